package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// TestModel runs the machine against a model of the world: a log per
// partition with gaps (transaction markers), a consumer whose position
// moves with polls and seeks (a poll, like the driver's lingering one,
// gathers records over several reads, so its records may span a
// rebalance), a sink that stores next offsets and fences
// and refuses a compare-and-set from the wrong offset or fence, and a
// scheduler that interleaves polls, write-aheads, round results (every
// class of failure), rebalances, pauses and ticks at random. At the end
// every partition's stored rows are exactly its log's records below the
// stored next offset, each once: nothing lost, nothing written twice,
// whatever the interleaving (invariants 1 to 4, 6 and 8).
func TestModel(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	for _, g := range []Guarantee{TwoPhase, SinkCAS, AtLeastOnce} {
		t.Run(fmt.Sprint(g), func(t *testing.T) {
			t.Parallel() // CPU-bound: one guarantee per core
			inflight := 2
			if !g.Pipelines() {
				inflight = 1
			}
			for seed := range uint64(seeds) {
				w := newWorld(t, seed, g, inflight)
				w.run(3000)
				w.check()
			}
		})
	}
}

type modelPart struct {
	log   []int64       // offsets of the records, increasing, with gaps
	pos   int           // the consumer's index into log
	next  int64         // the sink's stored next offset
	fence int64         // the sink's fence
	rows  map[int64]int // offset -> times written
	bad   int64         // a record that cannot be written (-1: none)
	// ddl is a record that needs a schema change (-1: none, or made): a
	// batch with it is refused unless it is alone in its round, even
	// while quiescing, so the task must make progress by itself.
	ddl int64
}

// modelPoll is an outstanding poll and the records it has read so far.
type modelPoll struct {
	seq  uint64
	recs []*kgo.Record
}

type world struct {
	t       *testing.T
	rng     *rand.Rand
	g       Guarantee
	m       *Machine
	parts   map[TP]*modelPart
	owned   map[TP]bool
	polls   []*modelPoll // outstanding polls
	staging []*Round     // write-aheads in flight
	running []*Round     // rounds in flight
	acks    []uint64     // revocations waiting for AckRevoke
	session bool         // a session is up
	failed  error        // ActionFail
	exited  bool         // ActionExit
	seq     uint64       // revocation numbers
	trace   []string     // the last events, for a failure's message
	quiet   bool         // quiescing: no more faults
	late    []Event      // events of cancelled polls, fed late
	wrote   map[uint64]bool
	// writtenAt is when a batch's rows were written (staged, or by its
	// round); lastWrite per partition checks that rows land in offset
	// order.
	clock     int
	writtenAt map[*twophase.Batch]int
	lastWrite map[TP]int
	staged    map[twophase.BatchID]bool
}

func newWorld(t *testing.T, seed uint64, g Guarantee, inflight int) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, uint64(g))), g: g, parts: map[TP]*modelPart{}, owned: map[TP]bool{}, staged: map[twophase.BatchID]bool{}, wrote: map[uint64]bool{}, writtenAt: map[*twophase.Batch]int{}, lastWrite: map[TP]int{}}
	for p := range int32(3) {
		mp := &modelPart{rows: map[int64]int{}, bad: -1, ddl: -1, fence: 0}
		off := int64(0)
		for range 40 + w.rng.IntN(40) {
			off += 1 + int64(w.rng.IntN(3)/2) // a gap now and then
			mp.log = append(mp.log, off)
		}
		if w.rng.IntN(4) == 0 {
			mp.bad = mp.log[w.rng.IntN(len(mp.log))]
		}
		if w.rng.IntN(2) == 0 {
			mp.ddl = mp.log[w.rng.IntN(len(mp.log))]
		}
		w.parts[TP{"t", p}] = mp
	}
	m, err := NewMachine(Config{Connector: "c", Guarantee: g, InFlight: inflight})
	if err != nil {
		t.Fatal(err)
	}
	w.m = m
	w.step(Event{Type: EventStart})
	return w
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	tail := w.trace
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	w.t.Fatalf("guarantee %s: %s\nlast events:\n%s", w.g, fmt.Sprintf(format, args...), fmt.Sprint(slices.Clone(tail)))
}

