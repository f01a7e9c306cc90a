package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/transform"
	"github.com/txsink/txsink/twophase"
)

// The behaviours of issue 17 where Kafka Connect's clients broke on
// txsink: each test here failed before its fix. integration/
// connectdiff_test.go compares the same requests with a live Connect
// worker.

// TestConfigValuesAsJSONScalars: numbers and booleans in a configuration
// are accepted and stored as strings, as Connect's Jackson binding does
// ("tasks.max": 1 → "1"), on create, PUT, PATCH and validate.
func TestConfigValuesAsJSONScalars(t *testing.T) {
	e := newEnv(t)
	cfg := map[string]any{}
	for k, v := range fakeConfig("nums") {
		cfg[k] = v
	}
	cfg["tasks.max"] = 1
	cfg["session.timeout.ms"] = 6000
	cfg["batch.linger.ms"] = 5.0e0
	cfg["delete.enabled"] = true
	r := e.must(201, "POST", "/connectors", map[string]any{"name": "nums", "config": cfg, "initial_state": "STOPPED"})
	var inf connectorInfo
	if err := json.Unmarshal(r.body, &inf); err != nil {
		t.Fatal(err)
	}
	stored, _ := e.worker.Config("nums")
	for k, want := range map[string]string{"tasks.max": "1", "session.timeout.ms": "6000", "batch.linger.ms": "5", "delete.enabled": "true"} {
		if stored[k] != want || inf.Config[k] != want {
			t.Errorf("%s stored %q, shown %q; want %q", k, stored[k], inf.Config[k], want)
		}
	}
	// The JSON text of a number is kept as written (Jackson's getText).
	r = e.must(200, "PUT", "/connectors/nums/config", strings.Replace(mustJSON(t, fakeConfig("nums")), `"tasks.max":"1"`, `"tasks.max":2`, 1))
	if got := r.json(t).(map[string]any)["config"].(map[string]any)["tasks.max"]; got != "2" {
		t.Errorf("PUT tasks.max %v, want \"2\"", got)
	}
	r = e.must(200, "PATCH", "/connectors/nums/config", `{"tasks.max": 1, "group.id": 1.5e1, "delete.enabled": false}`)
	got := r.json(t).(map[string]any)["config"].(map[string]any)
	if got["tasks.max"] != "1" || got["group.id"] != "1.5e1" || got["delete.enabled"] != "false" {
		t.Errorf("PATCH config %v", got)
	}
	// A number that is not a valid value is the setting's error, not a
	// JSON error.
	r = e.must(200, "PUT", "/connector-plugins/fake/config/validate", `{"connector.class":"fake","topics":"orders","tasks.max":0}`)
	var ci configInfos
	_ = json.Unmarshal(r.body, &ci)
	found := false
	for _, c := range ci.Configs {
		if c.Value.Name == "tasks.max" {
			found = c.Value.Value != nil && *c.Value.Value == "0" && len(c.Value.Errors) == 1
		}
	}
	if !found {
		t.Errorf("validate with tasks.max 0 (a number): %s", r.body)
	}
}

