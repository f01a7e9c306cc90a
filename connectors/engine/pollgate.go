package engine

import (
	"context"
	"sync"
)

// pollGate keeps polls out of a transaction's Begin and End. A poll
// enters the open gate; closing it cancels the polls inside (they return
// what they read) and waits for them to leave.
type pollGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	closed bool
	opened chan struct{} // closed while the gate is open
	inside map[int]context.CancelFunc
	nextID int
}

func newPollGate() *pollGate {
	g := &pollGate{opened: make(chan struct{}), inside: map[int]context.CancelFunc{}}
	g.cond = sync.NewCond(&g.mu)
	close(g.opened)
	return g
}

// enter waits for the gate to be open and returns a context that ends
// when the gate closes, and leave.
func (g *pollGate) enter(ctx context.Context) (context.Context, func(), error) {
	for {
		g.mu.Lock()
		if !g.closed {
			id := g.nextID
			g.nextID++
			cctx, cancel := context.WithCancel(ctx)
			g.inside[id] = cancel
			g.mu.Unlock()
			return cctx, func() {
				g.mu.Lock()
				delete(g.inside, id)
				cancel()
				g.cond.Broadcast()
				g.mu.Unlock()
			}, nil
		}
		wait := g.opened
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

func (g *pollGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.opened = make(chan struct{})
	for _, cancel := range g.inside {
		cancel()
	}
	for len(g.inside) > 0 {
		g.cond.Wait()
	}
}

func (g *pollGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = false
	close(g.opened)
}
