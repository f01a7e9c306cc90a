package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// ConnectorStatus is Kafka Connect's ConnectorStateInfo plus txsink's
// extensions.
type ConnectorStatus struct {
	Name      string
	Type      string
	Connector StateInfo
	Tasks     []TaskStatus
	// Target is the target state (txsink extension).
	Target TargetState
	// InDoubt lists the connector's prepared batches awaiting a decision
	// (txsink extension; only while the connector's sink is open).
	InDoubt []InDoubtBatch
}

// StateInfo is one state with the worker that holds it and, when FAILED,
// the error trace (secrets removed).
type StateInfo struct {
	State    State
	Trace    string
	WorkerID string
}

// TaskStatus is Kafka Connect's TaskState plus txsink's extensions.
type TaskStatus struct {
	ID int
	StateInfo
	// Partitions are the partitions the task owns, with their stored next
	// offsets and lag (records a read_committed consumer could still read
	// past next offset, see lag.go; -1 when unknown).
	Partitions []PartitionStatus
	// InDoubt lists the prepared batches of the task's partitions.
	InDoubt []InDoubtBatch
	// LastFenceConflict is the task's last fenced commit, if any.
	LastFenceConflict *FenceConflict
	// LastRound summarizes the task's last round, if any.
	LastRound *RoundSummary
	// Waiting is set while the task cannot make progress because a
	// dependency is missing or unavailable (a broker, a topic, the sink
	// database, a schema registry): the task stays RUNNING, retries by
	// itself and skips nothing. It is the first of Waits.
	Waiting *Waiting
	// Waits lists every cause the task waits for, in the order of Causes.
	Waits []Waiting
	// Restarts counts consecutive automatic restarts; RestartAt is the
	// next one when scheduled.
	Restarts  int
	RestartAt time.Time
}

// PartitionStatus is one partition of a task.
type PartitionStatus struct {
	Topic      string
	Partition  int32
	NextOffset int64
	EndOffset  int64 // -1 when unknown
	Lag        int64 // -1 when unknown
}

// InDoubtBatch is a prepared batch awaiting its decision. Since is when
// this worker first saw it (the sink does not record when it was prepared).
type InDoubtBatch struct {
	Topic       string
	Partition   int32
	FirstOffset int64
	LastOffset  int64
	Since       time.Time
}

// FenceConflict is a commit that was fenced by another owner.
type FenceConflict struct {
	At    time.Time
	Error string
}

// Waiting says since when, for what and why a task waits for a
// dependency.
type Waiting struct {
	Cause Cause
	Since time.Time
	Error string
}

// RoundSummary is the last round of a task.
type RoundSummary struct {
	At      time.Time
	Outcome string
	Records int
	Batches int
	Total   time.Duration
}

// statusTimeout bounds the Kafka and sink look-ups of a status request.
const statusTimeout = 3 * time.Second

// Status returns the states of the connector and of its tasks on this
// worker (only the tasks that run here, see Config.Partial), with what the
// engine observed of them; false when the engine
// does not know the connector. The partitions' lag and the in-doubt
// batches are looked up within a few seconds (and before ctx ends); when
// Kafka or the sink does not answer in time they are left unknown.
func (e *Engine) Status(ctx context.Context, name string) (ConnectorStatus, bool) {
	c := e.lookup(name)
	if c == nil {
		return ConnectorStatus{}, false
	}
	st, run := e.statusSnapshot(c)
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var ends map[tp]int64
	var lags map[lagAt]int64
	var at []lagAt
	for _, t := range st.Tasks {
		for _, p := range t.Partitions {
			at = append(at, lagAt{tp{p.Topic, p.Partition}, p.NextOffset})
		}
	}
	if len(at) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ends, lags = e.partitionLags(ctx, at)
		}()
	}
	var inDoubt []InDoubtBatch
	if run != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inDoubt, _ = c.obs.inDoubt(ctx, run.Sink)
		}()
	}
	wg.Wait()
	st.InDoubt = inDoubt
	for i := range st.Tasks {
		t := &st.Tasks[i]
		owned := map[tp]bool{}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			owned[tp{p.Topic, p.Partition}] = true
			if end, ok := ends[tp{p.Topic, p.Partition}]; ok {
				p.EndOffset = end
			}
			if lag, ok := lags[lagAt{tp{p.Topic, p.Partition}, p.NextOffset}]; ok {
				p.Lag = lag
			}
		}
		for _, b := range inDoubt {
			if owned[tp{b.Topic, b.Partition}] {
				t.InDoubt = append(t.InDoubt, b)
			}
		}
	}
	return st, true
}