// TestConfigNullRefused: a null setting is refused with the setting
// named (Connect refuses it with a 500), except in PATCH, where null
// removes the setting (Connect 3.8+).
func TestConfigNullRefused(t *testing.T) {
	e := newEnv(t)
	want := `Connector setting "fake.mode" is null: a setting is a string (JSON numbers and booleans are stored as strings); leave it out to use its default`
	body := strings.Replace(mustJSON(t, fakeConfig("nulls")), `{`, `{"fake.mode":null,`, 1)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/connectors", `{"name":"nulls","config":` + body + `}`},
		{"PUT", "/connectors/nulls/config", body},
		{"PUT", "/connector-plugins/fake/config/validate", body},
	} {
		r := e.do(c.method, c.path, c.body)
		var eb errorBody
		_ = json.Unmarshal(r.body, &eb)
		if r.code != 400 || eb.Message != want {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	if _, err := e.worker.Info(context.Background(), "nulls"); err == nil {
		t.Fatal("a configuration with a null setting was stored")
	}
	e.must(201, "POST", "/connectors", map[string]any{"name": "nulls", "config": fakeConfig("nulls"), "initial_state": "STOPPED"})
	r := e.must(200, "PATCH", "/connectors/nulls/config", `{"fake.mode": null}`)
	if _, ok := r.json(t).(map[string]any)["config"].(map[string]any)["fake.mode"]; ok {
		t.Errorf("PATCH null kept the setting: %s", r.body)
	}
}

// TestInitialStateCaseInsensitive: initial_state is read case-insensitively,
// as Connect's InitialState.forValue does.
func TestInitialStateCaseInsensitive(t *testing.T) {
	e := newEnv(t)
	for name, st := range map[string]string{"p": "paused", "s": "Stopped", "r": "running"} {
		e.must(201, "POST", "/connectors", map[string]any{"name": name, "config": fakeConfig(name), "initial_state": st})
	}
	e.waitState("p", engine.StatePaused, 1)
	e.waitState("s", engine.StateStopped, 0)
	e.waitState("r", engine.StateRunning, 1)
	r := e.must(400, "POST", "/connectors", map[string]any{"name": "b", "config": fakeConfig("b"), "initial_state": "sleeping"})
	if !strings.Contains(string(r.body), `got \"sleeping\"`) {
		t.Errorf("bad initial_state: %s", r.body)
	}
}

// TestLocationAbsolute: 201 responses carry an absolute Location built
// from the request's scheme and Host, as Connect's JAX-RS does.
func TestLocationAbsolute(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "POST", "/connectors", map[string]any{"name": "loc", "config": fakeConfig("loc"), "initial_state": "STOPPED"})
	if got, want := r.hdr.Get("Location"), e.srv.URL+"/connectors/loc"; got != want {
		t.Errorf("POST Location %q, want %q", got, want)
	}
	req, err := http.NewRequest("PUT", e.srv.URL+"/connectors/loc2/config", strings.NewReader(mustJSON(t, fakeConfig("loc2"))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Host = "localhost:8083"
	r = e.send(req)
	if got := r.hdr.Get("Location"); r.code != 201 || got != "http://localhost:8083/connectors/loc2" {
		t.Errorf("PUT: %d Location %q", r.code, got)
	}
}

// TestHeadAndOptions: HEAD is GET without a body; OPTIONS lists the
// path's methods in Allow and as text, as Connect's Jersey answers.
func TestHeadAndOptions(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "h", "config": fakeConfig("h"), "initial_state": "STOPPED"})
	for _, path := range []string{"/", "/connectors", "/connectors/h", "/connectors/h/status", "/connectors/ghost", "/nope"} {
		get := e.do("GET", path, nil)
		head := e.do("HEAD", path, nil)
		if head.code != get.code || len(head.body) != 0 || head.hdr.Get("Content-Type") != get.hdr.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q %q; GET: %d %q", path, head.code, head.body, head.hdr.Get("Content-Type"), get.code, get.hdr.Get("Content-Type"))
		}
		if cl := head.hdr.Get("Content-Length"); cl != "" && cl != get.hdr.Get("Content-Length") {
			t.Errorf("HEAD %s: Content-Length %s, GET's %s", path, cl, get.hdr.Get("Content-Length"))
		}
	}
	if r := e.do("HEAD", "/connectors/h/restart", nil); r.code != 405 {
		t.Errorf("HEAD on a POST-only path: %d", r.code)
	}
	for path, want := range map[string]string{
		"/":                                    "HEAD,GET,OPTIONS",
		"/connectors":                          "HEAD,GET,POST,OPTIONS",
		"/connectors/h":                        "HEAD,GET,DELETE,OPTIONS",
		"/connectors/ghost":                    "HEAD,GET,DELETE,OPTIONS",
		"/connectors/h/restart":                "POST,OPTIONS",
		"/connectors/h/config":                 "HEAD,GET,PUT,PATCH,OPTIONS",
		"/connectors/h/offsets":                "HEAD,GET,PATCH,DELETE,OPTIONS",
		"/connector-plugins/x/config/validate": "PUT,OPTIONS",
	} {
		r := e.do("OPTIONS", path, nil)
		if r.code != 200 || r.hdr.Get("Allow") != want || string(r.body) != strings.ReplaceAll(want, ",", ", ") || r.hdr.Get("Content-Type") != "text/plain" {
			t.Errorf("OPTIONS %s: %d Allow %q body %q, want Allow %q", path, r.code, r.hdr.Get("Allow"), r.body, want)
		}
	}
	r := e.do("OPTIONS", "/connectors", nil, "Accept", "application/json")
	if r.code != 200 || len(r.body) != 0 || r.hdr.Get("Content-Type") != "application/json" || r.hdr.Get("Allow") == "" {
		t.Errorf("OPTIONS accepting JSON: %d %q %v", r.code, r.body, r.hdr)
	}
	if r := e.do("OPTIONS", "/nope", nil); r.code != 404 {
		t.Errorf("OPTIONS on an unknown path: %d", r.code)
	}
}

