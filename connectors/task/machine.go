// Package task is the task machine: the pure state machine of one sink
// task's partitions and rounds, in the style of etcd raft's RawNode. It owns
// the partition cursors, the cut of a round, write-ahead (pipelined rounds),
// bad-record stops, the triage of a round's result and backoff counted in
// ticks. It performs no I/O, reads no clock, starts no goroutine and takes
// no lock: [Machine.Step] takes what happened ([Event]) and returns what to
// do ([Action]); a driver performs the actions against the Kafka client and
// the sink and feeds their results back as events.
//
// One round loop serves every delivery guarantee. The guarantee is a value
// chosen once ([Guarantee]); it decides how the driver runs a round (the
// Kafka-decided two-phase protocol or one local sink transaction) and when
// a revoked partition may be given up, never the shape of the loop.
//
// A Machine is not safe for concurrent use.
package task

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// Guarantee is a connector's delivery guarantee (delivery.guarantee); see
// [connectors.Guarantee].
type Guarantee = connectors.Guarantee

// Delivery guarantees (see connectors.TwoPhase and the others).
const (
	TwoPhase    = connectors.TwoPhase
	SinkCAS     = connectors.SinkCAS
	AtLeastOnce = connectors.AtLeastOnce
	AtMostOnce  = connectors.AtMostOnce
)

// ParseGuarantee returns the guarantee of a delivery.guarantee value.
func ParseGuarantee(s string) (Guarantee, error) { return connectors.ParseGuarantee(s) }

// ErrStopped is wrapped by the error of [ActionFail] when a partition
// stopped at a bad record with errors.tolerance=none.
var ErrStopped = errors.New("task stopped at a bad record")

// Ticks of the machine's logical clock. The driver feeds [EventTick] every
// [TickMillis] milliseconds; every wait is counted in ticks.
const TickMillis = 100

// Backoffs, in ticks.
const (
	retryTicks          = 5   // a round failed for another reason: 500 ms
	unavailableTicks    = 5   // the first wait for an unavailable dependency: 500 ms
	unavailableMaxTicks = 300 // its longest wait: 30 s
	restartTicks        = 2   // the first session restart: 200 ms
	restartMaxTicks     = 50  // the longest wait before a session restart: 5 s
)

// Config configures a [Machine].
type Config struct {
	// Connector names the connector; batch identities carry it.
	Connector string
	// Guarantee is the connector's delivery guarantee.
	Guarantee Guarantee
	// InFlight is the number of rounds that may be in flight at once: 1,
	// or 2 for pipelined rounds (rounds.max.in.flight=2 and a sink that
	// stages batches), where the round after the running one is polled,
	// cut from the running round's ends and written ahead (staged) while
	// the running round commits. Values below 1 mean 1.
	//
	// A round is written ahead only once every round before it has
	// written its rows, so rows land in offset order (a table's serial
	// column follows the log). In exactly_once the running round's rows
	// are written by its prepares ([EventWritten]); in exactly_once_sink,
	// whose rounds write rows and offsets in one local transaction, every
	// round is written ahead before it runs, and running it only adds the
	// compare-and-set and the COMMIT.
	InFlight int
	// Paused starts the machine paused.
	Paused bool
	// Txn, when set, applies source transactions whole (txn.go): polled
	// records are held until their transaction is complete. It needs
	// InFlight 1.
	Txn *TxnConfig
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Connector == "" {
		return errors.New("task: Config.Connector is empty")
	}
	if c.Guarantee < TwoPhase || c.Guarantee > AtMostOnce {
		return fmt.Errorf("task: Config.Guarantee: unknown %v", c.Guarantee)
	}
	if c.InFlight > 2 {
		return fmt.Errorf("task: Config.InFlight: must be 1 or 2, got %d", c.InFlight)
	}
	if c.InFlight == 2 && !c.Guarantee.Pipelines() {
		return fmt.Errorf("task: Config.InFlight: %s rounds cannot be pipelined", c.Guarantee)
	}
	if c.Txn != nil {
		if c.InFlight > 1 {
			return errors.New("task: Config.InFlight: rounds that hold source transactions are not pipelined")
		}
		return c.Txn.validate()
	}
	return nil
}

// TP names a partition.
type TP struct {
	Topic     string
	Partition int32
}

func (t TP) String() string { return fmt.Sprintf("%s[%d]", t.Topic, t.Partition) }

// Round is the work of one round: one batch per partition.
type Round struct {
	// ID numbers the machine's rounds from 1.
	ID uint64
	// Batches are the round's batches, in the order their partitions'
	// first records were polled.
	Batches []*twophase.Batch
	// Ahead is set when the round is written ahead (staged) before it
	// runs: cut while another round was in flight, or, in
	// exactly_once_sink with pipelined rounds, every round.
	Ahead bool
}

// IDs returns the identities of the round's batches.
func (r *Round) IDs() []twophase.BatchID {
	out := make([]twophase.BatchID, len(r.Batches))
	for i, b := range r.Batches {
		out[i] = b.ID
	}
	return out
}

// Records counts the round's records.
func (r *Round) Records() int {
	n := 0
	for _, b := range r.Batches {
		n += len(b.Records)
	}
	return n
}

// EventType is what happened, fed to [Machine.Step].
type EventType uint8

