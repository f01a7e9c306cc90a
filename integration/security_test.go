package integration

// The security suite (issue 12): one test per hole a REST client or a web
// page could use against a "txsink serve" worker, each against the real
// process and, where a claim reaches the database, a real PostgreSQL (the
// harness's, and a local cluster for the Unix-socket attacks). Each test
// also tries other spellings of its attack than the one reported.

import (
	"bytes"
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

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/internal/testpki"
)

// secServe starts a "txsink serve" for one security test.
func secServe(t *testing.T, o serveOpts) *worker {
	t.Helper()
	k := harness.Kafka(t)
	return startServeWith(t, k.Bootstrap, freeAddr(t), t.TempDir(), "sec-"+randSuffix(t), o)
}

// raw sends a request with exactly the given headers (no default
// Content-Type; "Host" sets the Host header) and returns status and body.
func (w *worker) raw(t *testing.T, method, path, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, strings.TrimSpace(string(b))
}

// connectorState returns the connector's state and trace ("" when it does
// not exist). A running connector with a FAILED task (a sink that cannot
// open fails its tasks, as in Kafka Connect) counts as FAILED, with the
// task's trace.
func (w *worker) connectorState(t *testing.T, name string) (string, string) {
	t.Helper()
	code, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
	if code != 200 {
		return "", ""
	}
	var st apiStatus
	_ = json.Unmarshal([]byte(b), &st)
	for _, ts := range st.Tasks {
		if ts.State == "FAILED" && st.Connector.State != "FAILED" {
			return ts.State, ts.Trace
		}
	}
	return st.Connector.State, st.Connector.Trace
}

