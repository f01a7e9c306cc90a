package engine_test

// The driver on kfake with the in-memory sink (connectors/sinktest): no
// database, no processes. Crashes and zombies are sink instances that die
// or freeze at a named point while their durable state, a shared
// sinktest.MemStore, lives on for the next owner.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// memModes are the delivery guarantees the driver tests cover, with
// rounds.max.in.flight (2 pipelines the two-phase modes).
var memModes = []struct{ name, delivery, inFlight string }{
	{"exactly_once", "exactly_once", "2"},
	{"exactly_once/rounds=1", "exactly_once", "1"},
	{"exactly_once_sink", "exactly_once_sink", "2"},
	{"exactly_once_sink/rounds=1", "exactly_once_sink", "1"},
	{"at_least_once", "at_least_once", "1"},
}

// memRig is a kfake cluster with transactional upstream data and a store.
type memRig struct {
	c     *kfake.Cluster
	store *sinktest.MemStore
	want  map[coord]string
	topic string
	// ev wakes the rig's condition waits: every sink hook call of the
	// instances the rig opens and every event their tasks report.
	ev *events
	// wrap, when set, wraps each MemSink instance the rig opens (a sink
	// with a behaviour MemSink has no knob for).
	wrap func(*sinktest.MemSink) connectors.Sink
}

// events wakes condition waits without a poll interval: whatever may make
// a condition true pokes it, and a waiter re-checks its condition at each
// poke. The store changes only inside MemSink calls, each of which calls
// its Hook after the change (AfterCommit, BetweenLocal, AfterLocalCommit),
// and tasks report through their Observer: a rig pokes at both.
type events struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next poke
}

func newEvents() *events { return &events{ch: make(chan struct{})} }

// poke wakes every waiter.
func (e *events) poke() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.ch)
	e.ch = make(chan struct{})
}

func (e *events) next() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ch
}

// waitFor waits until cond holds, re-checking it at every poke; it fails
// the test when 30 s pass without it, after printing every goroutine's
// stack.
func (e *events) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		woken := e.next() // taken before the check: a poke in between is not lost
		if cond() {
			return
		}
		select {
		case <-woken:
		case <-deadline:
			// Every goroutine's stack, to find what the driver waits for:
			// printed only here, on a failure.
			buf := make([]byte, 1<<22)
			os.Stderr.Write(buf[:runtime.Stack(buf, true)])
			t.Fatalf("after 30s: not %s", what)
		}
	}
}

// hook returns h (nil: none) poking ev after every call.
func (e *events) hook(h func(context.Context, sinktest.Point, twophase.BatchID) error) func(context.Context, sinktest.Point, twophase.BatchID) error {
	return func(ctx context.Context, p sinktest.Point, id twophase.BatchID) error {
		defer e.poke()
		if h == nil {
			return nil
		}
		return h(ctx, p, id)
	}
}

// pokingObserver passes a task's events on to an Observer (when not nil)
// and pokes ev after each.
type pokingObserver struct {
	obs engine.Observer
	ev  *events
}

func (o pokingObserver) Assigned(task int, ps []offsets.Position) {
	if o.obs != nil {
		o.obs.Assigned(task, ps)
	}
	o.ev.poke()
}

func (o pokingObserver) Revoked(task int, topic string, ps []int32) {
	if o.obs != nil {
		o.obs.Revoked(task, topic, ps)
	}
	o.ev.poke()
}

func (o pokingObserver) Round(task int, r engine.RoundStats) {
	if o.obs != nil {
		o.obs.Round(task, r)
	}
	o.ev.poke()
}

func (o pokingObserver) FenceConflict(task int, err error) {
	if o.obs != nil {
		o.obs.FenceConflict(task, err)
	}
	o.ev.poke()
}

func (o pokingObserver) Waiting(task int, err error) {
	if o.obs != nil {
		o.obs.Waiting(task, err)
	}
	o.ev.poke()
}

func newMemRig(t *testing.T, partitions, txns int) *memRig {
	t.Helper()
	r := newMemRigOn(t, "ev", partitions)
	if txns > 0 {
		r.want = produceSpread(t, r.c.ListenAddrs(), "ev", txns)
	}
	return r
}

// newMemRigOn is a rig over an empty topic.
func newMemRigOn(t *testing.T, topic string, partitions int) *memRig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &memRig{c: c, store: sinktest.NewStore(), topic: topic, ev: newEvents()}
}

