package herder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder/configlog"
	"github.com/txsink/txsink/connectors/herder/membership"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// How long a write waits to read itself back from the config topic.
const readBackTimeout = 30 * time.Second

// leaderWriter returns the config topic writer when this worker is the
// leader of a settled generation; otherwise a *ForwardError to the leader,
// or an ErrRebalance error when no leader is known.
func (h *Distributed) leaderWriter() (*configlog.Writer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.plan == nil || !h.stable {
		return nil, errorf(ErrRebalance, msgNoLeader)
	}
	if h.plan.Leader != h.memberID {
		if h.plan.LeaderURL == "" {
			return nil, errorf(ErrRebalance, msgNoLeader)
		}
		return nil, &ForwardError{URL: h.plan.LeaderURL, Target: "the leader"}
	}
	if h.writer == nil || h.writerOf != h.planGen {
		return nil, errorf(ErrRebalance, msgStale)
	}
	return h.writer, nil
}

// opLock returns the leader's write lock of a connector.
func (h *Distributed) opLock(name string) *sync.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.ops[name]
	if l == nil {
		l = &sync.Mutex{}
		h.ops[name] = l
	}
	return l
}

// change is what a leader operation writes.
type change struct {
	recs []configlog.Record
	// rebalance: the connector's units changed (created, deleted, task
	// count); the leader starts a rebalance to assign them.
	rebalance bool
}