// settle waits until the connector leaves UNASSIGNED/RESTARTING (or d
// passes) and returns its state and trace.
func (w *worker) settle(t *testing.T, name string, d time.Duration) (string, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		state, trace := w.connectorState(t, name)
		if state == "RUNNING" || state == "FAILED" || state == "PAUSED" || state == "STOPPED" || time.Now().After(deadline) {
			return state, trace
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refused creates a connector with cfg and fails the test unless the
// worker answers 400 naming field. When it accepts, the test reports how
// far the connector got (RUNNING proves the hole against the database).
func (w *worker) refused(t *testing.T, what, field string, cfg map[string]string) {
	t.Helper()
	name := "sec-" + randSuffix(t)
	cfg["name"] = name
	code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	if code == 400 && strings.Contains(body, field) {
		return
	}
	if code == 201 {
		state, trace := w.settle(t, name, 20*time.Second)
		w.call(t, "DELETE", "/connectors/"+name, nil)
		t.Errorf("%s: accepted (201); the connector reached %s %s", what, state, tail(trace, 300))
		return
	}
	t.Errorf("%s: %d %s, want 400 naming %s", what, code, body, field)
}

// pgConnector is a PostgreSQL connector configuration with dbURL.
func pgConnector(dbURL string) map[string]string {
	return map[string]string{
		"connector.class":    "postgres",
		"topics":             "sec-" + fmt.Sprint(time.Now().UnixNano()),
		"connection.url":     dbURL,
		"delivery.guarantee": "exactly_once_sink",
		"pk.mode":            "kafka",
		"session.timeout.ms": "6000",
	}
}

// TestSecurityConnectionURL (issue 12, item 1): connection.url cannot make
// the driver use keys outside the allowlist, a Unix socket, or an empty
// host, whatever the spelling. The reported attack reached RUNNING over a
// trust-authenticated Unix socket with a wrong password; here a local
// cluster's socket is the target.
func TestSecurityConnectionURL(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	local := pgtest.Start(t) // trust authentication on its Unix socket
	sock, port := local.SocketDir, local.Port
	// The ';' spelling needs a socket directory whose name ends in ';'.
	semi := sock + ";"
	if err := os.Symlink(sock, semi); err != nil {
		t.Fatal(err)
	}
	w := secServe(t, serveOpts{})
	lp := fmt.Sprint(port)
	for what, u := range map[string]string{
		"first '@' in the query":           "postgres://127.0.0.1:5432?application_name=@127.0.0.1:" + lp + "/postgres?host=" + sock + "&user=postgres",
		"jdbc: form":                       "jdbc:postgresql://127.0.0.1:5432?application_name=@127.0.0.1:" + lp + "/postgres?host=" + sock + "&user=postgres",
		"IPv6 literal":                     "postgres://[::1]:5432?application_name=@[::1]:" + lp + "/postgres?host=" + sock + "&user=postgres",
		"';' in the pair":                  "postgres://postgres@127.0.0.1:" + lp + "/postgres?sslmode=disable&host=" + semi,
		"percent-encoded key":              "postgres://postgres@127.0.0.1:" + lp + "/postgres?h%6fst=" + url.QueryEscape(sock),
		"repeated key":                     "postgres://postgres@127.0.0.1:" + lp + "/postgres?host=127.0.0.1&host=" + sock,
		"percent-encoded host":             "postgres://postgres@" + url.PathEscape(sock) + ":" + lp + "/postgres",
		"empty host":                       "postgres://postgres@:" + lp + "/postgres",
		"empty host in a list":             "postgres://postgres@127.0.0.1:" + lp + ",:" + lp + "/postgres",
		"no host":                          "postgres:///postgres?user=postgres&port=" + lp,
		"sslrootcert with ';'":             "postgres://postgres@127.0.0.1:" + lp + "/postgres?sslmode=require&sslrootcert=/etc/passwd;",
		"percent-encoded passfile":         "postgres://postgres@127.0.0.1:" + lp + "/postgres?passfil%65=/etc/passwd",
		"service file":                     "postgres://postgres@127.0.0.1:" + lp + "/postgres?servicefile=/etc/passwd&service=x",
		"pool setting reaching the driver": "postgres://postgres@127.0.0.1:" + lp + "/postgres?pool_max_conns=100000",
	} {
		w.refused(t, what+" ("+u+")", "connection.url", pgConnector(u))
	}
	// The check does not refuse what is fine: the harness's server over TCP.
	name := "sec-ok-" + randSuffix(t)
	cfg := pgConnector(db + "&application_name=sec&connect_timeout=10")
	cfg["name"] = name
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	if state, trace := w.settle(t, name, time.Minute); state != "RUNNING" {
		t.Fatalf("a valid connection.url: %s %s", state, trace)
	}
}

// canaryPieces are the parts of a password with '@' that must not show.
const canaryAt = "Xq7Can@ry9Z"

// TestSecurityRedaction (item 2): a password is hidden in every spelling
// the drivers accept, in every response, the logs and the metrics, for both
// sinks: ?pass%77ord=, ClickHouse's user:password@host:port without scheme,
// passwords with '@', JDBC's password parameter.
func TestSecurityRedaction(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	dbURL := canaryURL(t, pg, db) // a role whose password is apiCanary
	u, _ := url.Parse(dbURL)
	role := u.User.Username()
	u.User = url.User(role)
	w := secServe(t, serveOpts{})
	type conn struct {
		name, class, url string
		running          bool // the connection must work: the driver used the password
	}
	conns := []conn{
		{"sec-pw-param", "postgres", u.Scheme + "://" + u.User.String() + "@" + u.Host + u.Path + "?sslmode=disable&pass%77ord=" + url.QueryEscape(apiCanary), true},
		{"sec-pw-param-upper", "postgres", u.Scheme + "://" + u.User.String() + "@" + u.Host + u.Path + "?sslmode=disable&PASS%57ORD=" + url.QueryEscape(apiCanary), false},
		{"sec-jdbc", "postgres", "jdbc:postgresql://" + u.Host + u.Path + "?sslmode=disable&user=" + role + "&password=" + url.QueryEscape(apiCanary), true},
		{"sec-pg-at", "postgres", "postgres://" + role + ":" + canaryAt + "@" + u.Host + u.Path + "?sslmode=disable", false},
		{"sec-ch-bare", "clickhouse", "default:" + apiCanary + "@127.0.0.1:9000/default", false},
		{"sec-ch-at", "clickhouse", "clickhouse://default:" + canaryAt + "@127.0.0.1:9000/default", false},
		{"sec-ch-tcp", "clickhouse", "tcp://default:" + apiCanary + "@[::1]:9000", false},
	}
	for _, c := range conns {
		cfg := pgConnector(c.url)
		cfg["connector.class"] = c.class
		initial := "RUNNING"
		if !c.running {
			initial = "STOPPED" // shown, never connected
		}
		code, body := w.call(t, "POST", "/connectors", map[string]any{"name": c.name, "config": cfg, "initial_state": initial})
		switch {
		case code == 201:
		case code == 400 && !c.running:
			// Refused (a key pgx does not know, an '@' it would read as
			// part of the host): its error message is checked below too.
			continue
		default:
			t.Errorf("%s: %d %s", c.name, code, body)
			continue
		}
		if c.running {
			if state, trace := w.settle(t, c.name, time.Minute); state != "RUNNING" {
				t.Errorf("%s: %s %s (the driver did not use the password)", c.name, state, trace)
			}
		}
		w.call(t, "GET", "/connectors/"+c.name+"/config", nil)
		w.call(t, "GET", "/connectors/"+c.name, nil)
		w.call(t, "GET", "/connectors/"+c.name+"/tasks", nil)
		w.call(t, "GET", "/connectors/"+c.name+"/status", nil)
		cfg["name"] = c.name
		w.call(t, "PUT", "/connector-plugins/"+c.class+"/config/validate", cfg)
		// An invalid variant: the error message must not show it either.
		bad := map[string]string{}
		for k, v := range cfg {
			bad[k] = v
		}
		bad["tasks.max"] = "0"
		w.call(t, "PUT", "/connector-plugins/"+c.class+"/config/validate", bad)
		w.call(t, "PUT", "/connectors/"+c.name+"/config", bad)
	}
	// The control: with a wrong password in the same spelling the
	// connector fails, so RUNNING above means the driver used the password.
	wrong := pgConnector(strings.Replace(conns[0].url, url.QueryEscape(apiCanary), "WrongPw-1", 1))
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-pw-wrong", "config": wrong})
	if state, _ := w.settle(t, "sec-pw-wrong", time.Minute); state != "FAILED" {
		t.Errorf("a wrong password in pass%%77ord: %s, want FAILED (the server must check passwords for the test to prove anything)", state)
	}
	w.call(t, "GET", "/connectors?expand=info&expand=status", nil)
	w.call(t, "GET", "/metrics", nil)
	// A failure whose error holds the URL: a database that does not exist.
	missing := pgConnector(strings.Replace(conns[0].url, u.Path, "/no_such_db", 1))
	w.call(t, "POST", "/connectors", map[string]any{"name": "sec-missing", "config": missing})
	w.settle(t, "sec-missing", time.Minute)
	w.call(t, "GET", "/connectors/sec-missing/status", nil)

	w.mu.Lock()
	shown := strings.Join(w.bodies, "\n")
	w.mu.Unlock()
	for _, secret := range []string{apiCanary, url.QueryEscape(apiCanary), canaryAt, "Xq7Can", "ry9Z"} {
		reportShown(t, "a response", shown, secret)
		reportShown(t, "the log", w.output(), secret)
	}
}

// reportShown fails the test for every place text shows secret (up to
// five, with their context).
func reportShown(t *testing.T, where, text, secret string) {
	t.Helper()
	n := strings.Count(text, secret)
	for i, at := 0, 0; i < min(n, 5); i++ {
		j := strings.Index(text[at:], secret) + at
		t.Errorf("%q shown in %s (%d of %d): …%s…", secret, where, i+1, n, text[max(0, j-160):min(len(text), j+60)])
		at = j + len(secret)
	}
}

// captureServer is a stand-in for a server an attacker runs: it speaks
// PostgreSQL's protocol far enough to ask for a cleartext password and
// records the users and passwords it receives.
type captureServer struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string // "user:password"
}

func startCapture(t *testing.T) *captureServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &captureServer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serve(conn)
		}
	}()
	return c
}

