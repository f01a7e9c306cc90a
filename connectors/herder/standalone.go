// Package herder keeps connectors' configurations and target states and
// tells the engine (connectors/engine) what to run, as Kafka Connect's
// herders do.
package herder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
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

// Sentinel errors of the worker. Errors returned by Worker methods wrap one
// of them (or are config.Errors for an invalid configuration); their
// message is the one Kafka Connect uses and is safe to show (no secrets).
var (
	// ErrNotFound: no connector (or task) by that name (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrExists: a connector with that name exists (HTTP 409).
	ErrExists = errors.New("already exists")
	// ErrBadRequest: the request is malformed or not allowed in the
	// connector's current state, as Kafka Connect reports it (HTTP 400).
	ErrBadRequest = errors.New("bad request")
	// ErrConflict: the operation conflicts with the connector's state or
	// another operation on it (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrClosed: the worker is shutting down.
	ErrClosed = errors.New("worker is shutting down")
	// ErrSecretDropped: a configuration change moved the connector to
	// another host, port or user without sending its secret again, so the
	// stored secret was dropped; the connector fails until it is sent
	// (HTTP 409 where an operation needs the sink).
	ErrSecretDropped = errors.New("secret dropped")
)

// opError carries a Kafka Connect style message and one of the sentinels.
type opError struct {
	kind error
	msg  string
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &opError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func notFound(name string) error { return errorf(ErrNotFound, "Connector %s not found", name) }

// RestartPolicy says how the worker restarts failed tasks and connectors
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

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// DataDir holds the standalone state file; it is created if missing.
	DataDir string
	// WorkerID is shown as worker_id in statuses and is the instance id of
	// the Kafka transactional ids (see TaskOptions.InstanceID).
	WorkerID string
	// Bootstrap and KafkaOpts reach the Kafka cluster.
	Bootstrap []string
	KafkaOpts []kgo.Opt
	// Log is the worker's logger; ConnectorLog, when set, returns the
	// logger for one connector's runtime (for per-connector levels).
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
}

// Worker is the standalone herder: it runs named connectors, keeps their
// configurations, target states and task states in a data directory, and
// restores them when it starts again. Its methods are safe for concurrent
// use; operations on one connector are serialized.
//
// Pause and stop both stop the connector's tasks and close its sink (they
// differ in what the status shows and in that offsets may only be edited
// while STOPPED). Unlike Kafka Connect, a PAUSED txsink connector does not
// stay in its consumer group: its partitions are released at once and the
// group is empty while it is paused.
type Worker struct {
	reg     *connectors.Registry
	opt     WorkerOptions
	log     *slog.Logger
	metrics *workerMetrics

	mu      sync.Mutex // guards conns, closed, ready, storeErr
	conns   map[string]*managed
	closed  bool
	ready   bool
	storeEr error

	storeMu sync.Mutex // serializes writes of the state file
	bg      sync.WaitGroup

	adminMu   sync.Mutex
	admin     *kadm.Client
	adminCl   *kgo.Client
	clusterID string
}

// managed is one connector under the worker's control.
type managed struct {
	name string
	op   sync.Mutex // serializes lifecycle operations on this connector

	// The fields below are guarded by Worker.mu.
	raw       map[string]string
	target    TargetState
	state     State
	trace     string
	tasks     []*taskSlot
	conn      *engine.Connector // open while running
	gen       int               // incremented whenever conn changes
	restarts  int               // consecutive automatic connector restarts
	timer     *time.Timer
	created   time.Time
	updated   time.Time
	deleted   bool
	obs       *observer
	secrets   []string
	tasksMax  int
	restoring bool
	// dropped, when not "", says which stored secret a configuration
	// change dropped (see reconfigure); the connector fails with it.
	dropped string
}

type taskSlot struct {
	state    State
	trace    string
	gen      int
	restarts int
	started  time.Time
	timer    *time.Timer
	next     time.Time // next automatic restart, when scheduled
}

