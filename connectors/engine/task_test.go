package engine_test

// Tests of the task runtime on an in-memory Kafka (kfake, with
// transactions and read_committed) and the in-memory sink
// (connectors/sinktest), with the rig of driver_test.go: no database, no
// processes, no fixed sleeps. What only a real database can show (a
// missing table is a terminal error, a schema change's ACCESS EXCLUSIVE
// lock needs a round of its own) is tested with the PostgreSQL sink in
// connectors/postgres (go test -tags dbtest); the same guarantees end to
// end are proven on the real broker in integration/.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

type coord struct {
	p   int32
	off int64
}

// produceTxns writes n transactions of 1..20 records over the topic's
// partitions, aborting every fourth, and returns the committed records.
func produceTxns(t *testing.T, addrs []string, topic string, n int) map[coord]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	return produceTxnsWith(t, addrs, topic, n, func(_, j int) bool { return j < 1+rng.IntN(20) })
}

// produceTxnsWith writes n transactions, transaction i taking records while
// more(i, j) holds for its j-th record, aborting every fourth, and returns
// the committed records (values {"id":…,"seq":…}).
func produceTxnsWith(t *testing.T, addrs []string, topic string, n int, more func(i, j int) bool, opts ...kgo.Opt) map[coord]string {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.TransactionalID("up-" + topic), kgo.DefaultProduceTopic(topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	want := map[coord]string{}
	seq := 0
	for i := 0; i < n; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := 0; more(i, j); j++ {
			seq++
			v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(seq), "seq": seq})
			recs = append(recs, &kgo.Record{Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		abort := i%4 == 3
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatal(err)
		}
		if !abort {
			for _, r := range recs {
				var v struct{ ID string }
				_ = json.Unmarshal(r.Value, &v)
				want[coord{r.Partition, r.Offset}] = v.ID
			}
		}
	}
	return want
}

// roundObserver records rounds for tests.
type roundObserver struct {
	mu     sync.Mutex
	rounds []engine.RoundStats
}

func (o *roundObserver) Assigned(int, []offsets.Position) {}
func (o *roundObserver) Revoked(int, string, []int32)     {}
func (o *roundObserver) FenceConflict(int, error)         {}
func (o *roundObserver) Waiting(int, error)               {}
func (o *roundObserver) Round(_ int, r engine.RoundStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rounds = append(o.rounds, r)
}

func (o *roundObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.rounds)
}

// committedSum sums f over the committed rounds.
func (o *roundObserver) committedSum(f func(engine.RoundStats) int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.rounds {
		if r.Outcome == "committed" {
			n += f(r)
		}
	}
	return n
}

// writtenAhead sums the committed rounds' batches written ahead.
func (o *roundObserver) writtenAhead() int {
	return o.committedSum(func(r engine.RoundStats) int { return r.WrittenAhead })
}

func (o *roundObserver) deadLettered() int {
	return o.committedSum(func(r engine.RoundStats) int { return r.DeadLettered })
}

// produceValues writes one non-transactional record per value to topic.
func produceValues(t *testing.T, addrs []string, topic string, values ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Value: []byte(v)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// writeOf reports whether p is where a round writes a batch: Prepare in
// exactly_once, WriteLocal in the local guarantees.
func writeOf(p sinktest.Point) bool {
	return p == sinktest.BeforePrepare || p == sinktest.BeforeLocalCommit
}

// exit waits for the task's end, reported by the callback given to Start.
func exit(t *testing.T, exits <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-exits:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("task still running 30s after %s", what)
		return nil
	}
}

// TestTaskFailsOnTerminalError: an error that retrying cannot fix (the
// PostgreSQL sink's for a missing table, connectors/postgres
// TestMissingTableIsTerminal) is not a bad record and not worth retrying
// forever: the task fails with it and writes nothing.
func TestTaskFailsOnTerminalError(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 3, 8)
			var calls atomic.Int64
			conn := r.open(t, m.delivery, m.inFlight, "a", nil, func(s *sinktest.MemSink) {
				s.Hook = func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
					if !writeOf(p) {
						return nil
					}
					calls.Add(1)
					return &connectors.Terminal{Err: errors.New(`table "no_such_table" does not exist`)}
				}
			})
			exits := make(chan error, 1)
			conn.Start(func(_ int, err error) { exits <- err })
			err := exit(t, exits, "a terminal error")
			conn.Stop()
			if !connectors.IsTerminal(err) || !strings.Contains(err.Error(), "no_such_table") {
				t.Fatalf("task ended with %v, want the terminal error naming the table", err)
			}
			if n := calls.Load(); n == 0 {
				t.Fatal("the task ended before writing anything")
			}
			if rows := r.store.Rows(); len(rows) != 0 {
				t.Errorf("%d rows written", len(rows))
			}
			if p := r.store.Prepared(); len(p) != 0 {
				t.Errorf("left prepared: %v", p)
			}
		})
	}
}