func (c *captureServer) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(conn, conn)
	var user string
	for user == "" {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := conn.Write([]byte("N")); err != nil {
				return
			}
		case *pgproto3.StartupMessage:
			user = m.Parameters["user"]
		default:
			return
		}
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil {
		return
	}
	if err := be.SetAuthType(pgproto3.AuthTypeCleartextPassword); err != nil {
		return
	}
	msg, err := be.Receive()
	if err != nil {
		return
	}
	if pm, ok := msg.(*pgproto3.PasswordMessage); ok {
		c.mu.Lock()
		c.seen = append(c.seen, user+":"+pm.Password)
		c.mu.Unlock()
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"})
	_ = be.Flush()
}

func (c *captureServer) addr() string { return c.ln.Addr().String() }

func (c *captureServer) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// TestSecuritySecretRedirect (item 3): a stored password is bound to the
// host, port and user it was given for. Moving the connector (PATCH of
// connection.url alone, of connection.user alone, PUT of GET's output with
// "[hidden]") does not send it to the new target; the connector fails
// saying so; sending the password again brings it back. The worker's
// PGPASSWORD and PGUSER are not lent to a REST-created connector.
func TestSecuritySecretRedirect(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	dbURL := canaryURL(t, pg, db)
	u, _ := url.Parse(dbURL)
	role := u.User.Username()
	u.User = url.User(role)
	plain := u.String() // no password: connection.password holds it
	capture := startCapture(t)
	elsewhere := "postgres://" + role + "@" + capture.addr() + "/x?sslmode=disable"

	w := secServe(t, serveOpts{env: []string{"PGPASSWORD=" + apiCanary, "PGUSER=" + role}})
	create := func(name string, cfg map[string]string) {
		t.Helper()
		cfg["name"] = name
		w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
		if state, trace := w.settle(t, name, time.Minute); state != "RUNNING" {
			t.Fatalf("%s: %s %s", name, state, trace)
		}
	}
	// expectDropped checks the connector, and the logins the capture
	// server saw after the first since.
	expectDropped := func(name, how string, since int) {
		t.Helper()
		state, trace := w.settle(t, name, time.Minute)
		if state != "FAILED" || !strings.Contains(trace, "connection.") || !strings.Contains(trace, "dropped") {
			t.Errorf("%s: %s %q, want FAILED saying the stored password was dropped", how, state, trace)
		}
		for _, s := range capture.got()[since:] {
			if strings.HasSuffix(s, ":"+apiCanary) {
				t.Errorf("%s: the stored password reached the new host (%s)", how, s)
			}
		}
	}

	// PATCH of connection.url alone.
	cfg := pgConnector(plain)
	cfg["connection.password"] = apiCanary
	create("sec-patch-url", cfg)
	since := len(capture.got())
	w.must(t, 200, "PATCH", "/connectors/sec-patch-url/config", map[string]string{"connection.url": elsewhere})
	expectDropped("sec-patch-url", "PATCH connection.url", since)
	// Sending it again (here: back to the real server) works.
	w.must(t, 200, "PATCH", "/connectors/sec-patch-url/config", map[string]string{"connection.url": plain, "connection.password": apiCanary})
	if state, trace := w.settle(t, "sec-patch-url", time.Minute); state != "RUNNING" {
		t.Errorf("after sending the password again: %s %s", state, trace)
	}

	// PUT of GET's output with the host changed: "[hidden]" in
	// connection.password, and in the URL's user information.
	for name, c := range map[string]struct{ url, password string }{
		"sec-put-hidden":     {plain, apiCanary},
		"sec-put-hidden-url": {dbURL, ""},
	} {
		cfg = pgConnector(c.url)
		if c.password != "" {
			cfg["connection.password"] = c.password
		}
		create(name, cfg)
		var shown map[string]string
		_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/"+name+"/config", nil)), &shown)
		if !strings.Contains(fmt.Sprint(shown), "[hidden]") {
			t.Fatalf("%s: GET shows no [hidden]: %v", name, shown)
		}
		shown["connection.url"] = strings.Replace(shown["connection.url"], u.Host, capture.addr(), 1)
		since := len(capture.got())
		if code, b := w.call(t, "PUT", "/connectors/"+name+"/config", shown); code != 200 {
			t.Errorf("PUT of GET's output (%s): %d %s, want 200", name, code, b)
			continue
		}
		expectDropped(name, "PUT of GET's output with [hidden] ("+name+")", since)
	}

	// PATCH of connection.user alone: the password was given for the old
	// user.
	cfg = pgConnector(plain)
	cfg["connection.password"] = apiCanary
	create("sec-patch-user", cfg)
	since = len(capture.got())
	w.must(t, 200, "PATCH", "/connectors/sec-patch-user/config", map[string]string{"connection.user": "postgres"})
	expectDropped("sec-patch-user", "PATCH connection.user", since)

	// The worker's PGPASSWORD is not lent to a REST-created connector.
	since = len(capture.got())
	cfg = pgConnector(elsewhere)
	cfg["name"] = "sec-env-pw"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-env-pw", "config": cfg})
	w.settle(t, "sec-env-pw", time.Minute)
	deadline := time.Now().Add(20 * time.Second)
	for len(capture.got()) == since && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range capture.got()[since:] {
		if strings.HasSuffix(s, ":"+apiCanary) {
			t.Errorf("the worker's PGPASSWORD reached a host a REST client named (%s)", s)
		}
	}
	if len(capture.got()) == since {
		t.Error("the capture server saw no login attempt: the test proves nothing")
	}
	// Nor its PGUSER: a connector must name its user.
	noUser := pgConnector("postgres://" + capture.addr() + "/x?sslmode=disable")
	w.refused(t, "no user (PGUSER in the worker's environment)", "connection.user", noUser)

	// ClickHouse: the same binding (the connector stays STOPPED).
	ch := pgConnector("clickhouse://default@127.0.0.1:9000/default")
	ch["connector.class"] = "clickhouse"
	ch["connection.password"] = apiCanary
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-ch-move", "config": ch, "initial_state": "STOPPED"})
	w.must(t, 200, "PATCH", "/connectors/sec-ch-move/config", map[string]string{"connection.url": "clickhouse://default@127.0.0.2:9000/default"})
	var moved map[string]string
	_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/sec-ch-move/config", nil)), &moved)
	if _, ok := moved["connection.password"]; ok {
		t.Error("ClickHouse: the stored password followed connection.url to another host")
	}
}

