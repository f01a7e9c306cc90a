// Package engine is txsink's runtime on one worker: it opens a connector's
// sink and runs its tasks, each of which owns Kafka partitions through the
// connector's consumer group, polls read_committed batches, and hands each
// round to the commit protocol of the connector's delivery guarantee. It
// knows nothing of where configurations are kept: a herder
// (connectors/herder) tells it what to run.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/secrets"
)

// TargetState is the state an operator asked a connector to be in.
type TargetState string

// Target states (Kafka Connect's names).
const (
	TargetRunning TargetState = "RUNNING"
	TargetPaused  TargetState = "PAUSED"
	TargetStopped TargetState = "STOPPED"
)

// ParseTargetState accepts RUNNING, PAUSED and STOPPED; "" means RUNNING.
func ParseTargetState(s string) (TargetState, error) {
	switch TargetState(s) {
	case "", TargetRunning:
		return TargetRunning, nil
	case TargetPaused, TargetStopped:
		return TargetState(s), nil
	}
	return "", fmt.Errorf("initial_state must be RUNNING, PAUSED or STOPPED, got %q", s)
}

// State is the current state of a connector or task, as Kafka Connect
// names them.
type State string

// Connector and task states.
const (
	StateUnassigned State = "UNASSIGNED"
	StateRunning    State = "RUNNING"
	StatePaused     State = "PAUSED"
	StateStopped    State = "STOPPED"
	StateFailed     State = "FAILED"
	StateRestarting State = "RESTARTING"
)

// RestartPolicy says how the engine restarts failed tasks and connectors
// on its own. A task that stopped on a bad record (ErrTaskStopped) is not
// restarted: it would stop at the same record again; fix the cause and
// restart it through the API.
type RestartPolicy struct {
	Enabled bool
	// Initial is the first delay; each consecutive failure doubles it up
	// to Max. A task that ran for longer than Max before failing starts
	// over at Initial.
	Initial, Max time.Duration
}

// DefaultRestartPolicy restarts after 1 s, 2 s, 4 s, … up to 1 min.
var DefaultRestartPolicy = RestartPolicy{Enabled: true, Initial: time.Second, Max: time.Minute}

