package engine

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
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

// hold waits while the connector is paused: it stops fetching the
// connector's topics (kgo's PauseFetchTopics, which also covers partitions
// assigned during the pause), waits for the resume or for ctx, and then
// resumes fetching from the stored offsets (rewind). It reports whether it
// held.
func (g *gate) hold(ctx context.Context, cl *kgo.Client, topics []string, rewind func()) bool {
	paused, running := g.state()
	select {
	case <-paused:
	default:
		return false
	}
	cl.PauseFetchTopics(topics...)
	select {
	case <-running:
	case <-ctx.Done():
	}
	cl.ResumeFetchTopics(topics...)
	if ctx.Err() == nil {
		// Records buffered before the pause may have been dropped by
		// the client: continue from the sink's offsets.
		rewind()
	}
	return true
}

// pollPaused waits while the connector is paused (see gate.hold) and then
// polls one round's records; it returns no records when the connector is
// paused while the task waits for them.
func (t *Task) pollPaused(ctx context.Context, cl *kgo.Client, pollFn func(context.Context, int) kgo.Fetches) ([]*kgo.Record, error) {
	if t.gate == nil {
		return t.poll(ctx, pollFn)
	}
	if t.gate.hold(ctx, cl, t.conn.Topics, func() { t.rewind(cl) }) {
		if ctx.Err() == nil {
			t.log.Info("task resumed: fetching again from the stored offsets")
		}
		return nil, nil
	}
	pctx, cancel := t.gate.active(ctx)
	defer cancel()
	recs, err := t.poll(pctx, pollFn)
	if pctx.Err() != nil && ctx.Err() == nil {
		t.log.Info("task paused: fetching stopped, group membership and partitions kept")
	}
	return recs, err
}