// NewWorker creates the data directory if needed and loads the stored
// state. Call Start to run the stored connectors.
func NewWorker(reg *connectors.Registry, opt WorkerOptions) (*Worker, error) {
	if opt.DataDir == "" {
		return nil, errors.New("connectors: worker data directory is required")
	}
	if opt.WorkerID == "" {
		opt.WorkerID = engine.NewInstanceID()
	}
	if opt.OpenTimeout <= 0 {
		opt.OpenTimeout = 30 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if err := os.MkdirAll(opt.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("connectors: data directory: %w", err)
	}
	if fi, err := os.Stat(opt.DataDir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		opt.Log.Warn("the data directory is open to its group or to others; it holds connector passwords: make it private (chmod 700)", "data_dir", opt.DataDir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	if n, err := removeStaleTemps(opt.DataDir); err != nil {
		return nil, err
	} else if n > 0 {
		opt.Log.Info("removed temporary state files left by an interrupted write", "data_dir", opt.DataDir, "files", n)
	}
	w := &Worker{reg: reg, opt: opt, log: opt.Log, conns: map[string]*managed{}}
	w.metrics = newWorkerMetrics(w)
	if opt.Registerer != nil {
		if err := w.metrics.register(opt.Registerer); err != nil {
			return nil, err
		}
	}
	st, err := loadState(opt.DataDir)
	if err != nil {
		return nil, err
	}
	for name, sc := range st.Connectors {
		m := &managed{name: name, raw: sc.Config, target: sc.Target, created: sc.CreatedAt, updated: sc.UpdatedAt, restoring: true}
		if m.target == "" {
			m.target = TargetRunning
		}
		m.state, m.trace, m.dropped = sc.State, sc.Trace, sc.SecretDropped
		for _, t := range sc.Tasks {
			for len(m.tasks) <= t.ID {
				m.tasks = append(m.tasks, &taskSlot{state: StateUnassigned})
			}
			m.tasks[t.ID] = &taskSlot{state: t.State, trace: t.Trace}
		}
		w.prepare(m)
		w.conns[name] = m
	}
	return w, nil
}

// prepare derives the cached parts of m from its raw configuration.
func (w *Worker) prepare(m *managed) {
	m.secrets = secrets.Of(w.reg, m.raw)
	_, v, _ := w.reg.Validate(m.raw)
	m.tasksMax = int(v.Int(config.KeyTasksMax))
	if m.tasksMax < 1 {
		m.tasksMax = 1
	}
	if m.obs == nil {
		m.obs = newObserver(w, m.name)
	}
}

// WorkerID returns the worker's id.
func (w *Worker) WorkerID() string { return w.opt.WorkerID }

// Registry returns the sink registry.
func (w *Worker) Registry() *connectors.Registry { return w.reg }

// Start runs every stored connector whose target state is RUNNING; PAUSED
// and STOPPED ones stay so. A connector that fails to open is marked FAILED
// and retried under the restart policy. Start returns once every
// connector was tried.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	var all []*managed
	for _, m := range w.conns {
		all = append(all, m)
	}
	w.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, m := range all {
		m.op.Lock()
		w.mu.Lock()
		target := m.target
		m.restoring = false
		w.mu.Unlock()
		switch target {
		case TargetRunning:
			w.startLocked(ctx, m)
		default:
			w.idleLocked(m, target)
		}
		m.op.Unlock()
		w.log.Info("connector restored", "connector", m.name, "target_state", target)
	}
	w.mu.Lock()
	w.ready = true
	w.mu.Unlock()
	return w.persist()
}

// Close stops every connector's tasks and closes their sinks without
// changing their stored target states, and waits for the worker's
// background work. Prepared batches left by a task that is stopped in the
// middle of a round are resolved by the next owner's recovery.
func (w *Worker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.ready = false
	var all []*managed
	for _, m := range w.conns {
		all = append(all, m)
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.op.Lock()
			defer m.op.Unlock()
			w.shutdownLocked(m)
		}()
	}
	wg.Wait()
	w.bg.Wait()
	w.adminMu.Lock()
	if w.adminCl != nil {
		w.adminCl.Close()
		w.adminCl, w.admin = nil, nil
	}
	w.adminMu.Unlock()
}

// Ready reports whether the worker finished starting and is not shutting
// down, and the last error writing its state (nil when fine).
func (w *Worker) Ready(context.Context) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.storeEr != nil {
		return w.ready && !w.closed, fmt.Errorf("Worker cannot write its state to the data directory: %w", w.storeEr)
	}
	return w.ready && !w.closed, nil
}

// Connectors lists the connector names, sorted.
func (w *Worker) Connectors(context.Context) ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.conns)), nil
}

// lookup returns the managed connector or a not-found error.
func (w *Worker) lookup(name string) (*managed, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	m, ok := w.conns[name]
	if !ok {
		return nil, notFound(name)
	}
	return m, nil
}

// lockConn looks the connector up and takes its operation lock. The
// caller must unlock m.op.
func (w *Worker) lockConn(name string) (*managed, error) {
	m, err := w.lookup(name)
	if err != nil {
		return nil, err
	}
	m.op.Lock()
	w.mu.Lock()
	gone := m.deleted || w.closed
	w.mu.Unlock()
	if gone {
		m.op.Unlock()
		if w.isClosed() {
			return nil, ErrClosed
		}
		return nil, notFound(name)
	}
	return m, nil
}

