package integration

// End-to-end tests of the REST API: a real "txsink serve" process against
// real Kafka and PostgreSQL, driven over HTTP like an operator would.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/integration/harness"
)

// apiCanary is the password of the PostgreSQL role the API tests'
// connectors use. It must never appear in a response, a log line or a
// metric.
const apiCanary = "CanaryPw-4b1d-Zq7"

// worker is a "txsink serve" process and its HTTP base URL.
type worker struct {
	*proc
	base   string
	client *http.Client
	// bodies collects every response body, for the canary check.
	mu     sync.Mutex
	bodies []string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServe runs "txsink serve" on addr with the data directory and waits
// until GET /health answers 200.
func startServe(t *testing.T, bootstrap, addr, dataDir, workerID string) *worker {
	t.Helper()
	return startServeWith(t, bootstrap, addr, dataDir, workerID, serveOpts{})
}

// serveOpts are what some tests change in a "txsink serve" process.
type serveOpts struct {
	args []string // more flags
	env  []string // more environment
	// tls, when set, is the client configuration for an https worker.
	tls *tls.Config
}

// startServeWith is startServe with more flags and environment.
func startServeWith(t *testing.T, bootstrap, addr, dataDir, workerID string, o serveOpts) *worker {
	t.Helper()
	args := append([]string{"serve", "-listen", addr, "-bootstrap", bootstrap, "-data-dir", dataDir, "-worker-id", workerID, "-log-level", "debug"}, o.args...)
	cmd := exec.Command(txsinkBinary(t), args...)
	cmd.Env = append(append(os.Environ(), "TXSINK_TASK_RESTART_BACKOFF_INITIAL_MS=200", "TXSINK_TASK_RESTART_BACKOFF_MAX_MS=2000"), o.env...)
	p := startProc(t, cmd, "txsink serve "+workerID)
	w := &worker{proc: p, base: "http://" + addr, client: http.DefaultClient}
	if o.tls != nil {
		w.base = "https://" + addr
		w.client = &http.Client{Transport: &http.Transport{TLSClientConfig: o.tls}}
	}
	waitUp(t, p, w.client, w.base+"/health", "txsink serve", time.Minute)
	return w
}

// waitUp waits until url answers 200, failing when p exits or d passes.
func waitUp(t testing.TB, p *proc, client *http.Client, url, label string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if ok, code := p.exited(); ok {
			t.Fatalf("%s exited with %d:\n%s", label, code, tail(p.output(), 3000))
		}
		res, err := client.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 within %v: %v", label, url, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call sends a request and returns the status code and body. body may be
// a string (sent as is) or a value (encoded as JSON).
func (w *worker) call(t *testing.T, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, w.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := w.client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	w.mu.Lock()
	w.bodies = append(w.bodies, string(b))
	w.mu.Unlock()
	return res.StatusCode, strings.TrimSpace(string(b))
}

// must checks the status code and returns the body.
func (w *worker) must(t *testing.T, code int, method, path string, body any) string {
	t.Helper()
	got, b := w.call(t, method, path, body)
	if got != code {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, got, code, b)
	}
	return b
}

type apiStatus struct {
	Name      string `json:"name"`
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID     int    `json:"id"`
		State  string `json:"state"`
		Trace  string `json:"trace"`
		Txsink struct {
			Partitions []struct {
				Topic      string `json:"topic"`
				Partition  int32  `json:"partition"`
				NextOffset int64  `json:"next_offset"`
				Lag        *int64 `json:"lag"`
			} `json:"partitions"`
		} `json:"txsink"`
	} `json:"tasks"`
}

