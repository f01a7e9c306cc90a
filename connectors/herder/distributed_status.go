package herder

import (
	"context"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder/membership"
)

// Status returns the cluster's view of the connector and of its tasks:
// each with the worker the current plan gives it to (worker_id, its
// advertised host:port) and the state that worker last wrote to the status
// topic (UNASSIGNED until it wrote one, and for what no worker runs: a
// unit waiting for its departed worker, or a rebalance under way). The
// tasks this worker runs show its engine's own view, with txsink's
// details (partitions, lag, in-doubt batches); Owners tells where the
// others run.
func (h *Distributed) Status(ctx context.Context, name string) (engine.ConnectorStatus, error) {
	c, err := h.lookup(name)
	if err != nil {
		return engine.ConnectorStatus{}, err
	}
	h.mu.Lock()
	plan, me := h.plan, h.memberID
	h.mu.Unlock()
	local, _ := h.eng.Status(ctx, name)
	localTasks := map[int]engine.TaskStatus{}
	for _, t := range local.Tasks {
		localTasks[t.ID] = t
	}
	owner := func(u membership.Unit) (member, worker string) {
		if plan == nil {
			return "", ""
		}
		m, ok := plan.Owner(u)
		if !ok {
			return "", ""
		}
		return m, plan.Workers[m].ID
	}
	st := engine.ConnectorStatus{Name: name, Type: "sink", Target: c.Target, InDoubt: local.InDoubt}
	m, w := owner(membership.Unit{Connector: name, Task: -1})
	switch rec, ok := h.stLog.Connector(name); {
	case m != "" && m == me && local.Connector.State != "":
		st.Connector = local.Connector
	case m != "" && ok && rec.WorkerID == w:
		st.Connector = engine.StateInfo{State: rec.State, Trace: rec.Trace, WorkerID: w}
	default:
		st.Connector = engine.StateInfo{State: engine.StateUnassigned, WorkerID: w}
		if w == "" && ok {
			st.Connector.WorkerID = rec.WorkerID
		}
	}
	for i := range c.Tasks {
		m, w := owner(membership.Unit{Connector: name, Task: i})
		if t, ok := localTasks[i]; ok && m != "" && m == me {
			st.Tasks = append(st.Tasks, t)
			continue
		}
		ts := engine.TaskStatus{ID: i, StateInfo: engine.StateInfo{State: engine.StateUnassigned, WorkerID: w}}
		rec, ok := h.stLog.Task(name, i)
		switch {
		case m != "" && ok && rec.WorkerID == w:
			ts.StateInfo = engine.StateInfo{State: rec.State, Trace: rec.Trace, WorkerID: w}
		case w == "" && ok:
			ts.WorkerID = rec.WorkerID
		}
		st.Tasks = append(st.Tasks, ts)
	}
	return st, nil
}

// Owners returns the REST URLs of the other workers that run the
// connector's own unit (connector, "" when this worker or none does) and
// its tasks (by id), for the REST layer, which asks them for the details
// only they have (partitions, lag, in-doubt batches).
func (h *Distributed) Owners(name string) (connector string, tasks map[int]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tasks = map[int]string{}
	if h.plan == nil {
		return "", tasks
	}
	for _, a := range h.plan.Assigned {
		if a.Connector != name || a.Member == h.memberID {
			continue
		}
		if a.Task < 0 {
			connector = h.plan.Workers[a.Member].URL
		} else {
			tasks[a.Task] = h.plan.Workers[a.Member].URL
		}
	}
	return connector, tasks
}
