package integration

// What an operator sees must be true (issue 27): misspelt and foreign
// settings are caught on a real worker ("txsink serve"), against a real
// broker and a real PostgreSQL server.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
)

// validateAnswer is the part of Connect's ConfigInfos the tests read.
type validateAnswer struct {
	ErrorCount int `json:"error_count"`
	Configs    []struct {
		Value struct {
			Name   string   `json:"name"`
			Errors []string `json:"errors"`
		} `json:"value"`
	} `json:"configs"`
}

// errorsOf returns the errors validate reports on each setting.
func (v validateAnswer) errorsOf() map[string][]string {
	out := map[string][]string{}
	for _, c := range v.Configs {
		out[c.Value.Name] = append(out[c.Value.Name], c.Value.Errors...)
	}
	return out
}

func operatorValidate(t *testing.T, w *worker, cfg map[string]string) validateAnswer {
	t.Helper()
	var v validateAnswer
	if err := json.Unmarshal([]byte(w.must(t, 200, "PUT", "/connector-plugins/postgres/config/validate", cfg)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOperatorConfigTypos: a setting within a small edit distance of a
// txsink setting is refused with "did you mean" on create, PUT, PATCH,
// validate and the CLI; an unknown one is accepted, listed by validate
// and logged. On main before issue 27 every one of these was accepted
// silently (201, validate with no error, no log line).
func TestOperatorConfigTypos(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_typo_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-typo")

	with := func(name string, kv ...string) map[string]string {
		c := baseConnector(name, topic, dbURL, "exactly_once")
		for i := 0; i < len(kv); i += 2 {
			c[kv[i]] = kv[i+1]
		}
		return c
	}
	refused := func(code int, body, key, suggestion string) {
		t.Helper()
		want := "did you mean `" + suggestion + "`?"
		if code != 400 || !strings.Contains(body, key+": ") || !strings.Contains(body, want) {
			t.Errorf("%s: want 400 naming it and %q, got %d %s", key, want, code, body)
		}
	}

	// POST /connectors.
	name := "op-typo-" + randSuffix(t)
	code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": with(name, "auto.craete", "true")})
	refused(code, body, "auto.craete", "auto.create")
	code, body = w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": with(name, "delivery.guarentee", "at_least_once")})
	refused(code, body, "delivery.guarentee", "delivery.guarantee")

	// PUT and PATCH …/config of an existing connector (created STOPPED:
	// these cases need no running task).
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": with(name), "initial_state": "STOPPED"})
	code, body = w.call(t, "PUT", "/connectors/"+name+"/config", with(name, "errors.tolerence", "all"))
	refused(code, body, "errors.tolerence", "errors.tolerance")
	code, body = w.call(t, "PATCH", "/connectors/"+name+"/config", map[string]string{"Auto.Create": "true"})
	refused(code, body, "Auto.Create", "auto.create")

	// Validate: the misspelt setting is an entry with the error; an
	// unknown one too (create accepts it).
	v := operatorValidate(t, w, with(name, "table.name.fromat", "x_${topic}", "my.team.label", "payments"))
	errs := v.errorsOf()
	if e := errs["table.name.fromat"]; len(e) != 1 || !strings.Contains(e[0], "did you mean `table.name.format`?") {
		t.Errorf("validate on table.name.fromat: %v", e)
	}
	if e := errs["my.team.label"]; len(e) != 1 || !strings.Contains(e[0], "txsink ignores it") {
		t.Errorf("validate on an unknown setting: %v", e)
	}
	if v.ErrorCount != 2 {
		t.Errorf("error_count %d, want 2: %v", v.ErrorCount, errs)
	}

	// The CLI shows the API's refusal.
	cliName := "op-typo-cli-" + randSuffix(t)
	path := writeConnector(t, with(cliName, "pk.feilds", "id"))
	r := runCLI(t, []string{"TXSINK_URL=" + w.base}, "create", "-f", path)
	if r.code != 1 || !strings.Contains(r.stderr, "pk.feilds") || !strings.Contains(r.stderr, "did you mean `pk.fields`?") {
		t.Errorf("CLI create with pk.feilds: want exit 1 and did you mean\n%v", r)
	}

	// An unknown setting is accepted and logged at create.
	other := "op-unknown-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": other, "config": with(other, "my.team.label", "payments"), "initial_state": "STOPPED"})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.output(), "does not know; they are ignored") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about my.team.label:\n%s", tail(w.output(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, line := range strings.Split(w.output(), "\n") {
		if strings.Contains(line, "does not know; they are ignored") && !(strings.Contains(line, other) && strings.Contains(line, "my.team.label")) {
			t.Errorf("log line does not name the connector and the setting: %s", line)
		}
	}
}

