package main

// Unit tests of the "txsink connectors" client: the requests it sends (paths,
// methods, query, body, authentication) and how it renders answers. The
// server here replays Kafka Connect's documented answers; the client is
// tested against a real "txsink serve" in integration/cli_test.go.

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type seenRequest struct {
	Method, Path, Query, Body, Auth string
}

// connectStub answers like a Kafka Connect worker with one connector "orders".
type connectStub struct {
	mu   sync.Mutex
	seen []seenRequest
}

const stubStatus = `{"name":"orders","connector":{"state":"RUNNING","worker_id":"w1","txsink":{"target_state":"RUNNING","in_doubt":[]}},` +
	`"tasks":[{"id":0,"state":"RUNNING","worker_id":"w1","txsink":{"partitions":[{"topic":"orders","partition":0,"next_offset":42,"end_offset":43,"lag":1}],"in_doubt":[],"restarts":0,"last_round":null,"last_fence_conflict":null,"next_restart":null}},` +
	`{"id":1,"state":"FAILED","worker_id":"w1","trace":"boom\n\tat somewhere"}],"type":"sink"}`

func (s *connectStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, string(b), r.Header.Get("Authorization")})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	key := r.Method + " " + r.URL.Path
	switch key {
	case "GET /connectors":
		if r.URL.Query().Get("expand") == "status" {
			io.WriteString(w, `{"orders":{"status":`+stubStatus+`}}`)
			return
		}
		io.WriteString(w, `["orders"]`)
	case "GET /connectors/orders":
		io.WriteString(w, `{"name":"orders","config":{"name":"orders","connector.class":"postgres","connection.password":"[hidden]"},"tasks":[{"connector":"orders","task":0},{"connector":"orders","task":1}],"type":"sink"}`)
	case "GET /connectors/orders/status":
		io.WriteString(w, stubStatus)
	case "POST /connectors":
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"name":"orders","config":{},"tasks":[],"type":"sink"}`)
	case "PUT /connectors/orders/config":
		io.WriteString(w, `{"name":"orders","config":{},"tasks":[],"type":"sink"}`)
	case "PUT /connectors/orders/pause", "PUT /connectors/orders/resume":
		w.WriteHeader(http.StatusAccepted)
	case "PUT /connectors/orders/stop", "DELETE /connectors/orders":
		w.WriteHeader(http.StatusNoContent)
	case "POST /connectors/orders/restart":
		if r.URL.Query().Get("includeTasks") == "true" {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, stubStatus)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "GET /connectors/orders/offsets":
		io.WriteString(w, `{"offsets":[{"partition":{"kafka_topic":"orders","kafka_partition":0},"offset":{"kafka_offset":42}}]}`)
	case "PATCH /connectors/orders/offsets":
		io.WriteString(w, `{"message":"The offsets for this connector have been altered successfully"}`)
	case "DELETE /connectors/orders/offsets":
		io.WriteString(w, `{"message":"The offsets for this connector have been reset successfully"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error_code":404,"message":"Connector nope not found"}`)
	}
}