func (w *world) step(ev Event) {
	w.trace = append(w.trace, fmt.Sprintf("\n  %s seq=%d", ev.Type, ev.Seq))
	acts, err := w.m.Step(ev)
	if err != nil {
		w.fatalf("step %s: %v", ev.Type, err)
	}
	for _, a := range acts {
		w.trace = append(w.trace, fmt.Sprintf("\n    -> %s", a.Type))
		w.do(a)
	}
}

func (w *world) do(a Action) {
	switch a.Type {
	case ActionSession:
		w.session = true
		// The new session's assignment: recover (nothing is left
		// prepared in this model: a round's effects are applied at once
		// or not at all), fence, read the stored positions, seek.
		var ps []offsets.Position
		for _, k := range sortedTPs(w.parts) {
			if !w.quiet && w.rng.IntN(5) == 0 && len(ps) > 0 {
				continue // owned by another task for now
			}
			ps = append(ps, w.acquire(k))
		}
		w.step(Event{Type: EventAssigned, Positions: ps})
	case ActionPoll:
		w.polls = append(w.polls, &modelPoll{seq: a.Seq})
	case ActionCancelPoll:
		// The driver ends the poll and waits for it before the next
		// action (a Seek, or the end of the session): whatever it read
		// moved the consumer, and its event comes late (and is ignored).
		if i := slices.IndexFunc(w.polls, func(p *modelPoll) bool { return p.seq == a.Seq }); i >= 0 {
			w.polls = slices.Delete(w.polls, i, i+1)
			for _, k := range sortedTPs(w.parts) { // in order: a seed replays
				if mp := w.parts[k]; w.owned[k] {
					mp.pos = min(mp.pos+w.rng.IntN(3), len(mp.log))
				}
			}
			w.late = append(w.late, Event{Type: EventPolled, Seq: a.Seq, Records: []*kgo.Record{{Topic: "t", Partition: 0, Offset: 0}}})
		}
	case ActionStage:
		w.staging = append(w.staging, a.Round)
	case ActionRun:
		w.running = append(w.running, a.Round)
	case ActionHurryPoll:
		// The poll returns sooner; the model answers polls whenever.
	case ActionDiscard:
		for _, id := range a.IDs {
			delete(w.staged, id)
		}
	case ActionSeek:
		for _, p := range a.Positions {
			k := TP{p.Topic, p.Partition}
			if !w.owned[k] {
				w.fatalf("seek of %v, which the task does not own", k)
			}
			mp := w.parts[k]
			mp.pos, _ = slices.BinarySearch(mp.log, p.Next)
		}
	case ActionAckRevoke:
		w.acks = slices.DeleteFunc(w.acks, func(s uint64) bool { return s == a.Seq })
	case ActionRestart:
		w.session = false
		w.polls, w.staging = nil, nil
		// The rounds in flight ended before the restart (it follows a
		// round's result, and ahead rounds are discarded).
		w.owned = map[TP]bool{}
	case ActionFail:
		w.failed = a.Err
	case ActionExit:
		w.exited = true
	case ActionReport:
	}
}

// acquire fences a partition for the task and seeks the consumer to its
// stored position.
func (w *world) acquire(k TP) offsets.Position {
	mp := w.parts[k]
	mp.fence++
	w.owned[k] = true
	mp.pos, _ = slices.BinarySearch(mp.log, mp.next)
	return offsets.Position{Topic: k.Topic, Partition: k.Partition, Next: mp.next, Fence: mp.fence}
}

