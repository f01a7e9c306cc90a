package integration

// A real Debezium PostgreSQL source: Kafka Connect 4.1.1's standalone
// worker (class path from bench/peer/pom.xml) with Debezium's PostgreSQL
// connector as a plugin (deploy/debezium/pom.xml), both resolved by Maven
// once and cached (internal/connectpeer), run as a process on this
// machine against the harness's source PostgreSQL and broker.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/connectpeer"
)

// debeziumSource is a running Connect worker with one Debezium
// PostgreSQL connector.
type debeziumSource struct {
	name string
	rest string // http://127.0.0.1:port
	proc *proc
}

// debeziumOptions configure the source connector.
type debeziumOptions struct {
	// SourceURL is the source database (postgres://user:pw@host:port/db).
	SourceURL string
	// Prefix is topic.prefix; Tables the table.include.list entries
	// (schema.table).
	Prefix string
	Tables []string
	// Slot and Publication name Debezium's replication slot and
	// publication (created by Debezium).
	Slot, Publication string
	// Extra are more connector properties (such as
	// provide.transaction.metadata).
	Extra map[string]string
}

// startDebezium starts Kafka Connect with Debezium's PostgreSQL connector
// and waits until its task runs. It skips the test when java or mvn is
// missing (fails with TXSINK_TEST_REQUIRE_SERVICES). The worker is
// stopped at cleanup and its replication slot dropped.
func startDebezium(t *testing.T, k *harness.KafkaService, o debeziumOptions) *debeziumSource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	peer, err := connectpeer.PrepareWorker(ctx, "..")
	var plugins string
	if err == nil {
		plugins, err = connectpeer.ResolvePlugin(ctx, filepath.Join("..", "deploy", "debezium", "pom.xml"), "debezium-postgres")
	}
	if errors.Is(err, connectpeer.ErrUnavailable) {
		if v, _ := strconv.ParseBool(os.Getenv(harness.EnvRequireServices)); v {
			t.Fatalf("Kafka Connect with Debezium: %v, but %s is true", err, harness.EnvRequireServices)
		}
		t.Skipf("Kafka Connect with Debezium: %v: skipping", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := url.Parse(o.SourceURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := src.User.Password()
	dir := t.TempDir()
	port := cliFreePort(t)
	// The compose file's worker and connector settings
	// (deploy/debezium/*.properties), with this machine's addresses and
	// this test's names.
	name := "dbz-" + o.Prefix
	worker := readProperties(t, "worker.properties", map[string]string{
		"bootstrap.servers":            k.Bootstrap,
		"offset.storage.file.filename": filepath.Join(dir, "offsets"),
		"listeners":                    "http://127.0.0.1:" + strconv.Itoa(port),
		"plugin.path":                  plugins,
		"plugin.discovery":             "only_scan",
		"producer.linger.ms":           "5",
	})
	props := map[string]string{
		"name":               name,
		"database.hostname":  src.Hostname(),
		"database.port":      src.Port(),
		"database.user":      src.User.Username(),
		"database.password":  pw,
		"database.dbname":    strings.TrimPrefix(src.Path, "/"),
		"topic.prefix":       o.Prefix,
		"table.include.list": strings.Join(o.Tables, ","),
		"slot.name":          o.Slot,
		"publication.name":   o.Publication,
		"poll.interval.ms":   "50",
	}
	for k, v := range o.Extra {
		props[k] = v
	}
	connector := readProperties(t, "postgres-source.properties", props)
	wf, cf := filepath.Join(dir, "worker.properties"), filepath.Join(dir, "connector.properties")
	for f, s := range map[string]string{wf: worker, cf: connector} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	peer.JVM = connectpeer.LightJVM // a test worker (the benchmark keeps the defaults)
	cmd, err := peer.Standalone(dir, "768m", wf, cf)
	if err != nil {
		t.Fatal(err)
	}
	// Debezium's own progress (snapshot, slot, streaming) for failures.
	log4j := connectpeer.Log4j + "logger.dbz.name = io.debezium\nlogger.dbz.level = info\n"
	if err := os.WriteFile(filepath.Join(dir, "log4j2.properties"), []byte(log4j), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcStop(t, cmd, "Kafka Connect (Debezium)", 30*time.Second)
	d := &debeziumSource{name: name, rest: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	t.Cleanup(func() {
		p.Stop(30 * time.Second) // first: an active slot cannot be dropped
		// The slot would keep WAL and block dropping the database.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execSQL(ctx, o.SourceURL, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, o.Slot); err != nil {
			t.Logf("dropping replication slot %s: %v", o.Slot, err)
		}
	})
	d.waitRunning(t, 3*time.Minute)
	return d
}

// readProperties reads deploy/debezium/<file> (Java properties, one
// key=value a line) and returns it with set applied.
func readProperties(t *testing.T, file string, set map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "debezium", file))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		k, _, ok := strings.Cut(l, "=")
		k = strings.TrimSpace(k)
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if v, ok := set[k]; ok {
			l = k + "=" + v
		}
		seen[k] = true
		lines = append(lines, l)
	}
	for k, v := range set {
		if !seen[k] {
			lines = append(lines, k+"="+v)
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// waitRunning polls the worker's REST API until the connector and its
// task are RUNNING; a FAILED task fails the test with its trace.
func (d *debeziumSource) waitRunning(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if ok, code := d.proc.exited(); ok {
			t.Fatalf("Kafka Connect exited with %d:\n%s", code, tail(d.proc.output(), 6000))
		}
		st, err := d.status()
		if err == nil {
			last = fmt.Sprintf("%+v", st)
			if len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED" {
				t.Fatalf("Debezium's task failed: %s", st.Tasks[0].Trace)
			}
			if st.Connector.State == "RUNNING" && len(st.Tasks) > 0 && st.Tasks[0].State == "RUNNING" {
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("Debezium not running after %v (last status: %s):\n%s", timeout, last, tail(d.proc.output(), 6000))
}

// connectStatus is Connect's connector status.
type connectStatus struct {
	Connector struct {
		State string `json:"state"`
	} `json:"connector"`
	Tasks []struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

func (d *debeziumSource) status() (connectStatus, error) {
	var st connectStatus
	resp, err := http.Get(d.rest + "/connectors/" + d.name + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// alive returns an error when Connect exited or Debezium's task failed.
func (d *debeziumSource) alive() error {
	if ok, code := d.proc.exited(); ok {
		return fmt.Errorf("kafka Connect exited with %d:\n%s", code, tail(d.proc.output(), 4000))
	}
	if st, err := d.status(); err == nil && len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED" {
		return fmt.Errorf("debezium's task failed: %s", st.Tasks[0].Trace)
	}
	return nil
}
