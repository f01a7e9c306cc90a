package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/twophase"
)

// produce writes n records to orders (both partitions).
func (e *env) produce(n int) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(`{"id":1}`)}).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) rows(name string) int {
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	return e.store.rows[name]
}

func (e *env) waitRows(name string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.rows(name) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s wrote %d rows, want %d", name, e.rows(name), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLifecycle drives one connector through create → RUNNING → records
// written → pause → resume → stop → offsets GET/PATCH/DELETE → delete → 404
// against the real worker, a fake sink and an in-memory Kafka.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "POST", "/connectors", map[string]any{"name": "orders-sink", "config": fakeConfig("orders-sink")})
	if loc := r.hdr.Get("Location"); loc != e.srv.URL+"/connectors/orders-sink" {
		t.Errorf("Location %q", loc)
	}
	e.waitState("orders-sink", engine.StateRunning, 1)
	e.produce(10)
	e.waitRows("orders-sink", 10)

	e.must(202, "PUT", "/connectors/orders-sink/pause", nil)
	e.waitState("orders-sink", engine.StatePaused, 1)
	before := e.rows("orders-sink")
	e.produce(5)
	e.waitLag("orders-sink", 5)
	if got := e.rows("orders-sink"); got != before {
		t.Fatalf("rows written while PAUSED: %d -> %d", before, got)
	}
	e.must(202, "PUT", "/connectors/orders-sink/resume", nil)
	e.waitState("orders-sink", engine.StateRunning, 1)
	e.waitRows("orders-sink", 15)

	// Offsets may not be edited while RUNNING (400, Connect's message).
	r = e.must(400, "DELETE", "/connectors/orders-sink/offsets", nil)
	if !strings.Contains(string(r.body), "Connectors must be in the STOPPED state before their offsets can be modified") {
		t.Errorf("body %s", r.body)
	}
	e.must(204, "PUT", "/connectors/orders-sink/stop", nil)
	e.waitState("orders-sink", engine.StateStopped, 0)
	r = e.must(200, "GET", "/connectors/orders-sink/offsets", nil)
	var offs connectorOffsets
	_ = json.Unmarshal(r.body, &offs)
	total := int64(0)
	for _, o := range offs.Offsets {
		total += o.Offset.KafkaOffset
	}
	if total != 15 || len(offs.Offsets) != 2 {
		t.Fatalf("offsets %s: want 2 partitions summing to 15", r.body)
	}
	// Rewind partition 0 to 0 and clear partition 1.
	r = e.must(200, "PATCH", "/connectors/orders-sink/offsets", `{"offsets":[
		{"partition":{"kafka_topic":"orders","kafka_partition":0},"offset":{"kafka_offset":0}},
		{"partition":{"kafka_topic":"orders","kafka_partition":"1"},"offset":null}]}`)
	if string(r.body) != `{"message":"The offsets for this connector have been altered successfully"}`+"\n" {
		t.Errorf("PATCH body %s", r.body)
	}
	r = e.must(200, "GET", "/connectors/orders-sink/offsets", nil)
	if string(r.body) != `{"offsets":[{"partition":{"kafka_topic":"orders","kafka_partition":0},"offset":{"kafka_offset":0}}]}`+"\n" {
		t.Errorf("offsets after PATCH: %s", r.body)
	}
	e.must(202, "PUT", "/connectors/orders-sink/resume", nil)
	e.waitState("orders-sink", engine.StateRunning, 1)
	e.waitRows("orders-sink", 30) // everything again (p0 from 0, p1 from earliest)
	e.must(204, "PUT", "/connectors/orders-sink/stop", nil)
	e.waitState("orders-sink", engine.StateStopped, 0)
	r = e.must(200, "DELETE", "/connectors/orders-sink/offsets", nil)
	if string(r.body) != `{"message":"The offsets for this connector have been reset successfully"}`+"\n" {
		t.Errorf("DELETE offsets body %s", r.body)
	}
	if r := e.must(200, "GET", "/connectors/orders-sink/offsets", nil); string(r.body) != `{"offsets":[]}`+"\n" {
		t.Errorf("offsets after reset: %s", r.body)
	}
	e.must(204, "DELETE", "/connectors/orders-sink", nil)
	r = e.must(404, "GET", "/connectors/orders-sink", nil)
	if string(r.body) != `{"error_code":404,"message":"Connector orders-sink not found"}`+"\n" {
		t.Errorf("404 body %s", r.body)
	}
}