// Event types.
const (
	// EventStart starts the machine: it asks for a session.
	EventStart EventType = iota + 1
	// EventAssigned: the session was assigned partitions, and the driver
	// recovered their in-doubt batches, fenced them in the sink and
	// seeked the client to Positions (invariants 1, 4, 7).
	EventAssigned
	// EventRevoked: Partitions were revoked (Lost: lost, without a
	// rebalance). The driver waits for [ActionAckRevoke] with Seq before
	// it lets the rebalance go on.
	EventRevoked
	// EventPolled: the poll Seq returned Records (possibly none: it was
	// cancelled, or the client had nothing).
	EventPolled
	// EventStaged: the write-ahead of round Seq is over, successful for
	// every batch when StagedAll is set (a batch whose staging failed is
	// written by its round, which then reports EventWritten).
	EventStaged
	// EventWritten: the running round Seq wrote its rows (exactly_once:
	// every prepare returned); the round after it may be written ahead.
	// A local round's rows are written when it is done.
	EventWritten
	// EventRoundDone: round Seq ended with Result.
	EventRoundDone
	// EventTick advances the logical clock by one tick.
	EventTick
	// EventPause and EventResume pause and resume the connector (PAUSED
	// holds the task between rounds; the group membership stays). The
	// driver stops fetching while paused; after the resume the machine
	// seeks back to its cursors.
	EventPause
	EventResume
	// EventStop asks for a soft stop: the round in flight runs to its end,
	// no new round starts, then [ActionExit].
	EventStop
)

var eventNames = [...]string{
	EventStart: "Start", EventAssigned: "Assigned", EventRevoked: "Revoked", EventPolled: "Polled",
	EventStaged: "Staged", EventWritten: "Written", EventRoundDone: "RoundDone", EventTick: "Tick", EventPause: "Pause",
	EventResume: "Resume", EventStop: "Stop",
}

func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one input to [Machine.Step].
type Event struct {
	Type EventType
	// Seq names the poll (EventPolled), the round (EventStaged,
	// EventWritten, EventRoundDone) or the revocation to acknowledge
	// (EventRevoked).
	Seq uint64
	// Positions are the fenced positions of EventAssigned.
	Positions []offsets.Position
	// Partitions are the partitions of EventRevoked.
	Partitions []TP
	// Lost marks an EventRevoked of partitions lost without a rebalance.
	Lost bool
	// StagedAll marks an EventStaged whose every batch was written ahead.
	StagedAll bool
	// Records are the records of EventPolled, in the order polled.
	Records []*kgo.Record
	// Marks are the source-transaction marks of Records, index for index
	// (Config.Txn only; missing ones are record.TxnNone).
	Marks []record.TxnMark
	// Err, on EventPolled, says the poll's records cannot be cut now (their
	// source-transaction marks could not be read: an unavailable
	// registry): they are read again from the cursors after a backoff.
	Err error
	// Result is the result of EventRoundDone.
	Result Result
}

// Result is how a round ended, as the driver observed it.
type Result struct {
	// Committed lists the batches whose effects are committed: every
	// batch of a round whose decision committed (those whose participant
	// commit failed are also InDoubt, and recovery commits them), the
	// batches a local round wrote.
	Committed []twophase.BatchID
	// InDoubt lists batches that may be left prepared: recovery must run
	// before any new work on their partitions (invariant 7).
	InDoubt []twophase.BatchID
	// Fenced lists batches refused because another owner holds their
	// partitions.
	Fenced []twophase.BatchID
	// Ambiguous is set when the decision's outcome is unknown.
	Ambiguous bool
	// Err is the round's first error (nil for a clean abort decided by
	// the decision record: a rebalance, KIP-447 generation fencing).
	Err error
	// Stats are the round's timings and counts as the driver measured
	// them; the machine fills Outcome, Records, Batches and Positions.
	Stats RoundStats
}

// RoundStats describes one finished round.
type RoundStats struct {
	Outcome   string // committed, partial, aborted, in_doubt
	Records   int
	Batches   int
	Positions []offsets.Position // the committed next offsets
	// Driver-measured: phase durations in nanoseconds and counts.
	PrepareNanos, DecideNanos, CommitNanos, TotalNanos int64
	DeadLettered                                       int
	WrittenAhead                                       int
}

// ActionType is what the machine asks its driver to do.
type ActionType uint8

// Action types.
const (
	// ActionSession: start a consumer-group session (a new Kafka client).
	// Its assignments arrive as EventAssigned.
	ActionSession ActionType = iota + 1
	// ActionPoll: poll the records of one round (Seq names the poll) and
	// feed EventPolled. In TwoPhase, a poll must not run while the
	// session's transaction begins or ends: the driver holds it back then.
	ActionPoll
	// ActionCancelPoll: end poll Seq and wait for it to return before the
	// next action: records it read moved the consumer's positions, and the
	// Seek that follows (or the end of the session) must come after them.
	// Its EventPolled may still come; the machine ignores it.
	ActionCancelPoll
	// ActionHurryPoll: poll Seq should end its linger: return the records
	// it read, or the first ones that come. Its EventPolled counts.
	ActionHurryPoll
	// ActionStage: write Round ahead in the sink and feed EventStaged.
	ActionStage
	// ActionRun: run Round by the guarantee's protocol and feed
	// EventRoundDone.
	ActionRun
	// ActionDiscard: roll back whatever is staged for IDs.
	ActionDiscard
	// ActionSeek: seek the client's partitions to Positions (their Next).
	ActionSeek
	// ActionAckRevoke: the revocation Seq may proceed.
	ActionAckRevoke
	// ActionRestart: close the session (its client), because a fence
	// conflict or an unknown outcome needs recovery and fencing by a new
	// assignment (invariants 4 and 7). ActionSession follows after a
	// backoff counted in ticks.
	ActionRestart
	// ActionFail: the task fails with Err (terminal).
	ActionFail
	// ActionExit: a soft stop is complete.
	ActionExit
	// ActionReport: tell the observer and the log (Report).
	ActionReport
)