func (w *Worker) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// validate checks a configuration for create or update. name is the name
// in the URL or create body; the configuration's "name", when present,
// must equal it.
func (w *Worker) validate(name string, raw map[string]string) (map[string]string, error) {
	cfg := make(map[string]string, len(raw)+1)
	maps.Copy(cfg, raw)
	if n, ok := cfg[config.KeyName]; ok && n != name {
		return nil, errorf(ErrBadRequest, "Connector name configuration (%s) doesn't match connector name in the URL (%s)", secrets.ScrubString(n, secrets.Of(w.reg, raw)), name)
	}
	cfg[config.KeyName] = name
	if errs := secrets.CheckPlaceholders(w.reg, cfg); len(errs) > 0 {
		return nil, errs
	}
	if _, _, errs := w.reg.Validate(cfg); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// Create adds a connector and brings it to the initial target state. It
// returns config.Errors when the configuration is invalid and an error
// wrapping ErrExists when the name is taken. A connector whose sink cannot
// be opened is still created; its status is FAILED with the reason, and
// the restart policy retries it.
func (w *Worker) Create(ctx context.Context, name string, raw map[string]string, initial TargetState) (Info, error) {
	cfg, err := w.validate(name, raw)
	if err != nil {
		return Info{}, err
	}
	now := time.Now().UTC()
	m := &managed{name: name, raw: cfg, target: initial, state: StateUnassigned, created: now, updated: now}
	w.prepare(m)
	m.op.Lock()
	defer m.op.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Info{}, ErrClosed
	}
	if _, ok := w.conns[name]; ok {
		w.mu.Unlock()
		return Info{}, errorf(ErrExists, "Connector %s already exists", name)
	}
	w.conns[name] = m
	w.mu.Unlock()
	if err := w.persist(); err != nil {
		w.mu.Lock()
		delete(w.conns, name)
		w.mu.Unlock()
		return Info{}, err
	}
	w.log.Info("connector created", "connector", name, "initial_state", initial)
	w.applyTargetLocked(ctx, m)
	return w.info(m), w.persist()
}

// PutConfig creates the connector (created=true) or replaces its
// configuration and restarts its tasks with the new one when it runs.
// A value Hidden ("[hidden]", what GET …/config shows for a secret, also
// inside a URL) stands for the stored secret, which is kept while the
// connector's identity (host, port, user) stays the same, and dropped
// otherwise (see PatchConfig).
func (w *Worker) PutConfig(ctx context.Context, name string, raw map[string]string) (info Info, created bool, err error) {
	change := secrets.Change{Replace: true, Set: raw}
	if _, err := w.lookup(name); errors.Is(err, ErrNotFound) {
		info, err := w.Create(ctx, name, raw, TargetRunning)
		if errors.Is(err, ErrExists) { // lost a race with another create
			info, err = w.reconfigure(ctx, name, change)
			return info, false, err
		}
		return info, err == nil, err
	}
	info, err = w.reconfigure(ctx, name, change)
	return info, false, err
}

// PatchConfig merges patch into the connector's configuration (a nil value
// removes the setting, as in Kafka Connect's PATCH) and applies it like
// PutConfig. The connector must exist. The merge reads the configuration
// under the connector's lock, so concurrent patches of different settings
// all apply.
//
// Stored secrets are bound to where they are used: when the change moves
// the connector to another host, port or user (the sink's Spec.Identity)
// and does not send a secret again (a password setting, or the password
// inside connection.url), that secret is dropped, and the connector fails
// with ErrSecretDropped until a change sends it (or removes the setting
// with null).
func (w *Worker) PatchConfig(ctx context.Context, name string, patch map[string]*string) (Info, error) {
	change := secrets.Change{Set: map[string]string{}}
	for k, v := range patch {
		if v == nil {
			change.Unset = append(change.Unset, k)
		} else {
			change.Set[k] = *v
		}
	}
	return w.reconfigure(ctx, name, change)
}

// reconfigure applies change to the connector's configuration under its
// lock: read, merge, bind secrets, validate, store, restart.
func (w *Worker) reconfigure(ctx context.Context, name string, change secrets.Change) (Info, error) {
	m, err := w.lockConn(name)
	if err != nil {
		return Info{}, err
	}
	defer m.op.Unlock()
	w.mu.Lock()
	old, dropped := maps.Clone(m.raw), m.dropped
	w.mu.Unlock()
	next, droppedKeys, dropped := secrets.Bind(w.reg, w.identity, name, old, change, dropped)
	cfg, err := w.validate(name, next)
	if err != nil {
		return Info{}, err
	}
	w.stopConnLocked(m)
	w.mu.Lock()
	m.raw = cfg
	m.dropped = dropped
	m.updated = time.Now().UTC()
	m.restarts = 0
	w.prepare(m)
	w.mu.Unlock()
	w.log.Info("connector reconfigured", "connector", name)
	if len(droppedKeys) > 0 {
		w.log.Warn("stored secrets dropped: the connector moved to another host, port or user without them", "connector", name, "settings", droppedKeys, "connector_fails", dropped != "")
	}
	if err := w.persist(); err != nil {
		return Info{}, err
	}
	w.applyTargetLocked(ctx, m)
	return w.info(m), w.persist()
}