// TestConfigUpdateAndRestart: PUT and PATCH config restart the tasks with
// the new configuration; "[hidden]" sent back keeps the stored secret;
// restart endpoints answer with Connect's codes.
func TestConfigUpdateAndRestart(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/connectors/c1/config", fakeConfig("c1"))
	e.waitState("c1", engine.StateRunning, 1)
	// Read-modify-write with the redacted values.
	var cfg map[string]string
	_ = json.Unmarshal(e.must(200, "GET", "/connectors/c1/config", nil).body, &cfg)
	cfg["tasks.max"] = "2"
	r := e.must(200, "PUT", "/connectors/c1/config", cfg)
	if got := r.json(t).(map[string]any)["tasks"].([]any); len(got) != 2 {
		t.Fatalf("tasks after update: %s", r.body)
	}
	stored, _ := e.worker.Config("c1")
	if stored["fake.secret"] != canary || !strings.Contains(stored["fake.url"], canary) {
		t.Fatalf("secrets lost in a read-modify-write: %v", secrets.RedactConfig(nil, stored))
	}
	e.waitState("c1", engine.StateRunning, 2)
	r = e.must(200, "PATCH", "/connectors/c1/config", `{"tasks.max":"1","batch.linger.ms":null}`)
	if got := r.json(t).(map[string]any)["config"].(map[string]any); got["batch.linger.ms"] != nil || got["tasks.max"] != "1" {
		t.Fatalf("PATCH result %s", r.body)
	}
	e.waitState("c1", engine.StateRunning, 1)
	e.must(404, "PATCH", "/connectors/nope/config", `{"tasks.max":"1"}`)

	e.must(204, "POST", "/connectors/c1/restart", nil)
	e.waitState("c1", engine.StateRunning, 1)
	r = e.must(202, "POST", "/connectors/c1/restart?includeTasks=true", nil)
	st := r.json(t).(map[string]any)
	if st["connector"].(map[string]any)["state"] != "RESTARTING" {
		t.Errorf("restart response %s", r.body)
	}
	e.waitState("c1", engine.StateRunning, 1)
	// onlyFailed with nothing failed restarts nothing.
	r = e.must(202, "POST", "/connectors/c1/restart?includeTasks=true&onlyFailed=true", nil)
	if st := r.json(t).(map[string]any); st["connector"].(map[string]any)["state"] != "RUNNING" {
		t.Errorf("onlyFailed restart response %s", r.body)
	}
	e.must(204, "POST", "/connectors/c1/tasks/0/restart", nil)
	e.must(404, "POST", "/connectors/c1/tasks/7/restart", nil)
	e.must(404, "GET", "/connectors/c1/tasks/7/status", nil)
	e.must(404, "GET", "/connectors/c1/tasks/x/status", nil)
	e.waitState("c1", engine.StateRunning, 1)
	e.must(200, "GET", "/connectors/c1/tasks/0/status", nil)
}