var actionNames = [...]string{
	ActionSession: "Session", ActionPoll: "Poll", ActionCancelPoll: "CancelPoll", ActionHurryPoll: "HurryPoll", ActionStage: "Stage",
	ActionRun: "Run", ActionDiscard: "Discard", ActionSeek: "Seek", ActionAckRevoke: "AckRevoke",
	ActionRestart: "Restart", ActionFail: "Fail", ActionExit: "Exit", ActionReport: "Report",
}

func (t ActionType) String() string {
	if int(t) < len(actionNames) && actionNames[t] != "" {
		return actionNames[t]
	}
	return fmt.Sprintf("ActionType(%d)", uint8(t))
}

// Action is one output of [Machine.Step].
type Action struct {
	Type ActionType
	// Seq names the poll (ActionPoll, ActionCancelPoll, ActionHurryPoll)
	// or the revocation (ActionAckRevoke).
	Seq uint64
	// Round is the round of ActionStage and ActionRun.
	Round *Round
	// IDs are the batches of ActionDiscard.
	IDs []twophase.BatchID
	// Positions are the seeks of ActionSeek.
	Positions []offsets.Position
	// Err is the cause of ActionRestart and ActionFail.
	Err error
	// Report is the report of ActionReport.
	Report Report
}

// ReportType says what a report tells.
type ReportType uint8

// Report types.
const (
	// ReportAssigned: the task owns Positions.
	ReportAssigned ReportType = iota + 1
	// ReportRevoked: the task gave Partitions up.
	ReportRevoked
	// ReportRound: a round ended (Stats).
	ReportRound
	// ReportWaiting: rounds fail because a dependency is unavailable
	// (Err), retried after Ticks; the task's "waiting" status.
	ReportWaiting
	// ReportAvailable: a round committed after waiting.
	ReportAvailable
	// ReportRetry: a round failed (Err) and is redone from the stored
	// offsets after Ticks (0: at once, a clean abort).
	ReportRetry
	// ReportFenced: a commit was fenced by another owner (Err).
	ReportFenced
	// ReportBadRecord: Partitions[0] stops before the bad record of Err
	// (errors.tolerance=none).
	ReportBadRecord
	// ReportOwnRound: the batch of Partitions[0] needs a round of its own
	// (a schema change, Err).
	ReportOwnRound
	// ReportStale: IDs were cut before their partitions were revoked or
	// assigned anew and are dropped; the owner continues from the stored
	// offsets.
	ReportStale
	// ReportHeld: paused, and nothing is in flight any more: no round
	// running or written ahead, no poll. Once per pause.
	ReportHeld
	// ReportReread: a poll's records were given up (Err) and every
	// partition is read again from its cursor.
	ReportReread
	// ReportTxnSplit: source transaction TxnID is applied in parts (Err
	// says why): a bound of Config.Txn ended its wait.
	ReportTxnSplit
)

var reportNames = [...]string{
	ReportAssigned: "assigned", ReportRevoked: "revoked", ReportRound: "round", ReportWaiting: "waiting",
	ReportAvailable: "available", ReportRetry: "retry", ReportFenced: "fenced", ReportBadRecord: "bad-record",
	ReportOwnRound: "own-round", ReportStale: "stale", ReportHeld: "held", ReportReread: "reread",
	ReportTxnSplit: "txn-split",
}

func (t ReportType) String() string {
	if int(t) < len(reportNames) && reportNames[t] != "" {
		return reportNames[t]
	}
	return fmt.Sprintf("ReportType(%d)", uint8(t))
}

// Report is what an ActionReport tells.
type Report struct {
	Type       ReportType
	Positions  []offsets.Position
	Partitions []TP
	IDs        []twophase.BatchID
	Stats      RoundStats
	Err        error
	// Ticks is the wait of ReportWaiting and ReportRetry; Attempt counts
	// the consecutive failed rounds of ReportWaiting.
	Ticks, Attempt int
	// TxnID is the source transaction of ReportTxnSplit.
	TxnID string
}

// cursor is one owned partition.
type cursor struct {
	next  int64 // the stored next_offset: where the next batch continues
	fence int64 // the fence this owner obtained
	// ahead, when above next, is where the next batch continues while
	// rounds cut before it are in flight.
	ahead int64
	// stopAt, when >= 0, is the offset of a bad record: batches are cut
	// before it, and the task fails once everything before it committed.
	stopAt int64
	stopEr error
	// atStop: a poll returned a record at or past stopAt, so everything
	// before the bad record was handed to a round.
	atStop bool
}

func (c *cursor) from() int64 { return max(c.next, c.ahead) }