// write runs a leader operation on one connector: under its write lock,
// build computes the records from the connector's current state (exists
// is false when it has none), they are written in one transaction, and
// the write returns once this worker has read them back.
func (h *Distributed) write(ctx context.Context, name string, build func(cur configlog.Connector, exists bool) (change, error)) error {
	w, err := h.leaderWriter()
	if err != nil {
		return err
	}
	l := h.opLock(name)
	l.Lock()
	defer l.Unlock()
	cur, exists := h.cfgLog.Connector(name)
	ch, err := build(cur, exists)
	if err != nil || len(ch.recs) == 0 {
		return err
	}
	off, err := w.Write(ctx, ch.recs)
	if errors.Is(err, configlog.ErrFenced) {
		// A newer producer of the cluster's transactional id exists: a
		// new leader, or a producer that is not the cluster's (its
		// records are not signed, so they are ignored). Either way a
		// rebalance gives the cluster a leader whose writer is current.
		h.group.Rejoin()
		return errorf(ErrRebalance, msgStale)
	}
	if err != nil {
		return fmt.Errorf("writing the config topic: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	if err := h.cfgLog.WaitFor(rctx, off+1); err != nil {
		return err
	}
	if ch.rebalance {
		h.group.Rejoin()
	}
	return nil
}

// taskCount is the number of tasks a connector has in a target state.
func (h *Distributed) taskCount(cfg map[string]string, target engine.TargetState) int {
	if target == engine.TargetStopped {
		return 0
	}
	return engine.TasksMax(h.reg, cfg)
}

// validate checks a configuration (resolved, see validate) and refuses
// secrets in clear: they would be stored in the config topic.
func (h *Distributed) validate(ctx context.Context, name string, raw map[string]string) (map[string]string, error) {
	cfg, err := validate(ctx, h.log, h.reg, h.opt.Engine.Resolve, name, raw)
	if err != nil {
		return nil, err
	}
	var errs config.Errors
	for _, k := range secrets.InClear(h.reg, cfg) {
		errs = append(errs, config.FieldError{Name: k, Msg: "distributed mode stores configurations in Kafka's config topic, where secrets must not go in clear: give a config provider reference instead, such as ${file:/path/secrets.properties:key}, ${env:NAME} or ${dir:/path:file} (worker setting config.providers; a password inside a URL goes to the password setting)"})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// Connectors lists the connector names, sorted.
func (h *Distributed) Connectors(context.Context) ([]string, error) {
	if err := h.open(); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(h.cfgLog.Connectors())), nil
}

func (h *Distributed) open() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	return nil
}

// lookup returns a connector's shared state or a not-found error.
func (h *Distributed) lookup(name string) (configlog.Connector, error) {
	if err := h.open(); err != nil {
		return configlog.Connector{}, err
	}
	c, ok := h.cfgLog.Connector(name)
	if !ok {
		return configlog.Connector{}, notFound(name)
	}
	return c, nil
}

// Info returns a connector's configuration (with its config provider
// references, never resolved) and tasks.
func (h *Distributed) Info(_ context.Context, name string) (Info, error) {
	c, err := h.lookup(name)
	if err != nil {
		return Info{}, err
	}
	inf := Info{Name: name, Config: c.Config, Type: "sink", Tasks: []int{}}
	for i := range c.Tasks {
		inf.Tasks = append(inf.Tasks, i)
	}
	return inf, nil
}

// Create adds a connector in the initial target state, on the leader. Its
// configuration must hold its secrets as config provider references.
func (h *Distributed) Create(ctx context.Context, name string, raw map[string]string, initial engine.TargetState) (Info, error) {
	if _, err := h.leaderWriter(); err != nil {
		return Info{}, err
	}
	cfg, err := h.validate(ctx, name, raw)
	if err != nil {
		return Info{}, err
	}
	err = h.write(ctx, name, func(_ configlog.Connector, exists bool) (change, error) {
		if exists {
			return change{}, errorf(ErrExists, "Connector %s already exists", name)
		}
		now := time.Now()
		recs := []configlog.Record{configlog.PutConnector(name, cfg, now, now), configlog.PutTarget(name, initial)}
		recs = append(recs, configlog.PutTasks(name, cfg, h.taskCount(cfg, initial), 0)...)
		return change{recs: recs, rebalance: true}, nil
	})
	if err != nil {
		return Info{}, err
	}
	h.log.Info("connector created", "connector", name, "initial_state", initial)
	return h.Info(ctx, name)
}

// PutConfig creates the connector (created is true) or replaces its
// configuration, on the leader. A "[hidden]" placeholder keeps the stored
// value while the connector's host, port and user stay; a change of those
// that does not send the secret again is refused.
func (h *Distributed) PutConfig(ctx context.Context, name string, raw map[string]string) (Info, bool, error) {
	if _, err := h.leaderWriter(); err != nil {
		return Info{}, false, err
	}
	if _, ok := h.cfgLog.Connector(name); !ok {
		inf, err := h.Create(ctx, name, raw, engine.TargetRunning)
		if !errors.Is(err, ErrExists) {
			return inf, err == nil, err
		}
	}
	inf, err := h.reconfigure(ctx, name, secrets.Change{Replace: true, Set: raw})
	return inf, false, err
}

// PatchConfig merges patch into the connector's configuration (a nil
// value removes a setting), on the leader.
func (h *Distributed) PatchConfig(ctx context.Context, name string, patch map[string]*string) (Info, error) {
	return h.reconfigure(ctx, name, patchChange(patch))
}

func (h *Distributed) reconfigure(ctx context.Context, name string, chg secrets.Change) (Info, error) {
	err := h.write(ctx, name, func(cur configlog.Connector, exists bool) (change, error) {
		if !exists {
			return change{}, notFound(name)
		}
		next, dropped, _ := secrets.Bind(h.reg, identity(h.reg), name, cur.Config, chg, "")
		if len(dropped) > 0 {
			var errs config.Errors
			for _, k := range dropped {
				errs = append(errs, config.FieldError{Name: k, Msg: "the connector moves to another host, port, user or TLS mode: send this secret again (its config provider reference) instead of " + secrets.Hidden})
			}
			return change{}, errs
		}
		cfg, err := h.validate(ctx, name, next)
		if err != nil {
			return change{}, err
		}
		recs := []configlog.Record{configlog.PutConnector(name, cfg, cur.Created, time.Now())}
		n := h.taskCount(cfg, cur.Target)
		recs = append(recs, configlog.PutTasks(name, cfg, n, cur.Tasks)...)
		return change{recs: recs, rebalance: n != cur.Tasks}, nil
	})
	if err != nil {
		return Info{}, err
	}
	h.log.Info("connector reconfigured", "connector", name)
	return h.Info(ctx, name)
}

// Delete removes the connector from the cluster, on the leader; every
// worker stops its part. Its offsets stay in the sink.
func (h *Distributed) Delete(ctx context.Context, name string) error {
	var tasks int
	err := h.write(ctx, name, func(cur configlog.Connector, exists bool) (change, error) {
		if !exists {
			return change{}, notFound(name)
		}
		tasks = cur.Tasks
		return change{recs: configlog.DeleteConnector(name, cur.Tasks), rebalance: true}, nil
	})
	if err != nil {
		return err
	}
	h.stLog.Delete(name, tasks)
	h.log.Info("connector deleted", "connector", name)
	return nil
}

// Pause sets the connector's target state to PAUSED, on the leader.
func (h *Distributed) Pause(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetPaused)
}