func (p RestartPolicy) delay(attempt int) time.Duration {
	d := p.Initial
	if d <= 0 {
		d = time.Second
	}
	for i := 0; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Options configure an Engine.
type Options struct {
	// WorkerID is the instance id of the Kafka transactional ids (see
	// TaskOptions.InstanceID); default a random one.
	WorkerID string
	// AdvertisedID is worker_id in statuses: Kafka Connect's advertised
	// host:port of the worker's REST API (default: WorkerID).
	AdvertisedID string
	// Bootstrap and KafkaOpts reach the Kafka cluster.
	Bootstrap []string
	KafkaOpts []kgo.Opt
	// Log is the worker's logger (default slog.Default()); ConnectorLog,
	// when set, returns the logger for one connector's runtime (for
	// per-connector levels).
	Log          *slog.Logger
	ConnectorLog func(connector string) *slog.Logger
	// Restart is the automatic restart policy for failed tasks and
	// connectors.
	Restart RestartPolicy
	// Registerer, when set, receives the worker's Prometheus metrics.
	Registerer prometheus.Registerer
	// OpenTimeout bounds opening a connector's sink and its preflight
	// check (default 30 s).
	OpenTimeout time.Duration
	// Resolve, when set, replaces the config provider references of a
	// connector's configuration (config/providers) with their values
	// before its sink opens, and returns the values it put in. The
	// resolved configuration is never stored or shown; its secrets, and
	// every value a reference resolved to whatever its setting
	// (secrets.Provided), are removed from traces and from what Secrets
	// returns before the sink opens. An error fails the connector's tasks
	// with it as the trace.
	Resolve func(ctx context.Context, raw map[string]string) (resolved map[string]string, values []string, err error)
	// Memory is the worker's memory budget (NewMemory; nil: none), shared
	// by every task.
	Memory *Memory
}

// Listener is told about the changes the engine makes on its own, so that
// a herder can record them (the standalone herder writes its state file).
type Listener interface {
	// StatusChanged is called after the engine changed the state of the
	// connector or of one of its tasks by itself: a task failed, an
	// automatic restart ran. It is called without any of the engine's
	// locks held, and may call the engine's Snapshot and Status.
	StatusChanged(connector string)
}

// Config is what a herder asks the engine to run for one connector.
type Config struct {
	// Raw is the connector's configuration, validated by the herder.
	Raw map[string]string
	// Target is the state to bring the connector to.
	Target TargetState
	// Blocked, when not "", says why the connector cannot run (a
	// configuration change dropped its stored secret): it is FAILED with
	// this trace, and no automatic restart retries it.
	Blocked string
	// Partial limits the connector's tasks on this worker to Assigned, as
	// in distributed mode, where the others run on other workers: only
	// they start, and Status, Snapshot and MarkRestarting show only them.
	// The sink opens (for the connector's own state) even with none.
	// Without Partial every task runs here (standalone).
	Partial  bool
	Assigned []int
}

// runs reports whether task i runs on this worker.
func (cfg Config) runs(i int) bool {
	return !cfg.Partial || slices.Contains(cfg.Assigned, i)
}

// Snapshot is what a herder records of a connector's status: the states
// and traces of the connector and of its tasks (by id).
type Snapshot struct {
	Connector StateInfo
	Tasks     []StateInfo
}

// Engine runs connectors and their tasks on this worker: it opens their
// sinks, starts and stops their tasks, restarts what fails under the
// restart policy, and observes them for the status API and the metrics. A
// herder tells it what to run (Apply, Halt, Remove); it knows nothing of
// where configurations are kept. Its methods are safe for concurrent use;
// lifecycle operations on one connector are serialized.
type Engine struct {
	reg     *connectors.Registry
	opt     Options
	log     *slog.Logger
	lis     Listener
	metrics *metrics

	mu     sync.Mutex // guards conns, closed and opening
	conns  map[string]*conn
	closed bool
	// opening holds the secrets of sinks opened for one call (withSink),
	// resolved values included, while they are open: their log lines are
	// scrubbed too.
	opening map[int][]string
	holds   int            // the key of the next opening entry
	bg      sync.WaitGroup // restart timers at work

	adminMu   sync.Mutex
	admin     *kadm.Client
	adminCl   *kgo.Client
	clusterID string

	// lagCache keeps the partitions' last exact lag counts (lag.go).
	lagCache lagCache
}

// conn is one connector on this worker.
//
// Locks: op serializes the lifecycle operations on the connector (the
// herder's calls and the restart timers) and is held while its sink opens
// and its tasks stop; mu guards the fields below and is held only for
// short reads and writes, never while calling the Connector, the observer,
// the listener or a logger. The task goroutines' callbacks (taskExited,
// the observer's methods) take mu and the observer's own lock, never op,
// so stopping tasks under op cannot deadlock with them.
type conn struct {
	name string
	obs  *observer
	op   sync.Mutex

	mu      sync.Mutex
	cfg     Config
	secrets []string // of the stored configuration and of the resolved one
	// provided are the scrub strings of what the configuration's provider
	// references last resolved to (secrets.Provided), kept until the next
	// resolution replaces them: a changed configuration does not forget
	// them while tasks that hold them may still log.
	provided []string
	tasksMax int
	state    State
	trace    string
	tasks    []*taskSlot
	run      *Connector // open while running
	gen      int        // incremented whenever run changes
	restarts int        // consecutive automatic connector restarts
	timer    *time.Timer
	removed  bool
}

func (c *conn) isRemoved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed
}

// newTaskSlotsLocked gives the connector n new task slots, those that
// run on this worker in state, and returns their ids. The caller holds
// c.mu.
func (c *conn) newTaskSlotsLocked(n int, state State) (here []int) {
	c.tasks = make([]*taskSlot, n)
	for i := range c.tasks {
		c.tasks[i] = &taskSlot{here: c.cfg.runs(i)}
		if c.tasks[i].here {
			c.tasks[i].state = state
			here = append(here, i)
		}
	}
	return here
}

type taskSlot struct {
	here     bool // the task runs on this worker (Config.runs)
	state    State
	trace    string
	gen      int
	restarts int
	started  time.Time
	timer    *time.Timer
	next     time.Time // next automatic restart, when scheduled
}