// identity is where a raw configuration's secrets go: the sink's
// Spec.Identity ("" for a sink without one) and the converters' registry
// targets. A change of either drops the stored secrets it does not send
// again.
func (w *Worker) identity(raw map[string]string) (string, error) {
	spec, v, _ := w.reg.Validate(raw)
	id := ""
	if spec.Identity != nil {
		var err error
		if id, err = spec.Identity(v); err != nil {
			return "", err
		}
	}
	if r := convert.RegistryTargets(raw); r != "" {
		id += " " + r
	}
	return id, nil
}

// Delete stops the connector and removes it. Its offsets stay in the sink.
func (w *Worker) Delete(ctx context.Context, name string) error {
	m, err := w.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	w.stopConnLocked(m)
	w.mu.Lock()
	m.deleted = true
	delete(w.conns, name)
	w.mu.Unlock()
	w.metrics.forget(name)
	w.log.Info("connector deleted", "connector", name)
	return w.persist()
}

// Pause stops the connector's tasks and keeps it PAUSED. Idempotent.
func (w *Worker) Pause(ctx context.Context, name string) error {
	return w.setTarget(ctx, name, TargetPaused)
}

// Resume runs a PAUSED or STOPPED connector again. Idempotent.
func (w *Worker) Resume(ctx context.Context, name string) error {
	return w.setTarget(ctx, name, TargetRunning)
}

// Stop stops the connector's tasks and keeps it STOPPED (no tasks); its
// offsets may then be edited. Idempotent.
func (w *Worker) Stop(ctx context.Context, name string) error {
	return w.setTarget(ctx, name, TargetStopped)
}

func (w *Worker) setTarget(ctx context.Context, name string, target TargetState) error {
	m, err := w.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	w.mu.Lock()
	same := m.target == target
	running := m.conn != nil
	m.target = target
	m.updated = time.Now().UTC()
	w.mu.Unlock()
	if same && (target != TargetRunning || running) {
		return nil
	}
	if err := w.persist(); err != nil {
		return err
	}
	w.log.Info("connector target state changed", "connector", name, "target_state", target)
	w.applyTargetLocked(ctx, m)
	return w.persist()
}

// Restart restarts the connector (closing and reopening its sink, which
// restarts its tasks too: txsink tasks share the connector's sink) and,
// with includeTasks, its tasks; onlyFailed limits both to FAILED ones. It
// returns the status with RESTARTING for what will be restarted; the
// restart itself runs in the background. A connector that is not RUNNING
// by target is left alone (as in Kafka Connect).
func (w *Worker) Restart(ctx context.Context, name string, includeTasks, onlyFailed bool) (ConnectorStatus, error) {
	m, err := w.lookup(name)
	if err != nil {
		return ConnectorStatus{}, err
	}
	w.mu.Lock()
	restartConn := m.target == TargetRunning && (!onlyFailed || m.state == StateFailed)
	var tasks []int
	if m.target == TargetRunning && includeTasks {
		for i, t := range m.tasks {
			if !onlyFailed || t.state == StateFailed {
				tasks = append(tasks, i)
			}
		}
	}
	if restartConn {
		m.state = StateRestarting
		for _, t := range m.tasks {
			t.state = StateRestarting
		}
	}
	for _, i := range tasks {
		m.tasks[i].state = StateRestarting
	}
	w.mu.Unlock()
	st, err := w.Status(ctx, name)
	if err != nil {
		return st, err
	}
	if !restartConn && len(tasks) == 0 {
		return st, nil
	}
	if !w.goBG() {
		return st, ErrClosed
	}
	go func() {
		defer w.bg.Done()
		m, err := w.lockConn(name)
		if err != nil {
			return
		}
		defer m.op.Unlock()
		if restartConn {
			w.log.Info("restarting connector", "connector", name)
			w.stopConnLocked(m)
			w.mu.Lock()
			m.restarts = 0
			w.mu.Unlock()
			w.applyTargetLocked(context.Background(), m)
			return
		}
		for _, i := range tasks {
			w.restartTaskLocked(m, i, true)
		}
	}()
	return st, nil
}

