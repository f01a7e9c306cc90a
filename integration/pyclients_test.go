package integration

// The Kafka Connect clients people use, from PyPI, driving a real "txsink
// serve" (real Kafka and PostgreSQL) through their documented commands:
// kafka-connect-cli (the kafka_connect command), kafka-connect-api (a
// library) and kafka-connect-healthcheck (a health server). Each runs in
// a virtualenv the test creates once and caches (pyVenv).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

// The clients and the versions the test installs (latest on PyPI when
// written). Each gets its own virtualenv: their dependencies conflict
// (kafka-connect-cli pins requests 2.27).
var pyClients = map[string]string{
	"kafka-connect-cli":         "0.2.5",
	"kafka-connect-api":         "0.5.10",
	"kafka-connect-healthcheck": "0.3.0",
}

var pyVenvMu sync.Mutex

// pyVenv returns a virtualenv with pkg==version installed (pyVenvFor).
func pyVenv(t *testing.T, pkg string) string {
	t.Helper()
	version := pyClients[pkg]
	return pyVenvFor(t, pkg+"-"+version, pkg+"=="+version, "the PyPI clients")
}

// pyVenvFor returns the virtualenv named name with the pip requirement
// spec installed, created once under $TXSINK_PY_CACHE (default
// ~/.cache/txsink-pyclients) and reused; forWhat says in a skip what
// needed it. pip reads its index from the machine's configuration.
func pyVenvFor(t *testing.T, name, spec, forWhat string) string {
	t.Helper()
	pyVenvMu.Lock()
	defer pyVenvMu.Unlock()
	python, err := exec.LookPath("python3")
	if err != nil {
		harness.Unavailable(t, "python3 is needed for %s", forWhat)
	}
	cache := os.Getenv("TXSINK_PY_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "txsink-pyclients")
	}
	dir := filepath.Join(cache, name)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir
	}
	_ = os.RemoveAll(dir) // an interrupted install
	if out, err := exec.Command(python, "-m", "venv", dir).CombinedOutput(); err != nil {
		harness.Unavailable(t, "python3 -m venv: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "bin", "pip"), "install", "-q", "--disable-pip-version-check", spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		harness.Unavailable(t, "pip install %s: %v: %s", spec, err, tail(string(out), 2000))
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type pyResult struct {
	out  string
	code int
}

func runPy(t *testing.T, dir, prog string, args ...string) pyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "bin", prog), args...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", prog, args, err)
		}
		code = ee.ExitCode()
	}
	return pyResult{out: string(out), code: code}
}

// pyEnv is a txsink worker with one healthy connector's worth of
// records, a topic with a record the sink cannot write, and a database.
type pyEnv struct {
	w                *worker
	topic, badTopic  string
	db, missingDBURL string
	sfx, addr        string
	waitRows         func(n int)
	good             int
}