// TestTaskReportsDeadLetters: with errors.tolerance=all the bad records
// are set aside and the committed rounds a task reports count them, for
// the status API and the metrics; every good record is written once.
func TestTaskReportsDeadLetters(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRigOn(t, "ev", 1)
			var values []string
			for i := range 20 {
				values = append(values, fmt.Sprintf(`{"id":"%d","seq":%d}`, i, i))
			}
			recs := produceValues(t, r.c.ListenAddrs(), "ev", values...)
			bad := map[sinktest.Coord]error{}
			r.want = map[coord]string{}
			for i, rec := range recs {
				if i%7 == 3 {
					bad[sinktest.Coord{Topic: "ev", Partition: rec.Partition, Offset: rec.Offset}] = errors.New("cannot convert")
				} else {
					r.want[coord{rec.Partition, rec.Offset}] = fmt.Sprint(i)
				}
			}
			obs := &roundObserver{}
			conn := r.open(t, m.delivery, m.inFlight, "a", obs, func(s *sinktest.MemSink) { s.Bad = bad }, "errors.tolerance", "all")
			conn.Start(nil)
			r.drain(t, conn)
			r.check(t, false)
			if n := obs.deadLettered(); n != len(bad) {
				t.Fatalf("committed rounds reported %d dead-lettered records, want %d", n, len(bad))
			}
		})
	}
}

// TestTaskInitialLatest: with offsets.initial=latest a connector without
// stored offsets starts at each partition's end: records produced before
// it was assigned are skipped, every later one is written once.
func TestTaskInitialLatest(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRigOn(t, "ev", 3)
			produce := func(prefix string) []*kgo.Record {
				var values []string
				for i := range 30 {
					values = append(values, fmt.Sprintf(`{"id":"%s-%d"}`, prefix, i))
				}
				return produceValues(t, r.c.ListenAddrs(), "ev", values...)
			}
			produce("old")
			conn := r.open(t, m.delivery, m.inFlight, "a", nil, nil, "offsets.initial", "latest")
			conn.Start(nil)
			// All three partitions positioned at their ends.
			positioned := func() []offsets.Position {
				pos, _ := r.store.Open("mem").Positions(context.Background())
				return slices.DeleteFunc(pos, func(p offsets.Position) bool { return p.Next == offsets.Unset })
			}
			r.ev.waitFor(t, "three partitions positioned", func() bool { return len(positioned()) == 3 })
			var stored int64
			for _, p := range positioned() {
				stored += p.Next
			}
			if stored != 30 {
				t.Fatalf("stored next offsets %v sum to %d, want 30: the end of every partition", positioned(), stored)
			}
			r.want = map[coord]string{}
			for i, rec := range produce("new") {
				r.want[coord{rec.Partition, rec.Offset}] = fmt.Sprintf("new-%d", i)
			}
			r.drain(t, conn)
			r.check(t, false) // no row of an old record, every new one once
		})
	}
}

// TestTaskWaitsForUnavailableDependency: while a dependency of the record
// pipeline is down (a schema registry), rounds fail without writing, the
// task keeps running, retries with backoff and says so; once it is back
// every record is written exactly once and the wait is cleared.
func TestTaskWaitsForUnavailableDependency(t *testing.T) {
	for _, m := range memModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			r := newMemRig(t, 2, 20)
			var up atomic.Bool
			var refused atomic.Int64
			obs := &waitObserver{}
			conn := r.open(t, m.delivery, m.inFlight, "a", obs, func(s *sinktest.MemSink) {
				s.Hook = func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
					if !writeOf(p) || up.Load() {
						return nil
					}
					refused.Add(1)
					return fmt.Errorf("schema registry at 127.0.0.1:1: connection refused: %w", record.ErrUnavailable)
				}
			})
			exits := make(chan error, 1)
			conn.Start(func(_ int, err error) { exits <- err })
			r.ev.waitFor(t, "three rounds refused and waited for", func() bool { return obs.counts().waits >= 3 })
			if rows := r.store.Rows(); len(rows) != 0 {
				t.Fatalf("%d rows written while the dependency was down", len(rows))
			}
			select {
			case err := <-exits:
				t.Fatalf("task exited while waiting: %v", err)
			default:
			}
			up.Store(true)
			r.drain(t, conn)
			r.check(t, false)
			if c := obs.counts(); c.waits < 3 || c.cleared < 1 || int64(c.waits) > refused.Load() {
				t.Fatalf("observer saw %d waits and %d clears for %d refused writes; want a wait per refused round and a clear", c.waits, c.cleared, refused.Load())
			}
		})
	}
}

