package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// TaskOptions are the worker-level settings a task needs.
type TaskOptions struct {
	// Bootstrap lists the Kafka seed brokers.
	Bootstrap []string
	// KafkaOpts are extra client options (TLS, SASL) from the worker.
	KafkaOpts []kgo.Opt
	// InstanceID is the worker's stable id. Transactional ids are
	// txsink-<connector>-<task>-<InstanceID>: a restarted worker with the
	// same id fences its previous incarnation's open transaction at once
	// (InitProducerID), while two live workers must have different ids.
	InstanceID string
	Log        *slog.Logger
	// Observer, when set, receives task events (status, metrics).
	Observer Observer
	// ReservedTopics are the worker's own topics (connectors.Policy): a
	// topics.regex never consumes them, nor names starting "__".
	ReservedTopics map[string]string
}

// Observer receives a task's events. Methods must not block.
type Observer interface {
	// Assigned reports the partitions a task owns after a rebalance.
	Assigned(task int, positions []offsets.Position)
	// Revoked reports partitions a task gave up.
	Revoked(task int, topic string, partitions []int32)
	// Round reports one finished round.
	Round(task int, r RoundStats)
	// FenceConflict reports that a commit was fenced.
	FenceConflict(task int, err error)
	// Waiting reports that rounds fail because something the pipeline
	// depends on is unavailable (a schema registry, the sink database out
	// of disk space), with the error; nil once a round commits again.
	Waiting(task int, err error)
}

// RoundStats describes one round.
type RoundStats struct {
	Outcome      string // committed, aborted, in_doubt
	Records      int
	Batches      int
	Prepare      time.Duration
	Decide       time.Duration
	Commit       time.Duration
	Total        time.Duration
	Positions    []offsets.Position // committed next offsets
	DeadLettered int
	// WrittenAhead counts the round's batches that were written ahead
	// while the previous round ran (pipelined rounds).
	WrittenAhead int
}

// ErrTaskStopped is wrapped by the error a task returns when it stopped on
// a bad record with errors.tolerance=none.
var ErrTaskStopped = errors.New("task stopped at a bad record")

type tp struct {
	topic     string
	partition int32
}

type partState struct {
	next int64 // stored next_offset: where the next batch continues
	// ahead, when above next, is where the next batch continues while
	// rounds cut before it are in flight (pipelined rounds).
	ahead int64
	fence int64
	// stopAt, when >= 0, is the offset of a bad record: batches are cut
	// before it and the task fails once the records before it commit.
	stopAt int64
	stopEr error
	// atStop is set once a poll returned a record at or past stopAt:
	// everything before the bad record has been handed to a round.
	atStop bool
}

// Task owns partitions of the connector's topics through the consumer group
// and runs rounds of the commit protocol. A Task is run once.
type Task struct {
	conn config.Connector
	id   int
	sink connectors.Sink
	opt  TaskOptions
	log  *slog.Logger

	mu    sync.Mutex // guards parts
	parts map[tp]*partState

	roundMu sync.Mutex // held while a round runs (non-2PC modes wait on revoke)

	// hard is the context rounds run with (see RunGraceful).
	hard context.Context
	// unavailable counts consecutive rounds that failed on an unavailable
	// dependency (backoff); only the task's goroutine uses it.
	unavailable int
	// gate, when set, holds the task between rounds while its connector
	// is PAUSED.
	gate *gate
	// valueConverter is the connector's value.converter class, for the
	// dead letters' context headers.
	valueConverter string
	// alone names the partition whose batch needs a round of its own
	// (twophase.OwnRoundError); only the task's goroutine uses it.
	alone *tp
}

// NewTask returns a task; Run starts it.
func NewTask(conn config.Connector, id int, sink connectors.Sink, opt TaskOptions) *Task {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	return &Task{
		conn:  conn,
		id:    id,
		sink:  sink,
		opt:   opt,
		log:   log.With("connector", conn.Name, "task", id),
		parts: map[tp]*partState{},
	}
}

// errRestart asks Run to close the Kafka client and join again: after a
// fence conflict or an unknown outcome, the next assignment recovers and
// fences before any new work (invariants 4 and 7).
type errRestart struct{ err error }

func (e errRestart) Error() string { return "restarting session: " + e.err.Error() }
func (e errRestart) Unwrap() error { return e.err }

// Run consumes and commits until ctx is cancelled (returns nil) or a
// terminal error happens (a bad record with errors.tolerance=none, an
// unrecoverable configuration error). Fence conflicts and unknown outcomes
// restart the session internally. Cancelling ctx in the middle of a round
// leaves at most prepared batches, which the next owner's recovery resolves.
func (t *Task) Run(ctx context.Context) error {
	return t.RunGraceful(ctx, ctx)
}