// TestStatusExtensions: a task's status shows its partitions with
// next_offset and lag, and the connector's in-doubt batches.
func TestStatusExtensions(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "s1", "config": fakeConfig("s1")})
	e.waitState("s1", engine.StateRunning, 1)
	e.produce(4)
	e.waitRows("s1", 4)
	e.store.mu.Lock()
	e.store.inDoubt["s1"] = []twophase.BatchID{{Connector: "s1", Topic: "orders", Partition: 0, First: 10, Last: 12}}
	e.store.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st connectorStatus
		_ = json.Unmarshal(e.must(200, "GET", "/connectors/s1/status", nil).body, &st)
		ext := st.Tasks[0].Txsink
		sum := int64(0)
		lagKnown := true
		for _, p := range ext.Partitions {
			sum += p.NextOffset
			lagKnown = lagKnown && p.Lag != nil && *p.Lag == 0
		}
		if len(ext.Partitions) == 2 && sum == 4 && lagKnown && len(ext.InDoubt) == 1 && len(st.Connector.Txsink.InDoubt) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status extensions not as expected: %+v", ext)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`txsink_records_consumed_total{connector="s1"} 4`,
		`txsink_records_written_total{connector="s1"} 4`,
		`txsink_in_doubt_batches{connector="s1"} 1`,
		`txsink_partition_lag{connector="s1",partition="0",topic="orders"} 0`,
		`txsink_commit_phase_seconds_bucket{connector="s1",phase="commit"`,
		`txsink_connector_state{connector="s1",state="RUNNING"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestRestoreOnRestart: configs and target states survive a worker
// restart; RUNNING runs again, PAUSED and STOPPED stay so.
func TestRestoreOnRestart(t *testing.T) {
	e := newEnv(t)
	for name, st := range map[string]string{"run": "RUNNING", "paused": "PAUSED", "stopped": "STOPPED"} {
		e.must(201, "POST", "/connectors", map[string]any{"name": name, "config": fakeConfig(name), "initial_state": st})
	}
	e.waitState("run", engine.StateRunning, 1)
	e.waitState("paused", engine.StatePaused, 1)
	e.waitState("stopped", engine.StateStopped, 0)
	e.restart()
	e.waitState("run", engine.StateRunning, 1)
	e.waitState("paused", engine.StatePaused, 1)
	e.waitState("stopped", engine.StateStopped, 0)
	if got := string(e.must(200, "GET", "/connectors", nil).body); got != `["paused","run","stopped"]`+"\n" {
		t.Errorf("connectors after restart: %s", got)
	}
	e.must(200, "GET", "/health", nil)
}

// TestErrorPaths checks the exact status code and body of every error.
func TestErrorPaths(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "taken", "config": fakeConfig("taken"), "initial_state": "STOPPED"})
	e.must(201, "POST", "/connectors", map[string]any{"name": "live", "config": fakeConfig("live"), "initial_state": "PAUSED"})
	missingTopics := fakeConfig("m")
	delete(missingTopics, "topics")
	unknownClass := fakeConfig("u")
	unknownClass["connector.class"] = "com.example.Nope"
	big := `{"name":"big","config":{"x":"` + strings.Repeat("a", 70<<10) + `"}}`
	cases := []struct {
		name, method, path string
		body               any
		code               int
		msg                string
	}{
		{"unknown connector", "GET", "/connectors/ghost", nil, 404, "Connector ghost not found"},
		{"unknown connector status", "GET", "/connectors/ghost/status", nil, 404, "Connector ghost not found"},
		{"unknown connector delete", "DELETE", "/connectors/ghost", nil, 404, "Connector ghost not found"},
		{"unknown connector pause", "PUT", "/connectors/ghost/pause", nil, 404, "Connector ghost not found"},
		{"unknown connector offsets", "GET", "/connectors/ghost/offsets", nil, 404, "Connector ghost not found"},
		{"duplicate name", "POST", "/connectors", map[string]any{"name": "taken", "config": fakeConfig("taken")}, 409, "Connector taken already exists"},
		{"invalid JSON", "POST", "/connectors", `{"name": "x", "config": {`, 400, "Request body is not valid JSON for this endpoint: syntax error at byte 25"},
		{"wrong JSON type", "POST", "/connectors", `{"name": "x", "config": ["tasks.max"]}`, 400, `Request body is not valid JSON for this endpoint: field "config" must not be a JSON array`},
		{"null setting", "POST", "/connectors", `{"name": "x", "config": {"tasks.max": 2, "topics": null}}`, 400, `Connector setting "topics" is null: a setting is a string (JSON numbers and booleans are stored as strings); leave it out to use its default`},
		{"object setting", "PUT", "/connectors/x/config", `{"topics": {"a": 1}}`, 400, `Connector setting "topics" is an object: a setting is a string (JSON numbers and booleans are stored as strings)`},
		{"empty body", "POST", "/connectors", ``, 400, "Request body is empty; a JSON object is required"},
		{"missing config", "POST", "/connectors", `{"name":"x"}`, 400, `Connector config is required: the body must be {"name": …, "config": {…}}`},
		{"missing required field", "POST", "/connectors", map[string]any{"name": "m", "config": missingTopics}, 400,
			"Connector configuration is invalid and contains the following 1 error(s):\ntopics: Must configure one of topics or topics.regex\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`"},
		{"unknown connector.class", "POST", "/connectors", map[string]any{"name": "u", "config": unknownClass}, 400,
			"Connector configuration is invalid and contains the following 1 error(s):\nconnector.class: unknown connector class \"com.example.Nope\"; known: fake (io.txsink.test.FakeSink)\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`"},
		{"bad initial_state", "POST", "/connectors", map[string]any{"name": "i", "config": fakeConfig("i"), "initial_state": "SLEEPING"}, 400, `initial_state must be RUNNING, PAUSED or STOPPED, got "SLEEPING"`},
		{"invalid name", "POST", "/connectors", map[string]any{"name": "a/b", "config": fakeConfig("a/b")}, 400, `connector name "a/b" is invalid: use 1 to 200 letters, digits, '.', '_' or '-'`},
		{"name mismatch", "PUT", "/connectors/other/config", fakeConfig("taken"), 400, "Connector name configuration (taken) doesn't match connector name in the URL (other)"},
		{"offsets edit while not STOPPED", "PATCH", "/connectors/live/offsets", `{"offsets":[{"partition":{"kafka_topic":"orders","kafka_partition":0},"offset":{"kafka_offset":1}}]}`, 400,
			"Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/live/stop' endpoint"},
		{"offsets reset while not STOPPED", "DELETE", "/connectors/live/offsets", nil, 400,
			"Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/live/stop' endpoint"},
		{"offsets body without offsets", "PATCH", "/connectors/taken/offsets", `{"offsets":[]}`, 400, "Partitions / offsets need to be provided for an alter offsets request"},
		{"offsets body not a list", "PATCH", "/connectors/taken/offsets", `{"offsets":{"a":1}}`, 400, `Request body is not valid JSON for this endpoint: field "offsets" must not be a JSON object`},
		{"offsets without partition", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"offset":{"kafka_offset":1}}]}`, 400, "The partition for a sink connector offset cannot be null or missing"},
		{"offsets without topic", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"partition":{"kafka_partition":0},"offset":{"kafka_offset":1}}]}`, 400, "The partition for a sink connector offset must contain the keys 'kafka_topic' and 'kafka_partition'"},
		{"offsets negative partition", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":-1},"offset":{"kafka_offset":1}}]}`, 400, "Kafka partitions must be greater than or equal to 0"},
		{"offsets bad offset", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":0},"offset":{"kafka_offset":"x"}}]}`, 400, "Kafka offsets must be valid numbers and may not be null"},
		{"offsets negative offset", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":0},"offset":{"kafka_offset":-5}}]}`, 400, "Kafka offsets must be greater than or equal to 0"},
		{"offsets offset without key", "PATCH", "/connectors/taken/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":0},"offset":{"x":1}}]}`, 400, "The offset for a sink connector should either be null or contain the key 'kafka_offset'"},
		{"offsets unknown connector", "PATCH", "/connectors/ghost/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":0},"offset":{"kafka_offset":1}}]}`, 404, "Connector ghost not found"},
		{"oversized body", "POST", "/connectors", big, 413, "Request body is larger than 65536 bytes"},
		{"method not allowed", "DELETE", "/connectors", nil, 405, "HTTP 405 Method Not Allowed"},
		{"no such route", "GET", "/nope", nil, 404, "HTTP 404 Not Found"},
		{"restart bad flag", "POST", "/connectors/taken/restart?includeTasks=maybe", nil, 400, `Query parameter includeTasks must be true or false, got "maybe"`},
		{"task restart while stopped", "POST", "/connectors/taken/tasks/0/restart", nil, 404, "Unknown task: taken-0"},
		{"unknown plugin", "GET", "/connector-plugins/nope/config", nil, 404, "Unknown plugin nope."},
		{"validate class mismatch", "PUT", "/connector-plugins/fake/config/validate", `{"connector.class":"postgres"}`, 400, "Included connector type postgres does not match request type fake"},
		{"unknown logger", "GET", "/admin/loggers/no.such", nil, 404, "Logger no.such not found."},
		{"bad log level", "PUT", "/admin/loggers/txsink", `{"level":"LOUD"}`, 400, "Invalid log level 'LOUD'."},
		{"missing log level", "PUT", "/admin/loggers/txsink", `{}`, 400, "Desired 'level' parameter was not specified in request."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.body)
			want, _ := json.Marshal(errorBody{ErrorCode: c.code, Message: c.msg})
			if r.code != c.code || strings.TrimSpace(string(r.body)) != string(want) {
				t.Errorf("%s %s:\n got %d %s\nwant %d %s", c.method, c.path, r.code, strings.TrimSpace(string(r.body)), c.code, want)
			}
			if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestSecretsNeverShown: a canary password in a connector's config (a