// New returns an engine that runs connectors of reg. lis, when not nil,
// is told about the changes the engine makes on its own.
func New(reg *connectors.Registry, opt Options, lis Listener) (*Engine, error) {
	if opt.WorkerID == "" {
		opt.WorkerID = NewInstanceID()
	}
	if opt.AdvertisedID == "" {
		opt.AdvertisedID = opt.WorkerID
	}
	if opt.OpenTimeout <= 0 {
		opt.OpenTimeout = 30 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	e := &Engine{reg: reg, opt: opt, log: opt.Log, lis: lis, conns: map[string]*conn{}}
	e.metrics = newMetrics(e)
	if opt.Registerer != nil {
		if err := e.metrics.register(opt.Registerer); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// WorkerID returns the worker's id.
func (e *Engine) WorkerID() string { return e.opt.WorkerID }

// TasksMax returns the number of tasks a configuration asks for (at least
// one).
func TasksMax(reg *connectors.Registry, raw map[string]string) int {
	_, v, _ := reg.Validate(raw)
	return max(int(v.Int(config.KeyTasksMax)), 1)
}

// conn returns the connector, creating it when create is set and the
// engine is open (created is then true); nil when there is none.
func (e *Engine) conn(name string, create bool) (c *conn, created bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c = e.conns[name]
	if c == nil && create && !e.closed {
		c = &conn{name: name, state: StateUnassigned}
		c.obs = newObserver(e.metrics, name)
		e.conns[name] = c
		created = true
	}
	return c, created
}

// lookup returns the connector, or nil.
func (e *Engine) lookup(name string) *conn {
	c, _ := e.conn(name, false)
	return c
}

// all returns every connector the engine knows.
func (e *Engine) all() []*conn {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		out = append(out, c)
	}
	return out
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// setConfig stores cfg and what derives from it. The caller holds c.op.
func (e *Engine) setConfig(c *conn, cfg Config) {
	c.mu.Lock()
	same := c.cfg.Raw != nil && maps.Equal(c.cfg.Raw, cfg.Raw)
	c.cfg = Config{Raw: maps.Clone(cfg.Raw), Target: cfg.Target, Blocked: cfg.Blocked, Partial: cfg.Partial, Assigned: slices.Clone(cfg.Assigned)}
	c.mu.Unlock()
	if same {
		return
	}
	secs := secrets.Of(e.reg, cfg.Raw)
	n := TasksMax(e.reg, cfg.Raw)
	c.mu.Lock()
	secs = append(secs, c.provided...)
	c.secrets, c.tasksMax = secs, n
	c.mu.Unlock()
	c.obs.setSecrets(secs)
}

// Restore registers a connector that does not run yet, with its
// configuration and the states it was last known in, which Status shows
// until Apply brings it to its target. It does nothing for a connector the
// engine knows.
func (e *Engine) Restore(name string, cfg Config, st Snapshot) {
	c, created := e.conn(name, true)
	if !created {
		return
	}
	c.op.Lock()
	defer c.op.Unlock()
	e.setConfig(c, cfg)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.trace = st.Connector.State, st.Connector.Trace
	c.tasks = make([]*taskSlot, len(st.Tasks))
	for i, t := range st.Tasks {
		c.tasks[i] = &taskSlot{here: cfg.runs(i), state: t.State, trace: t.Trace}
	}
}

// Apply brings the connector to cfg.Target with the configuration
// cfg.Raw, registering it if the engine does not know it: with RUNNING or
// PAUSED it opens the sink and starts the tasks (PAUSED ones hold between
// rounds), unless they run already (to run a changed configuration, Halt
// first; a changed Config.Assigned stops the tasks no longer assigned and
// starts the new ones, leaving the others alone); with STOPPED it stops
// them. A sink that cannot be opened leaves the tasks FAILED, and the
// restart policy retries it. Opening is bounded by Options.OpenTimeout,
// not by ctx (a cancelled request does not leave a connector half open).
// Apply does nothing once the engine is closed.
func (e *Engine) Apply(ctx context.Context, name string, cfg Config) {
	c, _ := e.conn(name, true)
	if c == nil {
		return
	}
	c.op.Lock()
	defer c.op.Unlock()
	if e.isClosed() || c.isRemoved() {
		return
	}
	e.setConfig(c, cfg)
	e.applyTargetLocked(ctx, c)
}

// Halt stops the connector's tasks and closes its sink, keeping its
// states, and forgets its consecutive failures (the next automatic restart
// waits the initial delay). A herder halts a connector before it changes
// its configuration or restarts it, and applies it afterwards.
func (e *Engine) Halt(name string) {
	e.stopAndMark(name, func(c *conn) { c.restarts = 0 })
}

// Remove stops the connector and forgets it, with its metrics.
func (e *Engine) Remove(name string) {
	c := e.stopAndMark(name, func(c *conn) { c.removed = true })
	if c == nil {
		return
	}
	e.mu.Lock()
	if e.conns[name] == c {
		delete(e.conns, name)
	}
	e.mu.Unlock()
	e.metrics.forget(name)
}

// stopAndMark stops the connector under its op lock and then lets mark
// change its fields (under its mu). It returns the connector, nil when the
// engine does not know it.
func (e *Engine) stopAndMark(name string, mark func(*conn)) *conn {
	c := e.lookup(name)
	if c == nil {
		return nil
	}
	c.op.Lock()
	defer c.op.Unlock()
	e.stopLocked(c)
	c.mu.Lock()
	mark(c)
	c.mu.Unlock()
	return c
}

// Running reports whether the connector runs on this worker (its sink is
// open) and how many task slots it has.
func (e *Engine) Running(name string) (running bool, tasks int) {
	c := e.lookup(name)
	if c == nil {
		return false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run != nil, len(c.tasks)
}

// MarkRestarting prepares a restart request: it decides what the request
// restarts (the connector when its target is RUNNING, unless onlyFailed
// and it is not FAILED; with includeTasks its tasks, unless onlyFailed
// and they are not FAILED) and shows RESTARTING for it. The caller then
// restarts it: Halt and Apply for the connector, RestartTask for tasks.
func (e *Engine) MarkRestarting(name string, includeTasks, onlyFailed bool) (restartConn bool, tasks []int) {
	c := e.lookup(name)
	if c == nil {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	running := c.cfg.Target == TargetRunning
	restartConn = running && (!onlyFailed || c.state == StateFailed)
	if running && includeTasks {
		for i, t := range c.tasks {
			if t.here && (!onlyFailed || t.state == StateFailed) {
				tasks = append(tasks, i)
			}
		}
	}
	if restartConn {
		c.state = StateRestarting
		for _, t := range c.tasks {
			if t.here {
				t.state = StateRestarting
			}
		}
	}
	for _, i := range tasks {
		c.tasks[i].state = StateRestarting
	}
	return restartConn, tasks
}

// RestartTask stops task id of a running connector, if it runs, and
// starts it again, resetting its automatic restart backoff. It does
// nothing when the connector does not run.
func (e *Engine) RestartTask(name string, id int) {
	c := e.lookup(name)
	if c == nil {
		return
	}
	c.op.Lock()
	defer c.op.Unlock()
	e.restartTaskLocked(c, id, true)
}

// Close stops every connector's tasks and closes their sinks, keeping
// their states, and waits for the engine's background work. No automatic
// restart runs once Close has begun. Prepared batches left by a task that
// is stopped in the middle of a round are resolved by the next owner's
// recovery.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range e.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.op.Lock()
			defer c.op.Unlock()
			e.stopLocked(c)
		}()
	}
	wg.Wait()
	e.bg.Wait()
	e.adminMu.Lock()
	if e.adminCl != nil {
		e.adminCl.Close()
		e.adminCl, e.admin = nil, nil
	}
	e.adminMu.Unlock()
}

// changed tells the listener about a change the engine made by itself.
func (e *Engine) changed(name string) {
	if e.lis != nil {
		e.lis.StatusChanged(name)
	}
}

// restartTaskLocked stops task i (if it runs) and starts it again. manual
// restarts reset the automatic restart backoff. The caller holds c.op.
func (e *Engine) restartTaskLocked(c *conn, i int, manual bool) {
	c.mu.Lock()
	run := c.run
	if run == nil || i >= len(c.tasks) || !c.tasks[i].here {
		c.mu.Unlock()
		return
	}
	t := c.tasks[i]
	t.gen++ // the exit of the old run is not a failure
	if t.timer != nil {
		t.timer.Stop()
		t.timer, t.next = nil, time.Time{}
	}
	c.mu.Unlock()
	run.StopTask(i)
	c.mu.Lock()
	if manual {
		t.restarts = 0
	}
	c.mu.Unlock()
	e.startTask(c, run, i)
}

// applyTargetLocked brings the connector to its target state: RUNNING and
// PAUSED run its tasks (PAUSED ones hold between rounds, in the consumer
// group, without fetching), STOPPED stops them and closes the sink. The
// caller holds c.op.
func (e *Engine) applyTargetLocked(ctx context.Context, c *conn) {
	c.mu.Lock()
	target := c.cfg.Target
	run := c.run
	c.mu.Unlock()
	switch {
	case target == TargetStopped:
		e.stopLocked(c)
		e.stoppedLocked(c)
	case run == nil:
		e.startLocked(ctx, c)
	default:
		e.reassignLocked(c, run)
		e.pauseLocked(c, run, target == TargetPaused)
	}
}

// reassignLocked brings the running tasks in line with the assigned ones
// (Config.Partial): it stops the tasks no longer assigned and starts the
// newly assigned ones, leaving the others alone. The caller holds c.op.
func (e *Engine) reassignLocked(c *conn, run *Connector) {
	c.mu.Lock()
	var stop, start []int
	for i, t := range c.tasks {
		switch want := c.cfg.runs(i); {
		case t.here && !want:
			stop = append(stop, i)
			t.gen++ // the exit is not a failure
			if t.timer != nil {
				t.timer.Stop()
				t.timer, t.next = nil, time.Time{}
			}
			t.here, t.state, t.trace, t.restarts = false, "", "", 0
		case !t.here && want:
			start = append(start, i)
			t.here = true
		}
	}
	c.mu.Unlock()
	for _, i := range stop {
		run.StopTask(i)
	}
	for _, i := range start {
		e.startTask(c, run, i)
	}
	if len(stop)+len(start) > 0 {
		e.log.Info("connector tasks reassigned", "connector", c.name, "stopped", stop, "started", start)
	}
}

// pauseLocked pauses or resumes a running connector's tasks and shows it:
// the connector and its tasks that have not failed are PAUSED or RUNNING.
// The caller holds c.op.
func (e *Engine) pauseLocked(c *conn, run *Connector, paused bool) {
	run.SetPaused(paused)
	state := runState(paused)
	c.mu.Lock()
	if c.state != StateFailed {
		c.state = state
	}
	for _, t := range c.tasks {
		if t.here && t.state != StateFailed {
			t.state = state
		}
	}
	c.mu.Unlock()
	if paused {
		e.log.Info("connector paused: its tasks finish the round in flight and stop fetching, keeping their group membership", "connector", c.name)
	} else {
		e.log.Info("connector resumed", "connector", c.name)
	}
}

// runState is the state of a running connector and its tasks.
func runState(paused bool) State {
	if paused {
		return StatePaused
	}
	return StateRunning
}

// stoppedLocked sets the states of a STOPPED connector: no tasks.
func (e *Engine) stoppedLocked(c *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trace = ""
	c.state = StateStopped
	c.tasks = nil
}

// startLocked opens the connector's sink and starts its tasks. On failure
// the connector is FAILED and, under the restart policy, retried. The
// caller holds c.op.
func (e *Engine) startLocked(ctx context.Context, c *conn) {
	c.mu.Lock()
	raw := maps.Clone(c.cfg.Raw)
	secs := secrets.Of(e.reg, raw)
	blocked := c.cfg.Blocked
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.mu.Unlock()
	if blocked != "" {
		// Nothing to retry: the connector needs its secret sent again.
		c.mu.Lock()
		c.state, c.trace, c.tasks = StateFailed, blocked, nil
		c.gen++
		c.mu.Unlock()
		e.log.Error("connector failed to start", "connector", c.name, "err", blocked)
		e.metrics.connectorFailures.WithLabelValues(c.name).Inc()
		return
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.OpenTimeout)
	resolved, values, err := e.resolve(octx, raw)
	var run *Connector
	if err == nil {
		// Registered before the sink opens: from here on any error or
		// log line may carry a resolved value.
		provided := secrets.Provided(values)
		secs = append(append(secs, secrets.Of(e.reg, resolved)...), provided...)
		c.mu.Lock()
		c.provided = provided
		c.mu.Unlock()
		e.setSecrets(c, secs)
		run, err = Open(octx, e.reg, resolved, e.taskOptions(c))
	}
	cancel()
	if err != nil && errors.Is(err, connectors.ErrSinkUnavailable) {
		e.sinkUnavailableLocked(c, err, secs)
		return
	}
	if err != nil {
		// As in Kafka Connect, where a sink task opens its connections:
		// the connector runs and its tasks are FAILED with the error.
		trace := secrets.ScrubString(err.Error(), secs)
		c.mu.Lock()
		c.state, c.trace = runState(c.cfg.Target == TargetPaused), ""
		for _, i := range c.newTaskSlotsLocked(c.tasksMax, StateFailed) {
			c.tasks[i].trace = trace
		}
		c.gen++
		c.mu.Unlock()
		e.log.Error("connector's sink failed to open; its tasks are FAILED", "connector", c.name, "err", trace)
		e.metrics.connectorFailures.WithLabelValues(c.name).Inc()
		e.scheduleConnRestart(c)
		return
	}
	c.obs.clearCause(CauseDatabase) // the sink opened
	paused := c.cfg.Target == TargetPaused
	run.SetPaused(paused)
	c.mu.Lock()
	c.run = run
	c.gen++
	c.state, c.trace = runState(paused), ""
	here := c.newTaskSlotsLocked(run.Config.TasksMax, StateUnassigned)
	partial := c.cfg.Partial
	c.mu.Unlock()
	for _, i := range here {
		e.startTask(c, run, i)
	}
	if partial {
		e.log.Info("connector running", "connector", c.name, "delivery", run.Config.Delivery, "tasks", run.Config.TasksMax, "tasks_here", here)
	} else {
		e.log.Info("connector running", "connector", c.name, "delivery", run.Config.Delivery, "tasks", run.Config.TasksMax)
	}
}

// resolve replaces the configuration's config provider references
// (Options.Resolve).
func (e *Engine) resolve(ctx context.Context, raw map[string]string) (map[string]string, []string, error) {
	if e.opt.Resolve == nil {
		return raw, nil, nil
	}
	return e.opt.Resolve(ctx, raw)
}

// holdSecrets adds secs to what Secrets returns until release is called.
func (e *Engine) holdSecrets(secs []string) (release func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.opening == nil {
		e.opening = map[int][]string{}
	}
	e.holds++
	key := e.holds
	e.opening[key] = secs
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.opening, key)
	}
}