func newPyEnv(t *testing.T) *pyEnv {
	t.Helper()
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	sfx := randSuffix(t)
	e := &pyEnv{topic: "py-" + sfx, badTopic: "pybad-" + sfx, db: db, sfx: sfx}
	k.CreateTopic(t, e.topic, 2)
	k.CreateTopic(t, e.badTopic, 1)
	pool := connectPool(t, db)
	createEventsTable(t, pool, e.topic)
	createEventsTable(t, pool, e.badTopic)
	var u upstream
	produce(t, k.Bootstrap, e.topic, produceOpts{Records: 100, Partitions: 2, MaxTxn: 20, Seed: 71}, &u)
	e.good = u.total()
	var ub upstream
	produce(t, k.Bootstrap, e.badTopic, produceOpts{Records: 1, Partitions: 1, MaxTxn: 1, Seed: 72,
		Value: func(seq int, id string) []byte { return []byte(`{"id":"` + id + `","seq":"not a number"}`) }}, &ub)
	e.missingDBURL = missingDatabaseURL(t, db)
	e.addr = freeAddr(t)
	e.w = startServeWith(t, k.Bootstrap, e.addr, t.TempDir(), "py-"+sfx, serveOpts{env: []string{"TXSINK_TASK_RESTART_ENABLED=false"}})
	e.waitRows = func(n int) {
		deadline := time.Now().Add(2 * time.Minute)
		for rowCount(t, pool, e.topic) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d rows, want %d", rowCount(t, pool, e.topic), n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return e
}

// config is a connector of the good topic, tasks.max as a JSON number
// (as the clients' users write it).
func (e *pyEnv) config(name string) map[string]any {
	out := map[string]any{}
	for k, v := range baseConnector(name, e.topic, e.db, "exactly_once") {
		out[k] = v
	}
	out["tasks.max"] = 1
	return out
}

func (e *pyEnv) badRecordConfig(name string) map[string]any {
	c := e.config(name)
	c["topics"] = e.badTopic
	return c
}

func (e *pyEnv) cannotOpenConfig(name string) map[string]any {
	c := e.config(name)
	c["connection.url"] = e.missingDBURL
	return c
}

func mustJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPyKafkaConnectCLI drives kafka-connect-cli 0.2.5's kafka_connect
// command: connector list/create/get/configuration/update/pause/resume/
// restart/delete, task list/restart, and health-check with a FAILED task
// and with a connector whose sink cannot open.
func TestPyKafkaConnectCLI(t *testing.T) {
	venv := pyVenv(t, "kafka-connect-cli")
	e := newPyEnv(t)
	url := "--url=" + e.w.base
	kc := func(args ...string) pyResult { return runPy(t, venv, "kafka_connect", append(args, url)...) }
	ok := func(args ...string) string {
		t.Helper()
		r := kc(args...)
		if r.code != 0 || strings.HasPrefix(r.out, "Error:") {
			t.Fatalf("kafka_connect %v: exit %d: %s", args, r.code, r.out)
		}
		return r.out
	}
	name := "cli-" + e.sfx

	if out := ok("connector", "list"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list with no connectors: %s", out)
	}
	out := ok("connector", "create", "--name", name, "--configuration", mustJSONString(t, e.config(name)))
	var info struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Name != name || info.Config["tasks.max"] != "1" {
		t.Fatalf("create (tasks.max as a JSON number): %v: %s", err, out)
	}
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	e.waitRows(e.good)
	var list []struct {
		Connector   string `json:"connector"`
		State       string `json:"state"`
		FailedTasks []int  `json:"failedTasks"`
	}
	out = ok("connector", "list")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].State != "RUNNING" {
		t.Fatalf("list: %v: %s", err, out)
	}
	if out := ok("connector", "get", "--name", name); !strings.Contains(out, `"state": "RUNNING"`) {
		t.Fatalf("get: %s", out)
	}
	if out := ok("connector", "configuration", "--name", name); !strings.Contains(out, `"connection.url": "postgres://postgres:[hidden]@`) {
		t.Fatalf("configuration (password hidden): %s", out)
	}
	cfg := e.config(name)
	cfg["batch.linger.ms"] = 30
	if out := ok("connector", "update", "--name", name, "--configuration", mustJSONString(t, cfg)); !strings.Contains(out, `"batch.linger.ms": "30"`) {
		t.Fatalf("update: %s", out)
	}
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	ok("connector", "pause", "--name", name)
	e.w.waitState(t, name, "PAUSED", 1, time.Minute)
	ok("connector", "resume", "--name", name)
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	ok("connector", "restart", "--name", name)
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	out = ok("task", "list", "--connector", name)
	if !strings.Contains(out, `"taskId": 0`) || !strings.Contains(out, `"state": "RUNNING"`) {
		t.Fatalf("task list: %s", out)
	}
	ok("task", "restart", "--connector", name, "--task", "0")
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	if r := kc("health-check", "--verbose"); r.code != 0 {
		t.Fatalf("health-check with everything RUNNING: exit %d: %s", r.code, r.out)
	}

	// A task stopped at a bad record: FAILED with its trace; unhealthy (1).
	bad := "clibad-" + e.sfx
	ok("connector", "create", "--name", bad, "--configuration", mustJSONString(t, e.badRecordConfig(bad)))
	waitTaskFailed(t, e.w, bad)
	r := kc("health-check", "--verbose")
	if r.code != 1 || !strings.Contains(r.out, "Task 0 of connector "+bad+" in state FAILED") {
		t.Fatalf("health-check with a FAILED task: exit %d (want 1): %s", r.code, r.out)
	}
	out = ok("task", "list", "--connector", bad)
	if !strings.Contains(out, `"state": "FAILED"`) || !strings.Contains(out, "not a number") {
		t.Fatalf("task list of the failed task (trace): %s", out)
	}
	ok("connector", "delete", "--name", bad)

	// A connector whose sink cannot open: as in Connect, the connector
	// RUNNING and its task FAILED with the trace, so health-check exits 1
	// (unhealthy; before issue 17 it exited 3, an error of its own).
	nope := "clinope-" + e.sfx
	ok("connector", "create", "--name", nope, "--configuration", mustJSONString(t, e.cannotOpenConfig(nope)))
	waitTaskFailed(t, e.w, nope)
	r = kc("health-check", "--verbose")
	if r.code != 1 || !strings.Contains(r.out, "Task 0 of connector "+nope+" in state FAILED") {
		t.Fatalf("health-check with a connector whose sink cannot open: exit %d (want 1, as with Connect): %s", r.code, r.out)
	}
	ok("connector", "delete", "--name", nope)

	ok("connector", "delete", "--name", name)
	if out := ok("connector", "list"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %s", out)
	}
	if r := kc("connector", "get", "--name", name); !strings.Contains(r.out, "response status: 404") {
		t.Fatalf("get after delete: %d %s", r.code, r.out)
	}
}