// Snapshot returns the states and traces of the connector and of its
// tasks (by id; a task that does not run on this worker, see
// Config.Partial, has an empty StateInfo); false when the engine does not
// know the connector.
func (e *Engine) Snapshot(name string) (Snapshot, bool) {
	c := e.lookup(name)
	if c == nil {
		return Snapshot{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sn := Snapshot{Connector: StateInfo{State: c.state, Trace: c.trace, WorkerID: e.opt.AdvertisedID}}
	for _, t := range c.tasks {
		if !t.here {
			sn.Tasks = append(sn.Tasks, StateInfo{})
			continue
		}
		sn.Tasks = append(sn.Tasks, StateInfo{State: t.state, Trace: t.trace, WorkerID: e.opt.AdvertisedID})
	}
	return sn, true
}

// statusSnapshot returns the connector's states and what the observer
// knows, and its running Connector (nil when not running).
func (e *Engine) statusSnapshot(c *conn) (ConnectorStatus, *Connector) {
	c.mu.Lock()
	st := ConnectorStatus{
		Name:      c.name,
		Type:      "sink",
		Target:    c.cfg.Target,
		Connector: StateInfo{State: c.state, Trace: c.trace, WorkerID: e.opt.AdvertisedID},
	}
	if st.Connector.State == "" {
		st.Connector.State = StateUnassigned
	}
	for i, t := range c.tasks {
		if !t.here {
			continue
		}
		ts := TaskStatus{ID: i, StateInfo: StateInfo{State: t.state, Trace: t.trace, WorkerID: e.opt.AdvertisedID}, Restarts: t.restarts, RestartAt: t.next}
		st.Tasks = append(st.Tasks, ts)
	}
	run := c.run
	c.mu.Unlock()
	c.obs.fill(st.Tasks)
	return st, run
}

// observer receives one connector's task events (Observer) and keeps what
// the status and the metrics show.
type observer struct {
	m    *metrics
	name string

	mu      sync.Mutex
	tasks   map[int]*taskObs
	seen    map[twophase.BatchID]time.Time // in-doubt batches, first seen
	secrets []string                       // removed from the errors it keeps
	// active are the topics committed rounds wrote records from since
	// the worker started or the last ResetActiveTopics.
	active map[string]bool
	// recent are the connector's last rounds, oldest first.
	recent []RoundTiming
	// lags are the last lag looked up of each owned partition
	// (txsink_partition_lag), kept while Kafka does not answer.
	lags map[tp]lagPoint
	// kept are the last lags of partitions a task lost (its group session
	// ended without a revocation, as when the broker is gone), shown
	// until the broker answers the task's probe again or the partition is
	// assigned again.
	kept map[tp]keptLag
}

type keptLag struct {
	task int
	lagPoint
}

// lagPoint is a partition's lag as last looked up.
type lagPoint struct {
	lag int64
	at  time.Time
}

// lagPoint notes a partition's lag when fresh (ok) and returns the last
// one known, if any.
func (o *observer) lagPoint(k tp, lag int64, fresh bool, now time.Time) (lagPoint, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if fresh {
		if o.lags == nil {
			o.lags = map[tp]lagPoint{}
		}
		o.lags[k] = lagPoint{lag, now}
	}
	pt, ok := o.lags[k]
	return pt, ok
}

type taskObs struct {
	parts map[tp]offsets.Position
	fence *FenceConflict
	round *RoundSummary
	waits map[Cause]*Waiting
}

var _ Observer = (*observer)(nil)

func newObserver(m *metrics, name string) *observer {
	m.zero(name)
	return &observer{m: m, name: name, tasks: map[int]*taskObs{}, seen: map[twophase.BatchID]time.Time{}}
}

// setSecrets sets the connector's secrets, which the observer removes from
// the errors it keeps.
func (o *observer) setSecrets(s []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.secrets = s
}

func (o *observer) task(id int) *taskObs {
	t := o.tasks[id]
	if t == nil {
		t = &taskObs{parts: map[tp]offsets.Position{}, waits: map[Cause]*Waiting{}}
		o.tasks[id] = t
	}
	return t
}

// Assigned implements Observer.
func (o *observer) Assigned(task int, positions []offsets.Position) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.task(task)
	for _, p := range positions {
		t.parts[tp{p.Topic, p.Partition}] = p
		delete(o.kept, tp{p.Topic, p.Partition})
	}
}

// lost keeps the last lags of partitions a task lost, before Revoked
// forgets them.
func (o *observer) lost(task int, topic string, partitions []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range partitions {
		k := tp{topic, p}
		if pt, ok := o.lags[k]; ok {
			if o.kept == nil {
				o.kept = map[tp]keptLag{}
			}
			o.kept[k] = keptLag{task, pt}
		}
	}
}

// keptLags returns the kept lags of partitions no task owns now.
func (o *observer) keptLags() map[tp]lagPoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[tp]lagPoint{}
	for k, kl := range o.kept {
		out[k] = kl.lagPoint
	}
	return out
}