// continues reports whether b continues the partition as this cursor owns
// it: cut at its fence, from its stored next offset.
func (c *cursor) continues(b *twophase.Batch) bool { return c.fence == b.Fence && c.next == b.Prev }

// phase is the machine's lifecycle.
type phase uint8

const (
	phaseIdle       phase = iota // before EventStart
	phaseActive                  // a session runs
	phaseRestarting              // waiting to start a new session
	phaseDone                    // failed or exited: every event is ignored
)

// Machine is a task's state machine. See the package documentation.
type Machine struct {
	cfg Config
	// stageFirst: every round is written ahead before it runs (pipelined
	// exactly_once_sink).
	stageFirst bool
	phase      phase
	parts      map[TP]*cursor

	// rounds in flight, oldest first: rounds[0] may be running; later
	// ones are written ahead.
	rounds  []*round
	roundID uint64

	polling bool // a poll is outstanding
	pollSeq uint64

	paused   bool
	held     bool // ReportHeld issued for this pause
	stopping bool // soft stop asked

	now       int64 // ticks
	waitUntil int64 // no poll before this tick
	sessionAt int64 // phaseRestarting: start the session at this tick

	unavailable int // consecutive rounds failed on an unavailable dependency
	restarts    int // consecutive session restarts

	// revocations waiting for the running round (local guarantees).
	pendingAcks []pendingAck

	// txn holds polled records until their source transaction is
	// complete (Config.Txn); nil otherwise.
	txn *txnHold
}

type round struct {
	*Round
	running bool
	staging bool // ActionStage issued, EventStaged not yet fed
	staged  bool // EventStaged fed
	written bool // its rows are written: staged, or EventWritten fed
}

type pendingAck struct {
	seq   uint64
	parts []TP
}

// NewMachine returns a machine in its idle state; feed it EventStart.
func NewMachine(cfg Config) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.InFlight = max(cfg.InFlight, 1)
	m := &Machine{cfg: cfg, parts: map[TP]*cursor{}, paused: cfg.Paused,
		stageFirst: cfg.InFlight > 1 && cfg.Guarantee == SinkCAS}
	if cfg.Txn != nil {
		m.txn = newTxnHold(*cfg.Txn)
	}
	return m, nil
}

// ErrUnknownEvent is wrapped by the error of an event that names a round
// the machine does not run, or is not a known type.
var ErrUnknownEvent = errors.New("task: unknown event")

// Step feeds one event and returns the actions it calls for, in the order
// the driver must start them. An event the machine cannot take (a result
// of a round it never ran) returns an error wrapping ErrUnknownEvent and
// changes nothing. Events of a poll or a write-ahead the machine has since
// given up (a rewind, a new session) are ignored.
func (m *Machine) Step(ev Event) ([]Action, error) {
	if m.phase == phaseDone {
		return nil, nil
	}
	var out []Action
	switch ev.Type {
	case EventStart:
		if m.phase != phaseIdle {
			return nil, fmt.Errorf("%w: Start in an active machine", ErrUnknownEvent)
		}
		m.phase = phaseActive
		out = append(out, Action{Type: ActionSession})
	case EventAssigned:
		out = m.assigned(ev.Positions, out)
	case EventRevoked:
		out = m.revoked(ev, out)
	case EventPolled:
		if !m.polling || ev.Seq != m.pollSeq {
			return nil, nil // a poll given up by a rewind or a restart
		}
		m.polling = false
		if ev.Err != nil {
			out = append(out, report(Report{Type: ReportReread, Err: ev.Err}))
			m.waitUntil = m.now + retryTicks
			out = m.rewind(nil, out)
		} else if m.txn != nil {
			out = m.polledTxn(ev.Records, ev.Marks, out)
		} else {
			out = m.polled(ev.Records, out)
		}
	case EventStaged:
		if r := m.find(ev.Seq); r != nil && r.staging {
			r.staging, r.staged, r.written = false, true, ev.StagedAll
		}
		// else: a round dropped since.
	case EventWritten:
		if r := m.find(ev.Seq); r != nil && r.running {
			r.written = true
		}
	case EventRoundDone:
		r := m.find(ev.Seq)
		if r == nil || !r.running {
			return nil, fmt.Errorf("%w: RoundDone of round %d, which is not running", ErrUnknownEvent, ev.Seq)
		}
		out = m.roundDone(r, ev.Result, out)
	case EventTick:
		m.now++
		if m.phase == phaseRestarting && m.now >= m.sessionAt {
			m.phase = phaseActive
			out = append(out, Action{Type: ActionSession})
		} else if m.txn != nil && m.phase == phaseActive && !m.paused && !m.stopping {
			out = m.cutTxn(m.txn.bound(m, out))
		}
	case EventPause:
		m.paused = true
	case EventResume:
		if m.paused && m.phase == phaseActive {
			// The client may have dropped records it buffered before
			// the pause: continue from the cursors.
			out = m.rewind(nil, out)
		}
		m.paused, m.held = false, false
	case EventStop:
		m.stopping = true
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnknownEvent, ev.Type)
	}
	if m.phase == phaseActive {
		out = m.advance(out)
	}
	return out, nil
}

// Now returns the logical clock, in ticks.
func (m *Machine) Now() int64 { return m.now }

// Done reports whether the machine failed or exited.
func (m *Machine) Done() bool { return m.phase == phaseDone }

