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

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// StandaloneOptions configure a Standalone herder.
type StandaloneOptions struct {
	// DataDir holds the state file; it is created if missing.
	DataDir string
	// Engine configures the engine that runs the connectors; its Log is
	// the herder's too.
	Engine engine.Options
}

// Standalone is the standalone herder: it keeps named connectors'
// configurations, target states and last task states in a data directory,
// restores them when it starts again, and has the engine run them on this
// worker. Its methods are safe for concurrent use; operations on one
// connector are serialized.
//
// Pause and stop both stop the connector's tasks and close its sink (they
// differ in what the status shows and in that offsets may only be edited
// while STOPPED). Unlike Kafka Connect, a PAUSED txsink connector does not
// stay in its consumer group: its partitions are released at once and the
// group is empty while it is paused.
//
// Locks, in the order they are taken: a connector's op lock (held for a
// whole operation on it, while the engine applies it), then storeMu
// (held while the state file is written), then mu (the connector map),
// then a connector's mu (its fields); the last three are held only to
// read or write fields, never while calling the engine or a logger. The
// engine calls back (StatusChanged, from its timers and task goroutines)
// without its own locks held and never takes an op lock, so it cannot
// deadlock with an operation that waits for it.
type Standalone struct {
	reg     *connectors.Registry
	eng     *engine.Engine
	resolve Resolve
	dir     string
	log     *slog.Logger

	mu      sync.Mutex // guards conns, closed, ready, storeEr
	conns   map[string]*entry
	closed  bool
	ready   bool
	storeEr error

	storeMu sync.Mutex // serializes writes of the state file
	bg      sync.WaitGroup
}

// entry is one connector's stored state.
type entry struct {
	name string
	op   sync.Mutex // serializes operations on this connector

	mu       sync.Mutex // guards the fields below
	raw      map[string]string
	target   engine.TargetState
	created  time.Time
	updated  time.Time
	deleted  bool
	secrets  []string
	tasksMax int
	// dropped, when not "", says which stored secret a configuration
	// change dropped (see reconfigure); the connector fails with it.
	dropped string
}

