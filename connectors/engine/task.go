package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/task"
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
	// Memory is the worker's memory budget (nil: none): it bounds the
	// fetch size of a connector that sets no fetch.max.bytes and cuts
	// rounds short under memory pressure.
	Memory *Memory
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

// TxnSplitObserver is an Observer that also hears of source transactions
// applied in parts (source.transactions=whole).
type TxnSplitObserver interface {
	TxnSplit(task int, id string)
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

// tp names a partition in the status and metrics.
type tp struct {
	topic     string
	partition int32
}

// ErrTaskStopped is wrapped by the error a task returns when it stopped on
// a bad record with errors.tolerance=none.
var ErrTaskStopped = task.ErrStopped

// Task owns partitions of the connector's topics through the consumer group
// and runs rounds of the commit protocol: a task.Machine decides, a driver
// (driver.go) performs its actions against franz-go and the sink. A Task
// is run once.
type Task struct {
	conn config.Connector
	id   int
	sink connectors.Sink
	opt  TaskOptions
	log  *slog.Logger

	// gate, when set, holds the task between rounds while its connector
	// is PAUSED.
	gate *gate
	// valueConverter is the connector's value.converter class, for the
	// dead letters' context headers.
	valueConverter string
	// records is the connector's record pipeline (converters,
	// transforms, change events, errors.tolerance), run on every batch
	// before the sink; nil: the default one for the connector's
	// errors.tolerance.
	records *connectors.RecordPipeline
	// memoryCutLogged: the first round cut under memory pressure was
	// logged at info level (the task's polls run one at a time).
	memoryCutLogged bool
}

// NewTask returns a task; Run starts it.
func NewTask(conn config.Connector, id int, sink connectors.Sink, opt TaskOptions) *Task {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	return &Task{
		conn: conn,
		id:   id,
		sink: sink,
		opt:  opt,
		log:  log.With("connector", conn.Name, "task", id),
	}
}

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
	d, err := t.newDriver(soft, hard)
	if err != nil {
		return err
	}
	return d.run()
}

