package engine

// The driver runs a task.Machine against franz-go and the sink (DESIGN.md,
// "The task layer"). One goroutine, the loop, owns the machine: it feeds it
// events and performs its actions. Polls, write-aheads and rounds run in
// goroutines of their own that report back through the inbox; franz-go's
// callbacks only put events in the inbox (an assignment's recovery and
// fence bump, which must end before the callback returns the offsets to
// seek to, is the one piece of I/O a callback does, as before). No lock is
// held across broker or sink I/O; the loop waits only for a cancelled poll
// or write-ahead to return.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/task"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/twophase"
)

// inbox is the loop's queue of events: pushing never blocks.
type inbox struct {
	mu     sync.Mutex
	q      []task.Event
	notify chan struct{} // a token while q is not empty
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (b *inbox) push(ev task.Event) {
	b.mu.Lock()
	b.q = append(b.q, ev)
	b.mu.Unlock()
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []task.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = nil
	return q
}

type pollRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	hurry  chan struct{} // closed to end the poll's linger
}

type stageRun struct {
	round  *task.Round
	cancel context.CancelFunc
	done   chan struct{}
	ahead  atomic.Int32 // batches staged successfully
}

// driver is one run of a task.
type driver struct {
	t *Task
	g connectors.Guarantee
	// records converts every batch once, before the sink sees it (the
	// runtime's record pipeline and tolerance operator).
	records *connectors.RecordPipeline
	m       *task.Machine
	in      *inbox
	soft    context.Context
	hard    context.Context
	stager  twophase.Stager
	local   connectors.LocalWriter // the local guarantees' writer
	round   connectors.RoundWriter // source.transactions=whole: a round in one transaction

	s      *session
	polls  map[uint64]*pollRun
	stages map[uint64]*stageRun // by round
	rounds sync.WaitGroup

	revSeq atomic.Uint64
	ackMu  sync.Mutex
	acks   map[uint64]chan struct{}

	// staged tracks the newest round whose write-ahead ended, for the
	// ahead-before-decide failpoint.
	stagedMu sync.Mutex
	stagedID uint64
	stagedCh chan struct{}

	finished bool
	err      error
}

func (t *Task) newDriver(soft, hard context.Context) (*driver, error) {
	g, err := connectors.ParseGuarantee(t.conn.Delivery)
	if err != nil {
		return nil, err
	}
	if err := connectors.Supports(t.sink, g); err != nil {
		return nil, &connectors.Terminal{Err: err}
	}
	cfg := task.Config{Connector: t.conn.Name, Guarantee: g, InFlight: 1, Paused: t.gate != nil && t.gate.pausedNow()}
	var rw connectors.RoundWriter
	if t.conn.SourceTxnsTopic != "" {
		// Source transactions applied whole: a round is written in one
		// sink transaction, and rounds are not pipelined.
		var ok bool
		if rw, ok = t.sink.(connectors.RoundWriter); !ok {
			return nil, &connectors.Terminal{Err: fmt.Errorf("%s=%s: this sink cannot write a round in one transaction", config.KeySourceTxns, config.SourceTxnsWhole)}
		}
		cfg.Txn = &task.TxnConfig{Topic: t.conn.SourceTxnsTopic, MaxRecords: t.conn.SourceTxnsRecords,
			MaxWaitTicks: max(int64(t.conn.SourceTxnsWait/(task.TickMillis*time.Millisecond)), 1)}
	}
	var stager twophase.Stager
	if st, ok := t.sink.(twophase.Stager); ok && g.Pipelines() && t.conn.RoundsInFlight >= 2 && cfg.Txn == nil {
		stager, cfg.InFlight = st, 2
	}
	m, err := task.NewMachine(cfg)
	if err != nil {
		return nil, err
	}
	lw, _ := t.sink.(connectors.LocalWriter)
	records := t.records
	if records == nil {
		records = connectors.PipelineFor(nil, t.conn.ErrorsTolerance, t.sink)
	}
	return &driver{t: t, g: g, records: records, m: m, in: newInbox(), soft: soft, hard: hard, stager: stager, local: lw, round: rw,
		polls: map[uint64]*pollRun{}, stages: map[uint64]*stageRun{}, acks: map[uint64]chan struct{}{},
		stagedCh: make(chan struct{})}, nil
}