// Positions returns the owned partitions' stored positions, sorted.
func (m *Machine) Positions() []offsets.Position {
	out := make([]offsets.Position, 0, len(m.parts))
	for k, c := range m.parts {
		out = append(out, offsets.Position{Topic: k.Topic, Partition: k.Partition, Next: c.next, Fence: c.fence})
	}
	sortPositions(out)
	return out
}

func (m *Machine) find(id uint64) *round {
	for _, r := range m.rounds {
		if r.ID == id {
			return r
		}
	}
	return nil
}

func (m *Machine) running() *round {
	if len(m.rounds) > 0 && m.rounds[0].running {
		return m.rounds[0]
	}
	return nil
}

// assigned takes the fenced positions of a new assignment.
//
// A poll outstanding across an assignment is given up and every owned
// partition read again from its cursor: the driver's poll gathers records
// over several reads, so it may hold records of a partition read before
// the partition was lost or revoked and assigned back. Those continue
// where the earlier owner's rounds left off, not from the stored offset
// the new cursor starts at; cut against it they would make a batch that
// skips records or repeats them out of order.
func (m *Machine) assigned(ps []offsets.Position, out []Action) []Action {
	if m.phase != phaseActive {
		return out
	}
	for _, p := range ps {
		m.parts[TP{p.Topic, p.Partition}] = &cursor{next: p.Next, fence: p.Fence, stopAt: -1}
	}
	ps = slices.Clone(ps)
	sortPositions(ps)
	out = append(out, report(Report{Type: ReportAssigned, Positions: ps}))
	if m.polling {
		out = m.rewind(nil, out)
	}
	return out
}

// revoked drops revoked partitions. In the local guarantees the revocation
// waits for a running round that writes them, so the new owner's fence
// bump does not fence it; in TwoPhase the session aborts that round by
// itself, and waiting here would deadlock with its end.
func (m *Machine) revoked(ev Event, out []Action) []Action {
	for _, p := range ev.Partitions {
		delete(m.parts, p)
	}
	if m.txn != nil {
		m.txn.drop(func(tp TP) bool { return !slices.Contains(ev.Partitions, tp) })
	}
	if len(ev.Partitions) > 0 {
		out = append(out, report(Report{Type: ReportRevoked, Partitions: slices.Clone(ev.Partitions)}))
	}
	if r := m.running(); r != nil && !ev.Lost && m.cfg.Guarantee != TwoPhase && touches(r.Round, ev.Partitions) {
		m.pendingAcks = append(m.pendingAcks, pendingAck{seq: ev.Seq, parts: ev.Partitions})
		return out
	}
	return append(out, Action{Type: ActionAckRevoke, Seq: ev.Seq})
}

func touches(r *Round, ps []TP) bool {
	for _, b := range r.Batches {
		if slices.Contains(ps, TP{b.ID.Topic, b.ID.Partition}) {
			return true
		}
	}
	return false
}

// polled cuts the records of a poll into a round.
func (m *Machine) polled(recs []*kgo.Record, out []Action) []Action {
	batches, err := m.cut(recs)
	if err != nil {
		// Never cut a batch that repeats records or takes them out of
		// order: read every partition again from its cursor.
		out = append(out, report(Report{Type: ReportReread, Err: err}))
		return m.rewind(nil, out)
	}
	if len(batches) == 0 {
		// Nothing before a bad record is left to write.
		if err := m.stoppedError(); err != nil && len(m.rounds) == 0 {
			return m.fail(err, out)
		}
		return out
	}
	m.roundID++
	r := &round{Round: &Round{ID: m.roundID, Batches: batches, Ahead: len(m.rounds) > 0 || m.stageFirst}}
	m.rounds = append(m.rounds, r)
	return out
}

// cut groups records into one batch per owned partition, continuing from
// each partition's cursor, and cuts before a known bad record. Records of
// a partition out of offset order are an error, and nothing is cut.
func (m *Machine) cut(recs []*kgo.Record) ([]*twophase.Batch, error) {
	byTP := map[TP]*twophase.Batch{}
	var order []TP
	// A poll returns a partition's records together: the partition of
	// the record before is looked up once, not per record.
	var (
		k    TP
		c    *cursor
		b    *twophase.Batch
		have bool
	)
	for _, r := range recs {
		if !have || r.Partition != k.Partition || r.Topic != k.Topic {
			k, have = TP{r.Topic, r.Partition}, true
			c, b = m.parts[k], byTP[k]
		}
		if c == nil {
			continue // revoked meanwhile
		}
		from := c.from()
		if r.Offset < from {
			continue // already written, or in a round in flight
		}
		if c.stopAt >= 0 && r.Offset >= c.stopAt {
			c.atStop = true
			continue
		}
		if b == nil {
			b = &twophase.Batch{
				ID:    twophase.BatchID{Connector: m.cfg.Connector, Topic: r.Topic, Partition: r.Partition, First: r.Offset},
				Prev:  from,
				Fence: c.fence,
			}
			byTP[k] = b
			order = append(order, k)
		} else if r.Offset <= b.ID.Last {
			return nil, fmt.Errorf("%w: %s[%d] offset %d after %d", ErrPollOrder, r.Topic, r.Partition, r.Offset, b.ID.Last)
		}
		b.Records = append(b.Records, r)
		b.ID.Last = r.Offset
	}
	out := make([]*twophase.Batch, 0, len(order))
	for _, k := range order {
		b := byTP[k]
		m.parts[k].ahead = b.ID.NextOffset()
		out = append(out, b)
	}
	return out, nil
}

