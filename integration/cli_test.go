package integration

// The "txsink connectors" CLI against a real "txsink serve" (REST API),
// a real Kafka broker and a real PostgreSQL server.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

// cliFreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func cliFreePort(t testing.TB) int {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// cliServe runs "txsink serve" on a free loopback port with a fresh data
// directory and returns the process and its base URL once /health answers
// 200. The process is killed at cleanup if still running.
func cliServe(t testing.TB, bootstrap, workerID string, env ...string) (*proc, string) {
	t.Helper()
	port := cliFreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd := exec.Command(txsinkBinary(t), "serve",
		"-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"-bootstrap", bootstrap,
		"-worker-id", workerID,
		"-data-dir", filepath.Join(t.TempDir(), "data"))
	cmd.Env = append(os.Environ(), env...)
	p := startProcStop(t, cmd, "txsink serve "+workerID, 20*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, url
			}
		}
		if ok, code := p.exited(); ok {
			t.Fatalf("txsink serve exited with %d before it was healthy:\n%s", code, tail(p.output(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("txsink serve not healthy after 30s (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cliResult is one run of a txsink command.
type cliResult struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("txsink %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runCLI runs "txsink connectors" with the arguments and environment given.
func runCLI(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	return runCommand(t, env, append([]string{"connectors"}, args...)...)
}

// runCommand runs the txsink binary to its end with the arguments and
// environment given.
func runCommand(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(txsinkBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	r := cliResult{args: args, stdout: out.String(), stderr: errb.String()}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running the CLI: %v", err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// cliOK runs the CLI and fails the test unless it exits 0; it returns stdout.
func cliOK(t testing.TB, env []string, args ...string) string {
	t.Helper()
	r := runCLI(t, env, args...)
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	return r.stdout
}

// cliStatusJSON is the part of the status JSON the test reads.
type cliStatusJSON struct {
	Name      string `json:"name"`
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
	} `json:"tasks"`
}

// cliWaitState polls "connectors status -output json" until the connector
// and all its tasks are in state (STOPPED: no tasks).
func cliWaitState(t testing.TB, env []string, name, state string) cliStatusJSON {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var st cliStatusJSON
	var last cliResult
	for time.Now().Before(deadline) {
		last = runCLI(t, env, "status", name, "-output", "json")
		if last.code == 0 && json.Unmarshal([]byte(last.stdout), &st) == nil && st.Connector.State == state {
			ok := state != "STOPPED" || len(st.Tasks) == 0
			for _, task := range st.Tasks {
				ok = ok && task.State == state
			}
			if ok {
				return st
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("connector %s not %s after 45s; last:\n%v", name, state, last)
	return st
}

func TestCLIAgainstServe(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "cli_events_" + randSuffix(t)
	createTopic(t, k, topic, 3)
	createEventsTable(t, pool, topic)

	const token = "cli-test-token"
	_, url := cliServe(t, k.Bootstrap, "cli-1", "TXSINK_REST_AUTH_BEARER_TOKEN="+token)
	env := []string{"TXSINK_URL=" + url, "TXSINK_TOKEN=" + token}
	name := "cli-orders-" + randSuffix(t)

	// Authentication is enforced and the CLI reports the API's error.
	if r := runCLI(t, []string{"TXSINK_URL=" + url, "TXSINK_TOKEN="}, "list"); r.code != 1 || !strings.Contains(r.stderr, "401") {
		t.Errorf("without the token: want exit 1 and HTTP 401\n%v", r)
	}
	if r := runCLI(t, env, "get", "no-such-connector"); r.code != 1 || !strings.Contains(r.stderr, "not found") || !strings.Contains(r.stderr, "404") {
		t.Errorf("unknown connector: want exit 1 and the 404 message\n%v", r)
	}

	// create -f, then list/get/status.
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	cfgPath := writeConnector(t, cfg)
	if out := cliOK(t, env, "create", "-f", cfgPath); !strings.Contains(out, "Created connector "+name) {
		t.Errorf("create: %q", out)
	}
	if r := runCLI(t, env, "create", "-f", cfgPath); r.code != 1 || !strings.Contains(r.stderr, "409") {
		t.Errorf("second create: want a 409 conflict\n%v", r)
	}
	cliWaitState(t, env, name, "RUNNING")
	out := cliOK(t, env, "list")
	if !strings.Contains(out, "NAME") || !cliLineWith(out, name, "RUNNING", "1/1 running") {
		t.Errorf("list table:\n%s", out)
	}
	var names map[string]json.RawMessage
	if err := json.Unmarshal([]byte(cliOK(t, env, "list", "-output", "json")), &names); err != nil || names[name] == nil {
		t.Errorf("list -output json: %v %v", err, names)
	}
	out = cliOK(t, env, "get", name)
	if !strings.Contains(out, "connection.url") || !strings.Contains(out, "[hidden]") || !strings.Contains(out, "Tasks:  0") {
		t.Errorf("get: want the config with the password hidden:\n%s", out)
	}

	// Traffic, then status and offsets agree with the producer.
	u := &upstream{}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 3, AbortRatio: 0.2, MaxTxn: 100, Seed: 21}, u)
	waitDrained(t, pool, name, u, 90*time.Second, nil)
	if problems := exactness(u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %v", len(problems), problems[:min(10, len(problems))])
	}
	out = cliOK(t, env, "status", name)
	// WORKER is the advertised host:port (Connect's worker id), here the
	// API's address.
	for _, want := range []string{"CONNECTOR", "RUNNING", strings.TrimPrefix(url, "http://"), "TASK", "PARTITION", topic} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	offs := decodeOffsets(t, cliOK(t, env, "offsets", name, "-output", "json"))
	ends := u.ends()
	got := map[int32]int64{}
	for _, o := range offs.Offsets {
		got[o.Partition.Partition] = o.Offset.Offset
	}
	for p, e := range ends {
		if got[p] != e {
			t.Errorf("offsets: partition %d at %d, upstream end %d (all: %v)", p, got[p], e, got)
		}
	}
	if out := cliOK(t, env, "offsets", name); !cliLineWith(out, topic, "0", fmt.Sprint(ends[0])) {
		t.Errorf("offsets table:\n%s", out)
	}

	// Lifecycle verbs.
	cliOK(t, env, "pause", name)
	cliWaitState(t, env, name, "PAUSED")
	cliOK(t, env, "resume", name)
	cliWaitState(t, env, name, "RUNNING")
	cliOK(t, env, "restart", name, "--include-tasks")
	cliWaitState(t, env, name, "RUNNING")
	cliOK(t, env, "stop", name)
	cliWaitState(t, env, name, "STOPPED")

	// Offsets can be edited while STOPPED: set partition 0, then reset all.
	setPath := filepath.Join(t.TempDir(), "offsets.json")
	body := fmt.Sprintf(`{"offsets":[{"partition":{"kafka_topic":%q,"kafka_partition":0},"offset":{"kafka_offset":5}}]}`, topic)
	if err := os.WriteFile(setPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cliOK(t, env, "offsets", name, "--set", setPath)
	if so, err := sinkOffsets(t.Context(), pool, name); err != nil || so[0] != 5 {
		t.Errorf("after offsets --set: sink offsets %v (%v), want partition 0 at 5", so, err)
	}
	cliOK(t, env, "offsets", name, "--reset")
	if so, err := sinkOffsets(t.Context(), pool, name); err != nil {
		t.Error(err)
	} else {
		for p, n := range so {
			if n >= 0 {
				t.Errorf("after offsets --reset: partition %d still at %d", p, n)
			}
		}
	}

	// delete: gone from the list.
	if out := cliOK(t, env, "delete", name); !strings.Contains(out, "Deleted connector "+name) {
		t.Errorf("delete: %q", out)
	}
	if out := cliOK(t, env, "list"); strings.Contains(out, name) {
		t.Errorf("list after delete still shows %s:\n%s", name, out)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// cliLineWith reports whether some line of out holds all the words (split on
// spaces), as whole fields and in order.
func cliLineWith(out string, words ...string) bool {
	want := strings.Fields(strings.Join(words, " "))
	for _, l := range strings.Split(out, "\n") {
		i := 0
		for _, f := range strings.Fields(l) {
			if i < len(want) && f == want[i] {
				i++
			}
		}
		if i == len(want) {
			return true
		}
	}
	return false
}