// NewStandalone creates the data directory if needed, loads the stored
// state and creates the engine. Call Start to run the stored connectors.
func NewStandalone(reg *connectors.Registry, opt StandaloneOptions) (*Standalone, error) {
	if opt.DataDir == "" {
		return nil, errors.New("connectors: worker data directory is required")
	}
	if opt.Engine.Log == nil {
		opt.Engine.Log = slog.Default()
	}
	h := &Standalone{reg: reg, dir: opt.DataDir, log: opt.Engine.Log, conns: map[string]*entry{}, resolve: opt.Engine.Resolve}
	if err := os.MkdirAll(opt.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("connectors: data directory: %w", err)
	}
	if fi, err := os.Stat(opt.DataDir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		h.log.Warn("the data directory is open to its group or to others; it holds connector passwords: make it private (chmod 700)", "data_dir", opt.DataDir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	if n, err := removeStaleTemps(opt.DataDir); err != nil {
		return nil, err
	} else if n > 0 {
		h.log.Info("removed temporary state files left by an interrupted write", "data_dir", opt.DataDir, "files", n)
	}
	st, err := loadState(opt.DataDir)
	if err != nil {
		return nil, err
	}
	if h.eng, err = engine.New(reg, opt.Engine, h); err != nil {
		return nil, err
	}
	for name, sc := range st.Connectors {
		m := &entry{name: name, raw: sc.Config, target: sc.Target, created: sc.CreatedAt, updated: sc.UpdatedAt, dropped: sc.SecretDropped}
		if m.target == "" {
			m.target = engine.TargetRunning
		}
		h.prepare(m)
		sn := engine.Snapshot{Connector: engine.StateInfo{State: sc.State, Trace: sc.Trace}}
		for _, t := range sc.Tasks {
			for len(sn.Tasks) <= t.ID {
				sn.Tasks = append(sn.Tasks, engine.StateInfo{State: engine.StateUnassigned})
			}
			sn.Tasks[t.ID] = engine.StateInfo{State: t.State, Trace: t.Trace}
		}
		h.conns[name] = m
		h.eng.Restore(name, m.config(), sn)
	}
	return h, nil
}

// prepare derives the cached parts of m from its raw configuration. The
// caller holds m.mu or is m's only user.
func (h *Standalone) prepare(m *entry) {
	m.secrets = secrets.Of(h.reg, m.raw)
	m.tasksMax = engine.TasksMax(h.reg, m.raw)
}

// config is what the engine runs for m.
func (m *entry) config() engine.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return engine.Config{Raw: maps.Clone(m.raw), Target: m.target, Blocked: m.dropped}
}

// Registry returns the sink registry.
func (h *Standalone) Registry() *connectors.Registry { return h.reg }

// StatusChanged implements engine.Listener: the engine changed a state
// on its own, which the state file records.
func (h *Standalone) StatusChanged(string) {
	if err := h.persist(); err != nil {
		h.log.Error("writing worker state", "err", err)
	}
}

var _ engine.Listener = (*Standalone)(nil)

// Start runs every stored connector whose target state is RUNNING; PAUSED
// and STOPPED ones stay so. A connector that fails to open is marked FAILED
// and retried under the restart policy. Start returns once every
// connector was tried.
func (h *Standalone) Start(ctx context.Context) error {
	all := h.entries()
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, m := range all {
		m.op.Lock()
		cfg := m.config()
		h.eng.Apply(ctx, m.name, cfg)
		m.op.Unlock()
		h.log.Info("connector restored", "connector", m.name, "target_state", cfg.Target)
	}
	// Ready once the restored state is written: a readiness probe (or a
	// test) that looks at the data directory then finds no write in
	// progress.
	err := h.persist()
	h.mu.Lock()
	h.ready = true
	h.mu.Unlock()
	return err
}

// Close stops every connector's tasks and closes their sinks without
// changing their stored target states, and waits for the operations in
// flight and the herder's background work. Prepared batches left by a
// task that is stopped in the middle of a round are resolved by the next
// owner's recovery.
func (h *Standalone) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.ready = false
	h.mu.Unlock()
	h.eng.Close()
	// Wait for the operations in flight: each holds its connector's op
	// lock; those that take it later find the herder closed.
	for _, m := range h.entries() {
		m.op.Lock()
		m.op.Unlock()
	}
	h.bg.Wait()
}

// Ready reports whether the worker finished starting and is not shutting
// down, and the last error writing its state (nil when fine).
func (h *Standalone) Ready(context.Context) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.storeEr != nil {
		return h.ready && !h.closed, fmt.Errorf("Worker cannot write its state to the data directory: %w", h.storeEr)
	}
	return h.ready && !h.closed, nil
}

// ClusterID returns the Kafka cluster id, or "" when Kafka does not answer
// before ctx ends.
func (h *Standalone) ClusterID(ctx context.Context) string { return h.eng.ClusterID(ctx) }

// Waiting lists the waiting causes of the tasks that run on this worker
// (GET /health).
func (h *Standalone) Waiting() []engine.TaskWaiting { return h.eng.Waiting() }

// Connectors lists the connector names, sorted.
func (h *Standalone) Connectors(context.Context) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.conns)), nil
}

// entries returns every connector.
func (h *Standalone) entries() []*entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Values(h.conns))
}

// lookup returns the connector or a not-found error.
func (h *Standalone) lookup(name string) (*entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	m, ok := h.conns[name]
	if !ok {
		return nil, notFound(name)
	}
	return m, nil
}

