package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
)

// TestClusterConfigProviderCanary (issue 16, acceptance 6): a database
// password given as ${file:…} is resolved on the workers that run the
// connector (the rows arrive, through a role that needs it) and never
// appears in the config or status topic, in any response, in a log line
// (at trace level, through a failure whose trace would carry it) or in a
// metric. A password given in clear is refused. A database name given as
// ${file:…} (not a secret setting, issue 25) that the server refuses
// fails the tasks with a trace that quotes it: neither the status topic
// nor any response or log shows it. The scan is shown to find the
// canaries where they are (the secrets file), so it can fail.
func TestClusterConfigProviderCanary(t *testing.T) {
	e := newEnv(t, 2, map[string]string{"log.level": "trace"})
	canary := fmt.Sprintf("Cnry-%x-pw", rand.Uint64())
	// A database name from the same file (issue 25): not a secret setting,
	// yet a resolved value, which must not reach the status topic through
	// the trace of the database's refusal.
	dbCanary := fmt.Sprintf("dbcnry_%x", rand.Uint64())
	role := fmt.Sprintf("canary_%08x", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'`, role, canary)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	secretFile := filepath.Join(filepath.Dir(e.secrets), "canary.properties")
	if err := os.WriteFile(secretFile, []byte("password="+canary+"\ndb="+dbCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(e.dbUser)
	u.User = url.User(role)
	ws := e.start(2)
	a, b := ws[0], ws[1]
	var bodies []string
	call := func(w *harness.Worker, want int, method, path string, body any) string {
		t.Helper()
		out := must(t, w, want, method, path, body)
		bodies = append(bodies, out)
		return out
	}
	name := e.connectorName("canary")
	cfg := e.connector("exactly_once", 2)
	cfg["connection.url"] = u.String()

	// In clear: refused, naming the setting, without echoing the value.
	for _, bad := range []map[string]string{
		{"connection.password": canary},
		{"connection.url": strings.Replace(u.String(), role+"@", role+":"+canary+"@", 1), "connection.password": ""},
	} {
		c := map[string]string{}
		for k, v := range cfg {
			c[k] = v
		}
		for k, v := range bad {
			c[k] = v
		}
		out := call(b, 400, "POST", "/connectors", map[string]any{"name": name, "config": c})
		for k := range bad {
			if c[k] != "" && !strings.Contains(out, k) {
				t.Errorf("refusal does not name %s: %s", k, out)
			}
		}
	}
	// A reference to a missing key: refused, naming the setting.
	missing := map[string]string{}
	for k, v := range cfg {
		missing[k] = v
	}
	missing["connection.password"] = "${file:" + secretFile + ":nope}"
	if out := call(b, 400, "POST", "/connectors", map[string]any{"name": name, "config": missing}); !strings.Contains(out, "connection.password") {
		t.Errorf("a missing key is not reported on connection.password: %s", out)
	}

	cfg["connection.password"] = "${file:" + secretFile + ":password}"
	prod, stopProd := e.upstream(200)
	call(b, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	waitStatus(t, a, name, 90*time.Second, "running", func(st apiStatus) bool { ok, _ := runningOn(st, 2, ids(ws...)...); return ok })
	e.waitCaughtUp(name, prod, time.Minute) // rows written through the role: the reference was resolved

	// An error that carries the connection's details: a port nobody
	// listens on. The tasks wait for the database (RUNNING, the waiting
	// cause and its error in the status), they do not fail.
	broken := map[string]string{}
	for k, v := range cfg {
		broken[k] = v
	}
	bu, _ := url.Parse(u.String())
	bu.Host = "127.0.0.1:1"
	broken["connection.url"] = bu.String()
	call(a, 200, "PUT", "/connectors/"+name+"/config", broken)
	waitStatus(t, a, name, time.Minute, "tasks waiting for the database on the broken URL, with its error", func(st apiStatus) bool {
		waiting := 0
		for _, ts := range st.Tasks {
			if ts.Txsink != nil && ts.Txsink.Waiting != nil && ts.Txsink.Waiting.Cause == "database" && ts.Txsink.Waiting.Error != "" {
				waiting++
			}
		}
		return allTasks(st, 2, "RUNNING") && waiting > 0
	})
	// A database that does not exist, named by a reference: PostgreSQL's
	// refusal quotes the name in the trace, which goes to the status topic.
	missingDB := map[string]string{}
	for k, v := range cfg {
		missingDB[k] = v
	}
	missingDB["connection.url"] = strings.Replace(u.String(), u.Path, "/${file:"+secretFile+":db}", 1)
	call(b, 200, "PUT", "/connectors/"+name+"/config", missingDB)
	waitStatus(t, b, name, time.Minute, "tasks failed on the missing database", func(st apiStatus) bool {
		return allTasks(st, 2, "FAILED") && strings.Contains(st.Tasks[0].Trace, "does not exist")
	})
	for _, w := range ws {
		call(w, 200, "GET", "/connectors/"+name+"/status", nil)
		call(w, 200, "GET", "/connectors?expand=status", nil)
	}
	call(b, 200, "PUT", "/connectors/"+name+"/config", cfg)
	waitStatus(t, b, name, 90*time.Second, "running again", func(st apiStatus) bool { ok, _ := runningOn(st, 2, ids(ws...)...); return ok })
	call(a, 204, "POST", "/connectors/"+name+"/restart", nil)
	call(b, 202, "POST", "/connectors/"+name+"/restart?includeTasks=true", nil)

	for _, w := range ws {
		for _, path := range []string{"/", "/connectors?expand=info&expand=status", "/connectors/" + name, "/connectors/" + name + "/config",
			"/connectors/" + name + "/status", "/connectors/" + name + "/tasks", "/connectors/" + name + "/tasks/0/status",
			"/connectors/" + name + "/offsets", "/connector-plugins", "/admin/loggers", "/metrics"} {
			call(w, 200, "GET", path, nil)
		}
	}
	e.drain(name, prod, stopProd, 2*time.Minute)
	if r := e.check(name); !r.OK() {
		t.Fatalf("not exact:\n%s", reportText(r))
	}
	for _, w := range ws {
		if !w.Stop(time.Minute) {
			t.Errorf("%s did not stop", w.ID)
		}
	}

	leaks := func(s string) bool {
		return strings.Contains(s, canary) || strings.Contains(s, url.QueryEscape(canary)) || strings.Contains(s, dbCanary)
	}
	secretBytes, _ := os.ReadFile(secretFile)
	if !leaks(string(secretBytes)) {
		t.Fatal("the scan does not find the canary in the secrets file: it proves nothing")
	}
	for i, b := range bodies {
		if leaks(b) {
			t.Errorf("response %d holds the password or the database name: %s", i, b)
		}
	}
	for _, w := range ws {
		logs := w.Logs()
		if leaks(logs) {
			t.Errorf("the log of %s holds the password or the database name", w.ID)
		}
		if !strings.Contains(logs, `"level":"DEBUG"`) {
			t.Errorf("the log of %s has no debug line: it was not at a level that shows much", w.ID)
		}
	}
	for _, topic := range []string{e.cl.Setting("config.storage.topic"), e.cl.Setting("status.storage.topic")} {
		n, found := scanTopic(t, e.k.Bootstrap, topic, leaks)
		if n == 0 {
			t.Errorf("topic %s is empty: the scan proves nothing", topic)
		}
		if found {
			t.Errorf("topic %s holds the password or the database name", topic)
		} else {
			t.Logf("topic %s: %d records, none holds the password or the database name", topic, n)
		}
	}
	t.Logf("the password reached the sink through ${file:…}; %d responses, %d worker logs, the config and status topics scanned: no trace of it", len(bodies), len(ws))
}

// scanTopic reads every record of a topic, aborted transactions included,
// and reports how many it read and whether any key or value matched.
func scanTopic(t *testing.T, bootstrap, topic string, match func(string) bool) (int, bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n, found := 0, false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		got := 0
		fs.EachRecord(func(r *kgo.Record) {
			got++
			n++
			found = found || match(string(r.Key)) || match(string(r.Value))
		})
		if got == 0 {
			return n, found
		}
	}
}