// PASSWORD setting and inside the URL) is absent from every response,
// from the logs and from /metrics.
func TestSecretsNeverShown(t *testing.T) {
	e := newEnv(t)
	cfg := fakeConfig("secret-conn")
	var bodies []string
	add := func(r resp) { bodies = append(bodies, string(r.body)) }
	add(e.must(201, "POST", "/connectors", map[string]any{"name": "secret-conn", "config": cfg}))
	e.waitState("secret-conn", engine.StateRunning, 1)
	e.produce(3)
	e.waitRows("secret-conn", 3)
	bad := fakeConfig("secret-conn")
	bad["fake.mode"] = "nope-" + canary // an invalid value that carries the canary
	bad["batch.linger.ms"] = canary
	for _, r := range []resp{
		e.do("GET", "/connectors", nil),
		e.do("GET", "/connectors?expand=info&expand=status", nil),
		e.do("GET", "/connectors/secret-conn", nil),
		e.do("GET", "/connectors/secret-conn/config", nil),
		e.do("GET", "/connectors/secret-conn/status", nil),
		e.do("GET", "/connectors/secret-conn/tasks", nil),
		e.do("GET", "/connectors/secret-conn/tasks/0/status", nil),
		e.do("GET", "/connectors/secret-conn/offsets", nil),
		e.do("PUT", "/connectors/secret-conn/config", bad),
		e.do("PATCH", "/connectors/secret-conn/config", map[string]string{"name": canary}),
		e.do("POST", "/connectors", map[string]any{"name": "x", "config": bad}),
		e.do("PUT", "/connector-plugins/fake/config/validate", cfg),
		e.do("PUT", "/connector-plugins/fake/config/validate", bad),
		e.do("PUT", "/connectors/secret-conn/config", cfg),
		e.do("GET", "/metrics", nil),
		e.do("GET", "/admin/loggers", nil),
		e.do("GET", "/openapi.json", nil),
	} {
		add(r)
	}
	for i, b := range bodies {
		if strings.Contains(b, canary) {
			t.Errorf("response %d contains the canary: %s", i, b)
		}
	}
	if !strings.Contains(bodies[3], `"fake.secret":"[hidden]"`) || !strings.Contains(bodies[3], `"fake.url":"fake://writer:[hidden]@127.0.0.1/db"`) {
		t.Errorf("config not shown as [hidden]: %s", bodies[3])
	}
	e.stop()
	if logs := e.logs.String(); strings.Contains(logs, canary) {
		t.Errorf("logs contain the canary:\n%s", logs)
	}
}

