package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

// TestClusterAnyWorker (issue 16, acceptance 1): three workers; a
// connector created through A runs its six tasks spread over A, B and C;
// every worker answers GET, status and offsets the same; PUT, pause,
// resume, stop, offsets and delete through B or C act on the cluster; the
// table is exact.
func TestClusterAnyWorker(t *testing.T) {
	e := newEnv(t, 6, nil)
	ws := e.start(3)
	a, b, c := ws[0], ws[1], ws[2]
	prod, stopProd := e.upstream(300)
	name := e.connectorName("any")
	must(t, a, 201, "POST", "/connectors", map[string]any{"name": name, "config": e.connector("exactly_once", 6)})
	st := waitStatus(t, a, name, 90*time.Second, "six tasks running, two on each worker", func(st apiStatus) bool {
		ok, per := runningOn(st, 6, ids(ws...)...)
		return ok && st.Connector.State == "RUNNING" && per[a.ID] == 2 && per[b.ID] == 2 && per[c.ID] == 2
	})
	_, per := runningOn(st, 6, ids(ws...)...)
	t.Logf("created through %s: tasks per worker %v, the connector on %s", a.ID, per, st.Connector.WorkerID)

	// Every worker answers the same, and shows each task's details (its
	// partition) as the worker running it sees them.
	sameEverywhere(t, ws, "/connectors", "/connectors/"+name, "/connectors/"+name+"/config", "/connectors/"+name+"/tasks")
	sameStatus(t, ws, name)
	for _, w := range ws {
		waitStatus(t, w, name, 30*time.Second, "every task's partition shown", func(st apiStatus) bool {
			seen := map[int32]bool{}
			for _, ts := range st.Tasks {
				if ts.Txsink == nil || len(ts.Txsink.Partitions) != 1 {
					return false
				}
				seen[ts.Txsink.Partitions[0].Partition] = true
			}
			return len(seen) == 6
		})
	}
	e.waitCaughtUp(name, prod, time.Minute)
	sameEverywhere(t, ws[:1], "/connectors/"+name+"/offsets")

	// A configuration change through B: every worker shows it.
	cfg := e.connector("exactly_once", 6)
	cfg["batch.max.records"] = "400"
	must(t, b, 200, "PUT", "/connectors/"+name+"/config", cfg)
	for _, w := range ws {
		waitConfig(t, w, name, "batch.max.records", "400")
	}
	// Pause through C, resume through B.
	must(t, c, 202, "PUT", "/connectors/"+name+"/pause", nil)
	for _, w := range ws {
		waitStatus(t, w, name, time.Minute, "paused", func(st apiStatus) bool { return allTasks(st, 6, "PAUSED") && st.Connector.State == "PAUSED" })
	}
	must(t, b, 202, "PUT", "/connectors/"+name+"/resume", nil)
	for _, w := range ws {
		waitStatus(t, w, name, time.Minute, "running again", func(st apiStatus) bool { ok, _ := runningOn(st, 6, ids(ws...)...); return ok })
	}
	e.drain(name, prod, stopProd, 2*time.Minute)
	if r := e.check(name); !r.OK() || r.Rows != r.Committed {
		t.Fatalf("not exact after the operations:\n%s", reportText(r))
	} else {
		t.Logf("exact: %d committed records, %d rows", r.Committed, r.Rows)
	}

	// Stop through C; offsets edited through B once the connector runs
	// nowhere; every worker reads the same offsets.
	must(t, c, 204, "PUT", "/connectors/"+name+"/stop", nil)
	for _, w := range ws {
		waitStatus(t, w, name, time.Minute, "stopped", func(st apiStatus) bool { return st.Connector.State == "STOPPED" && len(st.Tasks) == 0 })
	}
	var before map[string]any
	_ = json.Unmarshal([]byte(must(t, a, 200, "GET", "/connectors/"+name+"/offsets", nil)), &before)
	edit := map[string]any{"offsets": []any{map[string]any{
		"partition": map[string]any{"kafka_topic": e.topic, "kafka_partition": 5},
		"offset":    map[string]any{"kafka_offset": 1},
	}}}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := do(t, b, "PATCH", "/connectors/"+name+"/offsets", edit)
		if code == 200 {
			break
		}
		// The tasks' consumer group empties within the session timeout.
		if code != 409 || time.Now().After(deadline) {
			t.Fatalf("PATCH offsets through B: %d %s", code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	off := sameEverywhere(t, ws, "/connectors/"+name+"/offsets")
	if !strings.Contains(off, fmt.Sprintf(`"kafka_partition":5},"offset":{"kafka_offset":1}`)) {
		t.Errorf("offsets after the PATCH through B: %s", off)
	}
	if got := e.sinkOffsets(name)[5]; got != 1 {
		t.Errorf("the sink's next_offset of partition 5 is %d, want 1", got)
	}

	// Delete through B: gone everywhere.
	must(t, b, 204, "DELETE", "/connectors/"+name, nil)
	for _, w := range ws {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, _ := do(t, w, "GET", "/connectors/"+name, nil)
			if code == 404 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still shows the deleted connector (%d)", w.ID, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// sameEverywhere requires every worker to answer GET path with the same
// body (retrying while they converge) and returns it.
func sameEverywhere(t *testing.T, ws []*harness.Worker, paths ...string) string {
	t.Helper()
	var last string
	for _, path := range paths {
		deadline := time.Now().Add(30 * time.Second)
		for {
			bodies := map[string][]string{}
			for _, w := range ws {
				code, b := do(t, w, "GET", path, nil)
				if code != 200 {
					t.Fatalf("GET %s on %s: %d %s", path, w.ID, code, b)
				}
				bodies[b] = append(bodies[b], w.ID)
			}
			if len(bodies) == 1 {
				for b := range bodies {
					last = b
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s differs between workers: %v", path, bodies)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return last
}

// sameStatus requires every worker to show the same states and worker ids
// (Kafka Connect's fields) for the connector and its tasks.
func sameStatus(t *testing.T, ws []*harness.Worker, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		seen := map[string][]string{}
		for _, w := range ws {
			st, ok := status(t, w, name)
			if !ok {
				t.Fatalf("no status on %s", w.ID)
			}
			for i := range st.Tasks {
				st.Tasks[i].Trace, st.Tasks[i].Txsink = "", nil
			}
			b, _ := json.Marshal(st)
			seen[string(b)] = append(seen[string(b)], w.ID)
		}
		if len(seen) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status differs between workers: %v", seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func allTasks(st apiStatus, n int, state string) bool {
	if len(st.Tasks) != n {
		return false
	}
	for _, ts := range st.Tasks {
		if ts.State != state {
			return false
		}
	}
	return true
}

func waitConfig(t *testing.T, w *harness.Worker, name, key, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cfg map[string]string
		_, b := do(t, w, "GET", "/connectors/"+name+"/config", nil)
		_ = json.Unmarshal([]byte(b), &cfg)
		if cfg[key] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s shows %s=%q, want %q", w.ID, key, cfg[key], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