// TestOperatorVendorConfigs sends the Confluent and Debezium JDBC sinks'
// documented configurations (config/testdata/vendor, connector.class
// replaced) to a real worker's validate and create: each setting is
// accepted, or refused with the advice docs/migrating.md gives. On main
// before issue 27 every foreign setting was accepted without a word.
func TestOperatorVendorConfigs(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_vendor_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-vendor")
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "config", "testdata", "vendor", "*.json"))
	if err != nil || len(files) < 5 {
		t.Fatalf("vendor configurations: %v (%d)", err, len(files))
	}
	refusedSeen := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var vc struct {
			Config map[string]string `json:"config"`
		}
		if err := json.Unmarshal(b, &vc); err != nil {
			t.Fatal(err)
		}
		cfg := map[string]string{}
		for k, v := range vc.Config {
			cfg[k] = v
		}
		cfg["connector.class"] = "postgres"
		cfg["topics"] = topic
		// The vendor's URL names another host: point it at the test's
		// database, still as a JDBC URL, with its user.
		cfg["connection.url"] = "jdbc:postgresql://" + u.Host + u.Path + "?sslmode=disable"
		if _, ok := cfg["connection.user"]; ok {
			cfg["connection.user"] = u.User.Username()
		}
		// validate does not connect; a password of its own keeps the
		// log and answer scrubbing (of secrets) off the messages.
		if _, ok := cfg["connection.password"]; ok {
			cfg["connection.password"] = "Vendor-Secret-7f3a"
		}
		errs := operatorValidate(t, w, cfg).errorsOf()
		anyRefused := false
		for key, val := range vc.Config {
			f, foreign := config.LookupForeign(key)
			refuse := foreign && f.Kind == config.Unsupported && (f.Same == nil || !f.Same(strings.TrimSpace(val)))
			switch {
			case refuse && (len(errs[key]) != 1 || !strings.Contains(errs[key][0], f.Advice)):
				t.Errorf("%s: %s=%q: want refused with %q, got %v", filepath.Base(file), key, val, f.Advice, errs[key])
			case refuse:
				refusedSeen++
				anyRefused = true
			case foreign && f.Kind != config.Native && len(errs[key]) > 0:
				t.Errorf("%s: %s=%q: want accepted, got %v", filepath.Base(file), key, val, errs[key])
			}
		}
		// Create agrees with validate: refused with 400 naming a refused
		// setting, or created.
		name := "op-vendor-" + randSuffix(t)
		cfg["name"] = name
		code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": cfg, "initial_state": "STOPPED"})
		if anyRefused && code != 400 || !anyRefused && code != 201 {
			t.Errorf("%s: create %d, want %v refused: %s", filepath.Base(file), code, anyRefused, body)
		}
	}
	if refusedSeen < 10 {
		t.Errorf("only %d refused settings seen", refusedSeen)
	}
}