// RunGraceful is Run with two stops. Cancelling soft ends the task between
// rounds: the round in flight runs to its end (committed or aborted, its
// prepared batches resolved) and no new round starts. Cancelling hard
// abandons the round in flight, as cancelling Run's ctx does. hard must be
// a parent of soft (or soft itself).
func (t *Task) RunGraceful(soft, hard context.Context) error {
	t.hard = hard
	ctx := soft
	backoff := 200 * time.Millisecond
	for {
		// A new session owns nothing until its first assignment.
		t.mu.Lock()
		t.parts = map[tp]*partState{}
		t.mu.Unlock()
		var err error
		if t.conn.Delivery == config.ExactlyOnce {
			err = t.runTransactional(ctx)
		} else {
			err = t.runLocal(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		var rs errRestart
		if !errors.As(err, &rs) {
			return err
		}
		t.log.Warn("session restart", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (t *Task) clientOpts(onAssign func(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error), onRevoke func(context.Context, *kgo.Client, map[string][]int32)) []kgo.Opt {
	// The client caps its read limit at 1 GiB and wants the fetch limit
	// below it.
	fetchMax := int32(min(t.conn.BatchMaxBytes*2, 1<<30-1<<20))
	if t.conn.FetchMaxBytes > 0 {
		fetchMax = int32(min(t.conn.FetchMaxBytes, 1<<30-1<<20))
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(t.opt.Bootstrap...),
		kgo.ConsumerGroup(t.conn.GroupID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(t.conn.SessionTimeout),
		kgo.HeartbeatInterval(t.conn.SessionTimeout / 5),
		kgo.AdjustFetchOffsetsFn(onAssign),
		kgo.OnPartitionsRevoked(onRevoke),
		kgo.OnPartitionsLost(onRevoke),
		kgo.FetchMaxBytes(fetchMax),
		// One fetch may bring a whole round of a partition: with the
		// default 1 MiB per partition a large round waits for several
		// fetches in turn between rounds.
		kgo.FetchMaxPartitionBytes(min(int32(t.conn.BatchMaxBytes), fetchMax)),
		// The client refuses a fetch limit above its read limit (100 MiB
		// by default), which batch.max.bytes above 50 MiB would set.
		kgo.BrokerMaxReadBytes(max(100<<20, fetchMax+1<<20)),
		kgo.ClientID("txsink-" + t.conn.Name),
	}
	if t.conn.MetadataMaxAge > 0 {
		opts = append(opts, kgo.MetadataMaxAge(t.conn.MetadataMaxAge), kgo.MetadataMinAge(min(t.conn.MetadataMaxAge, 5*time.Second)))
	}
	if p := t.conn.TopicsPattern(); p != "" {
		// New matching topics join the subscription at a metadata refresh:
		// the group rebalances and assign recovers and fences them as any
		// other partition.
		opts = append(opts, kgo.ConsumeTopics(p), kgo.ConsumeRegex())
		if ex := config.ExcludedTopics(p, t.opt.ReservedTopics); len(ex) > 0 {
			opts = append(opts, kgo.ConsumeExcludeTopics(ex...))
		}
	} else {
		opts = append(opts, kgo.ConsumeTopics(t.conn.Topics...))
	}
	return append(opts, t.opt.KafkaOpts...)
}

// runTransactional is delivery.guarantee=exactly_once: a GroupTransactSession
// whose transaction commits the group's offsets is the decision record.
func (t *Task) runTransactional(ctx context.Context) error {
	var dec *twophase.KafkaDecider
	var ready = make(chan struct{})
	onAssign := func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		<-ready
		return t.assign(actx, dec, offs)
	}
	onRevoke := func(_ context.Context, _ *kgo.Client, rev map[string][]int32) {
		// The session aborts the in-flight round by itself; waiting for it
		// here would deadlock with End. The new owner recovers whatever
		// we left prepared.
		t.forget(rev)
	}
	opts := t.clientOpts(onAssign, onRevoke)
	opts = append(opts,
		kgo.TransactionalID(fmt.Sprintf("txsink-%s-%d-%s", t.conn.Name, t.id, t.opt.InstanceID)),
		kgo.TransactionTimeout(t.conn.TxnTimeout),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer sess.Close()
	dec = twophase.NewKafkaDecider(sess, t.conn.GroupID)
	close(ready)
	var decider twophase.Decider = dec
	var dd *dlqDecider
	if t.conn.DLQTopic != "" {
		if err := t.ensureDLQTopic(ctx, sess.Client()); err != nil {
			return err
		}
		dd = &dlqDecider{Decider: dec, t: t, cl: sess.Client()}
		decider = dd
	}
	// Pipelined rounds (rounds.max.in.flight=2): next is the round after
	// the one in flight, polled and cut from the in-flight round's ends
	// and being written ahead (staged) while that one prepares, decides
	// and commits. Its batches are prepared only in its own round, after
	// the in-flight one committed: at most one batch per partition is
	// ever prepared (README, "Pipelined rounds").
	stager, _ := t.sink.(twophase.Stager)
	if t.conn.RoundsInFlight < 2 {
		stager = nil
	}
	var next *round
	defer func() { t.drop(stager, next) }()
	// inRound polls the next round inside a round that was not written
	// ahead: between its Begin and its End, while its batches are
	// written and prepared (franz-go forbids polling concurrently with
	// Begin or End, not between them).
	var inRound *poller
	hook := func(point string) {
		failpoint.HitIn(t.conn.Name, point)
		switch point {
		case twophase.HookAfterBegin:
			if stager != nil && next == nil && !t.stopping() {
				inRound = t.startPoll(ctx, sess.Client(), sess.PollRecords)
			}
		case twophase.HookBeforeDecide:
			if inRound != nil {
				next = t.stageAhead(stager, inRound.stop())
				inRound = nil
			}
			if next != nil && failpoint.Armed(failpoint.AheadBeforeDecide) {
				next.wait()
				failpoint.HitIn(t.conn.Name, failpoint.AheadBeforeDecide)
			}
		}
	}
	coord := twophase.NewCoordinator(t.sink, decider,
		twophase.WithPrepareConcurrency(t.conn.Parallelism),
		twophase.WithCallTimeout(t.conn.SinkTimeout),
		twophase.WithHook(hook))

	for {
		if ctx.Err() != nil {
			return nil
		}
		next = t.dropWhenPaused(stager, next, sess.Client())
		var cur *round
		if next != nil {
			cur, next = next, nil
		} else {
			recs, err := t.pollPaused(ctx, sess.Client(), sess.PollRecords)
			if err != nil || ctx.Err() != nil {
				return err
			}
			failpoint.HitIn(t.conn.Name, failpoint.AfterPoll)
			batches := t.cut(recs)
			if len(batches) == 0 {
				if err := t.stoppedError(); err != nil {
					return err
				}
				continue
			}
			cur = &round{records: len(recs), batches: t.soloRound(batches, sess.Client())}
		}
		// (A round not written ahead polls its follower inside, see the
		// hook.)
		next = t.writeAhead(ctx, sess.Client(), sess.PollRecords, stager, cur)
		batches := cur.batches
		start := time.Now()
		if dd != nil {
			dd.batches = batches
		}
		dec.CommitExactly(batches)
		res, err := coord.Round(t.hard, batches)
		if inRound != nil {
			// The round ended before its decision (cannot happen: every
			// round that began decides). Polled records must not be
			// skipped: drop them and rewind.
			inRound.stop()
			inRound = nil
			t.rewind(sess.Client())
		}
		stats := RoundStats{Records: cur.records, Batches: len(batches), Prepare: res.Phases.Prepare, Decide: res.Phases.Decide, Commit: res.Phases.Commit, Total: time.Since(start),
			WrittenAhead: int(cur.ahead.Load())}
		if res.Outcome != twophase.OutcomeCommitted || len(res.InDoubt) > 0 {
			// The round after it was cut from this one's ends: it must
			// not run (its compare-and-set would fail anyway).
			t.drop(stager, next)
			next = nil
		}
		switch res.Outcome {
		case twophase.OutcomeCommitted:
			stats.Outcome = "committed"
			t.available()
			stats.Positions = t.advance(batches)
			if dd != nil {
				stats.DeadLettered = dd.sent
			} else {
				stats.DeadLettered = len(t.takeDeadLetters(batches))
			}
			t.observeRound(stats)
			if err := t.stoppedError(); err != nil {
				return err
			}
			if len(res.InDoubt) > 0 {
				// Committed decision but some COMMIT PREPARED failed: the
				// batches are visible to recovery; restart so it runs.
				return errRestart{fmt.Errorf("%d committed batches left prepared: %w", len(res.InDoubt), err)}
			}
			continue
		case twophase.OutcomeAborted:
			stats.Outcome = "aborted"
			t.observeRound(stats)
			if ctx.Err() != nil {
				return nil
			}
			if len(res.Fenced) > 0 || errors.Is(err, offsets.ErrFenced) || errors.Is(err, twophase.ErrFenced) {
				t.fenceConflict(err)
				return errRestart{fmt.Errorf("fenced: %w", err)}
			}
			var own *twophase.OwnRoundError
			alone := errors.As(err, &own)
			if alone {
				// A schema change: its prepared transaction would hold a
				// lock the round's other batches wait on until the
				// decision, which waits for them.
				t.log.Info("a batch needs a schema change; running it in a round of its own", "batch", own.ID.String(), "reason", own.Err)
				t.alone = &tp{own.ID.Topic, own.ID.Partition}
			}
			if t.noteBadRecord(err) || alone {
				// The batch holding the bad record rolled back before
				// PREPARE; the others of the round were aborted.
				t.rewind(sess.Client())
				continue
			}
			if connectors.IsTerminal(err) {
				return err
			}
			if len(res.InDoubt) > 0 {
				// A prepare failed in a way that may have left its batch
				// prepared (holding the offsets row): recover first.
				return errRestart{fmt.Errorf("%d batches may be left prepared: %w", len(res.InDoubt), err)}
			}
			// A clean abort: a rebalance or KIP-447 generation fencing
			// (err == nil), or a participant failed to prepare (a lost
			// connection, an unavailable schema registry): the decision
			// was abort, so retry from the stored offsets.
			t.rewind(sess.Client())
			if unavailable(err) {
				if t.waitUnavailable(ctx, err) != nil {
					return nil
				}
				continue
			}
			if err == nil {
				t.log.Info("round aborted by the decision (rebalance or KIP-447 generation fencing); continuing from the stored offsets", "batches", len(batches))
			} else {
				t.log.Warn("round aborted; retrying from the stored offsets", "err", err)
				if sleepCtx(ctx, 500*time.Millisecond) != nil {
					return nil
				}
			}
			continue
		default:
			stats.Outcome = "in_doubt"
			t.observeRound(stats)
			return errRestart{fmt.Errorf("round outcome unknown: %w", err)}
		}
	}
}

// round is the work of one round: its batches and, when it was written
// ahead (pipelined rounds), the staging that writes them.
type round struct {
	records int
	batches []*twophase.Batch
	// staged is closed once staging is over (nil: not written ahead).
	staged chan struct{}
	cancel context.CancelFunc
	// ahead counts the batches staged successfully.
	ahead atomic.Int32
}

// wait returns once the round's staging is over.
func (r *round) wait() {
	if r.staged != nil {
		<-r.staged
	}
}

// dropWhenPaused drops the round written ahead once the connector is
// PAUSED (the round in flight has ended) and rewinds: it is redone after
// the resume. It returns the round that is still ahead, if any.
func (t *Task) dropWhenPaused(st twophase.Stager, next *round, cl *kgo.Client) *round {
	if next == nil || t.gate == nil || !t.gate.pausedNow() {
		return next
	}
	t.drop(st, next)
	t.rewind(cl)
	return nil
}

// writeAhead overlaps rounds: when cur was written ahead, it polls the
// following round while cur's write-ahead finishes and then writes that
// one ahead in the background while cur's round runs, and returns it.
// When it returns, cur's write-ahead is over.
func (t *Task) writeAhead(ctx context.Context, cl *kgo.Client, pollFn func(context.Context, int) kgo.Fetches, st twophase.Stager, cur *round) *round {
	var next *round
	if st != nil && cur.staged != nil && !t.stopping() {
		recs := t.pollAhead(ctx, cl, pollFn, cur)
		cur.wait()
		next = t.stageAhead(st, recs)
	}
	cur.wait()
	if cur.staged != nil {
		failpoint.HitIn(t.conn.Name, failpoint.AheadAfterCommit)
	}
	return next
}

// pollAhead polls the records of the round after cur while cur's staging
// runs, and stops polling when it is over. It returns no records while
// the connector is paused.
func (t *Task) pollAhead(ctx context.Context, cl *kgo.Client, pollFn func(context.Context, int) kgo.Fetches, cur *round) []*kgo.Record {
	p := t.startPoll(ctx, cl, pollFn)
	select {
	case <-cur.staged:
	case <-p.done:
	}
	return p.stop()
}

// poller is a poll for the next round running in the background.
type poller struct {
	conn   string // the connector's name, for its failpoints
	cancel context.CancelFunc
	done   chan struct{}
	recs   []*kgo.Record
}

// startPoll starts polling the records of one round (see poll) in the
// background; stop ends it and returns them.
func (t *Task) startPoll(ctx context.Context, cl *kgo.Client, pollFn func(context.Context, int) kgo.Fetches) *poller {
	pctx, cancel := context.WithCancel(ctx)
	p := &poller{conn: t.conn.Name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if t.gate != nil {
			var gcancel context.CancelFunc
			pctx, gcancel = t.gate.active(pctx)
			defer gcancel()
		}
		p.recs, _ = t.poll(pctx, pollFn)
	}()
	return p
}

// stop ends the poll and returns what it got.
func (p *poller) stop() []*kgo.Record {
	p.cancel()
	<-p.done
	if len(p.recs) > 0 {
		failpoint.HitIn(p.conn, failpoint.AfterPoll)
	}
	return p.recs
}

// stageAhead cuts recs from the ends of the round in flight and writes
// the batches ahead in the sink, in the background, at most
// commit.parallelism at a time. A batch whose staging fails is simply not
// staged: its Prepare writes it and reports the error, if it persists.
func (t *Task) stageAhead(st twophase.Stager, recs []*kgo.Record) *round {
	if len(recs) == 0 {
		return nil
	}
	batches := t.cut(recs)
	if len(batches) == 0 {
		return nil
	}
	for _, b := range batches {
		b.Alone = len(batches) == 1
	}
	ctx, cancel := context.WithCancel(t.hard)
	r := &round{records: len(recs), batches: batches, staged: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.staged)
		var g errgroup.Group
		g.SetLimit(max(t.conn.Parallelism, 1))
		for _, b := range batches {
			g.Go(func() error {
				if err := st.Stage(ctx, b); err != nil {
					if ctx.Err() == nil {
						t.log.Debug("writing a batch ahead failed; its prepare writes it", "batch", b.ID.String(), "err", err)
					}
				} else {
					r.ahead.Add(1)
				}
				return nil
			})
		}
		_ = g.Wait()
	}()
	return r
}

// drop abandons a round written ahead: its staging stops and what was
// staged rolls back. Nothing of it was prepared.
func (t *Task) drop(st twophase.Stager, r *round) {
	if r == nil || st == nil {
		return
	}
	r.cancel()
	r.wait()
	ids := make([]twophase.BatchID, len(r.batches))
	for i, b := range r.batches {
		ids[i] = b.ID
	}
	st.Discard(ids)
}

// stopping reports whether a partition stops before a bad record: rounds
// are then not pipelined, so that the task stops right after the records
// before it commit.
func (t *Task) stopping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range t.parts {
		if st.stopAt >= 0 {
			return true
		}
	}
	return false
}

// runLocal is delivery.guarantee=exactly_once_sink, at_least_once and
// at_most_once: no Kafka transaction; the sink's offsets are the only record.
func (t *Task) runLocal(ctx context.Context) error {
	var cl *kgo.Client
	ready := make(chan struct{})
	onAssign := func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		<-ready
		return t.assign(actx, stableOutcome{cl, t.conn.GroupID}, offs)
	}
	onRevoke := func(_ context.Context, _ *kgo.Client, rev map[string][]int32) {
		// Finish the in-flight round before giving the partitions up.
		t.roundMu.Lock()
		defer t.roundMu.Unlock()
		t.forget(rev)
	}
	var err error
	cl, err = kgo.NewClient(t.clientOpts(onAssign, onRevoke)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	close(ready)
	if t.conn.DLQTopic != "" {
		if err := t.ensureDLQTopic(ctx, cl); err != nil {
			return err
		}
	}

	guard, order := offsets.GuardCAS, connectors.Atomic
	switch t.conn.Delivery {
	case config.AtLeastOnce:
		guard, order = offsets.GuardNone, connectors.RowsFirst
	case config.AtMostOnce:
		guard, order = offsets.GuardNone, connectors.OffsetFirst
	}
	if t.conn.UnsafeNoFencing {
		guard = offsets.GuardNone
	}
	// Pipelined rounds (exactly_once_sink, rounds.max.in.flight=2): a
	// round's rows are written ahead (staged) while the following round
	// is polled, and the following round's rows are written ahead while
	// this one's offsets compare-and-set and COMMIT run. The offsets of a
	// round are set only after the round before it committed, in the
	// transaction that holds its rows (README, "Pipelined rounds").
	var stager twophase.Stager
	if order == connectors.Atomic && t.conn.RoundsInFlight >= 2 {
		stager, _ = t.sink.(twophase.Stager)
	}
	var next *round
	abandon := func() {
		t.drop(stager, next)
		next = nil
	}
	defer abandon()
	for {
		if ctx.Err() != nil {
			return nil
		}
		next = t.dropWhenPaused(stager, next, cl)
		cur := next
		next = nil
		if cur == nil {
			recs, err := t.pollPaused(ctx, cl, cl.PollRecords)
			if err != nil || ctx.Err() != nil {
				return err
			}
			failpoint.HitIn(t.conn.Name, failpoint.AfterPoll)
			if stager != nil && !t.stopping() {
				cur = t.stageAhead(stager, recs)
			} else {
				cur = &round{records: len(recs), batches: t.cut(recs)}
			}
			if cur == nil || len(cur.batches) == 0 {
				if err := t.stoppedError(); err != nil {
					return err
				}
				continue
			}
		}
		next = t.writeAhead(ctx, cl, cl.PollRecords, stager, cur)
		if next != nil && failpoint.Armed(failpoint.AheadBeforeDecide) {
			next.wait()
			failpoint.HitIn(t.conn.Name, failpoint.AheadBeforeDecide)
		}
		if err := t.localRound(t.hard, cl, stager, cur, guard, order, abandon); err != nil {
			return err
		}
	}
}

// localRound writes a round's batches with WriteLocal. When one fails,
// abandon drops the round written ahead (it was cut from this round's
// ends) before the task rewinds to the stored offsets.
func (t *Task) localRound(ctx context.Context, cl *kgo.Client, st twophase.Stager, r *round, guard offsets.Guard, order connectors.Order, abandon func()) error {
	t.roundMu.Lock()
	defer t.roundMu.Unlock()
	batches := t.current(st, r.batches)
	if len(batches) == 0 {
		return t.stoppedError()
	}
	failpoint.HitIn(t.conn.Name, failpoint.BeforeWrite)
	start := time.Now()
	errs := make([]error, len(batches))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(t.conn.Parallelism)
	for i, b := range batches {
		g.Go(func() error {
			wctx, cancel := t.sinkCtx(gctx)
			defer cancel()
			errs[i] = t.sink.WriteLocal(wctx, b, guard, order)
			return nil
		})
	}
	_ = g.Wait()
	var done, failed []*twophase.Batch
	var firstErr error
	for i, err := range errs {
		if err == nil {
			done = append(done, batches[i])
		} else {
			failed = append(failed, batches[i])
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if firstErr != nil {
		abandon()
	}
	t.takeDeadLetters(failed) // redone from the stored offsets
	letters := t.takeDeadLetters(done)
	if t.conn.DLQTopic != "" {
		// After the sink commit: a crash before the produce loses them
		// from the topic (README, Dead letters).
		t.produceDeadLetters(ctx, cl, letters)
	}
	stats := RoundStats{Records: r.records, Batches: len(batches), Commit: time.Since(start), Total: time.Since(start), Outcome: "committed",
		WrittenAhead: int(r.ahead.Load())}
	stats.Positions = t.advance(done)
	stats.DeadLettered = len(letters)
	if firstErr != nil {
		stats.Outcome = "partial"
	}
	t.observeRound(stats)
	if len(done) > 0 {
		// Mirror the sink's offsets into the group for lag tooling.
		mirror := map[string]map[int32]kgo.EpochOffset{}
		for _, b := range done {
			if mirror[b.ID.Topic] == nil {
				mirror[b.ID.Topic] = map[int32]kgo.EpochOffset{}
			}
			mirror[b.ID.Topic][b.ID.Partition] = kgo.EpochOffset{Epoch: -1, Offset: b.ID.NextOffset()}
		}
		cl.CommitOffsets(ctx, mirror, nil)
	}
	if firstErr == nil {
		t.available()
		return t.stoppedError()
	}
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(firstErr, offsets.ErrFenced) {
		t.fenceConflict(firstErr)
		return errRestart{firstErr}
	}
	if t.noteBadRecord(firstErr) {
		t.rewind(cl)
		return nil
	}
	if connectors.IsTerminal(firstErr) {
		return firstErr
	}
	if unavailable(firstErr) {
		t.rewind(cl)
		_ = t.waitUnavailable(ctx, firstErr)
		return nil
	}
	t.log.Warn("local write failed; retrying from the stored offsets", "err", firstErr)
	t.rewind(cl)
	select {
	case <-ctx.Done():
	case <-time.After(500 * time.Millisecond):
	}
	return nil
}

// current keeps the batches that still continue their partition: owned,
// at the fence they were cut with, from the stored next offset. A round
// cut before a rebalance (written ahead, or polled while the partitions
// moved) may hold batches of partitions revoked or assigned anew since;
// their staged rows roll back, and the partition's new owner (or the new
// assignment's recovery) takes over from the stored offsets.
func (t *Task) current(stager twophase.Stager, batches []*twophase.Batch) []*twophase.Batch {
	t.mu.Lock()
	out := batches[:0:0]
	var stale []twophase.BatchID
	for _, b := range batches {
		st, ok := t.parts[tp{b.ID.Topic, b.ID.Partition}]
		if ok && st.fence == b.Fence && st.next == b.Prev {
			out = append(out, b)
		} else {
			stale = append(stale, b.ID)
		}
	}
	t.mu.Unlock()
	if len(stale) > 0 {
		t.log.Info("dropping batches cut before their partitions were revoked or assigned anew; the owner continues from the stored offsets", "batches", len(stale))
		if stager != nil {
			stager.Discard(stale)
		}
	}
	return out
}

// sinkCtx bounds one sink call by sink.timeout.ms (see
// twophase.WithCallTimeout).
func (t *Task) sinkCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if t.conn.SinkTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, t.conn.SinkTimeout)
}

// outcomeReader is the part of a Decider recovery needs.
type outcomeReader interface {
	Outcome(ctx context.Context, id twophase.BatchID) (bool, error)
}

// assign runs when partitions are assigned, before any fetch: it recovers
// in-doubt batches of those partitions, fences them in the sink, and seeks
// to the sink's next_offset (invariants 1, 4, 7).
func (t *Task) assign(ctx context.Context, or outcomeReader, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	ctx, cancel := context.WithTimeout(ctx, t.conn.RecoveryTimeout)
	defer cancel()
	out := make(map[string]map[int32]kgo.Offset, len(offs))
	var assigned []offsets.Position
	for topic, parts := range offs {
		ps := make([]int32, 0, len(parts))
		for p := range parts {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		owned := map[int32]bool{}
		for _, p := range ps {
			owned[p] = true
		}
		owns := func(tpc string, p int32) bool { return tpc == topic && owned[p] }
		var pos map[int32]offsets.Position
		for attempt := 0; ; attempt++ {
			if t.conn.UnsafeNoRecovery {
				// Negative control only: in-doubt batches stay in doubt.
				if attempt == 0 {
					t.log.Warn("TEST ONLY: recovery of in-doubt batches is switched off (txsink.test.unsafe.disable.recovery)", "topic", topic)
				}
			} else if _, err := twophase.Recover(ctx, t.sink, decOnly{or}, t.conn.Name, owns, twophase.WithCallTimeout(t.conn.SinkTimeout)); err != nil {
				t.log.Warn("recovery of in-doubt batches failed; retrying", "topic", topic, "err", err)
				if err := sleepCtx(ctx, backoffFor(attempt)); err != nil {
					return nil, fmt.Errorf("recovery of %s: %w", topic, err)
				}
				continue
			}
			var err error
			pos, err = t.sink.Acquire(ctx, topic, ps)
			if err == nil {
				break
			}
			if !errors.Is(err, offsets.ErrBusy) {
				return nil, err
			}
			t.log.Info("offsets row locked by an in-doubt batch; recovering again", "topic", topic)
			if err := sleepCtx(ctx, backoffFor(attempt)); err != nil {
				return nil, fmt.Errorf("fencing %s: %w", topic, err)
			}
		}
		out[topic] = map[int32]kgo.Offset{}
		var initial kadm.ListedOffsets // listed once, when a partition needs it
		for _, p := range ps {
			ps := pos[p]
			if ps.Next == offsets.Unset {
				if initial == nil {
					var err error
					if initial, err = t.initialOffsets(ctx, topic); err != nil {
						return nil, err
					}
				}
				next, err := initialOffset(initial, topic, p)
				if err != nil {
					return nil, err
				}
				if err := t.sink.Initialize(ctx, topic, p, ps.Fence, next); err != nil {
					return nil, err
				}
				ps.Next = next
			}
			t.mu.Lock()
			t.parts[tp{topic, p}] = &partState{next: ps.Next, fence: ps.Fence, stopAt: -1}
			t.mu.Unlock()
			out[topic][p] = kgo.NewOffset().At(ps.Next).WithEpoch(-1)
			assigned = append(assigned, ps)
		}
	}
	t.log.Info("partitions assigned and fenced", "positions", fmtPositions(assigned))
	if t.opt.Observer != nil {
		t.opt.Observer.Assigned(t.id, assigned)
	}
	return out, nil
}

// decOnly adapts an outcome reader to twophase.Decider for Recover, which
// only calls Outcome.
type decOnly struct{ outcomeReader }

func (decOnly) Begin(context.Context) error { return errors.New("recovery only") }
func (decOnly) Decide(context.Context, bool) (bool, error) {
	return false, errors.New("recovery only")
}

// stableOutcome reads a batch's decision from the group's committed offsets
// with stable semantics (pending transactional commits settle first), for
// the modes that have no Kafka transaction of their own but may find
// batches left prepared by an earlier exactly_once run.
type stableOutcome struct {
	cl    *kgo.Client
	group string
}

func (s stableOutcome) Outcome(ctx context.Context, id twophase.BatchID) (bool, error) {
	offs, err := twophase.StableOffsets(ctx, s.cl, s.group, id.Topic)
	if err != nil {
		return false, err
	}
	return twophase.OutcomeFromOffsets(id, offs), nil
}

// initialOffsets lists where offsets.initial starts the topic's
// partitions: the log start (earliest) or the last stable offset (latest).
func (t *Task) initialOffsets(ctx context.Context, topic string) (kadm.ListedOffsets, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.opt.Bootstrap...)}, t.opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var lo kadm.ListedOffsets
	if t.conn.OffsetsInitial == string(offsets.InitialLatest) {
		lo, err = adm.ListCommittedOffsets(ctx, topic) // last stable offset
	} else {
		lo, err = adm.ListStartOffsets(ctx, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	return lo, nil
}

func initialOffset(lo kadm.ListedOffsets, topic string, p int32) (int64, error) {
	o, ok := lo.Lookup(topic, p)
	if !ok {
		return 0, fmt.Errorf("list offsets of %s[%d]: partition missing", topic, p)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("list offsets of %s[%d]: %w", topic, p, o.Err)
	}
	return o.Offset, nil
}

func (t *Task) forget(rev map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, ps := range rev {
		for _, p := range ps {
			delete(t.parts, tp{topic, p})
		}
		if len(ps) > 0 {
			t.log.Info("partitions revoked", "topic", topic, "partitions", ps)
		}
		if t.opt.Observer != nil {
			t.opt.Observer.Revoked(t.id, topic, ps)
		}
	}
}

// poll returns the records of one round: it waits for the first records,
// then keeps polling until batch.max.records, batch.max.bytes or
// batch.linger.ms; it does not linger when the first poll brought a tenth
// of batch.max.records or more.
func (t *Task) poll(ctx context.Context, pollFn func(context.Context, int) kgo.Fetches) ([]*kgo.Record, error) {
	max := t.conn.BatchMaxRecords
	var recs []*kgo.Record
	bytes := 0
	add := func(f kgo.Fetches, lingering bool) error {
		var fatal error
		f.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			t.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		f.EachRecord(func(r *kgo.Record) {
			recs = append(recs, r)
			bytes += len(r.Key) + len(r.Value)
		})
		return fatal
	}
	for len(recs) == 0 {
		if ctx.Err() != nil {
			return nil, nil
		}
		f := pollFn(ctx, max)
		if f.IsClientClosed() {
			return nil, nil
		}
		if err := add(f, false); err != nil {
			return nil, err
		}
	}
	// A backlog was waiting when the first poll brought a tenth of
	// batch.max.records or more (the previous round took longer than the
	// records took to arrive). Lingering for new records would only add
	// its delay to every record of the round; but the backlog itself may
	// be larger than one fetch (fetch.max.bytes), so the round keeps
	// taking fetches while each arrives within backlogFetchWait.
	backlog := len(recs) >= max/10
	deadline := time.Now().Add(t.conn.BatchLinger)
	for len(recs) < max && bytes < t.conn.BatchMaxBytes && time.Now().Before(deadline) {
		d := deadline
		if next := time.Now().Add(backlogFetchWait); backlog && next.Before(deadline) {
			d = next
		}
		lctx, cancel := context.WithDeadline(ctx, d)
		n := len(recs)
		f := pollFn(lctx, max-len(recs))
		cancel()
		if err := add(f, true); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return recs, nil
		}
		if backlog && len(recs) == n {
			return recs, nil // the backlog is taken
		}
	}
	return recs, nil
}

// backlogFetchWait is how long a round under a backlog waits for the next
// fetch: about what a fetch from a broker that has the records takes.
const backlogFetchWait = 10 * time.Millisecond

// cut groups a round's records into one batch per owned partition,
// continuing from the stored next offsets, and cuts before a known bad
// record.
func (t *Task) cut(recs []*kgo.Record) []*twophase.Batch {
	t.mu.Lock()
	defer t.mu.Unlock()
	byTP := map[tp]*twophase.Batch{}
	var order []tp
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		st, ok := t.parts[k]
		if !ok {
			continue // revoked meanwhile
		}
		from := max(st.next, st.ahead)
		if r.Offset < from {
			continue // already written, or in a round in flight
		}
		if st.stopAt >= 0 && r.Offset >= st.stopAt {
			st.atStop = true
			continue
		}
		b := byTP[k]
		if b == nil {
			b = &twophase.Batch{
				ID:    twophase.BatchID{Connector: t.conn.Name, Topic: r.Topic, Partition: r.Partition, First: r.Offset},
				Prev:  from,
				Fence: st.fence,
			}
			byTP[k] = b
			order = append(order, k)
		}
		b.Records = append(b.Records, r)
		b.ID.Last = r.Offset
	}
	out := make([]*twophase.Batch, 0, len(order))
	for _, k := range order {
		b := byTP[k]
		t.parts[k].ahead = b.ID.NextOffset()
		out = append(out, b)
	}
	return out
}

// advance moves the cursors of committed batches and returns their new
// positions.
func (t *Task) advance(batches []*twophase.Batch) []offsets.Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []offsets.Position
	for _, b := range batches {
		st, ok := t.parts[tp{b.ID.Topic, b.ID.Partition}]
		if !ok {
			continue
		}
		st.next = b.ID.NextOffset()
		out = append(out, offsets.Position{Topic: b.ID.Topic, Partition: b.ID.Partition, Next: st.next, Fence: st.fence})
	}
	return out
}

// rewind seeks every owned partition back to its stored next offset, after
// an aborted round.
func (t *Task) rewind(cl *kgo.Client) { t.rewindExcept(cl, nil) }

// soloRound keeps, when a partition asked for a round of its own, only
// that partition's batch, and seeks the others back to their stored
// offsets for the next round. It marks a batch alone in its round.
func (t *Task) soloRound(batches []*twophase.Batch, cl *kgo.Client) []*twophase.Batch {
	if want := t.alone; want != nil {
		t.alone = nil
		for _, b := range batches {
			if b.ID.Topic == want.topic && b.ID.Partition == want.partition {
				if len(batches) > 1 {
					t.rewindExcept(cl, want)
				}
				batches = []*twophase.Batch{b}
				break
			}
		}
	}
	for _, b := range batches {
		b.Alone = len(batches) == 1
	}
	return batches
}

// rewindExcept is rewind for every owned partition but skip.
func (t *Task) rewindExcept(cl *kgo.Client, skip *tp) {
	t.mu.Lock()
	set := map[string]map[int32]kgo.EpochOffset{}
	for k, st := range t.parts {
		if skip != nil && k == *skip {
			continue
		}
		if set[k.topic] == nil {
			set[k.topic] = map[int32]kgo.EpochOffset{}
		}
		st.ahead = 0
		set[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: st.next}
	}
	t.mu.Unlock()
	cl.SetOffsets(set)
}

// noteBadRecord records a bad record reported with errors.tolerance=none so
// that the following rounds stop before it. It reports whether err was one.
func (t *Task) noteBadRecord(err error) bool {
	var rl connectors.RecordLocator
	if !errors.As(err, &rl) {
		return false
	}
	topic, p, off := rl.RecordCoordinates()
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.parts[tp{topic, p}]
	if !ok {
		return true
	}
	if st.stopAt < 0 || off < st.stopAt {
		st.stopAt, st.stopEr = off, rl
	}
	t.log.Error("bad record: the partition stops before it (errors.tolerance=none)", "topic", topic, "partition", p, "offset", off, "err", rl)
	return true
}

// stoppedError returns the terminal error once every partition that hit a
// bad record has committed everything before it.
func (t *Task) stoppedError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, st := range t.parts {
		if st.stopAt >= 0 && (st.next >= st.stopAt || st.atStop) {
			return fmt.Errorf("%w: topic %s partition %d offset %d: %v (skip it by resetting the partition's offset to %d)", ErrTaskStopped, k.topic, k.partition, st.stopAt, st.stopEr, st.stopAt+1)
		}
	}
	return nil
}

func (t *Task) observeRound(s RoundStats) {
	t.log.Debug("round", "outcome", s.Outcome, "records", s.Records, "batches", s.Batches,
		"prepare", s.Prepare, "decide", s.Decide, "commit", s.Commit, "total", s.Total, "written_ahead", s.WrittenAhead)
	if t.opt.Observer != nil {
		t.opt.Observer.Round(t.id, s)
	}
}

// unavailable reports whether a round failed, leaving nothing prepared,
// because something it depends on is unavailable: a dependency of the
// record pipeline (a schema registry) or the sink database itself (out of
// disk space, restarting, unreachable).
func unavailable(err error) bool {
	return errors.Is(err, record.ErrUnavailable) || errors.Is(err, connectors.ErrSinkUnavailable)
}

// waitUnavailable waits before the next attempt after a round failed
// because a dependency of the pipeline or the sink is unavailable:
// exponential backoff from 500 ms to 30 s, reported to the observer (the
// task's "waiting" status). Nothing was written and nothing is skipped:
// the next round starts again from the stored offsets. It returns ctx's
// error when ctx ends first.
func (t *Task) waitUnavailable(ctx context.Context, err error) error {
	t.unavailable++
	d := min(500*time.Millisecond<<min(t.unavailable-1, 6), 30*time.Second)
	t.log.Warn("waiting for an unavailable dependency before retrying from the stored offsets (no record is skipped)",
		"err", err, "attempt", t.unavailable, "backoff", d)
	if t.opt.Observer != nil {
		t.opt.Observer.Waiting(t.id, err)
	}
	return sleepCtx(ctx, d)
}

// available ends a wait for an unavailable dependency.
func (t *Task) available() {
	if t.unavailable == 0 {
		return
	}
	t.log.Info("the record pipeline's dependencies are available again", "failed_attempts", t.unavailable)
	t.unavailable = 0
	if t.opt.Observer != nil {
		t.opt.Observer.Waiting(t.id, nil)
	}
}

func (t *Task) fenceConflict(err error) {
	t.log.Warn("fence conflict: another owner holds the partition; dropping the batch", "err", err)
	if t.opt.Observer != nil {
		t.opt.Observer.FenceConflict(t.id, err)
	}
}

func fmtPositions(ps []offsets.Position) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s[%d]=%d(fence %d)", p.Topic, p.Partition, p.Next, p.Fence)
	}
	return s
}

func backoffFor(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 5)
	return min(d, 3*time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