// ErrPollOrder is wrapped by ReportReread's error when a poll returned a
// partition's records out of offset order.
var ErrPollOrder = errors.New("task: a poll returned records out of offset order")

// advance starts what the state allows: the next round, a write-ahead, a
// poll, the end of a soft stop.
func (m *Machine) advance(out []Action) []Action {
	if m.stopping || m.paused {
		// Held between rounds: an outstanding poll ends and rounds
		// written ahead are dropped, to be redone after the resume.
		if m.polling || m.ahead() {
			out = m.rewind(nil, out)
		}
		if m.running() != nil {
			return out // runs to its end
		}
		if m.stopping {
			m.phase = phaseDone
			return append(out, Action{Type: ActionExit})
		}
		if !m.held {
			m.held = true
			out = append(out, Action{Type: ActionReport, Report: Report{Type: ReportHeld}})
		}
		return out
	}
	// Write ahead a round once every round before it wrote its rows, one
	// at a time and in order: a staging may wait for what an earlier round
	// releases, never for a later one, and rows land in offset order.
	written := true
	for _, r := range m.rounds {
		if r.Ahead && !r.staging && !r.staged && written {
			r.staging = true
			out = append(out, Action{Type: ActionStage, Round: r.Round})
		}
		written = written && r.written
	}
	// Run the oldest round once the one before it ended and its
	// write-ahead is over.
	if len(m.rounds) > 0 && !m.rounds[0].running && !m.rounds[0].staging {
		r := m.rounds[0]
		if r.Ahead && m.polling {
			// The poll for the round after it lingers no longer: its
			// records are written ahead while this one commits.
			out = append(out, Action{Type: ActionHurryPoll, Seq: m.pollSeq})
		}
		out = m.current(r, out)
		if len(r.Batches) == 0 {
			m.rounds = m.rounds[1:]
			if err := m.stoppedError(); err != nil && len(m.rounds) == 0 {
				return m.fail(err, out)
			}
			return m.advance(out)
		}
		for _, b := range r.Batches {
			b.Alone = len(r.Batches) == 1
		}
		r.running = true
		out = append(out, Action{Type: ActionRun, Round: r.Round})
	}
	// Poll for the next round: when no round is in flight, or, pipelined,
	// for the round after the running one (not while a partition stops at
	// a bad record: the task stops right after the records before it
	// commit).
	want := len(m.rounds) == 0 || (len(m.rounds) < m.cfg.InFlight && !m.stoppingAtBadRecord())
	if want && !m.polling && m.now >= m.waitUntil && len(m.parts) > 0 {
		m.pollSeq++
		m.polling = true
		out = append(out, Action{Type: ActionPoll, Seq: m.pollSeq})
	}
	return out
}

// ahead reports whether a round that is not running is in flight.
func (m *Machine) ahead() bool {
	for _, r := range m.rounds {
		if !r.running {
			return true
		}
	}
	return false
}

// current keeps the batches of r that still continue their partition:
// owned, at the fence they were cut with, from the stored next offset. A
// round cut before a rebalance (written ahead, or polled while the
// partitions moved) may hold batches of partitions revoked or assigned
// anew since; their staged rows roll back.
func (m *Machine) current(r *round, out []Action) []Action {
	keep := r.Batches[:0:0]
	var stale []twophase.BatchID
	for _, b := range r.Batches {
		c, ok := m.parts[TP{b.ID.Topic, b.ID.Partition}]
		if ok && c.continues(b) {
			keep = append(keep, b)
		} else {
			stale = append(stale, b.ID)
		}
	}
	if len(stale) == 0 {
		return out
	}
	r.Batches = keep
	out = append(out, report(Report{Type: ReportStale, IDs: stale}))
	if r.Ahead {
		out = append(out, Action{Type: ActionDiscard, IDs: stale})
	}
	return out
}