// TestSecurityClickHouseEngine (item 4): auto.create.engine takes only
// allowlisted MergeTree engines with validated arguments; validate reports
// every other value and create refuses it.
func TestSecurityClickHouseEngine(t *testing.T) {
	w := secServe(t, serveOpts{})
	for _, engine := range []string{
		"MergeTree AS SELECT * FROM url('http://127.0.0.1:1/x', CSV)",
		"MergeTree() SETTINGS storage_policy = 'x'",
		"URL('http://127.0.0.1:1/x', CSV)",
		"File(TabSeparated, '/etc/passwd')",
		"ReplicatedMergeTree('/p'') OR (1', '{replica}')",
		"ReplacingMergeTree(url('http://127.0.0.1:1/'))",
		"MergeTree() -- ",
		"Memory",
	} {
		cfg := pgConnector("127.0.0.1:9000")
		cfg["connector.class"] = "clickhouse"
		cfg["auto.create"] = "true"
		cfg["auto.create.engine"] = engine
		cfg["name"] = "sec-engine"
		body := w.must(t, 200, "PUT", "/connector-plugins/clickhouse/config/validate", cfg)
		var res validateAnswer
		_ = json.Unmarshal([]byte(body), &res)
		found := false
		for _, c := range res.Configs {
			found = found || c.Value.Name == "auto.create.engine" && len(c.Value.Errors) > 0
		}
		if !found {
			t.Errorf("validate of engine %q: no error on auto.create.engine (error_count %d)", engine, res.ErrorCount)
		}
		w.refused(t, "engine "+engine, "auto.create.engine", cfg)
	}
}

