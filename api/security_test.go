package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/internal/testpki"
)

// raw sends a request with exactly the headers given (Host among them; no
// default Content-Type) and returns the status, the body and the headers.
func (e *env) raw(method, path, body string, hdr map[string]string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return e.send(req)
}

func createBody(name string) string {
	b, _ := json.Marshal(map[string]any{"name": name, "config": fakeConfig(name)})
	return string(b)
}

// TestBodiesMustBeJSON: a body a browser can send without a CORS preflight
// (text/plain, a form) is refused with 415 and changes nothing; Kafka
// Connect clients' application/json works.
func TestBodiesMustBeJSON(t *testing.T) {
	e := newEnv(t)
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=utf-16", "application/jsonx", ""} {
		r := e.raw("POST", "/connectors", createBody("c1"), map[string]string{"Content-Type": ct})
		if r.code != http.StatusUnsupportedMediaType {
			t.Errorf("POST with Content-Type %q: %d %s, want 415", ct, r.code, r.body)
		}
	}
	if got, _ := e.worker.Connectors(context.Background()); len(got) != 0 {
		t.Fatalf("connectors created by refused requests: %v", got)
	}
	e.must(201, "POST", "/connectors", fakeConfigBody("c1"))
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		if r := e.raw("PATCH", "/connectors/c1/config", `{"batch.linger.ms":"6"}`, map[string]string{"Content-Type": ct}); r.code != 200 {
			t.Errorf("PATCH with %q: %d %s", ct, r.code, r.body)
		}
	}
	// A request without a body needs no Content-Type (curl -X PUT …/pause).
	if r := e.raw("PUT", "/connectors/c1/pause", "", nil); r.code != 202 {
		t.Errorf("PUT pause without body: %d %s", r.code, r.body)
	}
	// A form that posts nothing still declares its type.
	if r := e.raw("POST", "/connectors/c1/restart", "", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); r.code != 415 {
		t.Errorf("form POST restart: %d %s, want 415", r.code, r.body)
	}
}

func fakeConfigBody(name string) map[string]any {
	return map[string]any{"name": name, "config": fakeConfig(name)}
}

// TestHostHeader: a name that is not this worker's is refused (DNS
// rebinding), in every spelling; IP addresses, localhost, the listen host
// and rest.allowed.hosts are served; /health always.
func TestHostHeader(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Listen = "worker.internal:8083"
		o.AllowedHosts = []string{"txsink", "*.svc.cluster.local"}
	})
	for _, h := range []string{"attacker.example", "attacker.example:8083", "ATTACKER.example.", "localhost.attacker.example", "127.0.0.1.attacker.example", "txsink.attacker.example", "svc.cluster.local", "evil%2ecom", "0x7f.1", "[::1].attacker.example"} {
		if r := e.raw("GET", "/connectors", "", map[string]string{"Host": h}); r.code != http.StatusForbidden {
			t.Errorf("Host %q: %d %s, want 403", h, r.code, r.body)
		}
		if r := e.raw("POST", "/connectors", createBody("c1"), map[string]string{"Host": h, "Content-Type": "application/json"}); r.code != http.StatusForbidden {
			t.Errorf("POST with Host %q: %d, want 403", h, r.code)
		}
		if r := e.raw("GET", "/health", "", map[string]string{"Host": h}); r.code != 200 {
			t.Errorf("GET /health with Host %q: %d, want 200 (probes)", h, r.code)
		}
	}
	for _, h := range []string{"localhost", "LocalHost:8083", "localhost.", "127.0.0.1:8083", "[::1]:8083", "10.1.2.3", "[fe80::1%25eth0]:8083", "worker.internal", "txsink:8083", "txsink.ns.svc.cluster.local"} {
		if r := e.raw("GET", "/connectors", "", map[string]string{"Host": h}); r.code != 200 {
			t.Errorf("Host %q: %d %s, want 200", h, r.code, r.body)
		}
	}
	if got, _ := e.worker.Connectors(context.Background()); len(got) != 0 {
		t.Fatalf("connectors created by refused requests: %v", got)
	}
}