// Resume sets the connector's target state to RUNNING, on the leader.
func (h *Distributed) Resume(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetRunning)
}

// Stop sets the connector's target state to STOPPED (no tasks), on the
// leader; its offsets may then be edited.
func (h *Distributed) Stop(ctx context.Context, name string) error {
	return h.setTarget(ctx, name, engine.TargetStopped)
}

func (h *Distributed) setTarget(ctx context.Context, name string, target engine.TargetState) error {
	err := h.write(ctx, name, func(cur configlog.Connector, exists bool) (change, error) {
		if !exists {
			return change{}, notFound(name)
		}
		if cur.Target == target {
			return change{}, nil
		}
		recs := []configlog.Record{configlog.PutTarget(name, target)}
		n := h.taskCount(cur.Config, target)
		if n != cur.Tasks {
			recs = append(recs, configlog.PutTasks(name, cur.Config, n, cur.Tasks)...)
		}
		return change{recs: recs, rebalance: n != cur.Tasks}, nil
	})
	if err == nil {
		h.log.Info("connector target state changed", "connector", name, "target_state", target)
	}
	return err
}

// Restart asks every worker that runs a part of the connector to restart
// it (and with includeTasks its tasks; onlyFailed: only FAILED ones),
// through a request in the config topic written by the leader, and returns
// the cluster's status with RESTARTING for what will be restarted. A
// connector that is not RUNNING by target is left alone.
func (h *Distributed) Restart(ctx context.Context, name string, includeTasks, onlyFailed bool) (engine.ConnectorStatus, error) {
	if _, err := h.leaderWriter(); err != nil {
		return engine.ConnectorStatus{}, err
	}
	st, err := h.Status(ctx, name)
	if err != nil {
		return st, err
	}
	if st.Target != engine.TargetRunning {
		return st, nil
	}
	restartConn := !onlyFailed || st.Connector.State == engine.StateFailed
	var tasks []int
	if includeTasks {
		for i, t := range st.Tasks {
			if !onlyFailed || t.State == engine.StateFailed {
				tasks = append(tasks, i)
			}
		}
	}
	if !restartConn && len(tasks) == 0 {
		return st, nil
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	err = h.write(ctx, name, func(_ configlog.Connector, exists bool) (change, error) {
		if !exists {
			return change{}, notFound(name)
		}
		return change{recs: []configlog.Record{configlog.PutRestart(name, hex.EncodeToString(id), includeTasks, onlyFailed)}}, nil
	})
	if err != nil {
		return st, err
	}
	if restartConn {
		st.Connector.State = engine.StateRestarting
		for i := range st.Tasks {
			st.Tasks[i].State = engine.StateRestarting
		}
	}
	for _, i := range tasks {
		st.Tasks[i].State = engine.StateRestarting
	}
	return st, nil
}

// RestartTask restarts one task of a RUNNING or PAUSED connector (a
// paused task starts again paused) on the worker that runs it: here, or a
// *ForwardError to that worker. ErrNotFound for a STOPPED connector (it has
// no tasks).
func (h *Distributed) RestartTask(ctx context.Context, name string, task int) error {
	c, err := h.lookup(name)
	if err != nil {
		return err
	}
	if task < 0 || task >= c.Tasks {
		return errorf(ErrNotFound, "Unknown task: %s-%d", name, task)
	}
	h.mu.Lock()
	plan, me, stable := h.plan, h.memberID, h.stable
	a := h.applied[name]
	h.mu.Unlock()
	if plan == nil || !stable {
		return errorf(ErrRebalance, msgNoLeader)
	}
	owner, ok := plan.Owner(membership.Unit{Connector: name, Task: task})
	switch {
	case !ok:
		return errorf(ErrConflict, "Cannot restart task %s-%d: it is not assigned to a worker yet", name, task)
	case owner != me:
		return &ForwardError{URL: plan.Workers[owner].URL, Target: fmt.Sprintf("the worker running task %s-%d", name, task)}
	}
	if running, n := h.eng.Running(name); running && task < n {
		h.eng.RestartTask(name, task)
	} else {
		// The sink did not open here: open it again (its tasks with it).
		h.log.Info("restarting the connector's sink for a task restart", "connector", name, "task", task)
		h.eng.Halt(name)
		h.eng.Apply(ctx, name, engine.Config{Raw: c.Config, Target: c.Target, Partial: true, Assigned: a.tasks})
	}
	h.publish(name)
	return nil
}

// Offsets returns the offsets stored in the connector's sink (read by this
// worker, whichever runs the connector).
func (h *Distributed) Offsets(ctx context.Context, name string) ([]offsets.Position, error) {
	c, err := h.lookup(name)
	if err != nil {
		return nil, err
	}
	ps, err := h.eng.Offsets(ctx, name, c.Config)
	if err != nil {
		return nil, scrub(fmt.Errorf("reading offsets of %s: %w", name, err), h.Secrets())
	}
	return ps, nil
}

// AlterOffsets sets stored offsets of a STOPPED connector, on the leader.
func (h *Distributed) AlterOffsets(ctx context.Context, name string, positions []offsets.Position) error {
	return h.editOffsets(ctx, name, false, positions)
}

// ResetOffsets deletes every stored offset of a STOPPED connector, on the
// leader.
func (h *Distributed) ResetOffsets(ctx context.Context, name string) error {
	return h.editOffsets(ctx, name, true, nil)
}

// editOffsets edits the offsets of a connector that runs nowhere in the
// cluster: STOPPED by target, no task assigned to any worker, and (as
// Kafka Connect checks for sinks) no member left in its consumer group.
func (h *Distributed) editOffsets(ctx context.Context, name string, all bool, positions []offsets.Position) error {
	if _, err := h.leaderWriter(); err != nil {
		return err
	}
	l := h.opLock(name)
	l.Lock()
	defer l.Unlock()
	c, err := h.lookup(name)
	if err != nil {
		return err
	}
	h.mu.Lock()
	assigned := false
	if h.plan != nil {
		for _, a := range h.plan.Assigned {
			assigned = assigned || a.Connector == name && a.Task >= 0
		}
	}
	h.mu.Unlock()
	if c.Target != engine.TargetStopped || c.Tasks > 0 || assigned {
		return notStopped(name)
	}
	_, v, _ := h.reg.Validate(c.Config)
	group := config.ParseConnector(v).GroupID
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	dg, err := h.adm.DescribeGroups(gctx, group)
	cancel()
	if err != nil {
		return fmt.Errorf("describing the consumer group %s of %s: %w", group, name, err)
	}
	if d, ok := dg[group]; ok && d.Err == nil && len(d.Members) > 0 {
		return errorf(ErrConflict, "Offsets of %s cannot be modified while its consumer group %s still has %d active member(s); tasks that stopped leave it within the connector's session.timeout.ms: try again", name, group, len(d.Members))
	} else if ok && d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
		return fmt.Errorf("describing the consumer group %s of %s: %w", group, name, d.Err)
	}
	err = h.eng.EditOffsets(ctx, name, c.Config, all, positions)
	if errors.Is(err, offsets.ErrBusy) {
		return offsetsBusy(name)
	}
	if err != nil {
		return scrub(fmt.Errorf("editing offsets of %s: %w", name, err), h.Secrets())
	}
	return nil
}

// Secrets returns the secret strings of the connectors' configurations,
// resolved ones included (for the log scrubber).
func (h *Distributed) Secrets() []string {
	out := h.eng.Secrets()
	for _, c := range h.cfgLog.Connectors() {
		out = append(out, secrets.Of(h.reg, c.Config)...)
	}
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}