// RestartTask restarts one task of a running connector (synchronously).
func (w *Worker) RestartTask(ctx context.Context, name string, task int) error {
	m, err := w.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	w.mu.Lock()
	n := len(m.tasks)
	running := m.conn != nil
	w.mu.Unlock()
	if task < 0 || task >= n {
		return errorf(ErrNotFound, "Task %s-%d not found", name, task)
	}
	if !running {
		return errorf(ErrConflict, "Cannot restart task %s-%d: the connector is not running", name, task)
	}
	w.restartTaskLocked(m, task, true)
	return w.persist()
}

// restartTaskLocked stops task i (if it runs) and starts it again. manual
// restarts reset the automatic restart backoff.
func (w *Worker) restartTaskLocked(m *managed, i int, manual bool) {
	w.mu.Lock()
	c := m.conn
	w.mu.Unlock()
	if c == nil {
		return
	}
	w.mu.Lock()
	if i >= len(m.tasks) {
		w.mu.Unlock()
		return
	}
	t := m.tasks[i]
	t.gen++ // the exit of the old run is not a failure
	if t.timer != nil {
		t.timer.Stop()
		t.timer, t.next = nil, time.Time{}
	}
	w.mu.Unlock()
	c.StopTask(i)
	w.mu.Lock()
	if manual {
		t.restarts = 0
	}
	w.mu.Unlock()
	w.startTask(m, c, i)
}

// applyTargetLocked brings the connector to its target state.
func (w *Worker) applyTargetLocked(ctx context.Context, m *managed) {
	w.mu.Lock()
	target := m.target
	running := m.conn != nil
	w.mu.Unlock()
	switch {
	case target == TargetRunning && !running:
		w.startLocked(ctx, m)
	case target != TargetRunning:
		w.stopConnLocked(m)
		w.idleLocked(m, target)
	}
}

// idleLocked sets the states of a connector that is not running.
func (w *Worker) idleLocked(m *managed, target TargetState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.trace = ""
	switch target {
	case TargetPaused:
		m.state = StatePaused
		m.tasks = make([]*taskSlot, m.tasksMax)
		for i := range m.tasks {
			m.tasks[i] = &taskSlot{state: StatePaused}
		}
	case TargetStopped:
		m.state = StateStopped
		m.tasks = nil
	}
}

// startLocked opens the connector's sink and starts its tasks. On failure
// the connector is FAILED and, under the restart policy, retried.
func (w *Worker) startLocked(ctx context.Context, m *managed) {
	w.mu.Lock()
	raw := maps.Clone(m.raw)
	secs := m.secrets
	dropped := m.dropped
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	w.mu.Unlock()
	if dropped != "" {
		// Nothing to retry: the connector needs its secret sent again.
		w.mu.Lock()
		m.state, m.trace, m.tasks = StateFailed, dropped, nil
		m.gen++
		w.mu.Unlock()
		w.log.Error("connector failed to start", "connector", m.name, "err", dropped)
		w.metrics.connectorFailures.WithLabelValues(m.name).Inc()
		return
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opt.OpenTimeout)
	c, err := engine.Open(octx, w.reg, raw, w.taskOptions(m))
	cancel()
	w.mu.Lock()
	if err != nil {
		m.state = StateFailed
		m.trace = secrets.ScrubString(err.Error(), secs)
		m.tasks = nil
		m.gen++
		w.mu.Unlock()
		w.log.Error("connector failed to start", "connector", m.name, "err", m.trace)
		w.metrics.connectorFailures.WithLabelValues(m.name).Inc()
		w.scheduleConnRestart(m)
		return
	}
	m.conn = c
	m.gen++
	m.state, m.trace = StateRunning, ""
	m.tasks = make([]*taskSlot, c.Config.TasksMax)
	for i := range m.tasks {
		m.tasks[i] = &taskSlot{state: StateUnassigned}
	}
	w.mu.Unlock()
	for i := 0; i < c.Config.TasksMax; i++ {
		w.startTask(m, c, i)
	}
	w.log.Info("connector running", "connector", m.name, "delivery", c.Config.Delivery, "tasks", c.Config.TasksMax)
}

func (w *Worker) taskOptions(m *managed) engine.TaskOptions {
	log := w.log
	if w.opt.ConnectorLog != nil {
		log = w.opt.ConnectorLog(m.name)
	}
	return engine.TaskOptions{
		Bootstrap:  w.opt.Bootstrap,
		KafkaOpts:  w.opt.KafkaOpts,
		InstanceID: w.opt.WorkerID,
		Log:        log,
		Observer:   m.obs,
	}
}