// lockConn looks the connector up and takes its operation lock. The
// caller must unlock m.op.
func (h *Standalone) lockConn(name string) (*entry, error) {
	m, err := h.lookup(name)
	if err != nil {
		return nil, err
	}
	m.op.Lock()
	m.mu.Lock()
	deleted := m.deleted
	m.mu.Unlock()
	if closed := h.isClosed(); deleted || closed {
		m.op.Unlock()
		if closed {
			return nil, ErrClosed
		}
		return nil, notFound(name)
	}
	return m, nil
}

func (h *Standalone) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Create adds a connector and brings it to the initial target state. It
// returns config.Errors when the configuration is invalid and an error
// wrapping ErrExists when the name is taken. A connector whose sink cannot
// be opened is still created; its status is FAILED with the reason, and
// the restart policy retries it.
func (h *Standalone) Create(ctx context.Context, name string, raw map[string]string, initial engine.TargetState) (Info, error) {
	cfg, err := validate(ctx, h.log, h.reg, h.resolve, name, raw)
	if err != nil {
		return Info{}, err
	}
	now := time.Now().UTC()
	m := &entry{name: name, raw: cfg, target: initial, created: now, updated: now}
	h.prepare(m)
	m.op.Lock()
	defer m.op.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return Info{}, ErrClosed
	}
	if _, ok := h.conns[name]; ok {
		h.mu.Unlock()
		return Info{}, errorf(ErrExists, "Connector %s already exists", name)
	}
	h.conns[name] = m
	h.mu.Unlock()
	h.eng.Restore(name, m.config(), engine.Snapshot{Connector: engine.StateInfo{State: engine.StateUnassigned}})
	if err := h.persist(); err != nil {
		h.mu.Lock()
		delete(h.conns, name)
		h.mu.Unlock()
		h.eng.Remove(name)
		return Info{}, err
	}
	h.log.Info("connector created", "connector", name, "initial_state", initial)
	h.eng.Apply(ctx, name, m.config())
	return h.info(m), h.persist()
}

// PutConfig creates the connector (created=true) or replaces its
// configuration and restarts its tasks with the new one when it runs.
// A value Hidden ("[hidden]", what GET …/config shows for a secret, also
// inside a URL) stands for the stored secret, which is kept while the
// connector's identity (host, port, user) stays the same, and dropped
// otherwise (see PatchConfig).
func (h *Standalone) PutConfig(ctx context.Context, name string, raw map[string]string) (info Info, created bool, err error) {
	change := secrets.Change{Replace: true, Set: raw}
	if _, err := h.lookup(name); errors.Is(err, ErrNotFound) {
		info, err := h.Create(ctx, name, raw, engine.TargetRunning)
		if errors.Is(err, ErrExists) { // lost a race with another create
			info, err = h.reconfigure(ctx, name, change)
			return info, false, err
		}
		return info, err == nil, err
	}
	info, err = h.reconfigure(ctx, name, change)
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
func (h *Standalone) PatchConfig(ctx context.Context, name string, patch map[string]*string) (Info, error) {
	return h.reconfigure(ctx, name, patchChange(patch))
}

// reconfigure applies change to the connector's configuration under its
// lock: read, merge, bind secrets, validate, store, restart.
func (h *Standalone) reconfigure(ctx context.Context, name string, change secrets.Change) (Info, error) {
	m, err := h.lockConn(name)
	if err != nil {
		return Info{}, err
	}
	defer m.op.Unlock()
	m.mu.Lock()
	old, dropped := maps.Clone(m.raw), m.dropped
	m.mu.Unlock()
	next, droppedKeys, dropped := secrets.Bind(h.reg, identity(h.reg), name, old, change, dropped)
	cfg, err := validate(ctx, h.log, h.reg, h.resolve, name, next)
	if err != nil {
		return Info{}, err
	}
	h.eng.Halt(name)
	m.mu.Lock()
	m.raw = cfg
	m.dropped = dropped
	m.updated = time.Now().UTC()
	h.prepare(m)
	m.mu.Unlock()
	h.log.Info("connector reconfigured", "connector", name)
	if len(droppedKeys) > 0 {
		h.log.Warn("stored secrets dropped: the connector moved to another host, port, user or TLS mode without them", "connector", name, "settings", droppedKeys, "connector_fails", dropped != "")
	}
	if err := h.persist(); err != nil {
		return Info{}, err
	}
	h.eng.Apply(ctx, name, m.config())
	return h.info(m), h.persist()
}

// Delete stops the connector and removes it. Its offsets stay in the sink.
func (h *Standalone) Delete(ctx context.Context, name string) error {
	m, err := h.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	h.eng.Remove(name)
	m.mu.Lock()
	m.deleted = true
	m.mu.Unlock()
	h.mu.Lock()
	delete(h.conns, name)
	h.mu.Unlock()
	h.log.Info("connector deleted", "connector", name)
	return h.persist()
}

// Pause stops the connector's tasks and keeps it PAUSED. Idempotent.
func (h *Standalone) Pause(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetPaused)
}