// TestPluginsConnectorsOnlyFalse: connector-plugins?connectorsOnly=false
// lists the converters, transforms and predicates with Connect's type
// names.
func TestPluginsConnectorsOnlyFalse(t *testing.T) {
	e := newEnv(t)
	var only, all []pluginInfo
	_ = json.Unmarshal(e.must(200, "GET", "/connector-plugins", nil).body, &only)
	_ = json.Unmarshal(e.must(200, "GET", "/connector-plugins?connectorsOnly=false", nil).body, &all)
	if len(only) != 1 || only[0].Type != "sink" {
		t.Fatalf("connectors only: %+v", only)
	}
	byType := map[string][]string{}
	for _, p := range all {
		byType[p.Type] = append(byType[p.Type], p.Class)
		if p.Version == "" {
			t.Errorf("%s has no version", p.Class)
		}
	}
	var conv []string
	for _, p := range convert.Plugins() {
		conv = append(conv, p.Class)
	}
	for typ, want := range map[string][]string{
		"sink":           {"io.txsink.test.FakeSink"},
		"converter":      conv,
		"transformation": transform.TransformClasses(),
		"predicate":      transform.PredicateClasses(),
	} {
		got := byType[typ]
		slices.Sort(got)
		slices.Sort(want)
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("type %s: %v, want %v", typ, got, want)
		}
	}
	for _, c := range []string{"org.apache.kafka.connect.json.JsonConverter", "org.apache.kafka.connect.transforms.RegexRouter", "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"} {
		if !slices.ContainsFunc(all, func(p pluginInfo) bool { return p.Class == c }) {
			t.Errorf("%s not listed", c)
		}
	}
	e.must(400, "GET", "/connector-plugins?connectorsOnly=maybe", nil)
}

// TestActiveTopics: GET /connectors/{c}/topics shows the topics the
// connector committed records from, in Connect's shape; PUT …/topics/reset
// (202) empties the set until records are committed again.
func TestActiveTopics(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "tp", "config": fakeConfig("tp")})
	e.waitState("tp", engine.StateRunning, 1)
	if r := e.must(200, "GET", "/connectors/tp/topics", nil); strings.TrimSpace(string(r.body)) != `{"tp":{"topics":[]}}` {
		t.Errorf("before any record: %s", r.body)
	}
	e.produce(4)
	e.waitRows("tp", 4)
	if r := e.must(200, "GET", "/connectors/tp/topics", nil); strings.TrimSpace(string(r.body)) != `{"tp":{"topics":["orders"]}}` {
		t.Errorf("after records: %s", r.body)
	}
	r := e.must(202, "PUT", "/connectors/tp/topics/reset", nil)
	if len(r.body) != 0 {
		t.Errorf("reset body %q", r.body)
	}
	if r := e.must(200, "GET", "/connectors/tp/topics", nil); strings.TrimSpace(string(r.body)) != `{"tp":{"topics":[]}}` {
		t.Errorf("after reset: %s", r.body)
	}
	e.produce(2)
	e.waitRows("tp", 6)
	if r := e.must(200, "GET", "/connectors/tp/topics", nil); strings.TrimSpace(string(r.body)) != `{"tp":{"topics":["orders"]}}` {
		t.Errorf("after new records: %s", r.body)
	}
	e.must(404, "GET", "/connectors/ghost/topics", nil)
	e.must(404, "PUT", "/connectors/ghost/topics/reset", nil)
}