// TestCrossOrigin: a state-changing request from another site is refused;
// access.control.allow.origin lets the named origins in (with CORS
// headers and preflights).
func TestCrossOrigin(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, o := range []string{"http://attacker.example", "null", "http://127.0.0.1:1", "https://" + strings.TrimPrefix(e.srv.URL, "http://")} {
		if r := e.raw("POST", "/connectors", createBody("c1"), with(json, "Origin", o)); r.code != 403 {
			t.Errorf("POST from Origin %q: %d %s, want 403", o, r.code, r.body)
		}
		r := e.raw("GET", "/connectors", "", map[string]string{"Origin": o})
		if r.code != 200 || r.hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET from Origin %q: %d, CORS header %q; want 200 without", o, r.code, r.hdr.Get("Access-Control-Allow-Origin"))
		}
	}
	if got, _ := e.worker.Connectors(context.Background()); len(got) != 0 {
		t.Fatalf("connectors created cross-origin: %v", got)
	}
	// The worker's own origin is not cross-origin.
	if r := e.raw("POST", "/connectors", createBody("c1"), with(json, "Origin", e.srv.URL)); r.code != 201 {
		t.Errorf("same-origin POST: %d %s", r.code, r.body)
	}

	e2 := newEnv(t, func(o *Options) { o.AllowOrigin = "https://ui.example"; o.AllowMethods = "GET,POST,PUT,DELETE" })
	r := e2.raw("OPTIONS", "/connectors", "", map[string]string{"Origin": "https://ui.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
	if r.code != 204 || r.hdr.Get("Access-Control-Allow-Origin") != "https://ui.example" || !strings.Contains(r.hdr.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(strings.ToLower(r.hdr.Get("Access-Control-Allow-Headers")), "content-type") {
		t.Errorf("preflight: %d %v", r.code, r.hdr)
	}
	if r := e2.raw("POST", "/connectors", createBody("c2"), with(json, "Origin", "https://ui.example")); r.code != 201 || r.hdr.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Errorf("allowed origin POST: %d %v %s", r.code, r.hdr, r.body)
	}
	if r := e2.raw("PATCH", "/connectors/c2/config", `{"tasks.max":"1"}`, with(json, "Origin", "https://ui.example")); r.code != 403 {
		t.Errorf("PATCH is not in access.control.allow.methods: %d", r.code)
	}
	if r := e2.raw("OPTIONS", "/connectors", "", map[string]string{"Origin": "https://other.example", "Access-Control-Request-Method": "POST"}); r.code != 403 || r.hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %d %v", r.code, r.hdr)
	}
}

// TestLoggerNamesBounded: PUT /admin/loggers adds at most MaxAddedLoggers
// names, and only sane ones.
func TestLoggerNamesBounded(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < MaxAddedLoggers; i++ {
		e.must(200, "PUT", fmt.Sprintf("/admin/loggers/x.y%d", i), `{"level":"DEBUG"}`)
	}
	r := e.do("PUT", "/admin/loggers/one.too.many", `{"level":"DEBUG"}`)
	if r.code != 400 {
		t.Fatalf("logger %d: %d %s, want 400", MaxAddedLoggers+1, r.code, r.body)
	}
	// Known names still change.
	e.must(200, "PUT", "/admin/loggers/x.y0", `{"level":"INFO"}`)
	e.must(200, "PUT", "/admin/loggers/root", `{"level":"INFO"}`)
	if r := e.do("PUT", "/admin/loggers/"+strings.Repeat("a", 300), `{"level":"DEBUG"}`); r.code != 400 {
		t.Errorf("300-character name: %d", r.code)
	}
	if r := e.do("PUT", "/admin/loggers/a%20b", `{"level":"DEBUG"}`); r.code != 400 {
		t.Errorf("name with a space: %d", r.code)
	}
}

// TestDotNamesRefused: "." and ".." would be unreachable under
// /connectors/{name}.
func TestDotNamesRefused(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{".", ".."} {
		if r := e.do("POST", "/connectors", fakeConfigBody(n)); r.code != 400 {
			t.Errorf("POST name %q: %d %s", n, r.code, r.body)
		}
		cfg := fakeConfig(n)
		delete(cfg, "name")
		if r := e.do("PUT", "/connectors/"+n+"/config", cfg); r.code != 400 && r.code != 404 && r.code != 405 {
			t.Errorf("PUT /connectors/%s/config: %d %s", n, r.code, r.body)
		}
	}
	if got, _ := e.worker.Connectors(context.Background()); len(got) != 0 {
		t.Fatalf("created: %v", got)
	}
}