// roundDone triages a round's result: the one place that decides what a
// committed, fenced, bad, own-round, terminal, unavailable, in-doubt or
// aborted round leads to.
func (m *Machine) roundDone(r *round, res Result, out []Action) []Action {
	m.rounds = slices.DeleteFunc(m.rounds, func(x *round) bool { return x == r })
	stats := res.Stats
	stats.Records, stats.Batches = r.Records(), len(r.Batches)
	stats.Positions = m.commit(res.Committed)
	failed := res.Err != nil || res.Ambiguous || len(res.InDoubt) > 0 || len(res.Fenced) > 0 || len(res.Committed) < len(r.Batches)
	switch {
	case res.Ambiguous:
		stats.Outcome = "in_doubt"
	case !failed:
		stats.Outcome = "committed"
	case len(res.Committed) == len(r.Batches):
		stats.Outcome = "committed" // committed decision, some commits in doubt
	case len(res.Committed) > 0:
		stats.Outcome = "partial"
	default:
		stats.Outcome = "aborted"
	}
	out = append(out, report(Report{Type: ReportRound, Stats: stats}))
	out = m.ackPending(out)
	if !failed {
		m.restarts = 0
		if m.unavailable > 0 {
			m.unavailable = 0
			out = append(out, report(Report{Type: ReportAvailable}))
		}
		if err := m.stoppedError(); err != nil {
			return m.fail(err, out)
		}
		return out
	}
	// Whatever went wrong, the rounds cut from this one's ends must not
	// run (their compare-and-set would fail anyway): restart and rewind
	// drop them.
	err := res.Err
	switch {
	case res.Ambiguous:
		return m.restart(fmt.Errorf("round outcome unknown: %w", orUnknown(err)), out)
	case len(res.Fenced) > 0 || errors.Is(err, offsets.ErrFenced) || errors.Is(err, twophase.ErrFenced):
		out = append(out, report(Report{Type: ReportFenced, Err: fencedErr(err, res.Fenced)}))
		return m.restart(fmt.Errorf("fenced: %w", fencedErr(err, res.Fenced)), out)
	case len(res.InDoubt) > 0 && len(res.Committed) == len(r.Batches):
		// A committed decision whose participant commit failed: the
		// batches are visible to recovery, which the next assignment runs.
		return m.restart(fmt.Errorf("%d committed batches left in doubt: %w", len(res.InDoubt), orUnknown(err)), out)
	}
	// A round that aborted for a bad record, a schema change or a
	// terminal error is handled as such even when a prepare that failed
	// may have left its batch prepared: the partition stops before the
	// record (or the task fails), and the next owner's recovery resolves
	// what was left.
	var own *twophase.OwnRoundError
	if errors.As(err, &own) {
		if m.txn != nil {
			// A round of whole source transactions is written in one sink
			// transaction (connectors.RoundWriter); running one of its
			// batches alone would apply part of a source transaction. No
			// RoundWriter refuses so: one that does is a sink defect, and
			// the task stops rather than split the transaction.
			return m.fail(fmt.Errorf("source.transactions=whole: the sink refused a round of whole source transactions and asked for a round of its own for %s, which would apply part of a transaction: %w", own.ID, err), out)
		}
		tp := TP{own.ID.Topic, own.ID.Partition}
		out = append(out, report(Report{Type: ReportOwnRound, Partitions: []TP{tp}, Err: own.Err}))
		return m.ownRound(r, own.ID, out)
	}
	var rl connectors.RecordLocator
	if errors.As(err, &rl) {
		topic, p, off := rl.RecordCoordinates()
		tp := TP{topic, p}
		if c, ok := m.parts[tp]; ok && (c.stopAt < 0 || off < c.stopAt) {
			c.stopAt, c.stopEr = off, rl
			out = append(out, report(Report{Type: ReportBadRecord, Partitions: []TP{tp}, Err: rl}))
		}
		return m.rewind(nil, out)
	}
	if connectors.IsTerminal(err) {
		return m.fail(err, out)
	}
	if len(res.InDoubt) > 0 {
		// A prepare that may have left its batch prepared: recover it
		// (the next assignment does) before any new work on it.
		return m.restart(fmt.Errorf("%d batches may be left prepared: %w", len(res.InDoubt), orUnknown(err)), out)
	}
	out = m.rewind(nil, out)
	switch {
	case errors.Is(err, record.ErrUnavailable) || errors.Is(err, connectors.ErrSinkUnavailable):
		m.unavailable++
		d := min(unavailableTicks<<min(m.unavailable-1, 6), unavailableMaxTicks)
		m.waitUntil = m.now + int64(d)
		return append(out, report(Report{Type: ReportWaiting, Err: err, Ticks: d, Attempt: m.unavailable}))
	case err == nil:
		// A clean abort decided by the decision record (a rebalance,
		// KIP-447 generation fencing): continue from the stored offsets.
		return append(out, report(Report{Type: ReportRetry}))
	default:
		m.waitUntil = m.now + retryTicks
		return append(out, report(Report{Type: ReportRetry, Err: err, Ticks: retryTicks}))
	}
}

// ownRound runs the batch of id's partition in the failed round r, which
// needs a round of its own, next and alone, with the records it has
// (nothing of it was written), and reads every other partition again
// from its cursor. A batch whose partition was revoked or assigned anew
// since, or continued by a committed batch, is dropped instead, as any
// stale batch.
func (m *Machine) ownRound(r *round, id twophase.BatchID, out []Action) []Action {
	tp := TP{id.Topic, id.Partition}
	var b *twophase.Batch
	for _, x := range r.Batches {
		if (TP{x.ID.Topic, x.ID.Partition}) == tp {
			b = x
		}
	}
	c, ok := m.parts[tp]
	if b == nil || !ok || !c.continues(b) {
		return m.rewind(nil, out)
	}
	out = m.rewind(&tp, out)
	m.roundID++
	again := &twophase.Batch{ID: b.ID, Prev: b.Prev, Fence: b.Fence, Records: b.Records}
	m.rounds = append(m.rounds, &round{Round: &Round{ID: m.roundID, Batches: []*twophase.Batch{again}, Ahead: m.stageFirst}})
	c.ahead = again.ID.NextOffset()
	return append(out, Action{Type: ActionSeek, Positions: []offsets.Position{{Topic: tp.Topic, Partition: tp.Partition, Next: c.ahead, Fence: c.fence}}})
}