// setSecrets sets the secrets removed from the connector's traces.
func (e *Engine) setSecrets(c *conn, secs []string) {
	c.mu.Lock()
	c.secrets = secs
	c.mu.Unlock()
	c.obs.setSecrets(secs)
}

// Secrets returns the secret strings of the configurations the engine
// runs, resolved ones included (for a log handler that removes them; see
// secrets.ScrubString).
func (e *Engine) Secrets() []string {
	var out []string
	e.mu.Lock()
	for _, s := range e.opening {
		out = append(out, s...)
	}
	e.mu.Unlock()
	for _, c := range e.all() {
		c.mu.Lock()
		out = append(out, c.secrets...)
		c.mu.Unlock()
	}
	return out
}

func (e *Engine) taskOptions(c *conn) TaskOptions {
	log := e.log
	if e.opt.ConnectorLog != nil {
		log = e.opt.ConnectorLog(c.name)
	}
	return TaskOptions{
		Bootstrap:  e.opt.Bootstrap,
		KafkaOpts:  e.opt.KafkaOpts,
		InstanceID: e.opt.WorkerID,
		Log:        log,
		Observer:   c.obs,

		ReservedTopics: e.reg.Policy().ReservedTopics,
		Memory:         e.opt.Memory,
	}
}

// startTask starts task i of run and tracks its exit.
func (e *Engine) startTask(c *conn, run *Connector, i int) {
	c.mu.Lock()
	t := c.tasks[i]
	t.gen++
	gen := t.gen
	t.state, t.trace = runState(c.cfg.Target == TargetPaused), ""
	t.started = time.Now()
	t.next = time.Time{}
	c.mu.Unlock()
	if err := run.StartTask(i, func(id int, err error) { e.taskExited(c, run, id, gen, err) }); err != nil {
		c.mu.Lock()
		t.state, t.trace = StateFailed, secrets.ScrubString(err.Error(), c.secrets)
		c.mu.Unlock()
	}
}

