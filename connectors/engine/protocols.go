package engine

// The round protocols the driver runs a round by, one per kind of
// guarantee: the Kafka-decided two-phase commit (twoPhaseRound) and the
// sink-local writes of the other guarantees (localRound). The machine
// decides when a round runs and what its result means; these only
// perform it.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/task"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// twoPhaseRound is one round of the commit protocol, decided by the
// session's Kafka transaction, which also carries the round's dead letters.
func (d *driver) twoPhaseRound(s *session, r *task.Round) task.Result {
	t := d.t
	d.records.Attach(r.Batches)
	dec := &roundDecider{KafkaDecider: s.dec, gate: s.gate, batches: r.Batches}
	if t.conn.DLQTopic != "" {
		dec.dlq = &dlqDecider{t: t, cl: s.cl, batches: r.Batches}
	}
	hook := func(point string) {
		if point == twophase.HookAfterPrepare {
			// The round's rows are written: the round after it may be
			// written ahead.
			d.in.push(task.Event{Type: task.EventWritten, Seq: r.ID})
		}
		if point == twophase.HookBeforeDecide && failpoint.Armed(failpoint.AheadBeforeDecide) {
			d.waitAhead(d.hard, r.ID)
			failpoint.HitIn(t.conn.Name, failpoint.AheadBeforeDecide)
		}
		failpoint.HitIn(t.conn.Name, point)
		if point == twophase.HookAfterDecide && dec.committed {
			failpoint.HitIn(t.conn.Name, failpoint.AfterDecideCommit)
		}
	}
	coord := twophase.NewCoordinator(t.sink, dec,
		twophase.WithPrepareConcurrency(t.conn.Parallelism),
		twophase.WithCallTimeout(t.conn.SinkTimeout),
		twophase.WithHook(hook))
	rr, err := coord.Round(d.hard, r.Batches)
	res := task.Result{Err: err, InDoubt: rr.InDoubt, Fenced: rr.Fenced, Ambiguous: rr.Outcome == twophase.OutcomeInDoubt}
	res.Stats.PrepareNanos, res.Stats.DecideNanos, res.Stats.CommitNanos = int64(rr.Phases.Prepare), int64(rr.Phases.Decide), int64(rr.Phases.Commit)
	if rr.Outcome == twophase.OutcomeCommitted {
		res.Committed = r.IDs()
		res.Stats.DeadLettered = dec.sent()
		if dec.dlq == nil {
			res.Stats.DeadLettered = len(connectors.DeadLettersOf(r.Batches))
		}
	}
	return res
}

// roundDecider is the decision of one round: the session's transaction
// commits exactly the round's offsets (the session may already have polled
// the next round's records) and, with a dead-letter topic, the round's
// dead letters; polls stay out of its Begin and End.
type roundDecider struct {
	*twophase.KafkaDecider
	gate    *pollGate
	batches []*twophase.Batch
	dlq     *dlqDecider
	// committed: the last Decide committed (for the failpoint
	// after-decide-commit).
	committed bool
}

func (r *roundDecider) Begin(ctx context.Context) error {
	r.gate.close()
	defer r.gate.open()
	return r.KafkaDecider.Begin(ctx)
}

func (r *roundDecider) Decide(ctx context.Context, commit bool) (bool, error) {
	r.gate.close()
	defer r.gate.open()
	r.KafkaDecider.CommitExactly(r.batches)
	var committed bool
	var err error
	if r.dlq != nil {
		r.dlq.Decider = r.KafkaDecider
		committed, err = r.dlq.Decide(ctx, commit)
	} else {
		committed, err = r.KafkaDecider.Decide(ctx, commit)
	}
	r.committed = committed && err == nil
	return committed, err
}

func (r *roundDecider) sent() int {
	if r.dlq == nil {
		return 0
	}
	return r.dlq.sent
}

// localRound writes every batch of a round in a sink transaction of its
// own (WriteLocal), at most commit.parallelism at a time, then produces
// the dead letters of those that committed and mirrors the offsets into
// the group for lag tooling.
func (d *driver) localRound(s *session, r *task.Round) task.Result {
	t := d.t
	ctx := d.hard
	guard, order := d.g.WriteMode()
	if t.conn.UnsafeNoFencing {
		guard = offsets.GuardNone
	}
	if failpoint.Armed(failpoint.AheadBeforeDecide) {
		d.waitAhead(ctx, r.ID)
		failpoint.HitIn(t.conn.Name, failpoint.AheadBeforeDecide)
	}
	failpoint.HitIn(t.conn.Name, failpoint.BeforeWrite)
	start := time.Now()
	d.records.Attach(r.Batches)
	errs := make([]error, len(r.Batches))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(t.conn.Parallelism, 1))
	if d.round != nil {
		// Whole source transactions: every batch in one transaction.
		wctx, cancel := t.sinkCtx(ctx)
		err := d.round.WriteRound(wctx, r.Batches, guard)
		cancel()
		for i := range errs {
			errs[i] = err
		}
	} else {
		for i, b := range r.Batches {
			g.Go(func() error {
				wctx, cancel := t.sinkCtx(gctx)
				defer cancel()
				errs[i] = d.local.WriteLocal(wctx, b, guard, order)
				return nil
			})
		}
	}
	_ = g.Wait()
	var res task.Result
	var done []*twophase.Batch
	for i, err := range errs {
		if err == nil {
			done = append(done, r.Batches[i])
			res.Committed = append(res.Committed, r.Batches[i].ID)
		} else {
			if res.Err == nil {
				res.Err = err
			}
		}
	}
	// The failed batches' dead letters are dropped with them: they are
	// redone from the stored offsets.
	letters := connectors.DeadLettersOf(done)
	if t.conn.DLQTopic != "" {
		// After the sink commit: a crash before the produce loses them
		// from the topic (README, Dead letters).
		t.produceDeadLetters(ctx, s.cl, letters)
	}
	res.Stats.DeadLettered = len(letters)
	res.Stats.CommitNanos = int64(time.Since(start))
	if len(done) > 0 {
		mirror := map[string]map[int32]kgo.EpochOffset{}
		for _, b := range done {
			if mirror[b.ID.Topic] == nil {
				mirror[b.ID.Topic] = map[int32]kgo.EpochOffset{}
			}
			mirror[b.ID.Topic][b.ID.Partition] = kgo.EpochOffset{Epoch: -1, Offset: b.ID.NextOffset()}
		}
		s.cl.CommitOffsets(ctx, mirror, nil)
	}
	return res
}
