package herder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder/configlog"
	"github.com/txsink/txsink/connectors/herder/membership"
)

// DistributedOptions configure a Distributed herder.
type DistributedOptions struct {
	// Engine configures the engine; its WorkerID must be the worker's
	// advertised REST address (host:port): it is the worker's id in the
	// cluster, in statuses and in the Kafka transactional ids. Its Log is
	// the herder's too. Engine.Resolve defaults to Resolver's.
	Engine engine.Options
	// Cluster is distributed mode's configuration (Enabled).
	Cluster config.Cluster
	// URL is the worker's advertised REST URL, where the others forward
	// requests (scheme://host:port).
	URL string
	// Resolver resolves config provider references (nil: no provider):
	// configurations are validated resolved, and a secret given in clear
	// is refused.
	Resolver *providers.Resolver
}

// Distributed is the distributed herder: the workers that share a group.id
// form a cluster through Kafka's group coordinator (package membership).
// Connector configurations, target states and task counts live in the
// config topic, written only by the cluster's leader; each worker reads
// it to its end and answers reads from it. The leader assigns the
// connectors and their tasks to the workers, moving only what must move;
// each worker runs its part on its engine and writes their states to the
// status topic (package configlog). Writes that arrive at another worker
// fail with a *ForwardError naming the leader, which the REST layer
// forwards to.
//
// A task runs as one member of its connector's consumer group, whichever
// worker runs it: Kafka's group protocol gives its partitions, and on
// every assignment the task recovers in-doubt batches and bumps the
// partitions' fences before any work, so a partition that moves between
// workers is safe exactly as between two tasks of one worker, and a task
// that briefly runs on two workers during a rebalance (or on a worker cut
// off from the cluster) cannot commit twice.
//
// Its methods are safe for concurrent use.
type Distributed struct {
	reg      *connectors.Registry
	eng      *engine.Engine
	opt      DistributedOptions
	log      *slog.Logger
	id       string // this worker's id (advertised host:port)
	resolver *providers.Resolver

	logOpt  configlog.Options // for the leader's writer
	kcl     *kgo.Client       // group requests and admin
	adm     *kadm.Client
	cfgLog  *configlog.ConfigLog
	stLog   *configlog.StatusLog
	group   *membership.Group
	metrics *clusterMetrics

	runCtx context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup // readers, membership, reconcilers, timers

	mu       sync.Mutex
	started  bool
	ready    bool // the config topic was read to its end
	closed   bool
	plan     *membership.Plan // of the current generation
	planGen  int32
	memberID string
	stable   bool // holds the current generation's plan
	writer   *configlog.Writer
	writerOf int32       // generation the writer was started in
	recheck  *time.Timer // the leader's rebalance when a delay ends
	// What the engine was told per connector, and the statuses written.
	applied   map[string]applied
	published map[string]map[string]configlog.Status // connector → status key → written
	topics    map[string]map[string]bool             // connector → active topics written
	ops       map[string]*sync.Mutex                 // leader: one write at a time per connector
	workers   map[string]*reconcileState             // one reconciler per connector
}

// applied is what the engine was told to run for a connector.
type applied struct {
	hash   string
	target engine.TargetState
	tasks  []int
	conn   bool
}

func (a applied) equal(b applied) bool {
	return a.hash == b.hash && a.target == b.target && a.conn == b.conn && slices.Equal(a.tasks, b.tasks)
}

type reconcileState struct {
	running, dirty bool
	restarts       []configlog.Restart
}