// clientOpts are the options of the task's Kafka client. With a memory
// budget and no fetch.max.bytes it also returns the fetch sizer the
// client reports its batches to (nil otherwise).
func (t *Task) clientOpts(onAssign func(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error), onRevoke, onLost func(context.Context, *kgo.Client, map[string][]int32)) ([]kgo.Opt, *fetchSizer) {
	// The client caps its read limit at 1 GiB and wants the fetch limit
	// below it.
	fetchMax := int32(min(t.conn.BatchMaxBytes*2, 1<<30-1<<20))
	var sizer *fetchSizer
	if t.conn.FetchMaxBytes > 0 {
		fetchMax = int32(min(t.conn.FetchMaxBytes, 1<<30-1<<20))
	} else {
		var limit int
		sizer, limit = t.opt.Memory.newFetchSizer(int(fetchMax), t.conn.BatchMaxBytes)
		fetchMax = int32(limit)
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
		kgo.OnPartitionsLost(onLost),
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
		pats := []string{p}
		if t.conn.SourceTxnsTopic != "" {
			// The source's transaction topic, beside the pattern.
			pats = append(pats, "^"+regexp.QuoteMeta(t.conn.SourceTxnsTopic)+"$")
		}
		opts = append(opts, kgo.ConsumeTopics(pats...), kgo.ConsumeRegex())
		if ex := config.ExcludedTopics(p, t.opt.ReservedTopics); len(ex) > 0 {
			opts = append(opts, kgo.ConsumeExcludeTopics(ex...))
		}
	} else {
		topics := t.conn.Topics
		if t.conn.SourceTxnsTopic != "" {
			topics = append(slices.Clone(topics), t.conn.SourceTxnsTopic)
		}
		opts = append(opts, kgo.ConsumeTopics(topics...))
	}
	if sizer != nil {
		opts = append(opts, kgo.WithHooks(sizer))
	}
	return append(opts, t.opt.KafkaOpts...), sizer
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
type outcomeReader = twophase.OutcomeReader

// assign runs when partitions are assigned, before any fetch: it recovers
// in-doubt batches of those partitions, fences them in the sink, and
// returns the offsets to seek to, the sink's next_offset (invariants 1, 4,
// 7), and the fenced positions.
func (t *Task) assign(ctx context.Context, or outcomeReader, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, []offsets.Position, error) {
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
			} else if _, err := twophase.Recover(ctx, t.sink, or, t.conn.Name, owns, twophase.WithCallTimeout(t.conn.SinkTimeout)); err != nil {
				t.log.Warn("recovery of in-doubt batches failed; retrying", "topic", topic, "err", err)
				if c := causeOf(err); c != "" {
					t.waitFor(c, err) // shown in the status (health.go)
				}
				if err := sleepCtx(ctx, backoffFor(attempt)); err != nil {
					return nil, nil, fmt.Errorf("recovery of %s: %w", topic, err)
				}
				continue
			}
			var err error
			pos, err = t.sink.Acquire(ctx, topic, ps)
			if err == nil {
				t.waitFor(CauseDatabase, nil) // the database answers again
				break
			}
			if c := causeOf(err); c != "" {
				t.waitFor(c, err)
				t.log.Warn("fencing the partitions failed; retrying", "topic", topic, "err", err)
				if err := sleepCtx(ctx, backoffFor(attempt)); err != nil {
					return nil, nil, fmt.Errorf("fencing %s: %w", topic, err)
				}
				continue
			}
			if !errors.Is(err, offsets.ErrBusy) {
				return nil, nil, err
			}
			t.log.Info("offsets row locked by an in-doubt batch; recovering again", "topic", topic)
			if err := sleepCtx(ctx, backoffFor(attempt)); err != nil {
				return nil, nil, fmt.Errorf("fencing %s: %w", topic, err)
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
						return nil, nil, err
					}
				}
				next, err := initialOffset(initial, topic, p)
				if err != nil {
					return nil, nil, err
				}
				if err := t.sink.Initialize(ctx, topic, p, ps.Fence, next); err != nil {
					return nil, nil, err
				}
				ps.Next = next
			}
			out[topic][p] = kgo.NewOffset().At(ps.Next).WithEpoch(-1)
			assigned = append(assigned, ps)
		}
	}
	return out, assigned, nil
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