// TestSecurityConcurrentPatches (item 5): concurrent PATCHes of different
// settings of a running PostgreSQL connector all take effect.
func TestSecurityConcurrentPatches(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	w := secServe(t, serveOpts{})
	cfg := pgConnector(db)
	cfg["name"] = "sec-patch"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-patch", "config": cfg})
	const n = 8
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i], _ = w.call(t, "PATCH", "/connectors/sec-patch/config", map[string]string{fmt.Sprintf("x.key%d", i): fmt.Sprintf("r%d", round)})
			}()
		}
		wg.Wait()
		var got map[string]string
		_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/sec-patch/config", nil)), &got)
		for i := 0; i < n; i++ {
			if k := fmt.Sprintf("x.key%d", i); codes[i] != 200 || got[k] != fmt.Sprintf("r%d", round) {
				t.Errorf("round %d: PATCH of %s answered %d, and the configuration has %q: a lost update", round, k, codes[i], got[k])
			}
		}
	}
}

// TestSecurityBrowserRequests (item 6): what a web page can send is
// refused: bodies a form or a simple cross-site request carries (415),
// Host names of DNS rebinding (403), state changes from other origins
// (403). Kafka Connect's access.control.allow.origin lets named origins
// in; application/json clients keep working.
func TestSecurityBrowserRequests(t *testing.T) {
	w := secServe(t, serveOpts{})
	cfg := pgConnector("postgres://u@127.0.0.1:1/db")
	cfg["name"] = "sec-csrf"
	body, _ := json.Marshal(map[string]any{"name": "sec-csrf", "config": cfg, "initial_state": "STOPPED"})
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b", ""} {
		if code, _, b := w.raw(t, "POST", "/connectors", string(body), map[string]string{"Content-Type": ct}); code != 415 {
			t.Errorf("POST /connectors with Content-Type %q: %d %s, want 415", ct, code, b)
		}
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
	for _, host := range []string{"attacker.example", "attacker.example:" + port, "ATTACKER.EXAMPLE.:" + port, "localhost.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "[::1].attacker.example"} {
		if code, _, b := w.raw(t, "POST", "/connectors", string(body), map[string]string{"Content-Type": "application/json", "Host": host}); code != 403 {
			t.Errorf("POST with Host %q: %d %s, want 403", host, code, b)
		}
		if code, _, _ := w.raw(t, "GET", "/connectors", "", map[string]string{"Host": host}); code != 403 {
			t.Errorf("GET with Host %q: %d, want 403", host, code)
		}
	}
	for _, origin := range []string{"http://attacker.example", "null", "http://localhost:1"} {
		if code, _, b := w.raw(t, "POST", "/connectors", string(body), map[string]string{"Content-Type": "application/json", "Origin": origin}); code != 403 {
			t.Errorf("POST from Origin %q: %d %s, want 403", origin, code, b)
		}
	}
	if code, b := w.call(t, "GET", "/connectors", nil); code != 200 || b != "[]" {
		t.Fatalf("refused requests created connectors: %d %s", code, b)
	}
	// What keeps working: JSON clients on localhost, 127.0.0.1 and [::1].
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		if code, _, b := w.raw(t, "GET", "/connectors", "", map[string]string{"Host": host}); code != 200 {
			t.Errorf("GET with Host %q: %d %s", host, code, b)
		}
	}
	if code, _, b := w.raw(t, "POST", "/connectors", string(body), map[string]string{"Content-Type": "application/json; charset=utf-8"}); code != 201 {
		t.Errorf("JSON POST: %d %s", code, b)
	}

	// access.control.allow.origin and rest.allowed.hosts.
	w2 := secServe(t, serveOpts{env: []string{"TXSINK_ACCESS_CONTROL_ALLOW_ORIGIN=https://ui.example", "TXSINK_ACCESS_CONTROL_ALLOW_METHODS=GET,POST,PUT,DELETE", "TXSINK_REST_ALLOWED_HOSTS=txsink.internal"}})
	code, hdr, _ := w2.raw(t, "OPTIONS", "/connectors", "", map[string]string{"Origin": "https://ui.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
	if code != 204 || hdr.Get("Access-Control-Allow-Origin") != "https://ui.example" || !strings.Contains(hdr.Get("Access-Control-Allow-Methods"), "PUT") {
		t.Errorf("preflight from an allowed origin: %d %v", code, hdr)
	}
	if code, hdr, b := w2.raw(t, "POST", "/connectors", string(body), map[string]string{"Content-Type": "application/json", "Origin": "https://ui.example", "Host": "txsink.internal"}); code != 201 || hdr.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Errorf("POST from an allowed origin to an allowed host: %d %v %s", code, hdr, b)
	}
}