func sortedTPs(m map[TP]*modelPart) []TP {
	out := make([]TP, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortTPs(out)
	return out
}

func (w *world) run(steps int) {
	for range steps {
		if w.failed != nil || w.exited {
			return
		}
		var choices []func()
		if len(w.polls) > 0 {
			choices = append(choices, w.answerPoll, w.readPoll, w.readPoll)
		}
		if len(w.staging) > 0 {
			choices = append(choices, w.finishStaging)
		}
		if len(w.running) > 0 {
			choices = append(choices, w.finishRound, w.finishRound)
			if w.g == TwoPhase && !w.wrote[w.running[0].ID] {
				choices = append(choices, func() {
					// Every prepare of the running round returned.
					w.wrote[w.running[0].ID] = true
					for _, b := range w.running[0].Batches {
						w.write(b)
					}
					w.step(Event{Type: EventWritten, Seq: w.running[0].ID})
				})
			}
		}
		choices = append(choices, func() { w.step(Event{Type: EventTick}) })
		if len(w.late) > 0 {
			choices = append(choices, func() {
				ev := w.late[0]
				w.late = w.late[1:]
				w.step(ev)
			})
		}
		if w.session && w.rng.IntN(6) == 0 {
			choices = append(choices, w.rebalance)
		}
		if w.rng.IntN(40) == 0 {
			choices = append(choices, func() { w.step(Event{Type: EventPause}) })
		}
		if w.rng.IntN(10) == 0 {
			choices = append(choices, func() { w.step(Event{Type: EventResume}) })
		}
		choices[w.rng.IntN(len(choices))]()
	}
	// Quiesce: resume, own every partition again, finish what is in
	// flight, stop softly.
	w.quiet = true
	w.step(Event{Type: EventResume})
	if w.session {
		for _, k := range sortedTPs(w.parts) {
			if !w.owned[k] && w.failed == nil {
				w.step(Event{Type: EventAssigned, Positions: []offsets.Position{w.acquire(k)}})
			}
		}
	}
	for range 2000 {
		if w.failed != nil || w.exited {
			return
		}
		switch {
		case len(w.staging) > 0:
			w.finishStaging()
		case len(w.running) > 0:
			w.finishRound()
		case len(w.polls) > 0:
			w.answerPoll()
		default:
			w.step(Event{Type: EventTick})
		}
		if w.caughtUp() {
			w.step(Event{Type: EventStop})
		}
	}
}

func (w *world) caughtUp() bool {
	for _, mp := range w.parts {
		if len(mp.log) > 0 && mp.next <= mp.log[len(mp.log)-1] {
			return false
		}
	}
	return len(w.running) == 0
}

// readPoll lets the oldest outstanding poll read some records of the
// owned partitions from the consumer's positions, as one read of the
// driver's lingering poll does; it keeps them until answerPoll.
func (w *world) readPoll() {
	p := w.polls[0]
	// Each partition's records in order; partitions interleave at random.
	var queues [][]*kgo.Record
	for _, k := range sortedTPs(w.parts) {
		if !w.owned[k] || w.rng.IntN(3) == 0 {
			continue
		}
		mp := w.parts[k]
		var q []*kgo.Record
		for n := w.rng.IntN(8); n > 0 && mp.pos < len(mp.log); n-- {
			q = append(q, &kgo.Record{Topic: k.Topic, Partition: k.Partition, Offset: mp.log[mp.pos]})
			mp.pos++
		}
		if len(q) > 0 {
			queues = append(queues, q)
		}
	}
	for len(queues) > 0 {
		i := w.rng.IntN(len(queues))
		p.recs = append(p.recs, queues[i][0])
		if queues[i] = queues[i][1:]; len(queues[i]) == 0 {
			queues = slices.Delete(queues, i, i+1)
		}
	}
}

// answerPoll returns what the oldest outstanding poll read, after one
// more read.
func (w *world) answerPoll() {
	w.readPoll()
	p := w.polls[0]
	w.polls = w.polls[1:]
	w.step(Event{Type: EventPolled, Seq: p.seq, Records: p.recs})
}

func (w *world) finishStaging() {
	r := w.staging[0]
	w.staging = w.staging[1:]
	// A batch's write-ahead may fail (a lock timeout, a schema change):
	// its round writes it.
	all := true
	for _, b := range r.Batches {
		if w.rng.IntN(4) == 0 {
			all = false
			continue
		}
		w.staged[b.ID] = true
		w.write(b)
	}
	w.step(Event{Type: EventStaged, Seq: r.ID, StagedAll: all})
}

// finishRound applies a round to the sink, or fails it in one of the ways
// a real round fails.
func (w *world) finishRound() {
	r := w.running[0]
	w.running = w.running[1:]
	var res Result
	// A batch the sink refuses: its compare-and-set (a stale Prev or
	// fence), or a bad record in it.
	for _, b := range r.Batches {
		mp := w.parts[TP{b.ID.Topic, b.ID.Partition}]
		if b.Prev != mp.next || b.Fence != mp.fence {
			res.Fenced = append(res.Fenced, b.ID)
		}
	}
	var bad []*twophase.Batch
	for _, b := range r.Batches {
		mp := w.parts[TP{b.ID.Topic, b.ID.Partition}]
		if mp.bad >= b.ID.First && mp.bad <= b.ID.Last {
			bad = append(bad, b)
		}
	}
	switch {
	case len(res.Fenced) > 0:
		res.Err = fmt.Errorf("cas: %w", twophase.ErrFenced)
		if w.g != TwoPhase {
			// Local rounds write each batch on its own.
			for _, b := range r.Batches {
				if !slices.Contains(res.Fenced, b.ID) && !slices.Contains(bad, b) && w.apply(b) {
					res.Committed = append(res.Committed, b.ID)
				}
			}
		}
	case len(r.Batches) > 1 && slices.ContainsFunc(r.Batches, w.needsDDL):
		i := slices.IndexFunc(r.Batches, w.needsDDL)
		res.Err = &twophase.OwnRoundError{ID: r.Batches[i].ID, Err: errors.New("schema change")}
	case len(bad) > 0:
		mp := w.parts[TP{bad[0].ID.Topic, bad[0].ID.Partition}]
		res.Err = badRecord{bad[0].ID.Topic, bad[0].ID.Partition, mp.bad}
		if w.g != TwoPhase {
			for _, b := range r.Batches {
				if !slices.Contains(bad, b) && w.apply(b) {
					res.Committed = append(res.Committed, b.ID)
				}
			}
		}
	case w.quiet:
		for _, b := range r.Batches {
			if w.apply(b) {
				res.Committed = append(res.Committed, b.ID)
			}
		}
	default:
		switch w.rng.IntN(10) {
		case 0:
			res.Err = fmt.Errorf("registry: %w", record.ErrUnavailable)
		case 1:
			res.Err = errors.New("connection reset")
		case 2:
			// A clean abort by the decision record (2PC), or nothing
			// written (local).
		case 3:
			if len(r.Batches) > 1 {
				b := r.Batches[w.rng.IntN(len(r.Batches))]
				res.Err = &twophase.OwnRoundError{ID: b.ID, Err: errors.New("schema change")}
				break
			}
			fallthrough
		default:
			for _, b := range r.Batches {
				if w.apply(b) {
					res.Committed = append(res.Committed, b.ID)
				}
			}
		}
	}
	for _, b := range r.Batches {
		delete(w.staged, b.ID)
	}
	w.step(Event{Type: EventRoundDone, Seq: r.ID, Result: res})
}

// needsDDL reports whether b holds its partition's schema-change record.
func (w *world) needsDDL(b *twophase.Batch) bool {
	mp := w.parts[TP{b.ID.Topic, b.ID.Partition}]
	return mp.ddl >= b.ID.First && mp.ddl <= b.ID.Last
}

// write notes when a batch's rows were written, unless they were written
// ahead before.
func (w *world) write(b *twophase.Batch) {
	if _, ok := w.writtenAt[b]; !ok {
		w.clock++
		w.writtenAt[b] = w.clock
	}
}

// apply writes a batch's rows and advances the stored offset by
// compare-and-set. It reports false (fenced) when the CAS fails.
func (w *world) apply(b *twophase.Batch) bool {
	mp := w.parts[TP{b.ID.Topic, b.ID.Partition}]
	if b.Prev != mp.next || b.Fence != mp.fence {
		return false
	}
	w.write(b)
	k := TP{b.ID.Topic, b.ID.Partition}
	if at := w.writtenAt[b]; at < w.lastWrite[k] {
		w.fatalf("batch %s was written (at %d) before the batch it continues (at %d): rows out of offset order", b.ID, at, w.lastWrite[k])
	} else {
		w.lastWrite[k] = at
	}
	// The batch must be exactly the log's records from Prev to Last.
	i, _ := slices.BinarySearch(mp.log, b.Prev)
	for _, rec := range b.Records {
		if i >= len(mp.log) || mp.log[i] != rec.Offset {
			w.fatalf("batch %s skips or repeats records: got %d, log has %v", b.ID, rec.Offset, mp.log[i:min(i+3, len(mp.log))])
		}
		i++
	}
	for _, rec := range b.Records {
		mp.rows[rec.Offset]++
	}
	if mp.ddl >= b.ID.First && mp.ddl <= b.ID.Last {
		mp.ddl = -1 // made: the table has the column now
	}
	mp.next = b.ID.NextOffset()
	return true
}

// rebalance revokes some partitions (another task fences them at once, as
// a new owner does) and, later, assigns them back.
func (w *world) rebalance() {
	var owned []TP
	for _, k := range sortedTPs(w.parts) {
		if w.owned[k] {
			owned = append(owned, k)
		}
	}
	if len(owned) > 0 && w.rng.IntN(2) == 0 {
		k := owned[w.rng.IntN(len(owned))]
		w.seq++
		w.acks = append(w.acks, w.seq)
		w.step(Event{Type: EventRevoked, Seq: w.seq, Partitions: []TP{k}, Lost: w.rng.IntN(3) == 0})
		delete(w.owned, k)
		// Another owner may take it meanwhile: a zombie's later write
		// is fenced.
		if w.rng.IntN(2) == 0 {
			w.parts[k].fence++
		}
		return
	}
	for _, k := range sortedTPs(w.parts) {
		if !w.owned[k] {
			w.step(Event{Type: EventAssigned, Positions: []offsets.Position{w.acquire(k)}})
			return
		}
	}
}

func (w *world) check() {
	w.t.Helper()
	if w.failed != nil && !errors.Is(w.failed, ErrStopped) {
		w.fatalf("task failed: %v", w.failed)
	}
	if w.failed == nil && !w.exited {
		w.fatalf("the task neither stopped at a bad record nor exited")
	}
	if len(w.acks) > 0 {
		w.fatalf("revocations never acknowledged: %v", w.acks)
	}
	for _, k := range sortedTPs(w.parts) {
		mp := w.parts[k]
		for _, off := range mp.log {
			n := mp.rows[off]
			switch {
			case off < mp.next && n != 1:
				w.fatalf("%v offset %d written %d times (next %d)", k, off, n, mp.next)
			case off >= mp.next && n != 0:
				w.fatalf("%v offset %d written beyond the stored next offset %d", k, off, mp.next)
			}
		}
		if mp.bad >= 0 && mp.next > mp.bad {
			w.fatalf("%v: the bad record at %d was written over (next %d)", k, mp.bad, mp.next)
		}
		if w.failed == nil && mp.bad < 0 && mp.next <= mp.log[len(mp.log)-1] {
			w.fatalf("%v: not caught up: next %d, log ends at %d", k, mp.next, mp.log[len(mp.log)-1])
		}
	}
	if w.failed != nil {
		// It stopped at a bad record, after everything before it.
		found := false
		for _, mp := range w.parts {
			i, _ := slices.BinarySearch(mp.log, mp.next)
			if mp.bad >= 0 && i < len(mp.log) && mp.log[i] == mp.bad {
				found = true
			}
		}
		if !found {
			w.fatalf("stopped without any partition at its bad record: %v", w.failed)
		}
	}
}

var _ connectors.RecordLocator = badRecord{}