// run is the loop. It returns nil when soft or hard ends, or the task's
// terminal error.
func (d *driver) run() error {
	defer d.close()
	defer d.t.opt.Memory.join()()  // before the session sizes its fetches
	defer d.t.startProbe(d.hard)() // broker and topics, for the status (health.go)
	tick := time.NewTicker(task.TickMillis * time.Millisecond)
	defer tick.Stop()
	d.step(task.Event{Type: task.EventStart})
	soft := d.soft.Done()
	paused := d.t.gate != nil && d.t.gate.pausedNow()
	for !d.finished {
		var pauseCh, resumeCh <-chan struct{}
		if d.t.gate != nil {
			p, r := d.t.gate.state()
			if paused {
				resumeCh = r
			} else {
				pauseCh = p
			}
		}
		select {
		case <-d.hard.Done():
			return nil
		case <-soft:
			soft = nil
			d.step(task.Event{Type: task.EventStop})
		case <-d.in.notify:
			for _, ev := range d.in.take() {
				if d.finished {
					break
				}
				switch ev.Type {
				case task.EventStaged:
					d.noteStaged(ev.Seq)
				case task.EventPolled:
					delete(d.polls, ev.Seq)
				}
				d.step(ev)
			}
		case <-tick.C:
			d.step(task.Event{Type: task.EventTick})
		case <-pauseCh:
			paused = true
			d.t.log.Info("task paused: fetching stopped, group membership and partitions kept")
			if d.s != nil {
				// Every topic the client consumes: with topics.regex the
				// connector's list is empty (and a source transaction
				// topic is not in it).
				d.s.cl.PauseFetchTopics(append(slices.Clone(d.t.conn.Topics), d.s.cl.GetConsumeTopics()...)...)
			}
			d.step(task.Event{Type: task.EventPause})
		case <-resumeCh:
			paused = false
			if d.s != nil {
				d.s.cl.ResumeFetchTopics(d.s.cl.PauseFetchTopics()...)
			}
			d.t.log.Info("task resumed: fetching again from the stored offsets")
			d.step(task.Event{Type: task.EventResume})
		}
	}
	if d.soft.Err() != nil || d.hard.Err() != nil {
		return nil
	}
	return d.err
}

func (d *driver) step(ev task.Event) {
	acts, err := d.m.Step(ev)
	if err != nil {
		// A driver bug: the machine refused an event it produced the
		// cause of. Stop rather than guess.
		d.finish(fmt.Errorf("task machine: %w", err))
		return
	}
	for _, a := range acts {
		if d.finished {
			return
		}
		d.do(a)
	}
}

func (d *driver) finish(err error) {
	d.finished, d.err = true, err
}

func (d *driver) do(a task.Action) {
	switch a.Type {
	case task.ActionSession:
		if err := d.startSession(); err != nil {
			d.finish(err)
		}
	case task.ActionPoll:
		d.startPoll(a.Seq)
	case task.ActionCancelPoll:
		d.cancelPoll(a.Seq)
	case task.ActionHurryPoll:
		if p, ok := d.polls[a.Seq]; ok {
			select {
			case <-p.hurry:
			default:
				close(p.hurry)
			}
		}
	case task.ActionStage:
		d.startStage(a.Round)
	case task.ActionRun:
		d.startRound(a.Round)
	case task.ActionDiscard:
		d.discard(a.IDs)
	case task.ActionSeek:
		if d.s != nil {
			set := map[string]map[int32]kgo.EpochOffset{}
			for _, p := range a.Positions {
				if set[p.Topic] == nil {
					set[p.Topic] = map[int32]kgo.EpochOffset{}
				}
				set[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: p.Next}
			}
			d.s.cl.SetOffsets(set)
		}
	case task.ActionAckRevoke:
		d.ack(a.Seq)
	case task.ActionRestart:
		d.t.log.Warn("session restart", "err", a.Err)
		d.endSession()
	case task.ActionFail:
		d.finish(a.Err)
	case task.ActionExit:
		d.finish(nil)
	case task.ActionReport:
		d.t.report(a.Report)
	}
}

// startPoll polls one round's records in the background.
func (d *driver) startPoll(seq uint64) {
	s := d.s
	if s == nil {
		d.in.push(task.Event{Type: task.EventPolled, Seq: seq})
		return
	}
	ctx, cancel := context.WithCancel(d.hard)
	p := &pollRun{cancel: cancel, done: make(chan struct{}), hurry: make(chan struct{})}
	d.polls[seq] = p
	go func() {
		defer close(p.done)
		d.t.opt.Memory.roundStarted()
		s.sizer.adjust(s.cl)
		var recs []*kgo.Record
		if s.gate != nil {
			gctx, leave, err := s.gate.enter(ctx)
			if err == nil {
				recs, _ = d.t.poll(gctx, s.pollFn, p.hurry)
				leave()
			}
		} else {
			recs, _ = d.t.poll(ctx, s.pollFn, p.hurry)
		}
		if len(recs) > 0 {
			failpoint.HitIn(d.t.conn.Name, failpoint.AfterPoll)
		}
		ev := task.Event{Type: task.EventPolled, Seq: seq, Records: recs}
		if d.round != nil && len(recs) > 0 {
			ev.Marks, ev.Err = d.records.TxnMarks(ctx, recs, d.t.conn.SourceTxnsTopic)
		}
		d.in.push(ev)
	}()
}

