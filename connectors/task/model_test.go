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
//
// The subtest txn runs source transactions applied whole (Config.Txn,
// txn.go) the only way a connector can (exactly_once_sink, one round in
// flight, a round written in one sink transaction): the logs are a source
// history of transactions over the three partitions and a transaction
// topic, produced unevenly so that a transaction's END may come long
// before its events, some announcing events that never come. Beside the
// above, every committed round holds each transaction it touches whole
// (unless split) and after every transaction that ended before it, the
// machine holds no more than its bounds allow, and every split
// transaction eventually goes through.
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
				w := newWorld(t, seed, g, inflight, false)
				w.run(3000)
				w.check()
			}
		})
	}
	t.Run("txn", func(t *testing.T) {
		t.Parallel()
		// A quarter of the seeds: a step that holds transactions costs
		// the machine several times more (the package's time under
		// -race stays within twice what it was without this mode).
		var txns, whole, split, held int
		for seed := range uint64(seeds / 4) {
			w := newWorld(t, seed, SinkCAS, 1, true)
			w.run(3000)
			w.check()
			txns, whole, split = txns+len(w.txns), whole+w.whole, split+len(w.split)
			held = max(held, 100*w.maxHeld/w.txn.MaxRecords)
		}
		// Not vacuous: most seeds apply some transactions whole.
		if whole < txns/10 {
			t.Fatalf("%d of %d source transactions applied whole", whole, txns)
		}
		t.Logf("%d source transactions: %d applied whole, %d split; at most %d%% of max-records held", txns, whole, split, held)
	})
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
	// Source transactions (world.txn): the record at log[i] has mark
	// marks[i], and only log[:hw] is produced yet (a partition that lags
	// behind the others makes a transaction's events come late).
	marks []record.TxnMark
	hw    int
}

// modelPoll is an outstanding poll and the records it has read so far.
type modelPoll struct {
	seq  uint64
	recs []*kgo.Record
}

type world struct {
	t       *testing.T
	rng     *rand.Rand
	seed    uint64
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

	// Source transactions applied whole (Config.Txn), else nil.
	txn   *TxnConfig
	txns  []*modelTxn            // in commit order: the order of their ENDs
	txnAt map[modelRec]*modelTxn // a change event or an END -> its transaction
	split map[string]bool        // ReportTxnSplit so far
	// maxHeld is the most records the machine held at once; whole counts
	// the transactions applied whole.
	maxHeld, whole int
}

// checkSplit: a transaction is split only if it is not complete in the
// machine's hold (its END and every event it announces held), or if every
// earlier transaction that is neither applied nor split is complete (then
// none could be split to unblock it: records against the commit order).
// A complete transaction split while an earlier one is incomplete would
// go before it, a state the source never had: the earlier one is to be
// split at its own deadline instead, and the complete one then goes whole
// after it.
func (w *world) checkSplit(id string) {
	held := map[modelRec]bool{}
	for k, recs := range w.m.txn.held {
		for _, x := range recs {
			held[modelRec{k, x.r.Offset}] = true
		}
	}
	complete := func(tx *modelTxn) bool {
		if !held[tx.end] || int64(len(tx.events)) < tx.count {
			return false
		}
		for _, e := range tx.events {
			if !held[e] {
				return false
			}
		}
		return true
	}
	applied := func(tx *modelTxn) bool {
		for _, e := range append(slices.Clone(tx.events), tx.end) {
			if w.parts[e.tp].rows[e.off] == 0 {
				return false
			}
		}
		return true
	}
	var tx *modelTxn
	for _, t := range w.txns {
		if t.id == id {
			tx = t
		}
	}
	if tx == nil || !complete(tx) {
		return
	}
	for _, before := range w.txns[:tx.seq] {
		if !w.split[before.id] && !applied(before) && !complete(before) {
			w.fatalf("split: %s is complete and waits behind %s, which ended before it and is not complete; splitting %s applies it first", id, before.id, id)
		}
	}
}

// modelRec names one record of the model's logs.
type modelRec struct {
	tp  TP
	off int64
}

// modelTxn is one source transaction: its change events (in the consumed
// partitions) and its END in the transaction topic. count, the END's
// event_count, exceeds len(events) when some of its events are in
// tables this connector does not consume: it cannot complete, and is
// only applied split.
type modelTxn struct {
	id     string
	seq    int // its place in the commit order
	events []modelRec
	end    modelRec
	count  int64
}

func newWorld(t *testing.T, seed uint64, g Guarantee, inflight int, txn bool) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, uint64(g))), seed: seed, g: g, parts: map[TP]*modelPart{}, owned: map[TP]bool{}, staged: map[twophase.BatchID]bool{}, wrote: map[uint64]bool{}, writtenAt: map[*twophase.Batch]int{}, lastWrite: map[TP]int{}}
	if txn {
		return w.newTxnWorld()
	}
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
		mp.hw = len(mp.log)
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

