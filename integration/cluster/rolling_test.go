package cluster

import (
	"context"
	"sort"
	"testing"
	"time"
)

// TestClusterRollingRestart (issue 16, acceptance 4): every worker in
// turn is stopped (SIGTERM) and started again under traffic, with
// Connect's default scheduled.rebalance.max.delay.ms (a departed worker's
// tasks wait for it, while its partitions move to the connector's other
// tasks at once). Every task runs again after each step, the table is
// exact, and the test reports the longest time any partition had no owner
// (from the tasks' "assigned and fenced" and "revoked" log lines).
func TestClusterRollingRestart(t *testing.T) {
	e := newEnv(t, 6, map[string]string{"scheduled.rebalance.max.delay.ms": "300000"})
	ws := e.start(3)
	a := ws[0]
	prod, stopProd := e.upstream(300)
	name := e.connectorName("rolling")
	must(t, a, 201, "POST", "/connectors", map[string]any{"name": name, "config": e.connector("exactly_once", 6)})
	// Settled: each worker runs two tasks, as it says itself, each task
	// owning a partition.
	settled := func(what string) {
		t.Helper()
		for _, w := range ws {
			waitStatus(t, w, name, 2*time.Minute, what, func(st apiStatus) bool {
				ok, per := runningOn(st, 6, ids(ws...)...)
				if !ok || len(per) != 3 {
					return false
				}
				for _, ts := range st.Tasks {
					if ts.WorkerID == w.ID && (ts.Txsink == nil || len(ts.Txsink.Partitions) != 1) {
						return false
					}
				}
				return true
			})
		}
	}
	settled("six tasks on three workers")
	e.waitCaughtUp(name, prod, time.Minute)
	start := time.Now()
	for i, w := range ws {
		other := ws[(i+1)%len(ws)]
		stopped := time.Now()
		if !w.Stop(time.Minute) {
			t.Fatalf("%s did not stop within a minute of SIGTERM", w.ID)
		}
		stopTook := time.Since(stopped)
		// Its two tasks wait for it (KIP-415's delay) while the four
		// others hold every partition.
		waitStatus(t, other, name, time.Minute, "the stopped worker's tasks waiting for it", func(st apiStatus) bool {
			running, waiting := 0, 0
			for _, ts := range st.Tasks {
				switch {
				case ts.State == "RUNNING" && ts.WorkerID != w.ID:
					running++
				case ts.State == "UNASSIGNED":
					waiting++
				}
			}
			return running == 4 && waiting == 2
		})
		time.Sleep(2 * time.Second) // a restart takes a while
		if err := w.Start(""); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := w.WaitHealthy(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		settled("all tasks running again after restarting " + w.ID)
		t.Logf("restarted %s: stop took %v, back with its tasks after %v", w.ID, stopTook.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	}
	end := time.Now()
	e.drain(name, prod, stopProd, 3*time.Minute)
	r := e.check(name)
	if !r.OK() || r.Rows != r.Committed {
		t.Fatalf("not exact after the rolling restart:\n%s", reportText(r))
	}
	owns := ownerships(t, ws, e.topic, time.Now())
	g := gaps(owns, e.parts, start, end)
	var worst time.Duration
	var parts []int32
	for p := range g {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		d := g[p][1].Sub(g[p][0])
		worst = max(worst, d)
		t.Logf("partition %d: longest time without an owner %v", p, d.Round(time.Millisecond))
	}
	t.Logf("rolling restart of 3 workers in %v under traffic: exact (%d committed records, %d rows); the longest time any partition had no owner: %v",
		end.Sub(start).Round(time.Second), r.Committed, r.Rows, worst.Round(time.Millisecond))
}