// commit moves the cursors of committed batches and returns their new
// positions.
func (m *Machine) commit(ids []twophase.BatchID) []offsets.Position {
	var out []offsets.Position
	for _, id := range ids {
		c, ok := m.parts[TP{id.Topic, id.Partition}]
		if !ok {
			continue
		}
		c.next = id.NextOffset()
		out = append(out, offsets.Position{Topic: id.Topic, Partition: id.Partition, Next: c.next, Fence: c.fence})
	}
	return out
}

// ackPending acknowledges the revocations that waited for the round.
func (m *Machine) ackPending(out []Action) []Action {
	for _, a := range m.pendingAcks {
		out = append(out, Action{Type: ActionAckRevoke, Seq: a.seq})
	}
	m.pendingAcks = nil
	return out
}

// dropAhead drops every round that is not running: their write-ahead rolls
// back. Nothing of them was prepared.
func (m *Machine) dropAhead(out []Action) []Action {
	var keep []*round
	var ids []twophase.BatchID
	for _, r := range m.rounds {
		if r.running {
			keep = append(keep, r)
			continue
		}
		if r.Ahead {
			ids = append(ids, r.IDs()...)
		}
	}
	m.rounds = keep
	if len(ids) > 0 {
		out = append(out, Action{Type: ActionDiscard, IDs: ids})
	}
	return out
}

// rewind drops the rounds that are not running and seeks every owned
// partition but skip back to where the next batch continues: the end of
// the running round's batch, or the stored next offset. An outstanding
// poll is given up (its records may come from before the seek).
func (m *Machine) rewind(skip *TP, out []Action) []Action {
	out = m.dropAhead(out)
	running := map[TP]int64{}
	if r := m.running(); r != nil {
		for _, b := range r.Batches {
			// A batch cut under an earlier ownership of its partition
			// (another fence) does not continue the cursor.
			k := TP{b.ID.Topic, b.ID.Partition}
			if c, ok := m.parts[k]; ok && c.fence == b.Fence {
				running[k] = b.ID.NextOffset()
			}
		}
	}
	var seeks []offsets.Position
	for k, c := range m.parts {
		if skip != nil && k == *skip {
			continue
		}
		// Records handed to rounds since are given up: the stop is
		// reached again when a poll returns the bad record.
		c.ahead, c.atStop = running[k], false
		if m.txn != nil {
			m.txn.drop(func(tp TP) bool { return tp != k })
		}
		seeks = append(seeks, offsets.Position{Topic: k.Topic, Partition: k.Partition, Next: c.from(), Fence: c.fence})
	}
	if m.polling {
		out = append(out, Action{Type: ActionCancelPoll, Seq: m.pollSeq})
		m.polling = false
	}
	if len(seeks) == 0 {
		return out
	}
	sortPositions(seeks)
	return append(out, Action{Type: ActionSeek, Positions: seeks})
}

// restart gives the session up: the next one's assignments recover and
// fence before any new work.
func (m *Machine) restart(err error, out []Action) []Action {
	m.restarts++
	d := min(restartTicks<<min(m.restarts-1, 5), restartMaxTicks)
	if m.polling {
		out = append(out, Action{Type: ActionCancelPoll, Seq: m.pollSeq})
		m.polling = false
	}
	out = m.dropAhead(out)
	m.parts = map[TP]*cursor{}
	m.rounds, m.pendingAcks = nil, nil
	if m.txn != nil {
		m.txn = newTxnHold(m.txn.cfg)
	}
	m.phase = phaseRestarting
	m.sessionAt = m.now + int64(d)
	return append(out, Action{Type: ActionRestart, Err: err})
}

func (m *Machine) fail(err error, out []Action) []Action {
	if m.polling {
		out = append(out, Action{Type: ActionCancelPoll, Seq: m.pollSeq})
		m.polling = false
	}
	out = m.dropAhead(out)
	m.phase = phaseDone
	return append(out, Action{Type: ActionFail, Err: err})
}

// stoppingAtBadRecord reports whether a partition stops before a bad record.
func (m *Machine) stoppingAtBadRecord() bool {
	for _, c := range m.parts {
		if c.stopAt >= 0 {
			return true
		}
	}
	return false
}

// stoppedError returns the task's terminal error once a partition that hit
// a bad record has committed everything before it.
func (m *Machine) stoppedError() error {
	keys := make([]TP, 0, len(m.parts))
	for k := range m.parts {
		keys = append(keys, k)
	}
	sortTPs(keys)
	for _, k := range keys {
		c := m.parts[k]
		if c.stopAt >= 0 && (c.next >= c.stopAt || c.atStop) {
			return fmt.Errorf("%w: topic %s partition %d offset %d: %v (skip it by resetting the partition's offset to %d)", ErrStopped, k.Topic, k.Partition, c.stopAt, c.stopEr, c.stopAt+1)
		}
	}
	return nil
}

func report(r Report) Action { return Action{Type: ActionReport, Report: r} }

func orUnknown(err error) error {
	if err == nil {
		return errors.New("no error reported")
	}
	return err
}

func fencedErr(err error, ids []twophase.BatchID) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %d batches", twophase.ErrFenced, len(ids))
}

func sortPositions(ps []offsets.Position) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
}

func sortTPs(ts []TP) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Topic != ts[j].Topic {
			return ts[i].Topic < ts[j].Topic
		}
		return ts[i].Partition < ts[j].Partition
	})
}