// TestSecurityMutualTLS (item 7: health under mTLS, TLS errors in the JSON
// log): with a client CA, /health answers probes without a certificate
// (GET, and "txsink healthcheck"), the rest needs one, and a TLS handshake
// error is a JSON log line like every other.
func TestSecurityMutualTLS(t *testing.T) {
	pki, err := testpki.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	tlsEnv := []string{"TXSINK_REST_TLS_CERT_FILE=" + pki.CertFile, "TXSINK_REST_TLS_KEY_FILE=" + pki.KeyFile, "TXSINK_REST_TLS_CLIENT_CA_FILE=" + pki.CAFile}
	k := harness.Kafka(t)
	w := startServeWith(t, k.Bootstrap, addr, t.TempDir(), "sec-tls", serveOpts{args: []string{"-log-format", "json"}, env: tlsEnv, tls: pki.ClientConfig(nil)})
	// (startServeWith waited for GET /health without a certificate.)
	if code, _, b := w.raw(t, "GET", "/connectors", "", nil); code != 401 {
		t.Errorf("GET /connectors without a client certificate: %d %s, want 401", code, b)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(&pki.Client)}}
	res, err := withCert.Get(w.base + "/connectors")
	if err != nil || res.StatusCode != 200 {
		t.Errorf("GET /connectors with a client certificate: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	_, port, _ := net.SplitHostPort(addr)
	hc := exec.Command(txsinkBinary(t), "healthcheck")
	hc.Env = append(os.Environ(), "TXSINK_LISTEN=0.0.0.0:"+port, "TXSINK_REST_TLS_CERT_FILE="+pki.CertFile)
	if out, err := hc.CombinedOutput(); err != nil {
		t.Errorf("txsink healthcheck under mutual TLS: %v %s", err, out)
	}
	// A plain-HTTP client on the TLS port: a handshake error.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.output(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(w.output(), "TLS handshake error") {
		t.Error("no TLS handshake error was logged")
	}
	checkJSONLogs(t, w.output())
}

