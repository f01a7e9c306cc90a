package cluster

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestClusterKillAndJoin (issue 16, acceptance 2): kill -9 one of three
// workers in the middle of a stream: its tasks run on the others within
// the session timeout and one rebalance (the test reports the time), and
// its partitions are taken over; a fourth worker then takes some tasks;
// the table is exact.
func TestClusterKillAndJoin(t *testing.T) {
	e := newEnv(t, 6, nil)
	ws := e.start(3)
	a, b, c := ws[0], ws[1], ws[2]
	prod, stopProd := e.upstream(300)
	name := e.connectorName("failover")
	must(t, a, 201, "POST", "/connectors", map[string]any{"name": name, "config": e.connector("exactly_once", 6)})
	st := waitStatus(t, a, name, 90*time.Second, "six tasks on three workers", func(st apiStatus) bool {
		ok, per := runningOn(st, 6, ids(ws...)...)
		return ok && len(per) == 3
	})
	var onB []int
	for _, ts := range st.Tasks {
		if ts.WorkerID == b.ID {
			onB = append(onB, ts.ID)
		}
	}
	// Mid-stream: everything acknowledged so far is in, and more is
	// acknowledged than the sink holds (records in flight); and the
	// worker to kill owns partitions (the first rebalances of six tasks
	// may leave a worker without any for a while): the kill must take
	// some away for the test to tell.
	e.waitCaughtUp(name, prod, time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		fr, _ := prod.Snapshot()
		now := time.Now()
		owned := partitionsOf(ownerships(t, ws, e.topic, now), b.Index, now)
		if len(owned) > 0 && !e.caughtUp(name, fr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within a minute, no moment when the producer had acknowledged more than the sink holds while %s owned partitions (it owns %v): no stream to kill a worker in", b.ID, owned)
		}
	}

	killed := time.Now()
	b.Kill()
	st = waitStatus(t, a, name, 2*time.Minute, "the killed worker's tasks running elsewhere", func(st apiStatus) bool {
		ok, _ := runningOn(st, 6, a.ID, c.ID)
		return ok
	})
	tasksMoved := time.Since(killed)
	var parts []int32
	var partsMoved time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for {
		owns := ownerships(t, ws, e.topic, time.Now())
		parts = partitionsOf(owns, b.Index, killed)
		partsMoved = 0
		missing := int32(-1)
		for _, p := range parts {
			next := firstOwnedAfter(owns, p, killed, b.Index)
			if next.IsZero() {
				missing = p
				break
			}
			partsMoved = max(partsMoved, next.Sub(killed))
		}
		if missing < 0 && len(parts) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d of the killed worker (of %v) has no new owner", missing, parts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("kill -9 of %s (tasks %v, partitions %v): its tasks RUNNING elsewhere after %v; its partitions assigned and fenced elsewhere after %v (cluster session.timeout.ms %s, connector session.timeout.ms 6000)",
		b.ID, onB, parts, tasksMoved.Round(time.Millisecond), partsMoved.Round(time.Millisecond), e.cl.Setting("session.timeout.ms"))

	// A fourth worker takes some tasks.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := e.cl.Add(ctx)
	st = waitStatus(t, a, name, 2*time.Minute, "the new worker running tasks", func(st apiStatus) bool {
		ok, per := runningOn(st, 6, a.ID, c.ID, d.ID)
		return ok && per[d.ID] > 0
	})
	_, per := runningOn(st, 6, a.ID, c.ID, d.ID)
	t.Logf("after the fourth worker joined: tasks per worker %v", per)

	e.drain(name, prod, stopProd, 3*time.Minute)
	r := e.check(name)
	if !r.OK() || r.Rows != r.Committed {
		t.Fatalf("not exact:\n%s", reportText(r))
	}
	t.Logf("exact: %d committed records, %d rows", r.Committed, r.Rows)
}

// partitionsOf returns the partitions a worker owned at a moment.
func partitionsOf(owns []ownership, worker int, at time.Time) []int32 {
	var out []int32
	for _, o := range owns {
		if o.worker == worker && !o.from.After(at) && !o.till.Before(at) && !slices.Contains(out, o.partition) {
			out = append(out, o.partition)
		}
	}
	slices.Sort(out)
	return out
}

// firstOwnedAfter returns when a worker other than except was first
// assigned the partition after a moment (zero: never).
func firstOwnedAfter(owns []ownership, p int32, after time.Time, except int) time.Time {
	var first time.Time
	for _, o := range owns {
		if o.partition == p && o.worker != except && o.from.After(after) && (first.IsZero() || o.from.Before(first)) {
			first = o.from
		}
	}
	return first
}