// Revoked implements Observer.
func (o *observer) Revoked(task int, topic string, partitions []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.task(task)
	for _, p := range partitions {
		delete(t.parts, tp{topic, p})
		delete(o.lags, tp{topic, p})
		o.m.forgetPartition(o.name, topic, p)
	}
}

// Round implements Observer.
func (o *observer) Round(task int, r RoundStats) {
	o.mu.Lock()
	t := o.task(task)
	for _, p := range r.Positions {
		k := tp{p.Topic, p.Partition}
		if old, ok := t.parts[k]; ok {
			old.Next = p.Next
			t.parts[k] = old
		}
	}
	t.round = &RoundSummary{At: time.Now().UTC(), Outcome: r.Outcome, Records: r.Records, Batches: r.Batches, Total: r.Total}
	o.noteActiveLocked(r)
	o.noteRoundLocked(task, r)
	o.mu.Unlock()
	o.m.round(o.name, r)
}

// FenceConflict implements Observer.
func (o *observer) FenceConflict(task int, err error) {
	o.mu.Lock()
	t := o.task(task)
	t.fence = &FenceConflict{At: time.Now().UTC(), Error: secrets.ScrubString(fmt.Sprint(err), o.secrets)}
	o.mu.Unlock()
	o.m.fenced.WithLabelValues(o.name).Inc()
}

// TxnSplit implements TxnSplitObserver.
func (o *observer) TxnSplit(task int, id string) {
	o.m.txnSplit.WithLabelValues(o.name).Inc()
}

// Waiting implements Observer: rounds fail for an unavailable schema
// registry or sink database (err), or a round committed again (nil: both
// are available).
func (o *observer) Waiting(task int, err error) {
	if err == nil {
		o.waitFor(task, CauseDatabase, nil)
		o.waitFor(task, CauseSchemaRegistry, nil)
		return
	}
	c := causeOf(err)
	if c == "" {
		c = CauseDatabase // (the machine reports waiting for these two only)
	}
	o.waitFor(task, c, err)
	o.m.unavailable.WithLabelValues(o.name).Inc()
}