// TestSecurityUnsafeTestSwitch (item 7): the test-only switch that turns
// off fencing is refused unless the process was started with
// -allow-unsafe-test-settings; run refuses it too.
func TestSecurityUnsafeTestSwitch(t *testing.T) {
	pg := harness.Postgres(t)
	// A role of its own: the harness's password ("txsink") would be hidden
	// in the setting's name.
	db := canaryURL(t, pg, pg.NewDatabase(t))
	cfg := pgConnector(db)
	cfg["txsink.test.unsafe.disable.fencing"] = "true"
	w := secServe(t, serveOpts{})
	w.refused(t, "txsink.test.unsafe.disable.fencing over REST", "txsink.test.unsafe.disable.fencing", cfg)
	cfg["txsink.test.unsafe.disable.fencing"] = "TRUE"
	w.refused(t, "the switch spelt TRUE", "txsink.test.unsafe.disable.fencing", cfg)

	flagged := secServe(t, serveOpts{args: []string{"-allow-unsafe-test-settings"}})
	cfg["name"] = "sec-unsafe"
	flagged.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-unsafe", "config": cfg, "initial_state": "STOPPED"})

	cfg["name"] = "sec-unsafe-run"
	k := harness.Kafka(t)
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "sec-run")
	if !p.wait(60 * time.Second) {
		t.Fatal("txsink run with the switch and without the flag did not exit")
	}
	if _, code := p.exited(); code != 3 || !strings.Contains(p.output(), "txsink.test.unsafe.disable.fencing") {
		t.Errorf("txsink run: exit %d, want 3 naming the switch:\n%s", code, tail(p.output(), 2000))
	}
}

// TestSecuritySessionOptions (item 7): options may not weaken durability,
// in any spelling; allowlisted session settings work against PostgreSQL.
func TestSecuritySessionOptions(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	w := secServe(t, serveOpts{})
	for _, opt := range []string{
		"-c%20synchronous_commit%3Doff",
		"-csynchronous_commit%3Doff",
		"--synchronous-commit%3Doff",
		"--synchronous_commit%3Dlocal",
		"-c%20SYNCHRONOUS_COMMIT%3DOFF",
		"-c%20synchronous_commit%3Dfalse",
		"-c%20statement_timeout%3D5s%20-c%20synchronous_commit%3D0",
		"-c%20fsync%3Doff",
		"-c%20session_replication_role%3Dreplica",
		"-c%20default_transaction_isolation%3Dread%5C%20uncommitted",
	} {
		w.refused(t, "options="+opt, "connection.url", pgConnector(db+"&options="+opt))
	}
	jdbc := "jdbc:" + strings.Replace(db, "postgres://", "postgresql://", 1) + "&options=-c%20synchronous_commit%3Doff"
	w.refused(t, "JDBC options", "connection.url", pgConnector(jdbc))
	cfg := pgConnector(db + "&options=-c%20statement_timeout%3D60s%20-c%20synchronous_commit%3Don")
	cfg["name"] = "sec-options-ok"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "sec-options-ok", "config": cfg})
	if state, trace := w.settle(t, "sec-options-ok", time.Minute); state != "RUNNING" {
		t.Errorf("allowed session settings: %s %s", state, trace)
	}
}

