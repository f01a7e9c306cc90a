package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

// writeWorkerFile writes worker settings as a Java properties file (the
// file of "serve -config" and of "run/verify -worker-config").
func writeWorkerFile(t testing.TB, settings map[string]string) string {
	t.Helper()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s=%s\n", k, settings[k])
	}
	path := filepath.Join(t.TempDir(), "worker.properties")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKafkaSecurity runs "txsink run", "txsink serve" and "txsink verify"
// against the broker's SASL_SSL (SCRAM-SHA-512) and mutual TLS listeners,
// with the Kafka security settings in a worker file, and checks the
// result is exact. The upstream producer writes through the plaintext
// listener of the same broker.
func TestKafkaSecurity(t *testing.T) {
	k := harness.Kafka(t)
	sec := k.Security()
	for _, tc := range []struct {
		name     string
		settings map[string]string
	}{
		{"sasl_ssl", sec.SASLSettings()},
		{"mtls", sec.MTLSSettings()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := harness.Postgres(t).NewDatabase(t)
			pool := connectPool(t, db)
			workerFile := writeWorkerFile(t, tc.settings)
			bootstrap := tc.settings["bootstrap.servers"]

			// txsink run.
			topic := "sec_run_" + tc.name
			k.CreateTopic(t, topic, 3)
			createEventsTable(t, pool, topic)
			var u upstream
			produce(t, k.Bootstrap, topic, produceOpts{Records: 1500, Partitions: 3, AbortRatio: 0.15, MaxTxn: 40, Seed: 31}, &u)
			cfg := baseConnector("sec-run-"+tc.name, topic, db, "exactly_once")
			cfgPath := writeConnector(t, cfg)
			p := runTxsink(t, []string{"run", "-worker-config", workerFile, "-config", cfgPath, "-worker-id", "w1"}, "run-"+tc.name, nil)
			waitDrained(t, pool, cfg["name"], &u, 2*time.Minute, func() error {
				if ok, code := p.exited(); ok {
					return fmt.Errorf("txsink run exited with %d:\n%s", code, tail(p.output(), 3000))
				}
				return nil
			})
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)
			if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
				t.Fatalf("txsink run over %s: %d anomalies, first: %s", tc.name, len(problems), problems[0])
			}
			if strings.Contains(p.output(), sec.Password) {
				t.Errorf("txsink run logged the SASL password")
			}

			// txsink verify, through the same listener.
			r := runCommand(t, nil, "verify", "-worker-config", workerFile, "-config", cfgPath, "-id-column", "id", "-prepared-grace", "0", "-max-lag", "0", "-output", "json")
			if r.code != 0 {
				t.Fatalf("txsink verify over %s: %s", tc.name, r)
			}
			var rep verify.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("verify output: %v\n%s", err, r.stdout)
			}
			if rep.Committed != u.total() || rep.Rows != u.total() {
				t.Errorf("verify over %s: %d committed, %d rows; the producer committed %d", tc.name, rep.Committed, rep.Rows, u.total())
			}

			// txsink serve with the worker file, the connector from a file.
			topic = "sec_serve_" + tc.name
			k.CreateTopic(t, topic, 3)
			createEventsTable(t, pool, topic)
			var u2 upstream
			produce(t, k.Bootstrap, topic, produceOpts{Records: 1500, Partitions: 3, AbortRatio: 0.15, MaxTxn: 40, Seed: 32}, &u2)
			cfg = baseConnector("sec-serve-"+tc.name, topic, db, "exactly_once")
			w := startServeWith(t, bootstrap, freeAddr(t), t.TempDir(), "s1", serveOpts{args: []string{"-config", workerFile, "-connector", writeConnector(t, cfg)}})
			waitDrained(t, pool, cfg["name"], &u2, 2*time.Minute, func() error {
				if ok, code := w.proc.exited(); ok {
					return fmt.Errorf("txsink serve exited with %d", code)
				}
				return nil
			})
			w.proc.signal(syscall.SIGTERM)
			w.proc.wait(30 * time.Second)
			if problems := exactness(&u2, readRows(t, pool, topic), nil); len(problems) > 0 {
				t.Fatalf("txsink serve over %s: %d anomalies, first: %s", tc.name, len(problems), problems[0])
			}
		})
	}
}

// TestKafkaSecurityErrors: wrong Kafka credentials or certificates stop
// "txsink run", "serve" and "verify" at start (exit 3) with an error that
// names the setting to fix.
func TestKafkaSecurityErrors(t *testing.T) {
	k := harness.Kafka(t)
	sec := k.Security()
	db := harness.Postgres(t).NewDatabase(t)
	cfgPath := writeConnector(t, baseConnector("sec-errors", "sec_errors", db, "exactly_once"))
	with := func(base map[string]string, set map[string]string, drop ...string) map[string]string {
		out := maps.Clone(base)
		maps.Copy(out, set)
		for _, d := range drop {
			delete(out, d)
		}
		return out
	}
	cases := []struct {
		name, setting string
		settings      map[string]string
	}{
		{"wrong_password", "kafka.sasl.password", with(sec.SASLSettings(), map[string]string{"kafka.sasl.password": "not-the-password"})},
		{"unknown_user", "kafka.sasl.password", with(sec.SASLSettings(), map[string]string{"kafka.sasl.username": "nobody"})},
		{"untrusted_broker", "kafka.ssl.ca.file", with(sec.SASLSettings(), nil, "kafka.ssl.ca.file")},
		{"no_client_certificate", "kafka.ssl.cert.file", with(sec.MTLSSettings(), nil, "kafka.ssl.cert.file", "kafka.ssl.key.file")},
		{"stranger_certificate", "kafka.ssl.cert.file", with(sec.MTLSSettings(), map[string]string{"kafka.ssl.cert.file": sec.StrangerCertFile, "kafka.ssl.key.file": sec.StrangerKeyFile})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			workerFile := writeWorkerFile(t, tc.settings)
			check := func(cmd, out string, code int) {
				t.Helper()
				if code != 3 {
					t.Errorf("txsink %s: exit %d, want 3 (cannot start):\n%s", cmd, code, tail(out, 2000))
					return
				}
				if !strings.Contains(out, tc.setting+":") {
					t.Errorf("txsink %s: the error does not name %s:\n%s", cmd, tc.setting, tail(out, 2000))
				}
				t.Logf("txsink %s: %s", cmd, lastLine(out))
				if strings.Contains(out, sec.Password) {
					t.Errorf("txsink %s printed the SASL password", cmd)
				}
			}
			p := runTxsink(t, []string{"run", "-worker-config", workerFile, "-config", cfgPath, "-worker-id", "e1"}, "run-"+tc.name, nil)
			if !p.wait(time.Minute) {
				t.Fatalf("txsink run with %s still runs after a minute", tc.name)
			}
			_, code := p.exited()
			check("run", p.output(), code)

			r := runCommand(t, nil, "verify", "-worker-config", workerFile, "-config", cfgPath)
			check("verify", r.stdout+r.stderr, r.code)

			s := runTxsink(t, []string{"serve", "-config", workerFile, "-listen", freeAddr(t), "-data-dir", t.TempDir(), "-worker-id", "e2"}, "serve-"+tc.name, nil)
			if !s.wait(time.Minute) {
				t.Fatalf("txsink serve with %s still runs after a minute", tc.name)
			}
			_, code = s.exited()
			check("serve", s.output(), code)
		})
	}
}