// TestSecretBoundToTarget: moving the connector to another host (PATCH of
// the URL alone, or PUT of GET's output with "[hidden]") drops the stored
// secrets; the connector fails saying so until they are sent again.
func TestSecretBoundToTarget(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/connectors", fakeConfigBody("c1"))
	e.waitState("c1", engine.StateRunning, 1)

	e.must(200, "PATCH", "/connectors/c1/config", map[string]string{"fake.url": "fake://writer@attacker.example/db"})
	stored, _ := e.worker.Config("c1")
	if strings.Contains(fmt.Sprint(stored), canary) {
		t.Fatalf("the stored secret survived the move: %v", secrets.RedactConfig(nil, stored))
	}
	st := e.waitState("c1", engine.StateFailed, 0)
	if !strings.Contains(st.Connector.Trace, "fake.secret") || !strings.Contains(st.Connector.Trace, "dropped") {
		t.Errorf("trace %q does not say the secret was dropped", st.Connector.Trace)
	}
	// Sending it again brings the connector back.
	e.must(200, "PATCH", "/connectors/c1/config", map[string]string{"fake.secret": "New-" + canary})
	e.waitState("c1", engine.StateRunning, 1)

	// PUT of what GET shows, with the host changed: "[hidden]" does not
	// follow the move.
	var cfg map[string]string
	_ = json.Unmarshal(e.must(200, "GET", "/connectors/c1/config", nil).body, &cfg)
	if cfg["fake.secret"] != secrets.Hidden {
		t.Fatalf("GET config shows fake.secret %q", cfg["fake.secret"])
	}
	cfg["fake.url"] = "fake://writer@elsewhere.example/db"
	e.must(200, "PUT", "/connectors/c1/config", cfg)
	stored, _ = e.worker.Config("c1")
	if strings.Contains(fmt.Sprint(stored), canary) || stored["fake.secret"] != "" {
		t.Fatalf("PUT [hidden] carried the secret to the new host: %v", secrets.RedactConfig(nil, stored))
	}
	e.waitState("c1", engine.StateFailed, 0)
	// The same round trip without a move keeps it.
	e.must(200, "PATCH", "/connectors/c1/config", map[string]string{"fake.secret": canary})
	_ = json.Unmarshal(e.must(200, "GET", "/connectors/c1/config", nil).body, &cfg)
	cfg["tasks.max"] = "1"
	e.must(200, "PUT", "/connectors/c1/config", cfg)
	if stored, _ = e.worker.Config("c1"); stored["fake.secret"] != canary {
		t.Fatalf("round trip without a move lost the secret")
	}
	e.waitState("c1", engine.StateRunning, 1)
	// Offsets of a stopped connector whose secret was dropped: 409 with
	// the reason, not a connection attempt.
	e.must(200, "PATCH", "/connectors/c1/config", map[string]string{"fake.url": "fake://writer@third.example/db"})
	e.must(204, "PUT", "/connectors/c1/stop", nil)
	if r := e.must(409, "GET", "/connectors/c1/offsets", nil); !strings.Contains(string(r.body), "dropped") {
		t.Errorf("offsets: %s", r.body)
	}
}

// TestMutualTLSExemptsHealth: with rest.tls.client.ca.file, GET /health
// answers without a client certificate (probes), everything else needs
// one, and a certificate of another CA is refused at the handshake.
func TestMutualTLSExemptsHealth(t *testing.T) {
	pki, err := testpki.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wc, err := config.ParseWorker(map[string]string{config.KeyRESTTLSCertFile: pki.CertFile, config.KeyRESTTLSKeyFile: pki.KeyFile, config.KeyRESTTLSClientCAFile: pki.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := wc.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.RequireClientCert = true })
	// Serve the same handler over TLS.
	tlsSrv := httptest.NewUnstartedServer(e.srv.Config.Handler)
	tlsSrv.TLS = tc
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	get := func(path string, cert *tls.Certificate) (int, error) {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(cert)}}
		res, err := cl.Get(tlsSrv.URL + path)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := get("/health", nil); err != nil || code != 200 {
		t.Errorf("GET /health without a client certificate: %d %v, want 200", code, err)
	}
	if code, err := get("/connectors", nil); err != nil || code != 401 {
		t.Errorf("GET /connectors without a client certificate: %d %v, want 401", code, err)
	}
	if code, err := get("/connectors", &pki.Client); err != nil || code != 200 {
		t.Errorf("GET /connectors with a client certificate: %d %v, want 200", code, err)
	}
	if code, err := get("/health", &pki.Stranger); err == nil {
		t.Errorf("a certificate of another CA was accepted: %d", code)
	}
}