// TestStatusWorkerIDAndVersion: worker_id is the worker's advertised id
// (Connect's host:port) and the states carry the plugin version.
func TestStatusWorkerIDAndVersion(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "v", "config": fakeConfig("v"), "initial_state": "PAUSED"})
	e.waitState("v", engine.StatePaused, 1)
	var st connectorStatus
	_ = json.Unmarshal(e.must(200, "GET", "/connectors/v/status", nil).body, &st)
	if st.Connector.WorkerID != "127.0.0.1:8083" || st.Connector.Version != "0.1" || len(st.Tasks) != 1 || st.Tasks[0].WorkerID != "127.0.0.1:8083" || st.Tasks[0].Version != "0.1" {
		t.Errorf("status %+v", st)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStatusPage: /ui shows connectors, tasks, partitions with
// next_offset and lag, in-doubt batches and the last rounds' timings;
// it has no scripts, forms or external assets, and needs the API's
// authentication.
func TestStatusPage(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Auth = Auth{BasicUser: "admin", BasicPassword: "pw"} })
	basic := []string{"Authorization", "Basic YWRtaW46cHc="} // admin:pw
	if r := e.do("GET", "/ui", nil); r.code != 401 || r.hdr.Get("WWW-Authenticate") == "" {
		t.Fatalf("/ui without credentials: %d", r.code)
	}
	if r := e.do("POST", "/connectors", map[string]any{"name": "ui1", "config": fakeConfig("ui1")}, basic...); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	e.waitState("ui1", engine.StateRunning, 1)
	e.produce(6)
	e.waitRows("ui1", 6)
	e.store.mu.Lock()
	e.store.inDoubt["ui1"] = []twophase.BatchID{{Connector: "ui1", Topic: "orders", Partition: 1, First: 40, Last: 47}}
	e.store.mu.Unlock()
	r := e.do("GET", "/ui", nil, basic...)
	page := string(r.body)
	if r.code != 200 || !strings.HasPrefix(r.hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("/ui: %d %s", r.code, r.hdr.Get("Content-Type"))
	}
	if csp := r.hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	for _, want := range []string{
		`<section class="connector" id="connector-ui1">`,
		`<span class="state running">RUNNING</span>`,
		`<th class="num">next_offset</th>`, `<td>orders</td>`,
		`<td class="num">40</td><td class="num">47</td>`, // the in-doubt batch
		`<th class="num">prepare ms</th>`, `<td>committed</td>`,
		`127.0.0.1:8083`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/ui lacks %q", want)
		}
	}
	for _, banned := range []string{"<script", "<form", "<input", "<button", "src=", "href=", "@import", "url(", canary} {
		if strings.Contains(strings.ToLower(page), strings.ToLower(banned)) {
			t.Errorf("/ui contains %q", banned)
		}
	}
	if r := e.do("POST", "/ui", nil, basic...); r.code != 405 {
		t.Errorf("POST /ui: %d", r.code)
	}
}

// TestRestartTaskOfPausedConnector: restarting a task of a PAUSED
// connector answers 204 and leaves it PAUSED, as Connect does (issue 17
// item 2; kafka-connect-api's cycle_connector pauses, restarts the tasks
// and resumes).
func TestRestartTaskOfPausedConnector(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "cyc", "config": fakeConfig("cyc")})
	e.waitState("cyc", engine.StateRunning, 1)
	e.must(202, "PUT", "/connectors/cyc/pause", nil)
	e.waitState("cyc", engine.StatePaused, 1)
	e.must(204, "POST", "/connectors/cyc/tasks/0/restart", nil)
	e.waitState("cyc", engine.StatePaused, 1)
	e.must(404, "POST", "/connectors/cyc/tasks/1/restart", nil)
	e.must(202, "PUT", "/connectors/cyc/resume", nil)
	e.waitState("cyc", engine.StateRunning, 1)
	e.produce(3)
	e.waitRows("cyc", 3)
	// STOPPED: no tasks, so 404 (Connect's distributed herder: "Unknown
	// task"; its standalone herder fails with a NullPointerException).
	e.must(204, "PUT", "/connectors/cyc/stop", nil)
	e.waitState("cyc", engine.StateStopped, 0)
	e.must(404, "POST", "/connectors/cyc/tasks/0/restart", nil)
}