// waitObserver records the task's Waiting events.
type waitObserver struct {
	roundObserver
	mu      sync.Mutex
	waits   int
	cleared int
}

func (o *waitObserver) Waiting(_ int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil && errors.Is(err, record.ErrUnavailable) {
		o.waits++
	} else if err == nil {
		o.cleared++
	}
}

type waitCounts struct{ waits, cleared int }

func (o *waitObserver) counts() waitCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return waitCounts{o.waits, o.cleared}
}

// schemaSink is a MemSink whose records with a "color" field need a schema
// change before the first of them commits, and the change needs its batch
// alone in its round (as the PostgreSQL sink's ALTER TABLE, whose ACCESS
// EXCLUSIVE lock a prepared transaction keeps until the decision:
// connectors/postgres TestSchemaChangeNeedsOwnRound).
type schemaSink struct {
	*sinktest.MemSink
	st *schemaState
}

type schemaState struct {
	mu       sync.Mutex
	evolved  bool                      // the change committed
	pending  map[twophase.BatchID]bool // prepared with the change
	refused  int                       // prepares refused for want of a round of their own
	notAlone []twophase.BatchID        // batches that took the change without being alone
}

func needsChange(b *twophase.Batch) bool {
	for _, r := range b.Records {
		if strings.Contains(string(r.Value), `"color"`) {
			return true
		}
	}
	return false
}

func (s schemaSink) Prepare(ctx context.Context, b *twophase.Batch) error {
	st := s.st
	st.mu.Lock()
	change := !st.evolved && needsChange(b)
	if change && !b.Alone {
		st.refused++
		st.mu.Unlock()
		return &twophase.OwnRoundError{ID: b.ID, Err: errors.New("ALTER TABLE takes an ACCESS EXCLUSIVE lock")}
	}
	st.mu.Unlock()
	if err := s.MemSink.Prepare(ctx, b); err != nil {
		return err
	}
	if change {
		st.mu.Lock()
		st.pending[b.ID] = true
		st.mu.Unlock()
	}
	return nil
}

func (s schemaSink) Commit(ctx context.Context, id twophase.BatchID) error {
	if err := s.MemSink.Commit(ctx, id); err != nil {
		return err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.pending[id] {
		s.st.evolved = true
	}
	return nil
}

// TestTaskRunsSchemaChangesAlone: under exactly_once a batch whose
// prepare needs a round of its own (twophase.OwnRoundError) gets one; the
// other partitions follow in the next rounds and every record lands
// exactly once.
func TestTaskRunsSchemaChangesAlone(t *testing.T) {
	for _, m := range memModes {
		if m.delivery != "exactly_once" {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each subtest has its own kfake cluster and store
			// Each partition starts with records of a new generation,
			// which have a new field, followed by older ones: the first
			// round cuts a batch of every partition, each needing the
			// change. That round must hold more than one partition for
			// the sink to refuse it, but the client may bring the
			// backlog in several fetches (a partition's position is set
			// after another's): the 66 records are under a tenth of
			// batch.max.records, so the first round lingers (2 s) and
			// takes them all.
			r := newMemRigOn(t, "ev", 3)
			r.want = map[coord]string{}
			cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.ListenAddrs()...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				id := fmt.Sprintf("x%d", i)
				rec := &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, `{"id":%q,"seq":%d,"color":"c%d"}`, id, 1000+i, i)}
				if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
					t.Fatal(err)
				}
				r.want[coord{rec.Partition, rec.Offset}] = id
			}
			cl.Close()
			maps.Copy(r.want, produceSpread(t, r.c.ListenAddrs(), "ev", 12))
			st := &schemaState{pending: map[twophase.BatchID]bool{}}
			r.wrap = func(s *sinktest.MemSink) connectors.Sink { return schemaSink{s, st} }
			conn := r.open(t, m.delivery, m.inFlight, "a", nil, nil, "batch.max.records", "1000", "batch.linger.ms", "2000")
			exits := make(chan error, 1)
			conn.Start(func(_ int, err error) { exits <- err })
			r.ev.waitFor(t, fmt.Sprintf("all %d records stored", len(r.want)), func() bool { return r.distinct() >= len(r.want) })
			select {
			case err := <-exits:
				t.Fatalf("task ended: %v", err)
			default:
			}
			conn.Stop()
			r.check(t, false)
			st.mu.Lock()
			defer st.mu.Unlock()
			if !st.evolved || st.refused == 0 {
				t.Errorf("schema changed: %t, after %d refused prepares; want a change after a refusal", st.evolved, st.refused)
			}
		})
	}
}