// taskExited records a task's exit. A clean exit (nil) is a stop the
// engine asked for; an error fails the task and schedules its restart. It
// runs on the task's goroutine.
func (e *Engine) taskExited(c *conn, run *Connector, id, gen int, err error) {
	c.obs.clearTask(id)
	if err == nil {
		return
	}
	closed := e.isClosed()
	c.mu.Lock()
	if c.run != run || id >= len(c.tasks) || c.tasks[id].gen != gen || closed {
		c.mu.Unlock()
		return
	}
	t := c.tasks[id]
	t.state = StateFailed
	t.trace = secrets.ScrubString(err.Error(), c.secrets)
	if time.Since(t.started) > e.opt.Restart.Max {
		t.restarts = 0
	}
	retry := e.opt.Restart.Enabled && c.cfg.Target != TargetStopped && !errors.Is(err, ErrTaskStopped)
	if retry {
		d := e.opt.Restart.delay(t.restarts)
		t.restarts++
		t.next = time.Now().Add(d)
		t.timer = time.AfterFunc(d, func() { e.autoRestartTask(c, run, id, gen) })
	}
	trace := t.trace
	c.mu.Unlock()
	e.metrics.taskFailures.WithLabelValues(c.name).Inc()
	e.log.Error("task failed", "connector", c.name, "task", id, "err", trace, "restart_scheduled", retry)
	e.changed(c.name)
}