func (s *connectStub) last() seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"connectors"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLIRequestsAndTables(t *testing.T) {
	stub := &connectStub{}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	t.Setenv("TXSINK_URL", srv.URL)
	t.Setenv("TXSINK_TOKEN", "")
	t.Setenv("TXSINK_USER", "")
	dir := t.TempDir()
	connFile := filepath.Join(dir, "c.json")
	os.WriteFile(connFile, []byte(`{"name":"orders","config":{"connector.class":"postgres","topics":"orders"}}`), 0o600)
	offFile := filepath.Join(dir, "o.json")
	os.WriteFile(offFile, []byte(`{"offsets":[{"partition":{"kafka_topic":"orders","kafka_partition":0},"offset":{"kafka_offset":7}}]}`), 0o600)

	cases := []struct {
		args        []string
		method      string
		path, query string
		body        string // substring of the request body
		out         []string
	}{
		{[]string{"list"}, "GET", "/connectors", "expand=status", "", []string{"NAME", "orders", "RUNNING", "1/2 running"}},
		{[]string{"get", "orders"}, "GET", "/connectors/orders", "", "", []string{"Tasks:  0, 1", "connection.password", "[hidden]"}},
		{[]string{"status", "orders"}, "GET", "/connectors/orders/status", "", "", []string{"RUNNING", "FAILED", "boom", "NEXT OFFSET", "42"}},
		{[]string{"create", "-f", connFile}, "POST", "/connectors", "", `"name":"orders"`, []string{"Created connector orders"}},
		{[]string{"create", "--update", "-f", connFile}, "PUT", "/connectors/orders/config", "", `"connector.class":"postgres"`, []string{"Updated connector orders"}},
		{[]string{"create", "-d", `{"name":"orders","topics":"orders"}`}, "POST", "/connectors", "", `"config":{"name":"orders","topics":"orders"}`, []string{"Created"}},
		{[]string{"pause", "orders"}, "PUT", "/connectors/orders/pause", "", "", []string{"Paused connector orders"}},
		{[]string{"resume", "orders"}, "PUT", "/connectors/orders/resume", "", "", []string{"Resumed"}},
		{[]string{"stop", "orders"}, "PUT", "/connectors/orders/stop", "", "", []string{"Stopped"}},
		{[]string{"restart", "orders"}, "POST", "/connectors/orders/restart", "", "", []string{"Restarted connector orders"}},
		{[]string{"restart", "orders", "--include-tasks", "--only-failed"}, "POST", "/connectors/orders/restart", "includeTasks=true&onlyFailed=true", "", []string{"FAILED"}},
		{[]string{"delete", "orders"}, "DELETE", "/connectors/orders", "", "", []string{"Deleted connector orders"}},
		{[]string{"offsets", "orders"}, "GET", "/connectors/orders/offsets", "", "", []string{"TOPIC", "orders", "42"}},
		{[]string{"offsets", "orders", "--set", offFile}, "PATCH", "/connectors/orders/offsets", "", `"kafka_offset":7`, []string{"altered successfully"}},
		{[]string{"offsets", "--reset", "orders"}, "DELETE", "/connectors/orders/offsets", "", "", []string{"reset successfully"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, c.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			got := stub.last()
			if got.Method != c.method || got.Path != c.path || got.Query != c.query {
				t.Errorf("request %s %s?%s, want %s %s?%s", got.Method, got.Path, got.Query, c.method, c.path, c.query)
			}
			if c.body != "" && !strings.Contains(got.Body, c.body) {
				t.Errorf("body %s does not contain %s", got.Body, c.body)
			}
			for _, w := range c.out {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestCLIJSONOutput(t *testing.T) {
	srv := httptest.NewServer(&connectStub{})
	defer srv.Close()
	for _, args := range [][]string{{"list"}, {"status", "orders"}, {"get", "orders"}, {"offsets", "orders"}} {
		code, out, errOut := runCLI(t, append(args, "--url", srv.URL, "--output", "json")...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if !json.Valid([]byte(out)) {
			t.Errorf("%v: not JSON: %s", args, out)
		}
	}
}

func TestCLIErrorsAndAuth(t *testing.T) {
	stub := &connectStub{}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	code, _, errOut := runCLI(t, "status", "nope", "-url", srv.URL)
	if code != exitCLIError || !strings.Contains(errOut, "Connector nope not found (HTTP 404)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "pause", "orders", "-url", srv.URL, "-token", "s3cret"); code != 0 || stub.last().Auth != "Bearer s3cret" {
		t.Errorf("bearer: exit %d, Authorization %q", code, stub.last().Auth)
	}
	if code, _, _ := runCLI(t, "pause", "orders", "-url", srv.URL, "-user", "admin:pw"); code != 0 || !strings.HasPrefix(stub.last().Auth, "Basic ") {
		t.Errorf("basic: exit %d, Authorization %q", code, stub.last().Auth)
	}
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"get"},
		{"get", "a", "b"},
		{"list", "x"},
		{"create"},
		{"list", "-output", "yaml"},
		{"offsets", "orders", "-set", "f", "-reset"},
	} {
		if code, _, _ := runCLI(t, append(args, "-url", srv.URL)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, _ := runCLI(t, "list", "-url", "ftp://x"); code != exitUsage {
		t.Errorf("ftp URL: exit %d, want %d", code, exitUsage)
	}
	// A server that is not there: a clear error, exit 1.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if code, _, errOut := runCLI(t, "list", "-url", dead.URL); code != exitCLIError || errOut == "" {
		t.Errorf("dead server: exit %d, stderr %q", code, errOut)
	}
}

func TestParseInterspersed(t *testing.T) {
	var o cliOptions
	var v verbFlags
	fs := newTestFlagSet(&o, &v)
	pos, err := parseInterspersed(fs, []string{"a", "--include-tasks", "b", "--", "-c"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, ",") != "a,b,-c" || !v.includeTasks {
		t.Errorf("pos %v includeTasks %v", pos, v.includeTasks)
	}
}

func newTestFlagSet(o *cliOptions, v *verbFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	cliVerbs["restart"].flags(fs, v)
	return fs
}

func TestHealthcheck(t *testing.T) {
	healthy := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		if !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, `{"status":"x"}`)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"healthcheck", "-url", srv.URL + "/health"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "200 OK") {
		t.Errorf("healthy: exit %d, %q %q", code, out.String(), errb.String())
	}
	healthy = false
	if code := run([]string{"healthcheck", "-q", "-url", srv.URL + "/health"}, &out, &errb); code != 1 {
		t.Errorf("unhealthy: exit %d, want 1", code)
	}
	// Without -url: the port of TXSINK_LISTEN on the loopback interface.
	healthy = true
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	t.Setenv("TXSINK_HEALTHCHECK_URL", "")
	t.Setenv("TXSINK_LISTEN", "0.0.0.0:"+port)
	if code := run([]string{"healthcheck", "-q"}, &out, &errb); code != 0 {
		t.Errorf("derived URL %s: exit %d", defaultHealthURL(), code)
	}
	t.Setenv("TXSINK_LISTEN", "")
	if got := defaultHealthURL(); got != "http://127.0.0.1:8083/health" {
		t.Errorf("default URL %s", got)
	}
}