// NewDistributed creates the herder and its engine; Start joins the
// cluster.
func NewDistributed(reg *connectors.Registry, opt DistributedOptions) (*Distributed, error) {
	if !opt.Cluster.Enabled {
		return nil, errors.New("herder: distributed mode needs group.id")
	}
	if opt.Engine.WorkerID == "" || opt.URL == "" {
		return nil, errors.New("herder: distributed mode needs the worker's advertised id and URL")
	}
	if opt.Engine.Log == nil {
		opt.Engine.Log = slog.Default()
	}
	if opt.Engine.Resolve == nil && opt.Resolver != nil {
		opt.Engine.Resolve = opt.Resolver.Resolve
	}
	h := &Distributed{
		reg: reg, opt: opt, log: opt.Engine.Log, id: opt.Engine.WorkerID, resolver: opt.Resolver,
		applied: map[string]applied{}, published: map[string]map[string]configlog.Status{}, topics: map[string]map[string]bool{},
		ops: map[string]*sync.Mutex{}, workers: map[string]*reconcileState{},
	}
	var err error
	if h.eng, err = engine.New(reg, opt.Engine, h); err != nil {
		return nil, err
	}
	h.metrics = newClusterMetrics(h)
	if r := opt.Engine.Registerer; r != nil {
		if err := r.Register(h.metrics); err != nil {
			return nil, err
		}
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(opt.Engine.Bootstrap...), kgo.ClientID("txsink-cluster")}, opt.Engine.KafkaOpts...)
	if h.kcl, err = kgo.NewClient(kopts...); err != nil {
		return nil, err
	}
	h.adm = kadm.NewClient(h.kcl)
	// One keyring: the config log finds the cluster's signing key, the
	// leader's writer and the status log sign with it, both logs verify.
	base := configlog.Options{Bootstrap: opt.Engine.Bootstrap, KafkaOpts: opt.Engine.KafkaOpts, Log: h.log, Keys: configlog.NewKeyring()}
	h.logOpt = base
	h.logOpt.Topic = opt.Cluster.ConfigTopic
	cfgOpt := h.logOpt
	cfgOpt.OnChange = h.configChanged
	if h.cfgLog, err = configlog.NewConfigLog(cfgOpt); err != nil {
		h.kcl.Close()
		return nil, err
	}
	stOpt := base
	stOpt.Topic = opt.Cluster.StatusTopic
	stOpt.OnChange = h.statusChanged
	if h.stLog, err = configlog.NewStatusLog(stOpt); err != nil {
		h.kcl.Close()
		h.cfgLog.Close()
		return nil, err
	}
	h.group = membership.New(membership.Options{
		Client: h.kcl, Group: opt.Cluster.GroupID,
		Session: opt.Cluster.Session, Rebalance: opt.Cluster.Rebalance, Heartbeat: opt.Cluster.Heartbeat,
		Metadata: h.metadata, Assign: h.assign, OnAssigned: h.assigned, OnRevoked: h.revoked,
		Log: h.log,
	})
	h.runCtx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// Registry returns the sinks the worker runs.
func (h *Distributed) Registry() *connectors.Registry { return h.reg }

// WorkerID returns the worker's id in the cluster (advertised host:port).
func (h *Distributed) WorkerID() string { return h.id }

// Start makes sure the config and status topics exist (creating them as
// compacted topics), starts reading them, and joins the cluster once the
// config topic was read to its end (Ready reports it). It returns an error
// for a topic that cannot serve (wrong partition count or cleanup policy)
// and when ctx ends before Kafka answered; otherwise the worker keeps
// joining in the background until Close.
func (h *Distributed) Start(ctx context.Context) error {
	h.mu.Lock()
	if h.started || h.closed {
		h.mu.Unlock()
		return errors.New("herder: Start called twice or after Close")
	}
	h.started = true
	h.mu.Unlock()
	c := h.opt.Cluster
	topics := []configlog.TopicSpec{
		{Name: c.ConfigTopic, Setting: config.KeyConfigTopic, Partitions: 1, Exact: true, Replication: c.ConfigReplication},
		{Name: c.StatusTopic, Setting: config.KeyStatusTopic, Partitions: c.StatusPartitions, Replication: c.StatusReplication},
	}
	for _, t := range topics {
		for attempt := 0; ; attempt++ {
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := configlog.EnsureTopic(tctx, h.adm, t)
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, configlog.ErrTopic) || ctx.Err() != nil {
				return err
			}
			h.log.Warn("waiting for Kafka to create or check a cluster topic", "topic", t.Name, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(time.Second<<min(attempt, 4), 10*time.Second)):
			}
		}
	}
	h.goBG(func() { h.cfgLog.Run(h.runCtx) })
	h.goBG(func() { h.runTopics(h.runCtx) })
	h.goBG(func() {
		for attempt := 0; h.runCtx.Err() == nil; attempt++ {
			rctx, cancel := context.WithTimeout(h.runCtx, time.Minute)
			off, err := h.cfgLog.ReadToEnd(rctx)
			cancel()
			if err == nil {
				// The status log starts once the config topic was read:
				// it then knows the cluster's signing key if one exists.
				h.goBG(func() { h.stLog.Run(h.runCtx) })
				h.mu.Lock()
				h.ready = true
				h.mu.Unlock()
				h.log.Info("config topic read to its end; joining the cluster", "topic", c.ConfigTopic, "offset", off, "group", c.GroupID, "worker_id", h.id)
				h.group.Run(h.runCtx)
				return
			}
			h.log.Warn("reading the config topic to its end", "topic", c.ConfigTopic, "err", err)
			sleepCtx(h.runCtx, min(time.Second<<min(attempt, 4), 10*time.Second))
		}
	})
	return nil
}