// startTask starts task i of c and tracks its exit.
func (w *Worker) startTask(m *managed, c *engine.Connector, i int) {
	w.mu.Lock()
	t := m.tasks[i]
	t.gen++
	gen := t.gen
	t.state, t.trace = StateRunning, ""
	t.started = time.Now()
	t.next = time.Time{}
	w.mu.Unlock()
	if err := c.StartTask(i, func(id int, err error) { w.taskExited(m, c, id, gen, err) }); err != nil {
		w.mu.Lock()
		t.state, t.trace = StateFailed, secrets.ScrubString(err.Error(), m.secrets)
		w.mu.Unlock()
	}
}

// taskExited records a task's exit. A clean exit (nil) is a stop the
// worker asked for; an error fails the task and schedules its restart.
func (w *Worker) taskExited(m *managed, c *engine.Connector, id, gen int, err error) {
	m.obs.clearTask(id)
	if err == nil {
		return
	}
	w.mu.Lock()
	if m.conn != c || id >= len(m.tasks) || m.tasks[id].gen != gen || w.closed {
		w.mu.Unlock()
		return
	}
	t := m.tasks[id]
	t.state = StateFailed
	t.trace = secrets.ScrubString(err.Error(), m.secrets)
	if time.Since(t.started) > w.opt.Restart.Max {
		t.restarts = 0
	}
	retry := w.opt.Restart.Enabled && m.target == TargetRunning && !errors.Is(err, engine.ErrTaskStopped)
	if retry {
		d := w.opt.Restart.delay(t.restarts)
		t.restarts++
		t.next = time.Now().Add(d)
		t.timer = time.AfterFunc(d, func() { w.autoRestartTask(m, c, id, gen) })
	}
	trace := t.trace
	w.mu.Unlock()
	w.metrics.taskFailures.WithLabelValues(m.name).Inc()
	w.log.Error("task failed", "connector", m.name, "task", id, "err", trace, "restart_scheduled", retry)
	if err := w.persist(); err != nil {
		w.log.Error("writing worker state", "err", err)
	}
}

func (w *Worker) autoRestartTask(m *managed, c *engine.Connector, id, gen int) {
	if !w.goBG() {
		return
	}
	defer w.bg.Done()
	m.op.Lock()
	defer m.op.Unlock()
	w.mu.Lock()
	stale := m.deleted || w.closed || m.conn != c || id >= len(m.tasks) || m.tasks[id].gen != gen || m.tasks[id].state != StateFailed
	if !stale {
		m.tasks[id].timer = nil
	}
	w.mu.Unlock()
	if stale {
		return
	}
	w.log.Info("restarting failed task", "connector", m.name, "task", id)
	w.metrics.taskRestarts.WithLabelValues(m.name).Inc()
	w.restartTaskLocked(m, id, false)
	if err := w.persist(); err != nil {
		w.log.Error("writing worker state", "err", err)
	}
}

func (w *Worker) scheduleConnRestart(m *managed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.opt.Restart.Enabled || m.target != TargetRunning || w.closed {
		return
	}
	d := w.opt.Restart.delay(m.restarts)
	m.restarts++
	gen := m.gen
	m.timer = time.AfterFunc(d, func() {
		if !w.goBG() {
			return
		}
		defer w.bg.Done()
		m.op.Lock()
		defer m.op.Unlock()
		w.mu.Lock()
		stale := m.deleted || w.closed || m.gen != gen || m.conn != nil || m.target != TargetRunning
		w.mu.Unlock()
		if stale {
			return
		}
		w.log.Info("retrying failed connector", "connector", m.name)
		w.startLocked(context.Background(), m)
		if err := w.persist(); err != nil {
			w.log.Error("writing worker state", "err", err)
		}
	})
}

// goBG registers background work; it returns false once the worker is
// closing (Close waits for registered work).
func (w *Worker) goBG() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.bg.Add(1)
	return true
}

// stopConnLocked stops the connector's tasks and closes its sink, if open.
func (w *Worker) stopConnLocked(m *managed) {
	w.mu.Lock()
	c := m.conn
	m.conn = nil
	m.gen++
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	for _, t := range m.tasks {
		t.gen++
		if t.timer != nil {
			t.timer.Stop()
			t.timer, t.next = nil, time.Time{}
		}
	}
	w.mu.Unlock()
	if c != nil {
		c.Stop()
		w.log.Info("connector tasks stopped", "connector", m.name)
	}
	m.obs.clearAll()
}

// shutdownLocked stops the connector for worker shutdown, keeping states.
func (w *Worker) shutdownLocked(m *managed) {
	w.stopConnLocked(m)
}

