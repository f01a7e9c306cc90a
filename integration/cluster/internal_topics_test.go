package cluster

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder/configlog"
	"github.com/txsink/txsink/integration/harness"
)

// TestClusterInternalTopics (issue 25, item 1): a connector may not write
// dead letters to, or consume, the cluster's config, status or offsets
// topic, a name starting __, "." or ".." (400 naming the setting, on
// POST, PUT, PATCH and validate); and a record that reaches the config or status
// topic other than from the cluster's workers (here a plain producer of
// the test: the two-record attack of the issue, which stopped another
// connector and replaced its configuration, and forged statuses) is
// ignored and counted (txsink_cluster_records_ignored_total), each
// spelled several ways.
func TestClusterInternalTopics(t *testing.T) {
	offsetsTopic := fmt.Sprintf("connect-offsets-%08x", rand.Uint32())
	e := newEnv(t, 1, map[string]string{"offset.storage.topic": offsetsTopic})
	ws := e.start(2)
	a, b := ws[0], ws[1]
	cfgTopic, stTopic := e.cl.Setting("config.storage.topic"), e.cl.Setting("status.storage.topic")

	victim := e.connectorName("victim")
	must(t, a, 201, "POST", "/connectors", map[string]any{"name": victim, "config": e.connector("exactly_once", 1)})
	for _, w := range ws {
		waitStatus(t, w, victim, 90*time.Second, "victim running", func(st apiStatus) bool {
			ok, _ := runningOn(st, 1, ids(ws...)...)
			return ok && st.Connector.State == "RUNNING"
		})
	}

	// 1. Refusals, on every worker's REST API.
	type attack struct{ key, value string }
	var attacks []attack
	for _, dlq := range []string{cfgTopic, stTopic, offsetsTopic, "__consumer_offsets", "__transaction_state", "__txsink-dlq", ".", ".."} {
		attacks = append(attacks, attack{"errors.deadletterqueue.topic.name", dlq})
	}
	for _, topics := range []string{cfgTopic, e.topic + "," + stTopic, offsetsTopic, "__transaction_state", "__consumer_offsets", ".."} {
		attacks = append(attacks, attack{"topics", topics})
	}
	for _, re := range []string{regexp.QuoteMeta(cfgTopic), regexp.QuoteMeta(stTopic), strings.TrimSuffix(cfgTopic, "-configs") + "-.*", "(" + regexp.QuoteMeta(e.topic) + "|" + regexp.QuoteMeta(cfgTopic) + ")", "__transaction_state", "__consumer.*"} {
		attacks = append(attacks, attack{"topics.regex", re})
	}
	for i, at := range attacks {
		w := ws[i%2]
		name := e.connectorName("attack")
		cfg := e.connector("exactly_once", 1)
		cfg["errors.tolerance"] = "all"
		cfg["errors.deadletterqueue.topic.replication.factor"] = "1"
		if at.key == "topics.regex" {
			delete(cfg, "topics")
		}
		cfg[at.key] = at.value
		patch := map[string]any{"errors.tolerance": "all", "errors.deadletterqueue.topic.replication.factor": "1", at.key: at.value}
		if at.key == "topics.regex" {
			patch["topics"] = nil
		}
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/connectors", map[string]any{"name": name, "config": cfg}},
			{"PUT", "/connectors/" + name + "/config", cfg},
			{"PUT", "/connectors/" + victim + "/config", cfg},
			{"PATCH", "/connectors/" + victim + "/config", patch},
		} {
			code, out := do(t, w, req.method, req.path, req.body)
			if code != 400 || !strings.Contains(out, at.key) {
				t.Errorf("%s=%q, %s %s: %d %s, want 400 naming %s", at.key, at.value, req.method, req.path, code, out, at.key)
			}
		}
		cfg["name"] = name
		if errs := validateErrors(t, w, cfg)[at.key]; len(errs) == 0 {
			t.Errorf("%s=%q: validate reports no error on the setting", at.key, at.value)
		}
	}
	code, list := do(t, b, "GET", "/connectors", nil)
	if code != 200 || strings.Contains(list, "attack-") {
		t.Errorf("connectors after the refusals: %d %s", code, list)
	}
	if cfg := getConfig(t, a, victim); cfg["topics"] != e.topic || cfg["errors.tolerance"] != "" {
		t.Errorf("the victim's configuration changed through a refused PUT: %v", cfg)
	}

	// 2. Records written to the config topic by another producer: the
	// issue's two records (the victim STOPPED, its configuration
	// replaced), unsigned, with a made-up signature, with the signature
	// of a real record copied, and from a transactional producer with the
	// cluster's own transactional id (what a check of the writer's
	// producer id would let through).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	evil := e.connector("exactly_once", 1)
	evil["name"] = victim
	evil["topics"] = "evil-topic"
	evil["connection.url"] = "postgres://evil@127.0.0.1:1/evil?host=/var/run/postgresql"
	evil["connection.password"] = "clear-text"
	now := time.Now()
	two := []configlog.Record{PutConnectorRecord(victim, evil, now), configlog.PutTarget(victim, engine.TargetStopped)}
	sig, key := readConfigTopic(t, ctx, e.k.Bootstrap, cfgTopic)
	plain := producer(t, e.k.Bootstrap)
	var forged []*kgo.Record
	for _, hdrs := range [][]kgo.RecordHeader{
		nil,
		{{Key: configlog.SignatureHeader, Value: []byte(strings.Repeat("\xff", 32))}},
		{{Key: configlog.SignatureHeader, Value: sig}},
		{{Key: "txsink-signature ", Value: sig}},
	} {
		for _, r := range two {
			forged = append(forged, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte(r.Key), Value: r.Value, Headers: hdrs})
		}
	}
	if err := plain.ProduceSync(ctx, forged...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(e.k.Bootstrap), kgo.TransactionalID(configlog.TransactionalID(e.cl.GroupID())),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range two {
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte(r.Key), Value: r.Value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	forgedConfig := len(forged) + len(two)

	// 3. Statuses written to the status topic by another producer: the
	// victim and its task FAILED under a newer generation, by a worker
	// that does not exist, and a tombstone of the task's status.
	failed := []byte(`{"v":1,"state":"FAILED","trace":"forged","worker_id":"127.0.0.1:1","generation":100000}`)
	forgedStatus := []*kgo.Record{
		{Topic: stTopic, Key: []byte(configlog.StatusConnectorKey(victim)), Value: failed},
		{Topic: stTopic, Key: []byte(configlog.StatusTaskKey(victim, 0)), Value: failed},
		{Topic: stTopic, Key: []byte(configlog.StatusTaskKey(victim, 0)), Value: failed, Headers: []kgo.RecordHeader{{Key: configlog.SignatureHeader, Value: sig}}},
		{Topic: stTopic, Key: []byte(configlog.StatusConnectorKey(victim)), Value: failed, Headers: []kgo.RecordHeader{{Key: configlog.SignatureHeader, Value: []byte("x")}}},
		{Topic: stTopic, Key: []byte(configlog.StatusTaskKey(victim, 0))},
	}
	if err := plain.ProduceSync(ctx, forgedStatus...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// Each worker read them: either they applied (the attack worked) or
	// the metric counts them.
	for _, w := range ws {
		deadline := time.Now().Add(90 * time.Second)
		for {
			c, s := ignored(t, w, "config"), ignored(t, w, "status")
			st, _ := status(t, w, victim)
			cfg := getConfig(t, w, victim)
			attacked := cfg["topics"] == "evil-topic" || st.Connector.State == "STOPPED" || st.Connector.State == "FAILED" || len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED"
			if attacked {
				t.Errorf("%s: the forged records applied: config %v, status %+v", w.ID, cfg, st)
				break
			}
			if c >= forgedConfig && s >= len(forgedStatus) {
				if c != forgedConfig || s != len(forgedStatus) {
					t.Errorf("%s: ignored %d config and %d status records, want %d and %d", w.ID, c, s, forgedConfig, len(forgedStatus))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the forged records were neither applied nor counted: %d config, %d status ignored; status %+v", w.ID, c, s, st)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The cluster keeps working (the forged transactional producer fenced
	// the leader's writer: the next leader's writer fences it in turn),
	// and the victim runs with its configuration.
	other := e.connectorName("after")
	must(t, b, 201, "POST", "/connectors", map[string]any{"name": other, "config": e.connector("exactly_once", 1)})
	for _, w := range ws {
		waitStatus(t, w, other, 90*time.Second, "a connector created after the attack runs", func(st apiStatus) bool { return allTasks(st, 1, "RUNNING") })
		st := waitStatus(t, w, victim, 30*time.Second, "victim still running", func(st apiStatus) bool { return allTasks(st, 1, "RUNNING") })
		if st.Connector.State != "RUNNING" {
			t.Errorf("%s: victim connector %s", w.ID, st.Connector.State)
		}
		if cfg := getConfig(t, w, victim); cfg["topics"] != e.topic || cfg["connection.url"] != e.dbUser {
			t.Errorf("%s: victim configuration %v", w.ID, cfg)
		}
	}
	// Nothing of the records' content in the logs; the key nowhere.
	if key == "" {
		t.Error("no key record in the config topic")
	}
	raw, _ := base64.StdEncoding.DecodeString(key)
	leaks := func(s string) bool {
		return key != "" && (strings.Contains(s, key) || strings.Contains(s, hex.EncodeToString(raw)) || strings.Contains(s, base64.RawURLEncoding.EncodeToString(raw)))
	}
	for _, w := range ws {
		for _, path := range []string{"/", "/connectors?expand=info&expand=status", "/connectors/" + victim, "/connectors/" + victim + "/config",
			"/connectors/" + victim + "/status", "/connectors/" + victim + "/tasks", "/connectors/" + victim + "/topics", "/metrics", "/admin/loggers"} {
			if code, out := do(t, w, "GET", path, nil); code != 200 || leaks(out) {
				t.Errorf("%s GET %s: %d (key shown: %v)", w.ID, path, code, leaks(out))
			}
		}
		logs := w.Logs()
		if leaks(logs) {
			t.Errorf("%s logs the cluster's key", w.ID)
		}
		if strings.Contains(logs, "clear-text") || strings.Contains(logs, "evil-topic") || strings.Contains(logs, "127.0.0.1:1/evil") {
			t.Errorf("%s logs a forged record's content", w.ID)
		}
		if !strings.Contains(logs, "record ignored: not signed by this cluster") {
			t.Errorf("%s does not log the ignored records", w.ID)
		}
	}
}

// PutConnectorRecord is the config record of a connector's configuration.
func PutConnectorRecord(name string, cfg map[string]string, at time.Time) configlog.Record {
	return configlog.PutConnector(name, cfg, at, at)
}

func producer(t *testing.T, bootstrap string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readConfigTopic returns the signature header of a record the cluster
// wrote to its config topic and the cluster's key (nil and "" before a fix
// that signs records).
func readConfigTopic(t *testing.T, ctx context.Context, bootstrap, topic string) ([]byte, string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var sig []byte
	var key string
	for rctx.Err() == nil {
		fs := cl.PollFetches(rctx)
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == configlog.SignatureHeader && sig == nil {
					sig = h.Value
				}
			}
			if strings.HasPrefix(string(r.Key), "cluster-key-") {
				var v struct {
					Key string `json:"key"`
				}
				_ = json.Unmarshal(r.Value, &v)
				key = v.Key
			}
		})
		if sig != nil && key != "" {
			break
		}
	}
	return sig, key
}

// validateErrors returns the errors PUT …/config/validate reports, per
// setting.
func validateErrors(t *testing.T, w *harness.Worker, cfg map[string]string) map[string][]string {
	t.Helper()
	code, out := do(t, w, "PUT", "/connector-plugins/postgres/config/validate", cfg)
	if code != 200 {
		t.Fatalf("validate: %d %s", code, out)
	}
	var res struct {
		Configs []struct {
			Value struct {
				Name   string   `json:"name"`
				Errors []string `json:"errors"`
			} `json:"value"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("validate: %v: %s", err, out)
	}
	errs := map[string][]string{}
	for _, c := range res.Configs {
		if len(c.Value.Errors) > 0 {
			errs[c.Value.Name] = append(errs[c.Value.Name], c.Value.Errors...)
		}
	}
	return errs
}

func getConfig(t *testing.T, w *harness.Worker, name string) map[string]string {
	t.Helper()
	code, out := do(t, w, "GET", "/connectors/"+name+"/config", nil)
	if code != 200 {
		return nil
	}
	var cfg map[string]string
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("config: %v: %s", err, out)
	}
	return cfg
}

// ignored sums txsink_cluster_records_ignored_total of a topic ("config"
// or "status") on a worker's /metrics (0 when the metric is missing).
func ignored(t *testing.T, w *harness.Worker, topic string) int {
	t.Helper()
	code, out := do(t, w, "GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "txsink_cluster_records_ignored_total{") || !strings.Contains(l, `topic="`+topic+`"`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q", l)
		}
		n += int(v)
	}
	return n
}