func (e *Engine) autoRestartTask(c *conn, run *Connector, id, gen int) {
	if !e.goBG() {
		return
	}
	defer e.bg.Done()
	c.op.Lock()
	c.mu.Lock()
	stale := c.removed || c.run != run || id >= len(c.tasks) || c.tasks[id].gen != gen || c.tasks[id].state != StateFailed
	if !stale {
		c.tasks[id].timer = nil
	}
	c.mu.Unlock()
	if stale || e.isClosed() {
		c.op.Unlock()
		return
	}
	e.log.Info("restarting failed task", "connector", c.name, "task", id)
	e.metrics.taskRestarts.WithLabelValues(c.name).Inc()
	e.restartTaskLocked(c, id, false)
	c.op.Unlock()
	e.changed(c.name)
}

func (e *Engine) scheduleConnRestart(c *conn) {
	if e.isClosed() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !e.opt.Restart.Enabled || c.cfg.Target == TargetStopped {
		return
	}
	d := e.opt.Restart.delay(c.restarts)
	c.restarts++
	gen := c.gen
	c.timer = time.AfterFunc(d, func() {
		if !e.goBG() {
			return
		}
		defer e.bg.Done()
		c.op.Lock()
		c.mu.Lock()
		stale := c.removed || c.gen != gen || c.run != nil || c.cfg.Target == TargetStopped
		c.mu.Unlock()
		if stale || e.isClosed() {
			c.op.Unlock()
			return
		}
		e.log.Info("retrying failed connector", "connector", c.name)
		e.startLocked(context.Background(), c)
		c.op.Unlock()
		e.changed(c.name)
	})
}

// goBG registers background work; it returns false once the engine is
// closing (Close waits for registered work).
func (e *Engine) goBG() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.bg.Add(1)
	return true
}

// stopLocked stops the connector's tasks and closes its sink, if open.
// The caller holds c.op.
func (e *Engine) stopLocked(c *conn) {
	c.mu.Lock()
	run := c.run
	c.run = nil
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	for _, t := range c.tasks {
		t.gen++
		if t.timer != nil {
			t.timer.Stop()
			t.timer, t.next = nil, time.Time{}
		}
	}
	c.mu.Unlock()
	if run != nil {
		run.Stop()
		e.log.Info("connector tasks stopped", "connector", c.name)
	}
	c.obs.clearAll()
}