// persist writes every connector's configuration and states.
func (w *Worker) persist() error {
	w.storeMu.Lock()
	defer w.storeMu.Unlock()
	st := &storedState{Version: 1, Connectors: map[string]*storedConnector{}}
	w.mu.Lock()
	for name, m := range w.conns {
		sc := &storedConnector{Config: maps.Clone(m.raw), Target: m.target, State: m.state, Trace: m.trace, SecretDropped: m.dropped, CreatedAt: m.created, UpdatedAt: m.updated}
		for i, t := range m.tasks {
			sc.Tasks = append(sc.Tasks, storedTask{ID: i, State: t.state, Trace: t.trace})
		}
		st.Connectors[name] = sc
	}
	w.mu.Unlock()
	err := saveState(w.opt.DataDir, st)
	w.mu.Lock()
	w.storeEr = err
	w.mu.Unlock()
	if err != nil {
		w.log.Error("writing worker state failed", "err", err)
	}
	return err
}

// Info describes a connector as Kafka Connect's ConnectorInfo does.
type Info struct {
	Name string
	// Config is the stored configuration, unredacted: redact it with
	// RedactConfig before showing it.
	Config map[string]string
	// Tasks lists the task ids (none while STOPPED).
	Tasks []int
	Type  string
}

// Info returns the connector's description.
func (w *Worker) Info(_ context.Context, name string) (Info, error) {
	m, err := w.lookup(name)
	if err != nil {
		return Info{}, err
	}
	return w.info(m), nil
}

func (w *Worker) info(m *managed) Info {
	w.mu.Lock()
	defer w.mu.Unlock()
	inf := Info{Name: m.name, Config: maps.Clone(m.raw), Type: "sink", Tasks: []int{}}
	if m.target != TargetStopped {
		for i := 0; i < m.tasksMax; i++ {
			inf.Tasks = append(inf.Tasks, i)
		}
	}
	return inf
}

// Config returns the connector's stored configuration, unredacted.
func (w *Worker) Config(name string) (map[string]string, error) {
	inf, err := w.Info(context.Background(), name)
	return inf.Config, err
}

// TargetState returns the connector's target state.
func (w *Worker) TargetState(name string) (TargetState, error) {
	m, err := w.lookup(name)
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return m.target, nil
}

// Offsets returns the offsets stored in the sink. It works in any state;
// while the connector is not running it opens the sink for the read.
func (w *Worker) Offsets(ctx context.Context, name string) ([]offsets.Position, error) {
	m, err := w.lookup(name)
	if err != nil {
		return nil, err
	}
	var ps []offsets.Position
	err = w.withSink(ctx, m, func(s connectors.Sink) error {
		var err error
		ps, err = s.Positions(ctx)
		return err
	})
	if err != nil {
		return nil, w.scrub(m, fmt.Errorf("reading offsets of %s: %w", name, err))
	}
	out := ps[:0]
	for _, p := range ps {
		if p.Next != offsets.Unset {
			out = append(out, p)
		}
	}
	return out, nil
}

// AlterOffsets sets the stored offsets of the listed partitions (Next ==
// offsets.Unset clears one, so offsets.initial applies to it again) in one
// sink transaction that also bumps their fences. The connector must be
// STOPPED. The consumer group's committed offsets, a mirror for lag
// tooling, are set to the same positions afterwards (best effort).
func (w *Worker) AlterOffsets(ctx context.Context, name string, positions []offsets.Position) error {
	return w.editOffsets(ctx, name, false, positions)
}

// ResetOffsets deletes every stored offset of the connector in one sink
// transaction; the next run starts from offsets.initial. The connector
// must be STOPPED. The consumer group's committed offsets are deleted
// afterwards (best effort).
func (w *Worker) ResetOffsets(ctx context.Context, name string) error {
	return w.editOffsets(ctx, name, true, nil)
}

func (w *Worker) editOffsets(ctx context.Context, name string, all bool, positions []offsets.Position) error {
	m, err := w.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	w.mu.Lock()
	stopped := m.target == TargetStopped && m.conn == nil
	w.mu.Unlock()
	if !stopped {
		return errorf(ErrBadRequest, "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/%s/stop' endpoint", name)
	}
	err = w.withSink(ctx, m, func(s connectors.Sink) error { return s.ResetOffsets(ctx, all, positions) })
	if err != nil {
		if errors.Is(err, offsets.ErrBusy) {
			return errorf(ErrConflict, "Offsets of %s are locked by an in-doubt batch; run the connector so that recovery resolves it, stop it and try again", name)
		}
		return w.scrub(m, fmt.Errorf("editing offsets of %s: %w", name, err))
	}
	if all {
		w.log.Info("connector offsets reset", "connector", name)
	} else {
		w.log.Info("connector offsets altered", "connector", name, "partitions", len(positions))
	}
	w.mirrorGroup(ctx, m, all, positions)
	return nil
}