// poll returns the records of one round: it waits for the first records,
// then keeps polling until batch.max.records, batch.max.bytes or
// batch.linger.ms, or the worker's memory budget is under pressure; it
// does not linger when the first poll brought a tenth of
// batch.max.records or more.
//
// Closing hurry (nil: never) ends the linger: the records read so far are
// returned, or the first ones that come.
func (t *Task) poll(ctx context.Context, pollFn func(context.Context, int) kgo.Fetches, hurry <-chan struct{}) ([]*kgo.Record, error) {
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
		// Grown once per fetch, not record by record (each growth
		// copies the pointers under the collector's write barrier).
		recs = slices.Grow(recs, f.NumRecords())
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
	linger := ctx
	if hurry != nil {
		var cancel context.CancelFunc
		linger, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-hurry:
				cancel()
			case <-linger.Done():
			}
		}()
	}
	maxBytes := t.opt.Memory.roundBytes(t.conn.BatchMaxBytes)
	for len(recs) < max && bytes < maxBytes && time.Now().Before(deadline) {
		d := deadline
		if next := time.Now().Add(backlogFetchWait); backlog && next.Before(deadline) {
			d = next
		}
		if linger.Err() != nil {
			return recs, nil
		}
		if live, ok := t.opt.Memory.pressed(); ok {
			// The records taken stay (they are in memory already); the
			// round stops here rather than hold more.
			t.opt.Memory.cut.Add(1)
			lvl := slog.LevelDebug
			if !t.memoryCutLogged {
				lvl, t.memoryCutLogged = slog.LevelInfo, true
			}
			t.log.Log(ctx, lvl, "round cut short: memory pressure (the heap live after the last collection holds more than half the worker's memory budget; later cuts are logged at debug level)",
				"records", len(recs), "live_heap_bytes", live, "budget_bytes", t.opt.Memory.Budget())
			return recs, nil
		}
		lctx, cancel := context.WithDeadline(linger, d)
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

// report tells the observer and the log what the task machine reports
// (the driver hands every report over).
func (t *Task) report(r task.Report) {
	obs := t.opt.Observer
	switch r.Type {
	case task.ReportAssigned:
		// (The observer heard of it in the assignment callback.)
		t.log.Info("partitions assigned and fenced", "positions", fmtPositions(r.Positions))
	case task.ReportRevoked:
		byTopic := map[string][]int32{}
		for _, p := range r.Partitions {
			byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
		}
		for topic, ps := range byTopic {
			t.log.Info("partitions revoked", "topic", topic, "partitions", ps)
		}
	case task.ReportRound:
		s := r.Stats
		st := RoundStats{Outcome: s.Outcome, Records: s.Records, Batches: s.Batches, Positions: s.Positions,
			Prepare: time.Duration(s.PrepareNanos), Decide: time.Duration(s.DecideNanos), Commit: time.Duration(s.CommitNanos),
			Total: time.Duration(s.TotalNanos), DeadLettered: s.DeadLettered, WrittenAhead: s.WrittenAhead}
		t.observeRound(st)
	case task.ReportWaiting:
		t.log.Warn("waiting for an unavailable dependency before retrying from the stored offsets (no record is skipped)",
			"err", r.Err, "attempt", r.Attempt, "backoff", time.Duration(r.Ticks)*task.TickMillis*time.Millisecond)
		if obs != nil {
			obs.Waiting(t.id, r.Err)
		}
	case task.ReportAvailable:
		t.log.Info("the record pipeline's dependencies are available again")
		if obs != nil {
			obs.Waiting(t.id, nil)
		}
	case task.ReportRetry:
		if r.Err == nil {
			t.log.Info("round aborted by the decision (rebalance or KIP-447 generation fencing); continuing from the stored offsets")
		} else {
			t.log.Warn("round failed; retrying from the stored offsets", "err", r.Err)
		}
	case task.ReportReread:
		t.log.Warn("a poll's records were given up; reading every partition again from its cursor", "err", r.Err)
	case task.ReportFenced:
		t.log.Warn("fence conflict: another owner holds the partition; dropping the batch", "err", r.Err)
		if obs != nil {
			obs.FenceConflict(t.id, r.Err)
		}
	case task.ReportBadRecord:
		p := r.Partitions[0]
		t.log.Error("bad record: the partition stops before it (errors.tolerance=none)", "topic", p.Topic, "partition", p.Partition, "err", r.Err)
	case task.ReportOwnRound:
		t.log.Info("a batch needs a schema change; running it in a round of its own", "partition", r.Partitions[0].String(), "reason", r.Err)
	case task.ReportTxnSplit:
		t.log.Warn("a source transaction is applied in parts: readers of the target may see part of it", "transaction", r.TxnID, "reason", r.Err)
		if so, ok := obs.(TxnSplitObserver); ok {
			so.TxnSplit(t.id, r.TxnID)
		}
	case task.ReportHeld:
		t.log.Info("task paused and idle: no round running or written ahead; it writes nothing until the resume")
	case task.ReportStale:
		t.log.Info("dropping batches cut before their partitions were revoked or assigned anew; the owner continues from the stored offsets", "batches", len(r.IDs))
	}
}

func (t *Task) observeRound(s RoundStats) {
	t.log.Debug("round", "outcome", s.Outcome, "records", s.Records, "batches", s.Batches,
		"prepare", s.Prepare, "decide", s.Decide, "commit", s.Commit, "total", s.Total, "written_ahead", s.WrittenAhead)
	if t.opt.Observer != nil {
		t.opt.Observer.Round(t.id, s)
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