// TestAuth: with basic and bearer authentication configured, requests
// without valid credentials get 401; /health stays open.
func TestAuth(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Auth = Auth{BasicUser: "admin", BasicPassword: "pw", BearerToken: "tok"} })
	if r := e.do("GET", "/connectors", nil); r.code != 401 || r.hdr.Get("WWW-Authenticate") == "" {
		t.Fatalf("no credentials: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/connectors", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("admin:wrong"))); r.code != 401 {
		t.Fatalf("wrong password: %d", r.code)
	}
	if r := e.do("GET", "/connectors", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("admin:pw"))); r.code != 200 {
		t.Fatalf("basic: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/connectors", nil, "Authorization", "Bearer tok"); r.code != 200 {
		t.Fatalf("bearer: %d", r.code)
	}
	if r := e.do("GET", "/connectors", nil, "Authorization", "Bearer nope"); r.code != 401 {
		t.Fatalf("bad bearer: %d", r.code)
	}
	if r := e.do("GET", "/health", nil); r.code != 200 {
		t.Fatalf("health: %d", r.code)
	}
}

// TestLoggers: Connect's /admin/loggers shapes; setting a level applies to
// the logger and its descendants.
func TestLoggers(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "lg", "config": fakeConfig("lg"), "initial_state": "PAUSED"})
	r := e.must(200, "PUT", "/admin/loggers/txsink", map[string]string{"level": "WARN"})
	var changed []string
	_ = json.Unmarshal(r.body, &changed)
	// The PAUSED connector's tasks run (holding between rounds), so its
	// logger exists.
	if !reflect.DeepEqual(changed, []string{"txsink", "txsink.api", "txsink.connectors.lg", "txsink.worker"}) {
		t.Errorf("changed %v", changed)
	}
	var lv loggerLevel
	_ = json.Unmarshal(e.must(200, "GET", "/admin/loggers/txsink.worker", nil).body, &lv)
	if lv.Level != "WARN" || lv.LastModified == nil {
		t.Errorf("txsink.worker: %+v", lv)
	}
	e.must(204, "PUT", "/admin/loggers/root?scope=cluster", map[string]string{"level": "ERROR"})
	var all map[string]loggerLevel
	_ = json.Unmarshal(e.must(200, "GET", "/admin/loggers", nil).body, &all)
	if all["root"].Level != "ERROR" || all["txsink.api"].Level != "ERROR" {
		t.Errorf("after root=ERROR: %v", all)
	}
}