// produceSpread is produceTxns with the records of each transaction spread
// round-robin over the partitions, so that every partition has data and
// every round touches every partition.
func produceSpread(t *testing.T, addrs []string, topic string, n int) map[coord]string {
	t.Helper()
	return produceTxnsWith(t, addrs, topic, n, func(i, j int) bool { return j < 3+i%17 }, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
}

// spec registers the rig's MemSinks, configured by configure, their hooks
// poking r.ev, wrapped by r.wrap.
func (r *memRig) spec(configure func(*sinktest.MemSink)) connectors.Spec {
	spec := sinktest.Spec(r.store, func(s *sinktest.MemSink) {
		if configure != nil {
			configure(s)
		}
		s.Hook = r.ev.hook(s.Hook)
	})
	if wrap := r.wrap; wrap != nil {
		open := spec.New
		spec.New = func(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
			s, err := open(ctx, env, c, v)
			if err != nil {
				return nil, err
			}
			return wrap(s.(*sinktest.MemSink)), nil
		}
	}
	return spec
}

// open opens connector "mem" (all instances share its group and offsets)
// with a new MemSink instance, configured by configure.
func (r *memRig) open(t *testing.T, delivery, inFlight, instance string, obs engine.Observer, configure func(*sinktest.MemSink), extra ...string) *engine.Connector {
	t.Helper()
	reg := &connectors.Registry{}
	if err := reg.Register(r.spec(configure)); err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{
		"name": "mem", "connector.class": "memory", "topics": r.topic,
		"delivery.guarantee": delivery, "rounds.max.in.flight": inFlight,
		"batch.max.records": "30", "batch.linger.ms": "5", "session.timeout.ms": "3000",
		"shutdown.grace.ms": "2000",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		raw[extra[i]] = extra[i+1]
	}
	level := slog.LevelError
	if os.Getenv("TXSINK_DRIVER_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name(), "instance", instance)
	conn, err := engine.Open(context.Background(), reg, raw, engine.TaskOptions{Bootstrap: r.c.ListenAddrs(), InstanceID: instance, Log: log, Observer: pokingObserver{obs, r.ev}, KafkaOpts: kafkaOpts(instance)})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// kafkaOpts bounds a rebalance to 3 s, so that a task whose sink call is
// frozen while it holds a revocation (the local guarantees finish the
// round first) is dropped from the group quickly, as a process frozen
// whole would be after session.timeout.ms. TXSINK_DRIVER_DEBUG=kgo logs
// the Kafka client.
func kafkaOpts(instance string) []kgo.Opt {
	opts := []kgo.Opt{kgo.RebalanceTimeout(3 * time.Second)}
	if os.Getenv("TXSINK_DRIVER_DEBUG") == "kgo" {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, func() string { return "[" + instance + "] " })))
	}
	return opts
}

// distinct counts the distinct stored coordinates.
func (r *memRig) distinct() int {
	seen := map[coord]bool{}
	for _, row := range r.store.Rows() {
		seen[coord{row.Partition, row.Offset}] = true
	}
	return len(seen)
}

// check verifies the rows: only produced, committed records, each once
// (at least once when dups), in offset order per partition, and nothing
// left prepared.
func (r *memRig) check(t *testing.T, dups bool) {
	t.Helper()
	seen := map[coord]int{}
	last := map[int32]int64{}
	for _, row := range r.store.Rows() {
		k := coord{row.Partition, row.Offset}
		var v struct{ ID string }
		_ = json.Unmarshal(row.Value, &v)
		if r.want[k] != v.ID {
			t.Errorf("row p%d@%d id %q: produced %q (aborted upstream?)", k.p, k.off, v.ID, r.want[k])
		}
		if prev, ok := last[row.Partition]; ok && row.Offset <= prev && (!dups || seen[k] == 0) {
			t.Errorf("p%d: offset %d stored after %d (seq %d)", row.Partition, row.Offset, prev, row.Seq)
		}
		last[row.Partition] = row.Offset
		seen[k]++
	}
	for k := range r.want {
		if seen[k] == 0 || (!dups && seen[k] != 1) {
			t.Errorf("p%d@%d written %d times", k.p, k.off, seen[k])
		}
	}
	if p := r.store.Prepared(); len(p) != 0 {
		t.Errorf("left prepared: %v", p)
	}
}