// goBG runs fn in the background; Close waits for it.
func (h *Distributed) goBG(fn func()) {
	h.bg.Add(1)
	go func() { defer h.bg.Done(); fn() }()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Close stops the connectors' tasks on this worker (gracefully: each
// finishes its round, and leaves its consumer group so that its
// partitions move at once), leaves the cluster (so the leader reassigns at
// once, or after scheduled.rebalance.max.delay.ms), and stops reading the
// topics. The shared configuration is unchanged.
func (h *Distributed) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.ready = false
	if h.recheck != nil {
		h.recheck.Stop()
	}
	h.mu.Unlock()
	h.eng.Close()
	for _, n := range h.appliedNames() {
		h.publishTopics(n)
	}
	h.stLog.Flush(3 * time.Second)
	h.cancel()
	h.bg.Wait()
	h.mu.Lock()
	if h.writer != nil {
		h.writer.Close()
		h.writer = nil
	}
	h.mu.Unlock()
	h.cfgLog.Close()
	h.stLog.Close()
	h.kcl.Close()
}

// Ready reports whether the worker read the config topic to its end and
// is not shutting down, and an error when the config topic holds records
// this txsink cannot read (written by a newer one).
func (h *Distributed) Ready(context.Context) (bool, error) {
	h.mu.Lock()
	ready := h.ready && !h.closed
	h.mu.Unlock()
	if u := h.cfgLog.Unknown(); len(u) > 0 {
		return ready, fmt.Errorf("Worker cannot read %d record(s) of the config topic %s, written by another txsink version (first: %s); upgrade it", len(u), h.opt.Cluster.ConfigTopic, u[0])
	}
	return ready, nil
}

// ClusterID returns the Kafka cluster id, or "" when Kafka does not answer
// before ctx ends.
func (h *Distributed) ClusterID(ctx context.Context) string { return h.eng.ClusterID(ctx) }

// Waiting lists the waiting causes of the tasks that run on this worker
// (GET /health).
func (h *Distributed) Waiting() []engine.TaskWaiting { return h.eng.Waiting() }

// Sync waits until this worker read the config topic up to its current
// end (after a write forwarded to the leader, so that the next read here
// sees it). Cancelling ctx abandons the wait.
func (h *Distributed) Sync(ctx context.Context) error {
	_, err := h.cfgLog.ReadToEnd(ctx)
	return err
}

// metadata is this worker's member metadata for a join.
func (h *Distributed) metadata() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	md := membership.Metadata{Worker: h.id, URL: h.opt.URL, ConfigOffset: h.cfgLog.Offset(), Signs: true}
	if h.plan != nil {
		md.Generation = h.planGen
		md.Owned = h.plan.Mine(h.memberID)
	}
	return md.Encode()
}