// Resume runs a PAUSED or STOPPED connector again. Idempotent.
func (h *Standalone) Resume(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetRunning)
}

// Stop stops the connector's tasks and keeps it STOPPED (no tasks); its
// offsets may then be edited. Idempotent.
func (h *Standalone) Stop(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetStopped)
}

func (h *Standalone) setTarget(ctx context.Context, name string, target engine.TargetState) error {
	m, err := h.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	running, _ := h.eng.Running(name)
	m.mu.Lock()
	same := m.target == target
	m.target = target
	m.updated = time.Now().UTC()
	m.mu.Unlock()
	if same && (target == engine.TargetStopped || running) {
		return nil
	}
	if err := h.persist(); err != nil {
		return err
	}
	h.log.Info("connector target state changed", "connector", name, "target_state", target)
	h.eng.Apply(ctx, name, m.config())
	return h.persist()
}

// Restart restarts the connector (closing and reopening its sink, which
// restarts its tasks too: txsink tasks share the connector's sink) and,
// with includeTasks, its tasks; onlyFailed limits both to FAILED ones. It
// returns the status with RESTARTING for what will be restarted; the
// restart itself runs in the background. A connector that is not RUNNING
// by target is left alone (as in Kafka Connect).
func (h *Standalone) Restart(ctx context.Context, name string, includeTasks, onlyFailed bool) (engine.ConnectorStatus, error) {
	if _, err := h.lookup(name); err != nil {
		return engine.ConnectorStatus{}, err
	}
	restartConn, tasks := h.eng.MarkRestarting(name, includeTasks, onlyFailed)
	st, err := h.Status(ctx, name)
	if err != nil {
		return st, err
	}
	if !restartConn && len(tasks) == 0 {
		return st, nil
	}
	if !h.goBG() {
		return st, ErrClosed
	}
	go func() {
		defer h.bg.Done()
		m, err := h.lockConn(name)
		if err != nil {
			return
		}
		defer m.op.Unlock()
		if restartConn {
			h.log.Info("restarting connector", "connector", name)
			h.eng.Halt(name)
			h.eng.Apply(context.Background(), name, m.config())
			return
		}
		for _, i := range tasks {
			h.eng.RestartTask(name, i)
		}
	}()
	return st, nil
}

// RestartTask restarts one task of a RUNNING or PAUSED connector
// (synchronously), as Kafka Connect does: a task of a PAUSED connector
// starts again paused. When the connector's sink could not open (its
// tasks are FAILED), the restart opens it again. A STOPPED connector has
// no tasks: ErrNotFound, as in Connect's distributed herder.
func (h *Standalone) RestartTask(ctx context.Context, name string, task int) error {
	m, err := h.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	running, n := h.eng.Running(name)
	if task < 0 || task >= n {
		return errorf(ErrNotFound, "Unknown task: %s-%d", name, task)
	}
	m.mu.Lock()
	target := m.target
	m.mu.Unlock()
	switch {
	case running:
		h.eng.RestartTask(name, task)
	case target != engine.TargetStopped:
		h.log.Info("restarting the connector's sink for a task restart", "connector", name, "task", task)
		h.eng.Halt(name)
		h.eng.Apply(ctx, name, m.config())
	default:
		return errorf(ErrConflict, "Cannot restart task %s-%d: the connector is not running", name, task)
	}
	return h.persist()
}