// TestTaskTopicsRegex: topics.regex consumes every matching topic,
// whole-name matched, including one created after the task started.
func TestTaskTopicsRegex(t *testing.T) {
	r := newMemRigOn(t, "rx-a", 2)
	want := map[string]map[coord]string{"rx-a": produceTxns(t, r.c.ListenAddrs(), "rx-a", 4)}
	// stored counts the rows of each topic and each of their coordinates.
	stored := func() (map[string]int, map[string]map[coord]int) {
		n, seen := map[string]int{}, map[string]map[coord]int{}
		for _, row := range r.store.Rows() {
			n[row.Topic]++
			if seen[row.Topic] == nil {
				seen[row.Topic] = map[coord]int{}
			}
			seen[row.Topic][coord{row.Partition, row.Offset}]++
		}
		return n, seen
	}
	drained := func(topic string) func() bool {
		return func() bool { n, _ := stored(); return n[topic] >= len(want[topic]) }
	}
	conn := r.open(t, "exactly_once", "2", "a", nil, nil,
		"topics", "", "topics.regex", "rx-[a-z]", "metadata.max.age.ms", "1000")
	conn.Start(nil)
	r.ev.waitFor(t, "rx-a drained", drained("rx-a"))

	// rx-b matches, rx-bb does not match the whole pattern. One request
	// creates both: the metadata refresh that shows the task rx-b shows it
	// rx-bb too, so a wrong match would be assigned along with rx-b.
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, topic := range []string{"rx-b", "rx-bb"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
		req.Topics = append(req.Topics, rt)
	}
	if _, err := req.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	produceTxns(t, r.c.ListenAddrs(), "rx-bb", 2)
	want["rx-b"] = produceTxns(t, r.c.ListenAddrs(), "rx-b", 4)
	r.ev.waitFor(t, "rx-b drained", drained("rx-b"))
	conn.Stop()

	n, seen := stored()
	for topic, w := range want {
		for k := range w {
			if seen[topic][k] != 1 {
				t.Errorf("%s p%d@%d written %d times", topic, k.p, k.off, seen[topic][k])
			}
		}
		if n[topic] != len(w) {
			t.Errorf("%s: %d rows, want %d", topic, n[topic], len(w))
		}
	}
	if n["rx-bb"] != 0 {
		t.Errorf("%d rows of rx-bb, which the pattern does not match", n["rx-bb"])
	}
	pos, _ := r.store.Open("mem").Positions(context.Background())
	for _, p := range pos {
		if p.Topic == "rx-bb" {
			t.Errorf("rx-bb[%d] was assigned and fenced", p.Partition)
		}
	}
}

// TestTaskPausedTopicsRegex: a paused connector with topics.regex fetches
// nothing: its topics list is empty, so the topics to pause are the ones
// it was assigned (and the ones its client consumes). Three metadata
// refreshes after the assignment serve as the clock; resumed, it fetches
// and drains exactly.
func TestTaskPausedTopicsRegex(t *testing.T) {
	r := newMemRigOn(t, "rx-a", 2)
	want := produceTxns(t, r.c.ListenAddrs(), "rx-a", 4)
	var fetches, refreshes atomic.Int64
	var assigned atomic.Bool
	r.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			if len(tp.Partitions) > 0 {
				fetches.Add(1)
				r.ev.poke()
				break
			}
		}
		return nil, nil, false
	})
	r.c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		if assigned.Load() {
			refreshes.Add(1)
			r.ev.poke()
		}
		return nil, nil, false
	})
	obs := &assignObserver{}
	conn := r.open(t, "exactly_once", "2", "a", obs, nil,
		"topics", "", "topics.regex", "rx-[a-z]", "metadata.max.age.ms", "1000")
	conn.SetPaused(true)
	conn.Start(nil)
	r.ev.waitFor(t, "partitions assigned", func() bool { return obs.n.Load() > 0 })
	assigned.Store(true)
	r.ev.waitFor(t, "three metadata refreshes while paused", func() bool { return refreshes.Load() >= 3 })
	if n := fetches.Load(); n != 0 {
		t.Fatalf("a paused topics.regex connector sent %d fetch requests for its partitions", n)
	}
	if n := len(r.store.Rows()); n != 0 {
		t.Fatalf("paused, %d rows written", n)
	}
	conn.SetPaused(false)
	r.ev.waitFor(t, "drained after the resume", func() bool { return len(r.store.Rows()) >= len(want) })
	conn.Stop()
	if fetches.Load() == 0 {
		t.Fatal("no fetch request seen after the resume: the test cannot tell a paused fetch from a missed one")
	}
	seen := map[coord]int{}
	for _, row := range r.store.Rows() {
		seen[coord{row.Partition, row.Offset}]++
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("p%d@%d written %d times", k.p, k.off, seen[k])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct rows, want %d", len(seen), len(want))
	}
}