// TestRootAndHealth checks GET / and GET /health.
func TestRootAndHealth(t *testing.T) {
	e := newEnv(t)
	r := e.must(200, "GET", "/", nil)
	if got := strings.TrimSpace(string(r.body)); got != `{"version":"1.2.3","commit":"abc123","kafka_cluster_id":"kfake-cluster"}` {
		t.Errorf("root: %s", got)
	}
	r = e.must(200, "GET", "/health", nil)
	if got := strings.TrimSpace(string(r.body)); got != `{"status":"healthy","message":"Worker has completed startup and is ready to handle requests."}` {
		t.Errorf("health: %s", got)
	}
	e.worker.Close()
	if r := e.do("GET", "/health", nil); r.code != http.StatusServiceUnavailable {
		t.Errorf("health after close: %d", r.code)
	}
}

// TestFailedTaskRestartsWithBackoff: a task that fails with a terminal
// error is FAILED with its trace (secrets hidden), restarts on its own
// under the restart policy, and then writes everything.
func TestFailedTaskRestartsWithBackoff(t *testing.T) {
	e := newEnv(t)
	// FAILED lasts as long as the restart delay: 50 ms (the env's
	// default) is shorter than one status request on a loaded CI
	// machine, so the test polled past it. Two seconds, and the test
	// still shows the restart and its backoff.
	e.restartInitial = 2 * time.Second
	e.restart()
	e.must(201, "POST", "/connectors", map[string]any{"name": "flaky", "config": fakeConfig("flaky")})
	e.waitState("flaky", engine.StateRunning, 1)
	e.store.mu.Lock()
	e.store.failWrites = 2
	e.store.mu.Unlock()
	e.produce(6)
	deadline := time.Now().Add(time.Minute)
	sawFailed := false
	for !sawFailed {
		r := e.must(200, "GET", "/connectors/flaky/tasks/0/status", nil)
		var ts taskState
		_ = json.Unmarshal(r.body, &ts)
		if ts.State == "FAILED" {
			sawFailed = true
			if !strings.Contains(ts.Trace, "fake: table is gone (password [hidden] rejected)") || strings.Contains(string(r.body), canary) {
				t.Errorf("trace %q", ts.Trace)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("task never FAILED")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.waitRows("flaky", 6)
	e.waitState("flaky", engine.StateRunning, 1)
	if m := string(e.must(200, "GET", "/metrics", nil).body); !strings.Contains(m, `txsink_task_restarts_total{connector="flaky"}`) {
		t.Error("no txsink_task_restarts_total")
	}
}