// goBG registers background work; it returns false once the herder is
// closing (Close waits for registered work).
func (h *Standalone) goBG() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.bg.Add(1)
	return true
}

// persist writes every connector's configuration and states.
func (h *Standalone) persist() error {
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	st := &storedState{Version: 1, Connectors: map[string]*storedConnector{}}
	for _, m := range h.entries() {
		m.mu.Lock()
		sc := &storedConnector{Config: maps.Clone(m.raw), Target: m.target, SecretDropped: m.dropped, CreatedAt: m.created, UpdatedAt: m.updated}
		m.mu.Unlock()
		if sn, ok := h.eng.Snapshot(m.name); ok {
			sc.State, sc.Trace = sn.Connector.State, sn.Connector.Trace
			for i, t := range sn.Tasks {
				sc.Tasks = append(sc.Tasks, storedTask{ID: i, State: t.State, Trace: t.Trace})
			}
		}
		st.Connectors[m.name] = sc
	}
	err := saveState(h.dir, st)
	h.mu.Lock()
	h.storeEr = err
	h.mu.Unlock()
	if err != nil {
		h.log.Error("writing worker state failed", "err", err)
	}
	return err
}

// Info returns the connector's description.
func (h *Standalone) Info(_ context.Context, name string) (Info, error) {
	m, err := h.lookup(name)
	if err != nil {
		return Info{}, err
	}
	return h.info(m), nil
}

func (h *Standalone) info(m *entry) Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	inf := Info{Name: m.name, Config: maps.Clone(m.raw), Type: "sink", Tasks: []int{}}
	if m.target != engine.TargetStopped {
		for i := 0; i < m.tasksMax; i++ {
			inf.Tasks = append(inf.Tasks, i)
		}
	}
	return inf
}

// Config returns the connector's stored configuration, unredacted.
func (h *Standalone) Config(name string) (map[string]string, error) {
	inf, err := h.Info(context.Background(), name)
	return inf.Config, err
}

// TargetState returns the connector's target state.
func (h *Standalone) TargetState(name string) (engine.TargetState, error) {
	m, err := h.lookup(name)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.target, nil
}

// Status returns the connector's and its tasks' states. The partitions'
// lag and the in-doubt batches are looked up within a few seconds; when
// Kafka or the sink does not answer in time they are left unknown.
func (h *Standalone) Status(ctx context.Context, name string) (engine.ConnectorStatus, error) {
	m, err := h.lookup(name)
	if err != nil {
		return engine.ConnectorStatus{}, err
	}
	st, ok := h.eng.Status(ctx, name)
	if !ok {
		return engine.ConnectorStatus{}, notFound(name)
	}
	m.mu.Lock()
	st.Target = m.target
	m.mu.Unlock()
	return st, nil
}

// Offsets returns the offsets stored in the sink. It works in any state;
// while the connector is not running it opens the sink for the read.
func (h *Standalone) Offsets(ctx context.Context, name string) ([]offsets.Position, error) {
	m, err := h.lookup(name)
	if err != nil {
		return nil, err
	}
	var ps []offsets.Position
	err = h.withConfig(m, func(raw map[string]string) error {
		var err error
		ps, err = h.eng.Offsets(ctx, name, raw)
		return err
	})
	if err != nil {
		return nil, h.scrub(m, fmt.Errorf("reading offsets of %s: %w", name, err))
	}
	return ps, nil
}