// TestSecurityDotNames (item 7): "." and ".." are refused as names (an HTTP
// client removes them from /connectors/{name}).
func TestSecurityDotNames(t *testing.T) {
	w := secServe(t, serveOpts{})
	for _, n := range []string{".", ".."} {
		cfg := pgConnector("postgres://u@127.0.0.1:1/db")
		cfg["name"] = n
		if code, b := w.call(t, "POST", "/connectors", map[string]any{"name": n, "config": cfg, "initial_state": "STOPPED"}); code != 400 {
			t.Errorf("POST name %q: %d %s", n, code, b)
		}
	}
	if code, b := w.call(t, "GET", "/connectors", nil); code != 200 || b != "[]" {
		t.Errorf("connectors: %d %s", code, b)
	}
}

// TestSecurityStateFiles (item 7): a temporary state file a SIGKILL left
// (it holds passwords) is removed at start, and a data directory open to
// others is reported.
func TestSecurityStateFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".standalone.json.123456.tmp")
	if err := os.WriteFile(stale, []byte(`{"connection.password":"`+apiCanary+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k := harness.Kafka(t)
	w := startServeWith(t, k.Bootstrap, freeAddr(t), dir, "sec-state", serveOpts{})
	if _, err := os.Stat(stale); err == nil {
		t.Error("the stale temporary state file survived the start")
	}
	if out := w.output(); !strings.Contains(out, "data directory is open to its group or to others") {
		t.Errorf("no warning about the data directory's mode 0755:\n%s", tail(out, 2000))
	}
	// And a real SIGKILL in the middle of writes leaves none either once
	// the worker is back: killed once the first of 20 creates was
	// answered (the state file is being rewritten for the others).
	answered := make(chan struct{})
	var once sync.Once
	for i := 0; i < 20; i++ {
		cfg := pgConnector("postgres://u@127.0.0.1:1/db")
		cfg["connection.password"] = apiCanary
		name := fmt.Sprintf("sec-state-%d", i)
		cfg["name"] = name
		b, _ := json.Marshal(map[string]any{"name": name, "config": cfg, "initial_state": "STOPPED"})
		go func() {
			if res, err := http.Post(w.base+"/connectors", "application/json", bytes.NewReader(b)); err == nil {
				res.Body.Close()
				once.Do(func() { close(answered) })
			}
		}()
	}
	select {
	case <-answered:
	case <-time.After(time.Minute):
		t.Fatal("none of 20 creates answered within a minute")
	}
	w.signal(syscall.SIGKILL)
	w.wait(10 * time.Second)
	startServeWith(t, k.Bootstrap, freeAddr(t), dir, "sec-state", serveOpts{})
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary state files after a SIGKILL and a restart: %v", left)
	}
}

// TestSecurityLoggers (item 7): PUT /admin/loggers cannot add names
// without end.
func TestSecurityLoggers(t *testing.T) {
	w := secServe(t, serveOpts{})
	refused := 0
	for i := 0; i < 300; i++ {
		code, _ := w.call(t, "PUT", fmt.Sprintf("/admin/loggers/sec.n%d", i), map[string]string{"level": "DEBUG"})
		if code == 400 {
			refused++
		}
	}
	if refused == 0 {
		t.Error("300 new logger names all accepted")
	}
	var all map[string]any
	_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/admin/loggers", nil)), &all)
	added := 0
	for n := range all {
		if strings.HasPrefix(n, "sec.n") {
			added++
		}
	}
	if added+refused != 300 || added > 256 {
		t.Errorf("%d names added through the API, %d refused", added, refused)
	}
}