// assign runs on the leader between JoinGroup and SyncGroup: it fences the
// earlier leaders' writers, reads the config topic to its end and assigns.
func (h *Distributed) assign(ctx context.Context, leaderID string, members []membership.Member) (map[string][]byte, error) {
	gen, _, _ := h.group.State()
	w, err := configlog.NewWriter(ctx, h.logOpt, h.opt.Cluster.GroupID)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	old := h.writer
	h.writer, h.writerOf = w, gen
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
	off, err := h.cfgLog.ReadToEnd(ctx)
	if err != nil {
		return nil, err
	}
	in := membership.AssignInput{Members: map[string]membership.Metadata{}, Now: time.Now(), MaxDelay: h.opt.Cluster.MaxDelay}
	plan := membership.Plan{Leader: leaderID, ConfigOffset: off, Workers: map[string]membership.Worker{}}
	for _, m := range members {
		md, err := membership.DecodeMetadata(m.Metadata)
		if err != nil {
			h.log.Error("cluster member left without work: its metadata is not this txsink's", "member", m.ID, "err", err)
			continue
		}
		in.Members[m.ID] = md
		plan.Workers[m.ID] = membership.Worker{ID: md.Worker, URL: md.URL}
	}
	plan.LeaderURL = plan.Workers[leaderID].URL
	if off, err = h.ensureKey(ctx, w, in.Members, off); err != nil {
		return nil, err
	}
	plan.ConfigOffset = off
	for name, c := range h.cfgLog.Connectors() {
		in.Units = append(in.Units, membership.Unit{Connector: name, Task: -1})
		for i := range c.Tasks {
			in.Units = append(in.Units, membership.Unit{Connector: name, Task: i})
		}
	}
	h.mu.Lock()
	if h.plan != nil {
		in.Last, in.PendingSince = h.plan.Memory()
	}
	h.mu.Unlock()
	out := membership.Assign(in)
	for u, id := range out.Assigned {
		plan.Assigned = append(plan.Assigned, membership.Placement{Unit: u, Member: id})
	}
	for u, since := range out.PendingSince {
		plan.Pending = append(plan.Pending, membership.Waiting{Unit: u, Worker: in.Last[u], Since: since})
	}
	slices.SortFunc(plan.Assigned, func(a, b membership.Placement) int { return cmpUnit(a.Unit, b.Unit) })
	slices.SortFunc(plan.Pending, func(a, b membership.Waiting) int { return cmpUnit(a.Unit, b.Unit) })
	h.mu.Lock()
	if h.recheck != nil {
		h.recheck.Stop()
		h.recheck = nil
	}
	if out.NextCheck > 0 && !h.closed {
		h.recheck = time.AfterFunc(out.NextCheck+100*time.Millisecond, h.group.Rejoin)
	}
	h.mu.Unlock()
	if len(plan.Pending) > 0 {
		h.log.Info("units of departed workers wait for them (scheduled.rebalance.max.delay.ms)", "units", len(plan.Pending), "next_check", out.NextCheck)
	}
	b := plan.Encode()
	assignments := map[string][]byte{}
	for _, m := range members {
		assignments[m.ID] = b
	}
	return assignments, nil
}

// ensureKey writes the cluster's signing key to the config topic when it
// has none and every member signs (a cluster upgraded from a txsink
// without signing gets its key once its last older worker is gone: until
// then records stay unsigned, which those workers need), and returns the
// offset the config log then reached.
func (h *Distributed) ensureKey(ctx context.Context, w *configlog.Writer, members map[string]membership.Metadata, off int64) (int64, error) {
	keys := h.cfgLog.Keys()
	if keys.Known() {
		return off, nil
	}
	for id, md := range members {
		if !md.Signs {
			h.log.Info("the cluster's records stay unsigned while a worker of an older txsink is a member", "member", id, "worker_id", md.Worker)
			return off, nil
		}
	}
	rec, err := configlog.PutClusterKey()
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(ctx, []configlog.Record{rec}); err != nil {
		return 0, fmt.Errorf("writing the cluster's signing key: %w", err)
	}
	h.log.Info("wrote the cluster's signing key to the config topic", "topic", h.opt.Cluster.ConfigTopic)
	off, err = h.cfgLog.ReadToEnd(ctx)
	if err != nil {
		return 0, err
	}
	if !keys.Known() {
		return 0, errors.New("the cluster's signing key was written but not read back")
	}
	return off, nil
}