// withSink runs fn with the running connector's sink, or with a sink opened
// for the call.
func (w *Worker) withSink(ctx context.Context, m *managed, fn func(connectors.Sink) error) error {
	w.mu.Lock()
	c := m.conn
	raw := maps.Clone(m.raw)
	dropped := m.dropped
	w.mu.Unlock()
	if c != nil {
		return fn(c.Sink)
	}
	if dropped != "" {
		return &opError{kind: ErrSecretDropped, msg: dropped}
	}
	spec, v, errs := w.reg.Validate(raw)
	if len(errs) > 0 {
		return errs
	}
	conn := config.ParseConnector(v)
	octx, cancel := context.WithTimeout(ctx, w.opt.OpenTimeout)
	defer cancel()
	pipe, err := convert.NewPipeline(v)
	if err != nil {
		return err
	}
	s, err := spec.New(octx, connectors.Env{Bootstrap: w.opt.Bootstrap, KafkaOpts: w.opt.KafkaOpts, Log: w.log.With("connector", m.name), Pipeline: pipe, Policy: w.reg.Policy()}, conn, v)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// mirrorGroup makes the consumer group's committed offsets follow an
// administrative edit. The sink stays the source of truth (consumption
// resumes from it), so a failure here is only logged.
func (w *Worker) mirrorGroup(ctx context.Context, m *managed, all bool, positions []offsets.Position) {
	w.mu.Lock()
	_, v, _ := w.reg.Validate(m.raw)
	w.mu.Unlock()
	group := config.ParseConnector(v).GroupID
	adm, err := w.adminClient()
	if err != nil {
		w.log.Warn("offsets edited in the sink; could not mirror them to the consumer group", "group", group, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if all {
		resp, err := adm.DeleteGroups(ctx, group)
		if err == nil {
			if r, ok := resp[group]; ok && r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
				err = r.Err
			}
		}
		if err != nil {
			w.log.Warn("offsets reset in the sink; could not delete the consumer group's offsets", "group", group, "err", err)
		}
		return
	}
	offs := kadm.Offsets{}
	var del []string
	for _, p := range positions {
		if p.Next == offsets.Unset {
			del = append(del, fmt.Sprintf("%s[%d]", p.Topic, p.Partition))
			continue
		}
		offs.Add(kadm.Offset{Topic: p.Topic, Partition: p.Partition, At: p.Next, LeaderEpoch: -1})
	}
	if len(offs) > 0 {
		if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
			w.log.Warn("offsets altered in the sink; could not mirror them to the consumer group", "group", group, "err", err)
		}
	}
	if len(del) > 0 {
		w.log.Info("cleared partitions keep their consumer group offsets (a mirror only)", "group", group, "partitions", del)
	}
}

func (w *Worker) scrub(m *managed, err error) error {
	w.mu.Lock()
	secs := m.secrets
	w.mu.Unlock()
	var ferrs config.Errors
	var oe *opError
	if errors.As(err, &ferrs) || errors.As(err, &oe) && oe.kind == ErrSecretDropped {
		return err // messages without secrets, kinds kept
	}
	return errors.New(secrets.ScrubString(err.Error(), secs))
}

// adminClient returns the worker's shared Kafka admin client.
func (w *Worker) adminClient() (*kadm.Client, error) {
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	if w.admin != nil {
		return w.admin, nil
	}
	if len(w.opt.Bootstrap) == 0 {
		return nil, errors.New("no Kafka bootstrap servers configured")
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.opt.Bootstrap...), kgo.ClientID("txsink-worker-admin")}, w.opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	w.adminCl, w.admin = cl, kadm.NewClient(cl)
	return w.admin, nil
}

// ClusterID returns the Kafka cluster id, or "" when Kafka does not answer
// before ctx ends.
func (w *Worker) ClusterID(ctx context.Context) string {
	w.adminMu.Lock()
	id := w.clusterID
	w.adminMu.Unlock()
	if id != "" {
		return id
	}
	adm, err := w.adminClient()
	if err != nil {
		return ""
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return ""
	}
	w.adminMu.Lock()
	w.clusterID = md.Cluster
	w.adminMu.Unlock()
	return md.Cluster
}

// Secrets returns the secret strings of every connector's configuration
// (for a log handler that removes them; see ScrubString).
func (w *Worker) Secrets() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.conns {
		out = append(out, m.secrets...)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}