// txnTopic is the model's transaction topic.
const txnTopic = "x"

// newTxnWorld makes a world of source transactions applied whole: a
// history of transactions in commit order, each a BEGIN and an END in
// the transaction topic x[0] and its change events over t[0..2], which
// hold them in commit order as Debezium writes them. Snapshot rows come
// first; tombstones and other records without transaction metadata come
// between transactions and between a transaction's events. The
// partitions are produced unevenly (hw), so a transaction's END may be
// read long before some of its events.
func (w *world) newTxnWorld() *world {
	w.txnAt, w.split = map[modelRec]*modelTxn{}, map[string]bool{}
	w.txn = &TxnConfig{Topic: txnTopic, MaxRecords: []int{4, 7, 12, 30, 1000}[w.rng.IntN(5)], MaxWaitTicks: 5 + int64(w.rng.IntN(40))}
	x := TP{txnTopic, 0}
	w.parts[x] = &modelPart{rows: map[int64]int{}, bad: -1, ddl: -1}
	var data []TP
	for p := range int32(3) {
		k := TP{"t", p}
		w.parts[k] = &modelPart{rows: map[int64]int{}, bad: -1, ddl: -1}
		data = append(data, k)
	}
	add := func(k TP, mark record.TxnMark) modelRec {
		mp := w.parts[k]
		off := int64(0)
		if n := len(mp.log); n > 0 {
			off = mp.log[n-1] + 1 + int64(w.rng.IntN(3)/2) // a gap now and then
		}
		mp.log = append(mp.log, off)
		mp.marks = append(mp.marks, mark)
		return modelRec{k, off}
	}
	var none record.TxnMark
	for _, k := range data {
		for range w.rng.IntN(4) {
			add(k, none) // the initial snapshot
		}
	}
	for i := range 20 + w.rng.IntN(20) {
		tx := &modelTxn{id: fmt.Sprintf("T%d", i+1), seq: i}
		add(x, record.TxnMark{Kind: record.TxnBegin, ID: tx.id})
		for range w.rng.IntN(6) {
			k := data[w.rng.IntN(len(data))]
			tx.events = append(tx.events, add(k, record.TxnMark{Kind: record.TxnEvent, ID: tx.id}))
			if w.rng.IntN(6) == 0 {
				add(k, none) // a delete's tombstone
			}
		}
		tx.count = int64(len(tx.events))
		if w.rng.IntN(8) == 0 {
			tx.count += 1 + int64(w.rng.IntN(2)) // in a table not consumed
		}
		tx.end = add(x, record.TxnMark{Kind: record.TxnEnd, ID: tx.id, Count: tx.count})
		for _, r := range tx.events {
			w.txnAt[r] = tx
		}
		w.txnAt[tx.end] = tx
		w.txns = append(w.txns, tx)
		if w.rng.IntN(5) == 0 {
			add(data[w.rng.IntN(len(data))], none)
		}
	}
	if w.rng.IntN(5) == 0 {
		mp := w.parts[data[w.rng.IntN(len(data))]]
		mp.bad = mp.log[w.rng.IntN(len(mp.log))]
	}
	for _, k := range sortedTPs(w.parts) {
		mp := w.parts[k]
		mp.hw = w.rng.IntN(len(mp.log)/2 + 1)
	}
	m, err := NewMachine(Config{Connector: "c", Guarantee: SinkCAS, InFlight: 1, Txn: w.txn})
	if err != nil {
		w.t.Fatal(err)
	}
	w.m = m
	w.step(Event{Type: EventStart})
	return w
}

// produce appends records to a partition's log, as the source writes them.
func (w *world) produce() {
	mp := w.parts[sortedTPs(w.parts)[w.rng.IntN(len(w.parts))]]
	mp.hw = min(mp.hw+1+w.rng.IntN(12), len(mp.log))
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	tail := w.trace
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	mode := ""
	if w.txn != nil {
		mode = fmt.Sprintf(" txn max-records=%d max-wait=%d", w.txn.MaxRecords, w.txn.MaxWaitTicks)
	}
	w.t.Fatalf("seed %d guarantee %s%s: %s\nlast events:\n%s", w.seed, w.g, mode, fmt.Sprintf(format, args...), fmt.Sprint(slices.Clone(tail)))
}