// waitState polls the status until the connector and all of its tasks are
// in state, with tasks tasks.
func (w *worker) waitState(t *testing.T, name, state string, tasks int, d time.Duration) apiStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
		var st apiStatus
		_ = json.Unmarshal([]byte(b), &st)
		ok := code == 200 && st.Connector.State == state && len(st.Tasks) == tasks
		for _, ts := range st.Tasks {
			ok = ok && ts.State == state
		}
		if ok {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not %s with %d tasks after %v: %d %s", name, state, tasks, d, code, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// canaryURL creates a login role whose password is apiCanary and returns
// dbURL with that role's credentials.
func canaryURL(t *testing.T, pg *harness.PostgresService, dbURL string) string {
	t.Helper()
	role := "canary_" + randSuffix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'`, role, apiCanary)); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, apiCanary)
	return u.String()
}

func rowCount(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+table+`"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// apiConnector is a connector config whose password is the canary, both in
// connection.password and inside connection.url.
func apiConnector(name, topic, dbURL string) map[string]string {
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	cfg["connection.password"] = apiCanary
	return cfg
}

// TestAPILifecycle: over HTTP against real Kafka and PostgreSQL: create →
// RUNNING → records land exactly once → pause (no new rows while PAUSED) →
// resume → stop → GET offsets shows the sink's offsets → PATCH offsets
// back → resume re-delivers exactly the records after that position
// (insert.mode=insert: the rewound range is written a second time) →
// delete → 404. Along the way every error path answers with its exact
// status and body, and the canary password never shows in a response,
// the logs or /metrics.
func TestAPILifecycle(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	const topic, name = "api-life", "api-life"
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)
	dbURL := canaryURL(t, pg, db)

	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 600, Partitions: 3, AbortRatio: 0.1, MaxTxn: 40, Seed: 41}, &u)

	w := startServe(t, k.Bootstrap, freeAddr(t), t.TempDir(), "api-w1")
	cfg := apiConnector(name, topic, dbURL)
	body := w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	var info struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
		Tasks  []map[string]any  `json:"tasks"`
		Type   string            `json:"type"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil || info.Name != name || info.Type != "sink" || len(info.Tasks) != 1 {
		t.Fatalf("create response %s", body)
	}
	if info.Config["connection.password"] != "[hidden]" || !strings.Contains(info.Config["connection.url"], ":[hidden]@") {
		t.Fatalf("secrets not hidden: %v", info.Config)
	}
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	waitDrained(t, pool, name, &u, 2*time.Minute, nil)
	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("after first drain: %d anomalies, first: %v", len(problems), problems[:min(5, len(problems))])
	}
	t.Logf("drained %d records", u.total())

	// Error paths on the live process. The unknown-class message lists the
	// registered sinks; read them from the process's own answer for a
	// class that cannot exist, so the test follows new sinks.
	knownSinks := registeredSinks(t, w)
	errorCases := []struct {
		method, path string
		body         any
		code         int
		msg          string
	}{
		{"POST", "/connectors", map[string]any{"name": name, "config": cfg}, 409, "Connector " + name + " already exists"},
		{"GET", "/connectors/nope", nil, 404, "Connector nope not found"},
		{"POST", "/connectors", `{"name": "x", "config": `, 400, "Request body is not valid JSON for this endpoint: syntax error at byte 24"},
		{"POST", "/connectors", map[string]any{"name": "x", "config": map[string]string{"connector.class": "postgres", "connection.url": dbURL}}, 400,
			"Connector configuration is invalid and contains the following 1 error(s):\ntopics: Must configure one of topics or topics.regex\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`"},
		{"POST", "/connectors", map[string]any{"name": "x", "config": map[string]string{"connector.class": "com.example.Nope", "topics": topic}}, 400,
			"Connector configuration is invalid and contains the following 1 error(s):\nconnector.class: unknown connector class \"com.example.Nope\"; known: " + knownSinks + "\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`"},
		{"POST", "/connectors", map[string]any{"name": "x", "config": map[string]string{"connector.class": "postgres", "topics": topic, "connection.url": "postgres://h/db?sslkey=/etc/passwd"}}, 400,
			"Connector configuration is invalid and contains the following 1 error(s):\nconnection.url: connection string key \"sslkey\" is not in ConnStringAllowedKeys (allowed query parameters: sslmode, application_name, connect_timeout, target_session_attrs, statement_timeout, options, user, password, sslnegotiation, channel_binding)\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`"},
		{"PATCH", "/connectors/" + name + "/offsets", `{"offsets":[{"partition":{"kafka_topic":"` + topic + `","kafka_partition":0},"offset":{"kafka_offset":0}}]}`, 400,
			"Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/" + name + "/stop' endpoint"},
		{"PATCH", "/connectors/" + name + "/offsets", `{"offsets":[{"partition":{"kafka_topic":"` + topic + `"},"offset":{"kafka_offset":0}}]}`, 400,
			"The partition for a sink connector offset must contain the keys 'kafka_topic' and 'kafka_partition'"},
		{"PATCH", "/connectors/" + name + "/offsets", `{"offsets":"all"}`, 400, `Request body is not valid JSON for this endpoint: field "offsets" must not be a JSON string`},
		{"POST", "/connectors", `{"name":"big","config":{"x":"` + strings.Repeat("z", 2<<20) + `"}}`, 413, "Request body is larger than 1048576 bytes"},
	}
	for _, c := range errorCases {
		code, b := w.call(t, c.method, c.path, c.body)
		want, _ := json.Marshal(map[string]any{"error_code": c.code, "message": c.msg})
		if code != c.code || b != string(want) {
			t.Errorf("%s %s:\n got %d %s\nwant %d %s", c.method, c.path, code, b, c.code, want)
		}
	}

	// Pause: no new rows while PAUSED.
	w.must(t, 202, "PUT", "/connectors/"+name+"/pause", nil)
	w.waitState(t, name, "PAUSED", 1, time.Minute)
	before := rowCount(t, pool, topic)
	produce(t, k.Bootstrap, topic, produceOpts{Records: 900, Partitions: 3, AbortRatio: 0.1, MaxTxn: 40, Seed: 42}, &u)
	// The paused task has seen the new records arrive: its status counts
	// every one of them as lag. Only then does "no new row" mean
	// something: a task that kept fetching would have had their
	// committed transactions in hand.
	added := int64(u.total() - before)
	deadline := time.Now().Add(time.Minute)
	for {
		st := w.waitState(t, name, "PAUSED", 1, time.Second)
		var lag int64
		for _, p := range st.Tasks[0].Txsink.Partitions {
			if p.Topic == topic && p.Lag != nil {
				lag += *p.Lag
			}
		}
		if lag >= added {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the paused task's status shows lag %d, want the %d records produced while paused", lag, added)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if after := rowCount(t, pool, topic); after != before {
		t.Fatalf("rows changed while PAUSED: %d -> %d", before, after)
	}

	// Resume: the records produced meanwhile land exactly once.
	w.must(t, 202, "PUT", "/connectors/"+name+"/resume", nil)
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	waitDrained(t, pool, name, &u, 2*time.Minute, nil)
	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("after resume: %d anomalies, first: %v", len(problems), problems[:min(5, len(problems))])
	}
	// The status shows the task's partitions with their stored offsets.
	st := w.waitState(t, name, "RUNNING", 1, time.Second)
	ends := u.ends()
	seen := 0
	for _, p := range st.Tasks[0].Txsink.Partitions {
		if p.Topic == topic && p.NextOffset >= ends[p.Partition] {
			seen++
		}
	}
	if seen != 3 {
		t.Errorf("status partitions %+v, want 3 partitions at the upstream ends %v", st.Tasks[0].Txsink.Partitions, ends)
	}

	// Stop, then read the offsets: they are the sink's.
	w.must(t, 204, "PUT", "/connectors/"+name+"/stop", nil)
	w.waitState(t, name, "STOPPED", 0, time.Minute)
	offs := decodeOffsets(t, w.must(t, 200, "GET", "/connectors/"+name+"/offsets", nil))
	stored, err := sinkOffsets(context.Background(), pool, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs.Offsets) != 3 {
		t.Fatalf("GET offsets: %+v", offs)
	}
	for _, o := range offs.Offsets {
		if o.Partition.Topic != topic || stored[o.Partition.Partition] != o.Offset.Offset {
			t.Errorf("GET offsets %+v, sink has %v", o, stored)
		}
	}

	// Rewind partition 1 to the middle of its committed records.
	u.mu.Lock()
	p1 := u.committed[1]
	rewind := p1[len(p1)/2].Offset
	end1 := p1[len(p1)-1].Offset + 1
	u.mu.Unlock()
	b := w.must(t, 200, "PATCH", "/connectors/"+name+"/offsets",
		fmt.Sprintf(`{"offsets":[{"partition":{"kafka_topic":%q,"kafka_partition":1},"offset":{"kafka_offset":%d}}]}`, topic, rewind))
	if b != `{"message":"The offsets for this connector have been altered successfully"}` {
		t.Errorf("PATCH offsets: %s", b)
	}
	stored, _ = sinkOffsets(context.Background(), pool, name)
	if stored[1] != rewind {
		t.Fatalf("sink offset of partition 1 is %d after PATCH, want %d", stored[1], rewind)
	}
	w.must(t, 202, "PUT", "/connectors/"+name+"/resume", nil)
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	waitDrained(t, pool, name, &u, 2*time.Minute, nil)
	// insert.mode=insert: exactly the records of partition 1 from the
	// rewind position on are written a second time; nothing else.
	extra := map[int32][2]int64{1: {rewind, end1}}
	if problems := exactness(&u, readRows(t, pool, topic), extra); len(problems) > 0 {
		t.Fatalf("after rewind: %d anomalies, first: %v", len(problems), problems[:min(5, len(problems))])
	}
	t.Logf("rewound partition 1 to %d: %d records re-delivered", rewind, len(p1)-len(p1)/2)

	// Metrics.
	_, metrics := w.call(t, "GET", "/metrics", nil)
	for _, want := range []string{
		`txsink_records_written_total{connector="` + name + `"}`,
		`txsink_commit_phase_seconds_bucket{connector="` + name + `",phase="prepare"`,
		`txsink_batches_total{connector="` + name + `",outcome="committed"}`,
		`txsink_batches_written_ahead_total{connector="` + name + `"}`,
		`txsink_partition_lag{connector="` + name + `",partition="1",topic="` + topic + `"}`,
		`txsink_in_doubt_batches{connector="` + name + `"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Every other endpoint once, for the canary check.
	for _, p := range []string{"/", "/connectors?expand=status&expand=info", "/connectors/" + name, "/connectors/" + name + "/config",
		"/connectors/" + name + "/tasks", "/connectors/" + name + "/tasks/0/status", "/connector-plugins", "/admin/loggers"} {
		w.must(t, 200, "GET", p, nil)
	}
	w.must(t, 200, "PUT", "/connector-plugins/postgres/config/validate", cfg)

	// Delete → 404.
	w.must(t, 204, "DELETE", "/connectors/"+name, nil)
	code, b := w.call(t, "GET", "/connectors/"+name, nil)
	if code != 404 || b != `{"error_code":404,"message":"Connector `+name+` not found"}` {
		t.Errorf("after delete: %d %s", code, b)
	}
	w.signal(syscall.SIGTERM)
	if !w.wait(30 * time.Second) {
		t.Fatal("txsink serve did not stop within 30s of SIGTERM")
	}
	if _, code := w.exited(); code != 0 {
		t.Errorf("txsink serve exited with %d", code)
	}

	// The canary: not in any response, not in the logs, not in /metrics.
	w.mu.Lock()
	for i, b := range w.bodies {
		if strings.Contains(b, apiCanary) {
			t.Errorf("response %d contains the canary password: %s", i, tail(b, 300))
		}
	}
	n := len(w.bodies)
	w.mu.Unlock()
	logs := w.output()
	if strings.Contains(logs, apiCanary) {
		t.Errorf("the logs contain the canary password")
	}
	if !strings.Contains(logs, "connector created") || !strings.Contains(logs, "http request") {
		t.Errorf("the logs lack the lifecycle lines:\n%s", tail(logs, 2000))
	}
	t.Logf("canary absent from %d responses, %d bytes of logs and /metrics", n, len(logs))
}

// TestAPIKillRestart: the worker is killed (SIGKILL) while a connector
// writes; a new process on the same data directory restores every
// connector with its target state (RUNNING runs again, PAUSED and STOPPED
// stay so), and the RUNNING one ends exact: nothing lost, nothing
// duplicated, no prepared transaction left.
func TestAPIKillRestart(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	topic := "api-kill-" + randSuffix(t)
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)
	createEventsTable(t, pool, "api-kill-parked")
	dbURL := canaryURL(t, pg, db)
	dataDir := t.TempDir()
	addr := freeAddr(t)

	var u upstream
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produce(t, k.Bootstrap, topic, produceOpts{Records: 6000, Partitions: 3, AbortRatio: 0.1, MaxTxn: 50, Seed: 43}, &u)
	}()

	w := startServe(t, k.Bootstrap, addr, dataDir, "api-kill-w")
	run := apiConnector("kill-run", topic, dbURL)
	run["batch.max.records"] = "200"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "kill-run", "config": run})
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "kill-paused", "config": apiConnector("kill-paused", topic, dbURL), "initial_state": "PAUSED"})
	stopped := apiConnector("kill-stopped", topic, dbURL)
	stopped["table.name.format"] = "api-kill-parked"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "kill-stopped", "config": stopped, "initial_state": "STOPPED"})
	w.waitState(t, "kill-run", "RUNNING", 1, time.Minute)

	for kill := 1; kill <= 2; kill++ {
		// Kill once some records are written but not all.
		waitWritten(t, func() map[int32]int64 { got, _ := sinkOffsets(context.Background(), pool, "kill-run"); return got }, int64(kill*500), fmt.Sprintf("kill %d", kill))
		w.signal(syscall.SIGKILL)
		if !w.wait(10 * time.Second) {
			t.Fatal("SIGKILL did not end the worker")
		}
		t.Logf("kill %d: worker killed", kill)
		w = startServe(t, k.Bootstrap, addr, dataDir, "api-kill-w")
		if b := w.must(t, 200, "GET", "/connectors", nil); b != `["kill-paused","kill-run","kill-stopped"]` {
			t.Fatalf("connectors after restart: %s", b)
		}
		w.waitState(t, "kill-run", "RUNNING", 1, time.Minute)
		w.waitState(t, "kill-paused", "PAUSED", 1, 10*time.Second)
		w.waitState(t, "kill-stopped", "STOPPED", 0, 10*time.Second)
	}
	wg.Wait()
	waitDrained(t, pool, "kill-run", &u, 3*time.Minute, nil)
	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("after 2 kills: %d anomalies, first: %v", len(problems), problems[:min(10, len(problems))])
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
	// The PAUSED connector's task joined the group and stored its
	// partitions' first offsets (the log start), but wrote nothing.
	if got, _ := sinkOffsets(context.Background(), pool, "kill-paused"); len(got) > 0 {
		for p, n := range got {
			if n > 0 {
				t.Errorf("the PAUSED connector advanced partition %d to %d", p, n)
			}
		}
	}
	// The stored state survived the kills.
	b, err := os.ReadFile(filepath.Join(dataDir, "standalone.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"target_state": "PAUSED"`) {
		t.Errorf("state file lost the PAUSED target: %s", tail(string(b), 500))
	}
	w.signal(syscall.SIGTERM)
	w.wait(30 * time.Second)
	if strings.Contains(w.output(), apiCanary) {
		t.Error("the logs contain the canary password")
	}
	t.Logf("%d records exact after 2 SIGKILLs of the worker", u.total())
}

// registeredSinks returns the "name (class), …" list the worker prints for
// an unknown connector.class, from an error the test is not checking.
func registeredSinks(t *testing.T, w *worker) string {
	t.Helper()
	_, b := w.call(t, "POST", "/connectors", map[string]any{"name": "probe", "config": map[string]string{"connector.class": "probe.Nope", "topics": "t"}})
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal([]byte(b), &e)
	_, rest, ok := strings.Cut(e.Message, "; known: ")
	list, _, ok2 := strings.Cut(rest, "\n")
	if !ok || !ok2 || !strings.Contains(list, "postgres (io.txsink.postgres.PostgresSinkConnector)") {
		t.Fatalf("unexpected unknown-class message: %s", b)
	}
	return list
}