// checkAtMostOnce waits until conn's stored positions pass every wanted
// record, stops it and checks the rows: each once at most, in offset
// order; with lost, a crash between the offset and the rows lost the rows
// of one batch (at most batch.max.records, of one partition), otherwise
// none.
func (r *memRig) checkAtMostOnce(t *testing.T, conn *engine.Connector, lost bool) {
	t.Helper()
	ends := map[int32]int64{}
	for k := range r.want {
		ends[k.p] = max(ends[k.p], k.off+1)
	}
	r.ev.waitFor(t, "positions past every record", func() bool {
		pos, _ := r.store.Open("mem").Positions(context.Background())
		n := 0
		for _, p := range pos {
			if p.Next >= ends[p.Partition] {
				n++
			}
		}
		return n == len(ends)
	})
	conn.Stop()
	seen := map[coord]int{}
	last := map[int32]int64{}
	for _, row := range r.store.Rows() {
		k := coord{row.Partition, row.Offset}
		if _, ok := r.want[k]; !ok {
			t.Errorf("row p%d@%d: not a committed upstream record", k.p, k.off)
		}
		if prev, ok := last[row.Partition]; ok && row.Offset <= prev {
			t.Errorf("p%d: offset %d stored after %d", row.Partition, row.Offset, prev)
		}
		last[row.Partition] = row.Offset
		seen[k]++
	}
	missing := map[int32]int{}
	n := 0
	for k := range r.want {
		if seen[k] > 1 {
			t.Errorf("p%d@%d written %d times", k.p, k.off, seen[k])
		}
		if seen[k] == 0 {
			missing[k.p]++
			n++
		}
	}
	switch {
	case !lost && n > 0:
		t.Errorf("%d records lost: %v by partition", n, missing)
	case lost && (len(missing) != 1 || n > 30):
		t.Errorf("%d records lost, by partition %v; want the rows of the one batch whose offset was written", n, missing)
	}
}

// drain waits until every wanted record is stored, then stops conn
// gracefully (its rounds end) so that check sees a settled store.
func (r *memRig) drain(t *testing.T, conn *engine.Connector) {
	t.Helper()
	r.ev.waitFor(t, fmt.Sprintf("all %d records stored", len(r.want)), func() bool { return r.distinct() >= len(r.want) })
	conn.Stop()
}

// TestDriverDrain: a drain of transactional upstream data (every fourth
// transaction aborted) is exact and in offset order, in every mode.
func TestDriverDrain(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 3, 40)
			obs := &roundObserver{}
			// The largest batch.max.bytes: the Kafka client must accept it.
			conn := r.open(t, m.delivery, m.inFlight, "a", obs, nil, "batch.max.bytes", "1073741824")
			conn.Start(nil)
			r.drain(t, conn)
			r.check(t, false)
			ahead := obs.writtenAhead()
			if pipelined := m.inFlight == "2" && m.delivery != "at_least_once"; pipelined != (ahead > 0) {
				t.Errorf("%d batches written ahead (pipelined: %t)", ahead, pipelined)
			}
		})
	}
}

// crashAt returns a hook that crashes its instance at the n-th hit of p.
func crashAt(p sinktest.Point, n int64, hits *atomic.Int64) func(context.Context, sinktest.Point, twophase.BatchID) error {
	return func(_ context.Context, q sinktest.Point, _ twophase.BatchID) error {
		if q == p && hits.Add(1) == n {
			return sinktest.ErrCrashed
		}
		return nil
	}
}

// TestDriverCrash: the sink instance dies at each point of the third round
// it reaches there; the task is stopped (its process "died") and a new
// task over a new instance of the same store takes over. The result is
// exact (at_least_once: complete) with nothing left prepared.
func TestDriverCrash(t *testing.T) {
	twoPhase := []sinktest.Point{sinktest.BeforePrepare, sinktest.AfterPrepare, sinktest.BeforeCommit, sinktest.AfterCommit, sinktest.InAcquire}
	local := []sinktest.Point{sinktest.BeforeLocalCommit, sinktest.AfterLocalCommit, sinktest.InAcquire}
	modes := append(slices.Clone(memModes), struct{ name, delivery, inFlight string }{"at_most_once", "at_most_once", "1"})
	for _, m := range modes {
		points := local
		if m.delivery == "exactly_once" {
			points = twoPhase
		}
		if m.delivery == "at_least_once" || m.delivery == "at_most_once" {
			points = append(slices.Clone(points), sinktest.BetweenLocal)
		}
		for _, p := range points {
			t.Run(m.name+"/"+string(p), func(t *testing.T) {
				t.Parallel() // each subtest has its own kfake cluster and store
				r := newMemRig(t, 3, 40)
				var hits atomic.Int64
				var a *sinktest.MemSink
				n := int64(4) // in the second round

				if p == sinktest.InAcquire {
					n = 1
				}
				// at_most_once writes the offset before the rows, so a
				// crash loses every batch of its round then between the
				// two; one batch at a time makes that exactly the crashed
				// batch at between-local-commit and none elsewhere.
				var extra []string
				if m.delivery == "at_most_once" {
					extra = []string{"commit.parallelism", "1"}
				}
				connA := r.open(t, m.delivery, m.inFlight, "a", nil, func(s *sinktest.MemSink) {
					a, s.Hook = s, crashAt(p, n, &hits)
				}, extra...)
				connA.Start(nil)
				r.ev.waitFor(t, "the sink crashed", func() bool { return hits.Load() >= n })
				connA.Stop()
				if !a.Crashed() {
					t.Fatal("the hook crashed the instance, yet it is not crashed")
				}
				// The crash left the batch in doubt: the new owner must
				// recover it.
				if (p == sinktest.AfterPrepare || p == sinktest.BeforeCommit) && len(r.store.Prepared()) == 0 {
					t.Fatalf("after the crash at %s nothing is prepared", p)
				}
				connB := r.open(t, m.delivery, m.inFlight, "a", nil, nil, extra...)
				connB.Start(nil)
				if m.delivery == "at_most_once" {
					r.checkAtMostOnce(t, connB, p == sinktest.BetweenLocal)
					return
				}
				r.drain(t, connB)
				r.check(t, m.delivery == "at_least_once")
			})
		}
	}
}