// cancelPoll ends a poll and waits for it: what it read moved the
// client's positions, and the seek that follows must come after.
func (d *driver) cancelPoll(seq uint64) {
	p, ok := d.polls[seq]
	if !ok {
		return
	}
	delete(d.polls, seq)
	p.cancel()
	<-p.done
}

// startStage writes a round ahead, at most commit.parallelism batches at
// a time. A batch whose staging fails is simply not staged: its round
// writes it and reports the error, if it persists.
func (d *driver) startStage(r *task.Round) {
	ctx, cancel := context.WithCancel(d.hard)
	sr := &stageRun{round: r, cancel: cancel, done: make(chan struct{})}
	d.stages[r.ID] = sr
	go func() {
		defer close(sr.done)
		// Attached once: the round reuses the write-ahead's pipeline of
		// each batch.
		d.records.Attach(r.Batches)
		for i, err := range d.stage(ctx, r.Batches) {
			if err == nil {
				sr.ahead.Add(1)
			} else if ctx.Err() == nil {
				d.t.log.Debug("writing a batch ahead failed; its round writes it", "batch", r.Batches[i].ID.String(), "err", err)
			}
		}
		d.in.push(task.Event{Type: task.EventStaged, Seq: r.ID, StagedAll: int(sr.ahead.Load()) == len(r.Batches)})
	}()
}

// stage writes bs ahead and returns each batch's error: a RoundStager
// under two-phase commit takes them in the units its prepare will (a few
// transactions of several batches each), any other stager one batch at a
// time, commit.parallelism at once.
func (d *driver) stage(ctx context.Context, bs []*twophase.Batch) []error {
	if rs, ok := d.stager.(twophase.RoundStager); ok && d.g == connectors.TwoPhase {
		return rs.StageRound(ctx, bs)
	}
	errs := make([]error, len(bs))
	var g errgroup.Group
	g.SetLimit(max(d.t.conn.Parallelism, 1))
	for i, b := range bs {
		g.Go(func() error { errs[i] = d.stager.Stage(ctx, b); return nil })
	}
	_ = g.Wait()
	return errs
}

// discard stops the write-ahead of the rounds holding ids and rolls back
// what they staged. Nothing of them was prepared.
func (d *driver) discard(ids []twophase.BatchID) {
	if d.stager == nil {
		return
	}
	drop := map[twophase.BatchID]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	for rid, sr := range d.stages {
		for _, b := range sr.round.Batches {
			if drop[b.ID] {
				sr.cancel()
				<-sr.done
				delete(d.stages, rid)
				break
			}
		}
	}
	d.stager.Discard(ids)
}

func (d *driver) noteStaged(id uint64) {
	d.stagedMu.Lock()
	defer d.stagedMu.Unlock()
	if id > d.stagedID {
		d.stagedID = id
		close(d.stagedCh)
		d.stagedCh = make(chan struct{})
	}
}

// waitAhead waits until a round after id was written ahead (the
// ahead-before-decide failpoint's window), or ctx ends.
func (d *driver) waitAhead(ctx context.Context, id uint64) {
	for {
		d.stagedMu.Lock()
		done, ch := d.stagedID > id, d.stagedCh
		d.stagedMu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// startRound runs a round by the guarantee's protocol in the background.
func (d *driver) startRound(r *task.Round) {
	var ahead int
	if sr, ok := d.stages[r.ID]; ok {
		delete(d.stages, r.ID)
		ahead = int(sr.ahead.Load())
		// The round before it committed; this one is written ahead and
		// not prepared yet.
		failpoint.HitIn(d.t.conn.Name, failpoint.AheadAfterCommit)
	}
	s := d.s
	d.rounds.Add(1)
	go func() {
		defer d.rounds.Done()
		start := time.Now()
		var res task.Result
		if s.gts != nil {
			res = d.twoPhaseRound(s, r)
		} else {
			res = d.localRound(s, r)
		}
		res.Stats.TotalNanos = int64(time.Since(start))
		res.Stats.WrittenAhead = ahead
		d.in.push(task.Event{Type: task.EventRoundDone, Seq: r.ID, Result: res})
	}()
}

// close ends whatever is still running: polls, write-aheads (rolled
// back), rounds (they run with the hard context; a round abandoned in
// the middle leaves at most prepared batches, which the next owner's
// recovery resolves), and the session.
func (d *driver) close() {
	for seq := range d.polls {
		d.cancelPoll(seq)
	}
	var ids []twophase.BatchID
	for _, sr := range d.stages {
		ids = append(ids, sr.round.IDs()...)
	}
	if len(ids) > 0 {
		d.discard(ids)
	}
	d.rounds.Wait()
	d.endSession()
}
