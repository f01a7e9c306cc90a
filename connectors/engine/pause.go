package engine

import (
	"context"
	"sync"
)

// gate holds a connector's tasks between rounds while it is PAUSED, as
// Kafka Connect pauses a task: the task stays a member of the consumer
// group (the client keeps heartbeating, so the group stays Stable and lag
// tools see it) and stops fetching, and it keeps its partitions and
// fences. A round in flight when the pause comes runs to its end
// (committed or aborted, its prepared batches resolved) before the task
// holds; no Kafka transaction stays open while paused.
type gate struct {
	mu      sync.Mutex
	paused  chan struct{} // closed while paused
	running chan struct{} // closed while running
}

func newGate(paused bool) *gate {
	g := &gate{paused: make(chan struct{}), running: make(chan struct{})}
	if paused {
		close(g.paused)
	} else {
		close(g.running)
	}
	return g
}

// set pauses (true) or resumes (false) the tasks.
func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if paused == g.isPausedLocked() {
		return
	}
	if paused {
		g.running = make(chan struct{})
		close(g.paused)
	} else {
		g.paused = make(chan struct{})
		close(g.running)
	}
}

func (g *gate) isPausedLocked() bool {
	select {
	case <-g.paused:
		return true
	default:
		return false
	}
}

// state returns the channels of the current state.
// pausedNow reports whether the connector is paused.
func (g *gate) pausedNow() bool {
	paused, _ := g.state()
	select {
	case <-paused:
		return true
	default:
		return false
	}
}

func (g *gate) state() (paused, running <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused, g.running
}

// active returns a context for one poll: it ends with ctx or when the
// connector is paused, so that a task waiting for records notices the
// pause at once. Call cancel when the poll returns.
func (g *gate) active(ctx context.Context) (context.Context, context.CancelFunc) {
	paused, _ := g.state()
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-paused:
			cancel()
		case <-pctx.Done():
		}
	}()
	return pctx, cancel
}