// TestSinkCannotOpen: a connector whose sink cannot open runs, and its
// tasks are FAILED with the error as their trace, as Connect shows a sink
// task that fails to start (issue 17 item 3).
func TestSinkCannotOpen(t *testing.T) {
	e := newEnv(t)
	cfg := fakeConfig("down")
	cfg["fake.url"] = "fake://writer@" + fakeDownHost + ":5432/db"
	cfg["tasks.max"] = "2"
	e.must(201, "POST", "/connectors", map[string]any{"name": "down", "config": cfg})
	var st engine.ConnectorStatus
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		st, err = e.worker.Status(context.Background(), "down")
		if err == nil && len(st.Tasks) == 2 && st.Tasks[0].State == engine.StateFailed && st.Tasks[1].State == engine.StateFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not FAILED: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Connector.State != engine.StateRunning || st.Connector.Trace != "" {
		t.Errorf("connector %s %q, want RUNNING without a trace", st.Connector.State, st.Connector.Trace)
	}
	r := e.must(200, "GET", "/connectors/down/tasks/1/status", nil)
	ts, _ := r.json(t).(map[string]any)
	if ts["state"] != "FAILED" || !strings.Contains(fmt.Sprint(ts["trace"]), "connection refused") {
		t.Errorf("task status %s", r.body)
	}
	r = e.must(200, "GET", "/connectors/down/tasks", nil)
	if n := len(r.json(t).([]any)); n != 2 {
		t.Errorf("/tasks lists %d tasks: %s", n, r.body)
	}
	// A task restart opens the sink again: still failing, still FAILED.
	e.must(204, "POST", "/connectors/down/tasks/0/restart", nil)
	if st, _ := e.worker.Status(context.Background(), "down"); len(st.Tasks) != 2 || st.Tasks[0].State != engine.StateFailed {
		t.Errorf("after a task restart: %+v", st)
	}
}

// TestPausedKeepsGroupMembership: a PAUSED connector's task stays in the
// consumer group (Stable, one member) and stops writing; records produced
// meanwhile are written after the resume, none twice (issue 17 item 5).
func TestPausedKeepsGroupMembership(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", map[string]any{"name": "pz", "config": fakeConfig("pz")})
	e.waitState("pz", engine.StateRunning, 1)
	e.produce(5)
	e.waitRows("pz", 5)
	e.must(202, "PUT", "/connectors/pz/pause", nil)
	e.waitState("pz", engine.StatePaused, 1)
	before := e.rows("pz")
	e.produce(7)
	e.waitLag("pz", 7)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gs, err := adm.DescribeGroups(context.Background(), "txsink-pz")
		if err != nil {
			t.Fatal(err)
		}
		if g := gs["txsink-pz"]; g.State != "Stable" || len(g.Members) != 1 {
			t.Fatalf("group while PAUSED: state %q, %d members; want Stable with 1", g.State, len(g.Members))
		}
	}
	if got := e.rows("pz"); got != before {
		t.Fatalf("a PAUSED connector wrote %d rows", got-before)
	}
	e.must(202, "PUT", "/connectors/pz/resume", nil)
	e.waitState("pz", engine.StateRunning, 1)
	e.waitRows("pz", 12)
	e.waitLag("pz", 0) // every record's round committed: a duplicate would be written by now
	if got := e.rows("pz"); got != 12 {
		t.Errorf("after the resume: %d rows, want 12", got)
	}
}