// AlterOffsets sets the stored offsets of the listed partitions (Next ==
// offsets.Unset clears one, so offsets.initial applies to it again) in one
// sink transaction that also bumps their fences. The connector must be
// STOPPED. The consumer group's committed offsets, a mirror for lag
// tooling, are set to the same positions afterwards (best effort).
func (h *Standalone) AlterOffsets(ctx context.Context, name string, positions []offsets.Position) error {
	return h.editOffsets(ctx, name, false, positions)
}

// ResetOffsets deletes every stored offset of the connector in one sink
// transaction; the next run starts from offsets.initial. The connector
// must be STOPPED. The consumer group's committed offsets are deleted
// afterwards (best effort).
func (h *Standalone) ResetOffsets(ctx context.Context, name string) error {
	return h.editOffsets(ctx, name, true, nil)
}

func (h *Standalone) editOffsets(ctx context.Context, name string, all bool, positions []offsets.Position) error {
	m, err := h.lockConn(name)
	if err != nil {
		return err
	}
	defer m.op.Unlock()
	running, _ := h.eng.Running(name)
	m.mu.Lock()
	stopped := m.target == engine.TargetStopped && !running
	m.mu.Unlock()
	if !stopped {
		return notStopped(name)
	}
	err = h.withConfig(m, func(raw map[string]string) error {
		return h.eng.EditOffsets(ctx, name, raw, all, positions)
	})
	if err != nil {
		if errors.Is(err, offsets.ErrBusy) {
			return offsetsBusy(name)
		}
		return h.scrub(m, fmt.Errorf("editing offsets of %s: %w", name, err))
	}
	return nil
}

// withConfig runs fn, an engine operation on the connector's sink, with
// the connector's configuration. It fails with ErrSecretDropped instead
// when the connector does not run and a configuration change dropped the
// secret its sink needs.
func (h *Standalone) withConfig(m *entry, fn func(raw map[string]string) error) error {
	m.mu.Lock()
	raw, dropped := maps.Clone(m.raw), m.dropped
	m.mu.Unlock()
	if running, _ := h.eng.Running(m.name); !running && dropped != "" {
		return &opError{kind: ErrSecretDropped, msg: dropped}
	}
	return fn(raw)
}

func (h *Standalone) scrub(m *entry, err error) error {
	m.mu.Lock()
	secs := m.secrets
	m.mu.Unlock()
	return scrub(err, secs)
}

// Secrets returns the secret strings of every connector's configuration
// (for a log handler that removes them; see secrets.ScrubString).
func (h *Standalone) Secrets() []string {
	out := h.eng.Secrets()
	for _, m := range h.entries() {
		m.mu.Lock()
		out = append(out, m.secrets...)
		m.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// ActiveTopics returns, sorted, the topics from which the connector's
// committed rounds wrote records since the last ResetActiveTopics (Kafka
// Connect's active topics). They are kept in memory; ctx is not used.
func (h *Standalone) ActiveTopics(_ context.Context, name string) ([]string, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	ts, ok := h.eng.ActiveTopics(name)
	if !ok {
		return nil, notFound(name)
	}
	return ts, nil
}

// ResetActiveTopics empties the connector's set of active topics; ctx is
// not used.
func (h *Standalone) ResetActiveTopics(_ context.Context, name string) error {
	if _, err := h.lookup(name); err != nil {
		return err
	}
	if !h.eng.ResetActiveTopics(name) {
		return notFound(name)
	}
	return nil
}

// RecentRounds returns the connector's last rounds (up to 20, all tasks),
// newest first. They are kept in memory since the worker started; ctx is
// not used.
func (h *Standalone) RecentRounds(_ context.Context, name string) ([]engine.RoundTiming, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	rs, ok := h.eng.RecentRounds(name)
	if !ok {
		return nil, notFound(name)
	}
	return rs, nil
}