// blockAt returns a hook that freezes at the first hit of p until release
// is closed (or its call's ctx ends), and closes reached when it froze.
func blockAt(p sinktest.Point, reached, release chan struct{}) func(context.Context, sinktest.Point, twophase.BatchID) error {
	var once sync.Once
	return func(ctx context.Context, q sinktest.Point, _ twophase.BatchID) error {
		if q != p {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(reached)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestDriverZombie: task A freezes, as a stopped process would, in its sink
// with a round that writes every partition, and its heartbeats stop; the
// group drops it after session.timeout.ms, task B (same group, another
// worker) takes the partitions, fences them and commits; A is released
// and must be fenced: no duplicate, no loss.
func TestDriverZombie(t *testing.T) {
	for _, m := range memModes {
		if m.delivery == "at_least_once" {
			continue // unfenced by design
		}
		points := []sinktest.Point{sinktest.BeforePrepare, sinktest.AfterPrepare, sinktest.BeforeCommit}
		if m.delivery == "exactly_once_sink" {
			points = []sinktest.Point{sinktest.BeforeLocalCommit, sinktest.AfterLocalCommit}
		}
		for _, p := range points {
			t.Run(m.name+"/"+string(p), func(t *testing.T) {
				t.Parallel() // each subtest has its own kfake cluster and store
				r := newMemRig(t, 3, 40)
				release := make(chan struct{})
				var frozen atomic.Int64
				var a *sinktest.MemSink
				// A round that lingers takes the whole backlog, every
				// partition, as a rule; but the client may hand the
				// partitions over in more than one fetch, so the test
				// asks only that A froze in a round: B must fence it
				// whichever partitions it writes.
				connA := r.open(t, m.delivery, m.inFlight, "a", nil, func(s *sinktest.MemSink) {
					a = s
					s.Hook = func(ctx context.Context, q sinktest.Point, _ twophase.BatchID) error {
						if q != p {
							return nil
						}
						frozen.Add(1)
						r.ev.poke()
						select {
						case <-release:
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					}
				}, "batch.max.records", "10000", "batch.linger.ms", "500")
				connA.Start(nil)
				r.ev.waitFor(t, "task A frozen in its sink", func() bool { return frozen.Load() >= 1 })
				// A's heartbeats are lost while it is frozen: the broker closes
				// the connection of each.
				var member atomic.Value
				var thawed atomic.Bool
				r.c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
					r.c.KeepControl()
					hb := req.(*kmsg.HeartbeatRequest)
					if member.CompareAndSwap(nil, hb.MemberID) {
						r.ev.poke()
					}
					if !thawed.Load() && member.Load() == hb.MemberID {
						return nil, errors.New("task A is frozen"), true
					}
					return nil, nil, false
				})
				r.ev.waitFor(t, "task A heartbeats", func() bool { return member.Load() != nil })
				obsB := &assignObserver{}
				connB := r.open(t, m.delivery, m.inFlight, "b", obsB, nil)
				connB.Start(nil)
				// B owns the partitions once the group dropped A; rows are
				// stored (A's own before it froze, at after-local-commit).
				r.ev.waitFor(t, "task B assigned, rows stored", func() bool { return obsB.n.Load() > 0 && len(r.store.Rows()) > 0 })
				thawed.Store(true)
				close(release)
				if p == sinktest.BeforePrepare || p == sinktest.BeforeLocalCommit {
					// A's write comes after B's fence bump.
					r.ev.waitFor(t, "task A fenced", func() bool { return a.Fenced() > 0 })
				}
				r.ev.waitFor(t, fmt.Sprintf("all %d records stored", len(r.want)), func() bool { return r.distinct() >= len(r.want) })
				connA.Stop()
				connB.Stop()
				r.check(t, false)
				t.Logf("task A froze in %d sink calls at %s", frozen.Load(), p)
			})
		}
	}
}

// TestDriverRebalanceMidRound: a second task joins while the first is in
// the middle of a round (frozen after its prepare, released as soon as
// the second joined): the rebalance ends exact.
func TestDriverRebalanceMidRound(t *testing.T) {
	for _, m := range memModes {
		p := sinktest.AfterPrepare
		if m.delivery != "exactly_once" {
			p = sinktest.AfterLocalCommit
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 4, 40)
			reached, release := make(chan struct{}), make(chan struct{})
			connA := r.open(t, m.delivery, m.inFlight, "a", nil, func(s *sinktest.MemSink) {
				s.Hook = blockAt(p, reached, release)
			})
			connA.Start(nil)
			<-reached
			obsB := &assignObserver{}
			connB := r.open(t, m.delivery, m.inFlight, "b", obsB, nil)
			connB.Start(nil)
			close(release)
			r.ev.waitFor(t, "task B assigned", func() bool { return obsB.n.Load() > 0 })
			r.drain(t, connB)
			connA.Stop()
			r.check(t, m.delivery == "at_least_once")
		})
	}
}