func cmpUnit(a, b membership.Unit) int {
	if a.Connector != b.Connector {
		if a.Connector < b.Connector {
			return -1
		}
		return 1
	}
	return a.Task - b.Task
}

// assigned receives a generation's plan (from the membership goroutine).
func (h *Distributed) assigned(g membership.Generation) {
	p, err := membership.DecodePlan(g.Assignment)
	if err == nil && p.Error != "" {
		err = errors.New(p.Error)
	}
	if err != nil {
		h.log.Error("cluster assignment unusable; joining again", "err", err)
		h.mu.Lock()
		if !h.closed {
			time.AfterFunc(time.Second, h.group.Rejoin)
		}
		h.mu.Unlock()
		return
	}
	h.mu.Lock()
	var before []string
	if h.plan != nil {
		for _, u := range h.plan.Mine(h.memberID) {
			before = append(before, u.Connector)
		}
	}
	h.plan, h.planGen, h.memberID, h.stable = &p, g.Generation, g.MemberID, true
	h.metrics.rebalances.Inc()
	mine := p.Mine(g.MemberID)
	h.mu.Unlock()
	leader := "no"
	if p.Leader == g.MemberID {
		leader = "yes"
	}
	h.log.Info("cluster assignment", "generation", g.Generation, "leader", leader, "leader_url", p.LeaderURL, "workers", len(p.Workers), "units", fmtUnits(mine))
	names := map[string]bool{}
	for _, n := range before {
		names[n] = true
	}
	for _, u := range mine {
		names[u.Connector] = true
	}
	for n := range names {
		h.kick(n, nil)
	}
}

// revoked is told that a rebalance started or the membership was lost:
// writes wait for the next plan.
func (h *Distributed) revoked(lost bool) {
	h.mu.Lock()
	h.stable = false
	h.mu.Unlock()
	if lost {
		h.log.Warn("this worker lost its cluster membership (its session expired); it keeps its tasks until the leader's next assignment (their commits are fenced once they run elsewhere)")
	}
}

func fmtUnits(us []membership.Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return out
}

// configChanged is told what the config topic changed.
func (h *Distributed) configChanged(ch configlog.Change) {
	if ch.KeyLearned {
		// Write every status and active topic again, signed: those
		// written before the key are ignored from now on.
		h.mu.Lock()
		clear(h.published)
		clear(h.topics)
		h.mu.Unlock()
		for _, n := range h.appliedNames() {
			h.kick(n, nil)
		}
	}
	for _, n := range ch.Connectors {
		h.kick(n, nil)
	}
	for _, r := range ch.Restarts {
		h.kick(r.Connector, &r)
	}
}

// StatusChanged implements engine.Listener: the engine changed a state on
// its own; the status topic gets it.
func (h *Distributed) StatusChanged(name string) { h.publish(name) }

var _ engine.Listener = (*Distributed)(nil)

// kick schedules a reconciliation of the connector (and a restart
// request): one goroutine per connector at a time, so the engine's calls
// for one connector never overlap and a slow sink does not hold up the
// others.
func (h *Distributed) kick(name string, restart *configlog.Restart) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	w := h.workers[name]
	if w == nil {
		w = &reconcileState{}
		h.workers[name] = w
	}
	w.dirty = true
	if restart != nil {
		w.restarts = append(w.restarts, *restart)
	}
	if w.running {
		h.mu.Unlock()
		return
	}
	w.running = true
	h.bg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.bg.Done()
		for {
			h.mu.Lock()
			if !w.dirty || h.closed {
				w.running = false
				if !w.dirty {
					delete(h.workers, name)
				}
				h.mu.Unlock()
				return
			}
			w.dirty = false
			rs := w.restarts
			w.restarts = nil
			h.mu.Unlock()
			h.reconcile(name)
			for _, r := range rs {
				h.restartHere(r)
			}
		}
	}()
}