// waitFor implements causeObserver.
func (o *observer) waitFor(task int, cause Cause, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.task(task)
	old := t.waits[cause]
	if err == nil {
		delete(t.waits, cause)
		if cause == CauseBroker {
			for k, kl := range o.kept {
				if kl.task == task {
					delete(o.kept, k)
				}
			}
		}
		return
	}
	w := &Waiting{Cause: cause, Since: time.Now().UTC(), Error: secrets.ScrubString(fmt.Sprint(err), o.secrets)}
	if old != nil {
		w.Since = old.Since
	}
	t.waits[cause] = w
}

// waiting returns the causes a task waits for, in the order of Causes.
func (o *observer) waitingLocked(t *taskObs) []Waiting {
	var out []Waiting
	for _, c := range Causes {
		if w := t.waits[c]; w != nil {
			out = append(out, *w)
		}
	}
	return out
}

// waitingCauses returns, by task, the causes the connector's tasks wait
// for.
func (o *observer) waitingCauses() map[int][]Waiting {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int][]Waiting{}
	for id, t := range o.tasks {
		if ws := o.waitingLocked(t); len(ws) > 0 {
			out[id] = ws
		}
	}
	return out
}

// clearTask forgets a task's partitions (it exited).
func (o *observer) clearTask(id int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.tasks[id]; t != nil {
		for k := range t.parts {
			delete(o.lags, k)
			o.m.forgetPartition(o.name, k.topic, k.partition)
		}
		t.parts = map[tp]offsets.Position{}
		t.waits = map[Cause]*Waiting{}
	}
}

// clearAll forgets every task's partitions.
func (o *observer) clearAll() {
	o.mu.Lock()
	var ids []int
	for id := range o.tasks {
		ids = append(ids, id)
	}
	o.mu.Unlock()
	for _, id := range ids {
		o.clearTask(id)
	}
}

// fill adds what the observer knows to task statuses.
func (o *observer) fill(ts []TaskStatus) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range ts {
		t := o.tasks[ts[i].ID]
		if t == nil {
			continue
		}
		for _, p := range t.parts {
			ts[i].Partitions = append(ts[i].Partitions, PartitionStatus{Topic: p.Topic, Partition: p.Partition, NextOffset: p.Next, EndOffset: -1, Lag: -1})
		}
		sort.Slice(ts[i].Partitions, func(a, b int) bool {
			pa, pb := ts[i].Partitions[a], ts[i].Partitions[b]
			if pa.Topic != pb.Topic {
				return pa.Topic < pb.Topic
			}
			return pa.Partition < pb.Partition
		})
		if t.fence != nil {
			f := *t.fence
			ts[i].LastFenceConflict = &f
		}
		if t.round != nil {
			r := *t.round
			ts[i].LastRound = &r
		}
		if ws := o.waitingLocked(t); len(ws) > 0 {
			ts[i].Waits = ws
			w := ws[0]
			ts[i].Waiting = &w
		}
	}
}

// positions returns every owned partition's position.
func (o *observer) positions() []offsets.Position {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []offsets.Position
	for _, t := range o.tasks {
		for _, p := range t.parts {
			out = append(out, p)
		}
	}
	return out
}

// inDoubt lists the connector's prepared batches and remembers when each
// was first seen.
func (o *observer) inDoubt(ctx context.Context, s connectors.Sink) ([]InDoubtBatch, error) {
	ids, err := s.InDoubt(ctx, o.name)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[twophase.BatchID]time.Time{}
	var out []InDoubtBatch
	for _, id := range ids {
		since, ok := o.seen[id]
		if !ok {
			since = now
		}
		seen[id] = since
		out = append(out, InDoubtBatch{Topic: id.Topic, Partition: id.Partition, FirstOffset: id.First, LastOffset: id.Last, Since: since})
	}
	o.seen = seen
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].FirstOffset < out[j].FirstOffset
	})
	return out, nil
}