type assignObserver struct {
	roundObserver
	n atomic.Int64
}

func (o *assignObserver) Assigned(_ int, ps []offsets.Position) {
	if len(ps) > 0 {
		o.n.Add(1)
	}
}

// TestDriverBadRecordStops: with errors.tolerance=none a bad record stops
// the task with an error naming it; its partition is stored up to exactly
// that offset.
func TestDriverBadRecordStops(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 1, 20)
			// The bad record: the 25th committed one of partition 0.
			var bad int64 = -1
			var offs []int64
			for k := range r.want {
				offs = append(offs, k.off)
			}
			slices.Sort(offs)
			bad = offs[24]
			conn := r.open(t, m.delivery, m.inFlight, "a", nil, func(s *sinktest.MemSink) {
				s.Bad = map[sinktest.Coord]error{{Topic: "ev", Partition: 0, Offset: bad}: errors.New("cannot convert")}
			})
			exits := make(chan error, 1)
			conn.Start(func(_ int, err error) { exits <- err })
			var err error
			select {
			case err = <-exits:
			case <-time.After(30 * time.Second):
				t.Fatal("task still running 30s after a bad record")
			}
			conn.Stop()
			if !errors.Is(err, engine.ErrTaskStopped) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", bad)) {
				t.Fatalf("task ended with %v; want it stopped at offset %d", err, bad)
			}
			rows := r.store.Rows()
			for _, row := range rows {
				if row.Offset >= bad {
					t.Errorf("row at offset %d, past the bad record %d", row.Offset, bad)
				}
			}
			if len(rows) != 24 {
				t.Errorf("%d rows, want the 24 before the bad record", len(rows))
			}
			pos, _ := r.store.Open("mem").Positions(context.Background())
			if len(pos) != 1 || pos[0].Next != bad {
				t.Errorf("stored positions %+v, want next=%d", pos, bad)
			}
			if p := r.store.Prepared(); len(p) != 0 {
				t.Errorf("left prepared: %v", p)
			}
		})
	}
}

// TestDriverPauseResume: a connector started paused joins, fences its
// partitions and writes nothing; resumed, it drains exactly.
func TestDriverPauseResume(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 3, 20)
			var writes atomic.Int64
			obs := &assignObserver{}
			conn := r.open(t, m.delivery, m.inFlight, "a", obs, func(s *sinktest.MemSink) {
				s.Hook = func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
					if p == sinktest.BeforePrepare || p == sinktest.BeforeLocalCommit {
						writes.Add(1)
					}
					return nil
				}
			})
			conn.SetPaused(true)
			conn.Start(nil)
			r.ev.waitFor(t, "partitions assigned", func() bool { return obs.n.Load() > 0 })
			if w, n := writes.Load(), len(r.store.Rows()); w != 0 || n != 0 {
				t.Fatalf("paused task wrote: %d write calls, %d rows", w, n)
			}
			conn.SetPaused(false)
			r.drain(t, conn)
			r.check(t, false)
		})
	}
}