// waitTaskFailed waits until task 0 of a connector is FAILED.
func waitTaskFailed(t *testing.T, w *worker, name string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, b := w.call(t, "GET", "/connectors/"+name+"/tasks/0/status", nil)
		if code == 200 && strings.Contains(b, `"state":"FAILED"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task 0 of %s not FAILED: %d %s", name, code, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pyAPIScript drives kafka-connect-api's documented objects (Api, Cluster,
// Connector, Task) and prints one JSON object per step.
const pyAPIScript = `
import json, sys, time
from kafka_connect_api.kafka_connect_api import Api, Cluster, Connector
from kafka_connect_api.errors import GenericConflict, GenericNotFound

url, name, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
api = Api(url=url)
cluster = Cluster(api)
out = {}
def wait(state, n=600):
    c = Connector(cluster, name)
    for _ in range(n):
        st = c.status
        if st["connector"]["state"] == state and st["tasks"] and all(t["state"] == state for t in st["tasks"]):
            return True
        time.sleep(0.1)
    return False

out["version"] = cluster.version
out["kafka_cluster"] = cluster.kafka_cluster
c = Connector(cluster, name)
# Connector.exists() raises GenericNotFound on a 404 (the client's
# decorator checks the status first, against Connect too): list instead.
out["listed_before"] = name in cluster.connectors
c.config = config
out["exists_after"] = c.exists()
out["listed"] = name in cluster.connectors
out["running"] = wait("RUNNING")
out["connector_class"] = c.connector_class
out["tasks"] = [t.id for t in c.tasks]
out["task_running"] = c.tasks[0].is_running()
c.pause()
out["paused"] = wait("PAUSED")
c.resume()
out["resumed"] = wait("RUNNING")
c.restart()
out["restarted"] = wait("RUNNING")
c.restart_all_tasks()
out["tasks_restarted"] = wait("RUNNING")
try:
    c.cycle_connector()
    out["cycle"] = "ok"
except GenericConflict as e:
    out["cycle"] = "conflict: %s" % (e.details,)
out["state_after_cycle"] = "RUNNING" if wait("RUNNING") else c.state
if out["state_after_cycle"] == "PAUSED":
    c.resume()
out["running_at_end"] = wait("RUNNING")
out["loggers"] = "root" in cluster.loggers
c.delete()
out["listed_after_delete"] = name in cluster.connectors
try:
    c.status
    out["status_after_delete"] = "found"
except GenericNotFound:
    out["status_after_delete"] = "404"
print(json.dumps(out))
`

// TestPyKafkaConnectAPI drives kafka-connect-api 0.5.10: create through
// Connector.config, list, status, tasks, pause, resume, restart,
// restart_all_tasks, cycle_connector, loggers, delete.
func TestPyKafkaConnectAPI(t *testing.T) {
	venv := pyVenv(t, "kafka-connect-api")
	e := newPyEnv(t)
	name := "api-" + e.sfx
	cfg := e.config(name)
	cfg["name"] = name
	r := runPy(t, venv, "python", "-c", pyAPIScript, e.w.base, name, mustJSONString(t, cfg))
	if r.code != 0 {
		t.Fatalf("kafka-connect-api script: exit %d: %s", r.code, r.out)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("script output: %v: %s", err, r.out)
	}
	for k, want := range map[string]any{
		"listed_before": false, "exists_after": true, "listed": true, "running": true,
		"connector_class": "postgres", "task_running": true,
		"paused": true, "resumed": true, "restarted": true, "tasks_restarted": true,
		"running_at_end": true, "loggers": true, "listed_after_delete": false, "status_after_delete": "404",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	if got["kafka_cluster"] == "" || got["version"] == "" {
		t.Errorf("cluster info: %v", got)
	}
	// cycle_connector pauses, restarts every task, resumes: the task
	// restart of a PAUSED connector answers 204 as in Connect (before
	// issue 17, 409 left the connector PAUSED).
	if cycle, _ := got["cycle"].(string); cycle != "ok" || got["state_after_cycle"] != "RUNNING" {
		t.Errorf("cycle_connector: %q, state %v; want ok and RUNNING", cycle, got["state_after_cycle"])
	}
}

// TestPyKafkaConnectHealthcheck runs kafka-connect-healthcheck 0.3.0's
// server against txsink with the worker id in Connect's form (the
// advertised host:port): healthy while everything runs, unhealthy (503,
// the task named) with a FAILED task, and with a connector whose sink
// cannot open.
func TestPyKafkaConnectHealthcheck(t *testing.T) {
	venv := pyVenv(t, "kafka-connect-healthcheck")
	e := newPyEnv(t)
	name := "hc-" + e.sfx
	e.w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": e.config(name)})
	e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	// The worker id as Connect shows it: host:port of the REST API.
	st := e.w.waitState(t, name, "RUNNING", 1, time.Minute)
	if st.Connector.WorkerID != e.addr {
		t.Fatalf("worker_id %q, want the advertised host:port %q", st.Connector.WorkerID, e.addr)
	}
	port := freeAddr(t)
	_, hport, _ := strings.Cut(port, ":")
	cmd := exec.Command(filepath.Join(venv, "bin", "kafka-connect-healthcheck"),
		"--port", hport, "--connect-url", e.w.base, "--connect-worker-id", e.addr, "--log-level", "INFO")
	p := startProc(t, cmd, "kafka-connect-healthcheck")
	health := func() (int, map[string]any) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err := http.Get("http://127.0.0.1:" + hport + "/")
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				var v map[string]any
				_ = json.Unmarshal(b, &v)
				return res.StatusCode, v
			}
			if ok, code := p.exited(); ok || time.Now().After(deadline) {
				t.Fatalf("healthcheck server not answering (exited %v, %d): %v", ok, code, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code, v := health(); code != 200 || v["healthy"] != true {
		t.Fatalf("everything RUNNING: %d %v", code, v)
	}
	bad := "hcbad-" + e.sfx
	e.w.must(t, 201, "POST", "/connectors", map[string]any{"name": bad, "config": e.badRecordConfig(bad)})
	waitTaskFailed(t, e.w, bad)
	code, v := health()
	if code != 503 || v["healthy"] != false || !strings.Contains(fmt.Sprint(v["failures"]), "connector:"+bad) || !strings.Contains(fmt.Sprint(v["failures"]), "type:task") {
		t.Fatalf("a FAILED task, worker id %s: %d %v (before issue 17 the worker id did not match and this reported healthy)", e.addr, code, v)
	}
	e.w.must(t, 204, "DELETE", "/connectors/"+bad, nil)
	nope := "hcnope-" + e.sfx
	e.w.must(t, 201, "POST", "/connectors", map[string]any{"name": nope, "config": e.cannotOpenConfig(nope)})
	waitTaskFailed(t, e.w, nope)
	code, v = health()
	if code != 503 || !strings.Contains(fmt.Sprint(v["failures"]), "connector:"+nope) {
		t.Fatalf("a connector whose sink cannot open: %d %v", code, v)
	}
	e.w.must(t, 204, "DELETE", "/connectors/"+nope, nil)
	if code, v := health(); code != 200 {
		t.Fatalf("healthy again after the deletes: %d %v", code, v)
	}
}