// mineOf returns this worker's units of a connector under the current
// plan.
func (h *Distributed) mineOf(name string) (conn bool, tasks []int, gen int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.plan == nil {
		return false, nil, 0
	}
	for _, u := range h.plan.Mine(h.memberID) {
		if u.Connector != name {
			continue
		}
		if u.Task < 0 {
			conn = true
		} else {
			tasks = append(tasks, u.Task)
		}
	}
	slices.Sort(tasks)
	return conn, tasks, h.planGen
}

// reconcile brings the engine in line with the plan and the config topic
// for one connector.
func (h *Distributed) reconcile(name string) {
	c, ok := h.cfgLog.Connector(name)
	conn, tasks, _ := h.mineOf(name)
	if ok {
		tasks = slices.DeleteFunc(tasks, func(i int) bool { return i >= c.Tasks })
	}
	h.mu.Lock()
	prev, had := h.applied[name]
	h.mu.Unlock()
	if !ok || !conn && len(tasks) == 0 {
		if had {
			h.eng.Remove(name)
			h.mu.Lock()
			delete(h.applied, name)
			h.mu.Unlock()
			h.log.Info("connector no longer runs here", "connector", name, "deleted", !ok)
		}
		h.forgetPublished(name)
		return
	}
	want := applied{hash: configlog.ConfigHash(c.Config), target: c.Target, tasks: tasks, conn: conn}
	if had && prev.equal(want) {
		h.publish(name)
		return
	}
	if had && prev.hash != want.hash {
		h.eng.Halt(name) // a new configuration: reopen the sink with it
	}
	h.eng.Apply(h.runCtx, name, engine.Config{Raw: c.Config, Target: c.Target, Partial: true, Assigned: tasks})
	h.mu.Lock()
	h.applied[name] = want
	h.mu.Unlock()
	h.publish(name)
}

// restartHere carries out a restart request for what this worker runs of
// the connector.
func (h *Distributed) restartHere(r configlog.Restart) {
	h.mu.Lock()
	a, had := h.applied[r.Connector]
	h.mu.Unlock()
	if !had {
		return
	}
	restartConn, tasks := h.eng.MarkRestarting(r.Connector, r.IncludeTasks, r.OnlyFailed)
	if !restartConn && len(tasks) == 0 {
		return
	}
	h.publish(r.Connector)
	c, ok := h.cfgLog.Connector(r.Connector)
	if !ok {
		return
	}
	if restartConn {
		h.log.Info("restarting connector", "connector", r.Connector, "request", r.ID)
		h.eng.Halt(r.Connector)
		h.eng.Apply(h.runCtx, r.Connector, engine.Config{Raw: c.Config, Target: c.Target, Partial: true, Assigned: a.tasks})
	} else {
		for _, i := range tasks {
			h.eng.RestartTask(r.Connector, i)
		}
	}
	h.publish(r.Connector)
}

// publish writes the states of this worker's units of the connector that
// changed since they were last written.
func (h *Distributed) publish(name string) {
	conn, tasks, gen := h.mineOf(name)
	sn, ok := h.eng.Snapshot(name)
	if !ok {
		return
	}
	put := func(key string, st engine.StateInfo, write func(configlog.Status)) {
		if st.State == "" {
			return
		}
		rec := configlog.Status{State: st.State, Trace: st.Trace, WorkerID: h.id, Generation: gen}
		h.mu.Lock()
		pub := h.published[name]
		if pub == nil {
			pub = map[string]configlog.Status{}
			h.published[name] = pub
		}
		same := pub[key] == rec
		pub[key] = rec
		h.mu.Unlock()
		if !same {
			write(rec)
		}
	}
	if conn {
		put(configlog.StatusConnectorKey(name), sn.Connector, func(s configlog.Status) { h.stLog.PutConnector(name, s) })
	}
	for _, i := range tasks {
		if i < len(sn.Tasks) {
			put(configlog.StatusTaskKey(name, i), sn.Tasks[i], func(s configlog.Status) { h.stLog.PutTask(name, i, s) })
		}
	}
}

// forgetPublished forgets what was written for a connector this worker no
// longer runs (written again if it comes back).
func (h *Distributed) forgetPublished(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.published, name)
}