func (w *world) step(ev Event) {
	w.trace = append(w.trace, fmt.Sprintf("\n  %s seq=%d", ev.Type, ev.Seq))
	acts, err := w.m.Step(ev)
	if err != nil {
		w.fatalf("step %s: %v", ev.Type, err)
	}
	for _, a := range acts {
		switch {
		case w.txn != nil && a.Type == ActionRun:
			w.trace = append(w.trace, fmt.Sprintf("\n    -> %s %v", a.Type, a.Round.IDs()))
		case a.Type == ActionReport && a.Report.Type == ReportTxnSplit:
			w.trace = append(w.trace, fmt.Sprintf("\n    -> %s %s %s", a.Type, a.Report.Type, a.Report.TxnID))
		default:
			w.trace = append(w.trace, fmt.Sprintf("\n    -> %s", a.Type))
		}
		w.do(a)
	}
	if w.txn != nil {
		w.checkHeld()
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
					mp.pos = max(mp.pos, min(mp.pos+w.rng.IntN(3), mp.hw))
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
		if a.Report.Type == ReportTxnSplit {
			w.checkSplit(a.Report.TxnID)
			w.split[a.Report.TxnID] = true
		}
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
			finish := w.finishRound
			if w.txn != nil {
				finish = w.finishWholeRound
			}
			choices = append(choices, finish, finish)
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
		if w.txn != nil {
			choices = append(choices, w.produce)
		}
		choices[w.rng.IntN(len(choices))]()
	}
	// Quiesce: resume, own every partition again, finish what is in
	// flight, stop softly.
	w.quiet = true
	for _, mp := range w.parts {
		mp.hw = len(mp.log)
	}
	w.step(Event{Type: EventResume})
	if w.session {
		for _, k := range sortedTPs(w.parts) {
			if !w.owned[k] && w.failed == nil {
				w.step(Event{Type: EventAssigned, Positions: []offsets.Position{w.acquire(k)}})
			}
		}
	}
	quiesce := 2000
	if w.txn != nil {
		quiesce = 6000 // small shares read the logs a few records a round
	}
	for range quiesce {
		if w.failed != nil || w.exited {
			return
		}
		switch {
		case len(w.staging) > 0:
			w.finishStaging()
		case len(w.running) > 0 && w.txn != nil:
			w.finishWholeRound()
		case len(w.running) > 0:
			w.finishRound()
		case len(w.polls) > 0:
			w.answerPoll()
			if w.txn != nil && w.failed == nil && !w.exited {
				// Time passes while a poll waits for records; a
				// transaction that cannot complete is split by it.
				w.step(Event{Type: EventTick})
			}
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
		for n := w.rng.IntN(8); n > 0 && mp.pos < mp.hw; n-- {
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
	ev := Event{Type: EventPolled, Seq: p.seq, Records: p.recs}
	if w.txn != nil {
		if !w.quiet && w.rng.IntN(20) == 0 {
			// The records' transaction marks could not be read.
			ev.Err = fmt.Errorf("registry: %w", record.ErrUnavailable)
		}
		for _, r := range p.recs {
			mp := w.parts[TP{r.Topic, r.Partition}]
			i, _ := slices.BinarySearch(mp.log, r.Offset)
			ev.Marks = append(ev.Marks, mp.marks[i])
		}
		w.pollHeld(ev)
		return
	}
	w.step(ev)
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

// finishWholeRound ends a round of source transactions applied whole:
// the sink writes every batch of it in one transaction (WriteRound), so
// the round commits whole or not at all.
func (w *world) finishWholeRound() {
	r := w.running[0]
	w.running = w.running[1:]
	fenced := false
	var bad *twophase.Batch
	for _, b := range r.Batches {
		mp := w.parts[TP{b.ID.Topic, b.ID.Partition}]
		if b.Prev != mp.next || b.Fence != mp.fence {
			fenced = true
		}
		if bad == nil && mp.bad >= b.ID.First && mp.bad <= b.ID.Last {
			bad = b
		}
	}
	fault := -1
	if !w.quiet {
		fault = w.rng.IntN(10)
	}
	var res Result
	switch {
	case fenced:
		res.Err = fmt.Errorf("cas: %w", offsets.ErrFenced)
	case bad != nil:
		res.Err = badRecord{bad.ID.Topic, bad.ID.Partition, w.parts[TP{bad.ID.Topic, bad.ID.Partition}].bad}
	case fault == 0:
		res.Err = fmt.Errorf("registry: %w", record.ErrUnavailable)
	case fault == 1:
		res.Err = errors.New("connection reset")
	case fault == 2:
		// Nothing written, no error: a clean abort.
	default:
		w.checkWhole(r)
		for _, b := range r.Batches {
			if !w.apply(b) {
				w.fatalf("batch %s of round %d refused after its compare-and-set was checked", b.ID, r.ID)
			}
			res.Committed = append(res.Committed, b.ID)
		}
	}
	w.step(Event{Type: EventRoundDone, Seq: r.ID, Result: res})
}

// checkWhole checks a round of source transactions before it commits:
// every transaction it touches that is not split is in it whole, its END
// included (no reader sees half of it), and no transaction in it comes
// before one that ended earlier in the source and is neither applied (in
// this round or before) nor split (the source's commit order).
func (w *world) checkWhole(r *Round) {
	in := map[modelRec]bool{}
	var touched []*modelTxn
	for _, b := range r.Batches {
		for _, rec := range b.Records {
			k := modelRec{TP{rec.Topic, rec.Partition}, rec.Offset}
			in[k] = true
			if tx := w.txnAt[k]; tx != nil && !slices.Contains(touched, tx) {
				touched = append(touched, tx)
			}
		}
	}
	applied := func(tx *modelTxn) bool {
		for _, e := range append(slices.Clone(tx.events), tx.end) {
			if !in[e] && w.parts[e.tp].rows[e.off] == 0 {
				return false
			}
		}
		return true
	}
	for _, tx := range touched {
		if w.split[tx.id] {
			continue
		}
		for _, before := range w.txns[:tx.seq] {
			if !w.split[before.id] && !applied(before) {
				w.fatalf("order: round %d applies %s (split %v) before %s, which ended before it and is neither applied nor split", r.ID, tx.id, w.split[tx.id], before.id)
			}
		}
		if w.split[tx.id] {
			continue
		}
		w.whole++
		if tx.count > int64(len(tx.events)) {
			w.fatalf("round %d applies %s, whose END announces %d events of which %d are consumed, without splitting it", r.ID, tx.id, tx.count, len(tx.events))
		}
		for _, e := range tx.events {
			if !in[e] {
				w.fatalf("atomicity: round %d writes part of %s without its event %v@%d (a reader sees half of it)", r.ID, tx.id, e.tp, e.off)
			}
		}
		if !in[tx.end] {
			w.fatalf("atomicity: round %d writes %s without its END %v@%d", r.ID, tx.id, tx.end.tp, tx.end.off)
		}
	}
}

// pollHeld feeds a poll of source transactions and checks that the
// machine held no change partition beyond its share of max-records, nor
// the transaction topic beyond max-records (txn.go).
func (w *world) pollHeld(ev Event) {
	before := map[TP]int{}
	for k, recs := range w.m.txn.held {
		before[k] = len(recs)
	}
	data := 0
	for k := range w.owned {
		if k.Topic != txnTopic {
			data++
		}
	}
	share := max(w.txn.MaxRecords/max(data, 1), 1)
	w.step(ev)
	for k, recs := range w.m.txn.held {
		limit := share
		if k.Topic == txnTopic {
			limit = w.txn.MaxRecords
		}
		if len(recs) > before[k] && len(recs) > limit {
			w.fatalf("a poll made %v hold %d records, over its bound %d (%d owned change partitions)", k, len(recs), limit, data)
		}
	}
}

// checkHeld checks what the machine holds after every step: its count
// is right, it holds only owned partitions, and no more than max-records
// for the transaction topic and as many for the change partitions.
func (w *world) checkHeld() {
	h := w.m.txn
	n := 0
	for k, recs := range h.held {
		if len(recs) > 0 && !w.owned[k] {
			w.fatalf("holds %d records of %v, which the task does not own", len(recs), k)
		}
		n += len(recs)
	}
	if n != h.n {
		w.fatalf("holds %d records but counts %d", n, h.n)
	}
	w.maxHeld = max(w.maxHeld, n)
	// At most max-records in the transaction topic and as many in the
	// change partitions together, also after an assignment shrank the
	// shares (a partition gives back what it held beyond its new share;
	// seed 84 held 26 of 24 before it did).
	bound := 2 * w.txn.MaxRecords
	if n > bound {
		per := map[TP]int{}
		for k, recs := range h.held {
			per[k] = len(recs)
		}
		w.fatalf("holds %d records, over %d (max-records %d): %v", n, bound, w.txn.MaxRecords, per)
	}
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
		// It stopped at a bad record, after everything before it (with
		// source transactions: before the bad record's transaction, or
		// one that waits before it).
		found := false
		for _, mp := range w.parts {
			i, _ := slices.BinarySearch(mp.log, mp.next)
			if mp.bad >= 0 && (w.txn != nil || i < len(mp.log) && mp.log[i] == mp.bad) {
				found = true
			}
		}
		if !found {
			w.fatalf("stopped without any partition at its bad record: %v", w.failed)
		}
	}
}

var _ connectors.RecordLocator = badRecord{}