// TestOperatorTableNotFoundHint: with auto.create off, a missing table
// fails the task with an error that points at auto.create (on main it
// claimed txsink does not create target tables).
func TestOperatorTableNotFoundHint(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_missing_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-missing")
	name := "op-missing-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, topic, dbURL, "exactly_once")})
	produce(t, k.Bootstrap, topic, produceOpts{Records: 5, Partitions: 1, Seed: 3}, &upstream{})
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
		var st apiStatus
		_ = json.Unmarshal([]byte(b), &st)
		if len(st.Tasks) == 1 && st.Tasks[0].State == "FAILED" {
			tr := st.Tasks[0].Trace
			if !strings.Contains(tr, "table not found") || !strings.Contains(tr, "auto.create=true") || strings.Contains(tr, "does not create target tables") {
				t.Errorf("trace: %s", tr)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not FAILED after 90s: %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// abortTail appends aborted transactions of n records to each of the
// topic's partitions, after everything produced so far.
func abortTail(t *testing.T, bootstrap, topic string, partitions int32, txns, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.TransactionalID("op-abort-"+topic),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range txns {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for p := range partitions {
			for i := range n {
				recs = append(recs, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf(`{"id":"aborted-%d-%d","seq":0,"body":""}`, p, i))})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOperatorLagZeroAfterAbortedTail: after a full drain of partitions
// whose logs end with aborted transactions, the lag is 0 in the status
// (REST and CLI), in txsink_partition_lag and in txsink verify, while
// the end offset is well past the stored position. On main before issue
// 27 the status, CLI and metric showed end offset − next offset (here
// over 60 per partition) for good, while verify said 0.
func TestOperatorLagZeroAfterAbortedTail(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "op_lag_" + randSuffix(t)
	const parts = 3
	createTopic(t, k, topic, parts)
	createEventsTable(t, pool, topic)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-lag")
	name := "op-lag-" + randSuffix(t)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})

	u := &upstream{}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 2000, Partitions: parts, AbortRatio: 0.2, MaxTxn: 50, Seed: 27}, u)
	abortTail(t, k.Bootstrap, topic, parts, 3, 20) // 60 aborted records and 3 markers per partition
	waitDrained(t, pool, name, u, 2*time.Minute, nil)
	if problems := exactness(u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %v", len(problems), problems[:min(10, len(problems))])
	}

	// The REST status: every partition known, lag 0, end offset past
	// the stored position by the aborted tail.
	deadline := time.Now().Add(30 * time.Second)
	var st apiStatus
	for {
		_, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
		st = apiStatus{}
		_ = json.Unmarshal([]byte(b), &st)
		n, zero := 0, true
		for _, task := range st.Tasks {
			for _, p := range task.Txsink.Partitions {
				n++
				zero = zero && p.Lag != nil && *p.Lag == 0
			}
		}
		if n == parts && zero {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status lag not 0 on every partition after the drain: %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, raw := w.call(t, "GET", "/connectors/"+name+"/status", nil)
	var ends struct {
		Tasks []struct {
			Txsink struct {
				Partitions []struct {
					Partition  int32  `json:"partition"`
					NextOffset int64  `json:"next_offset"`
					EndOffset  *int64 `json:"end_offset"`
				} `json:"partitions"`
			} `json:"txsink"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal([]byte(raw), &ends)
	for _, task := range ends.Tasks {
		for _, p := range task.Txsink.Partitions {
			if p.EndOffset == nil || *p.EndOffset-p.NextOffset < 60 {
				t.Errorf("partition %d: end offset %v, next %d: the aborted tail should lie past the position", p.Partition, p.EndOffset, p.NextOffset)
			}
		}
	}

	// The CLI shows the same.
	out := cliOK(t, []string{"TXSINK_URL=" + w.base}, "status", name, "-output", "json")
	var cst apiStatus
	if err := json.Unmarshal([]byte(out), &cst); err != nil {
		t.Fatalf("CLI status: %v\n%s", err, out)
	}
	for _, task := range cst.Tasks {
		for _, p := range task.Txsink.Partitions {
			if p.Lag == nil || *p.Lag != 0 {
				t.Errorf("CLI status: partition %d lag %v, want 0", p.Partition, p.Lag)
			}
		}
	}

	// The metric: one series per partition, each 0.
	_, metrics := w.call(t, "GET", "/metrics", nil)
	series := 0
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "txsink_partition_lag{") || !strings.Contains(line, `connector="`+name+`"`) {
			continue
		}
		series++
		if f := strings.Fields(line); f[len(f)-1] != "0" {
			t.Errorf("metric: %s", line)
		}
	}
	if series != parts {
		t.Errorf("%d txsink_partition_lag series for %s, want %d", series, name, parts)
	}

	// verify: lag 0 on every partition, no anomaly.
	r := runCommand(t, nil, "verify", "-bootstrap", k.Bootstrap, "-config", writeConnector(t, cfg), "-id-column", "id", "-prepared-grace", "0", "-max-lag", "0", "-output", "json")
	var rep struct {
		Lag        int64 `json:"lag"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			Lag       int64 `json:"lag"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("verify: exit %d, %v\n%v", r.code, err, r)
	}
	if rep.Lag != 0 || len(rep.Partitions) != parts {
		t.Errorf("verify: lag %d over %d partitions, want 0 over %d", rep.Lag, len(rep.Partitions), parts)
	}
}
