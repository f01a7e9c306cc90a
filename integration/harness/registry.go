package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// EnvSchemaRegistryURL names a running Confluent-API Schema Registry
// (http://host:port, user information in the URL for basic
// authentication) to use instead of franz-go's in-memory srfake.
const EnvSchemaRegistryURL = "TXSINK_TEST_SCHEMA_REGISTRY_URL"

// EnvSchemaRegistryBin names the binary of AxonOps Schema Registry (a
// real Confluent-API registry with in-memory storage; .ci/run builds it
// from the tools module .ci/tools/schemaregistry into
// bin/tools/schema-registry and sets this variable). When set, and
// TXSINK_TEST_SCHEMA_REGISTRY_URL is not, the harness starts it on
// 127.0.0.1 on a free port, once per test binary, and puts it behind the
// front instead of srfake.
const EnvSchemaRegistryBin = "TXSINK_TEST_SCHEMA_REGISTRY_BIN"

// SchemaRegistryService is a Schema Registry that speaks Confluent's REST
// API, behind a front on 127.0.0.1 that the test controls: separate txsink
// processes reach it at URL, and Down/Up make it unreachable for a while.
//
// The registry is, in this order: the registry named by
// TXSINK_TEST_SCHEMA_REGISTRY_URL; AxonOps Schema Registry started from
// TXSINK_TEST_SCHEMA_REGISTRY_BIN (what CI runs); or franz-go's srfake (an
// independent implementation of the API that checks no compatibility
// rules, never a registry of ours), served over HTTP. Each is shared by
// the test binary; tests keep apart by registering under subjects from
// Subject.
type SchemaRegistryService struct {
	// URL is the front's address, http://127.0.0.1:port.
	URL string
	// Client registers and looks up schemas through the front.
	Client *sr.Client
	// Real reports that a real registry is behind the front.
	Real bool
	// Kind says which registry is behind the front, for test logs.
	Kind string

	f       *registryFront
	backend *swapHandler
	start   func() (registryBackend, error)
}

// SchemaRegistry returns the registry shared by the test binary (started
// on first use). It needs neither Docker nor the network.
func SchemaRegistry(t testing.TB) *SchemaRegistryService {
	t.Helper()
	return service(t, "schema-registry", startRegistry)
}

// PrivateSchemaRegistry returns a registry of tb's own, of the kind
// SchemaRegistry would share, terminated when tb ends: for a test that
// empties it (RestartEmpty), which would pull the ids from under the
// other tests of the binary.
func PrivateSchemaRegistry(t testing.TB) *SchemaRegistryService {
	t.Helper()
	s, err := startRegistry(t, false)
	if err != nil {
		t.Fatalf("harness: starting a schema registry: %v", err)
	}
	return s
}

// registryBackend is what the front serves: a real registry's process
// behind a reverse proxy, or srfake; start makes a new, empty one.
type registryBackend struct {
	handler http.Handler
	close   func()
}

func startRegistry(tb testing.TB, sharedMode bool) (*SchemaRegistryService, error) {
	real := false
	kind := "franz-go srfake"
	var start func() (registryBackend, error)
	raw := os.Getenv(EnvSchemaRegistryURL)
	switch bin := os.Getenv(EnvSchemaRegistryBin); {
	case raw == "" && bin != "":
		real = true
		kind = "AxonOps Schema Registry (" + EnvSchemaRegistryBin + ")"
		start = func() (registryBackend, error) {
			p, addr, err := startRegistryProcess(bin)
			if err != nil {
				return registryBackend{}, fmt.Errorf("%s=%s: %w", EnvSchemaRegistryBin, bin, err)
			}
			u := &url.URL{Scheme: "http", Host: addr}
			return registryBackend{handler: registryProxy(u), close: func() { p.Stop(10 * time.Second) }}, nil
		}
	case raw != "":
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvSchemaRegistryURL, err)
		}
		real = true
		kind = "the registry of " + EnvSchemaRegistryURL
		b := registryBackend{handler: registryProxy(u), close: func() {}}
		first := true
		start = func() (registryBackend, error) {
			if !first {
				return registryBackend{}, errors.New("the registry of " + EnvSchemaRegistryURL + " is not the harness's to restart")
			}
			first = false
			return b, nil
		}
	default:
		// srfake served by its own HTTP server; the front proxies to it,
		// so that closing the front's connections looks like a registry
		// that went away.
		start = func() (registryBackend, error) {
			srv := httptest.NewServer(srfake.NewRegistry().Handler())
			u, _ := url.Parse(srv.URL)
			return registryBackend{handler: httputil.NewSingleHostReverseProxy(u), close: srv.Close}, nil
		}
	}
	b, err := start()
	if err != nil {
		return nil, err
	}
	sw := &swapHandler{}
	sw.set(b)
	f, err := newRegistryFront(sw)
	if err != nil {
		b.close()
		return nil, err
	}
	s := &SchemaRegistryService{URL: "http://" + f.addr, Real: real, Kind: kind, f: f, backend: sw, start: start}
	if s.Client, err = sr.NewClient(sr.URLs(s.URL)); err != nil {
		f.close()
		b.close()
		return nil, err
	}
	register(tb, sharedMode, resource{name: "schema registry front " + f.addr, terminate: func(context.Context) error {
		f.close()
		sw.closeCurrent()
		return nil
	}})
	return s, nil
}

// registryProxy forwards to the registry at u, with u's user
// information as basic authentication.
func registryProxy(u *url.URL) http.Handler {
	proxy := httputil.NewSingleHostReverseProxy(u)
	user := u.User
	base := proxy.Director
	proxy.Director = func(r *http.Request) {
		base(r)
		r.Host = u.Host
		if user != nil {
			p, _ := user.Password()
			r.SetBasicAuth(user.Username(), p)
		}
	}
	return proxy
}

// swapHandler serves the current backend; RestartEmpty replaces it.
type swapHandler struct {
	mu sync.Mutex
	b  registryBackend
}

func (h *swapHandler) set(b registryBackend) (old registryBackend) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, h.b = h.b, b
	return old
}

func (h *swapHandler) closeCurrent() {
	if old := h.set(registryBackend{}); old.close != nil {
		old.close()
	}
}

func (h *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	b := h.b
	h.mu.Unlock()
	if b.handler == nil {
		http.Error(w, "no registry", http.StatusBadGateway)
		return
	}
	b.handler.ServeHTTP(w, r)
}

// RestartEmpty replaces the registry behind the front with a new, empty
// one at the same URL, as an in-memory registry restarted: every schema
// and id is gone. It fails the test on a registry the harness did not
// start (TXSINK_TEST_SCHEMA_REGISTRY_URL).
func (s *SchemaRegistryService) RestartEmpty(t testing.TB) {
	t.Helper()
	b, err := s.start()
	if err != nil {
		t.Fatalf("schema registry: restart empty: %v", err)
	}
	if old := s.backend.set(b); old.close != nil {
		old.close()
	}
}

// startRegistryProcess starts the AxonOps Schema Registry binary on
// 127.0.0.1 on a free port with in-memory storage and waits until it
// answers GET /config. Its output goes to the test binary's stderr only
// if it fails to start.
func startRegistryProcess(bin string) (*Process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var out bytes.Buffer
	cmd := exec.Command(bin)
	// Only what the server needs: its configuration comes from these
	// variables (no config file), and nothing of the test's environment.
	cmd.Env = []string{
		"SCHEMA_REGISTRY_HOST=127.0.0.1",
		"SCHEMA_REGISTRY_PORT=" + strconv.Itoa(port),
		"SCHEMA_REGISTRY_STORAGE_TYPE=memory",
		"SCHEMA_REGISTRY_LOG_LEVEL=warn",
	}
	p, err := StartCommand(cmd, &lockedWriter{w: &out})
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get("http://" + addr + "/config")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, addr, nil
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			p.Kill()
			return nil, "", fmt.Errorf("did not answer on %s (last: %v): %s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedWriter serialises writes from the process's output copiers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Subject returns name with a random suffix: a subject no other test (and,
// on a real registry, no earlier run) uses.
func (s *SchemaRegistryService) Subject(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// Register registers schema under subject and returns its id.
func (s *SchemaRegistryService) Register(t testing.TB, subject string, schema sr.Schema) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss, err := s.Client.CreateSchema(ctx, subject, schema)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID
}

// Down makes the registry unreachable: the front stops listening (new
// connections are refused) and closes the connections it holds. It stays
// down until Up.
func (s *SchemaRegistryService) Down() { s.f.down() }

// Up makes the registry reachable again at the same URL.
func (s *SchemaRegistryService) Up(t testing.TB) {
	t.Helper()
	if err := s.f.up(); err != nil {
		t.Fatalf("schema registry front: listen again on %s: %v", s.f.addr, err)
	}
}

// registryFront serves the backend on a fixed 127.0.0.1 address and can
// stop listening and drop its connections for a while.
type registryFront struct {
	addr string
	srv  *http.Server

	mu    sync.Mutex
	ln    net.Listener // nil while down
	conns map[net.Conn]struct{}
}

func newRegistryFront(backend http.Handler) (*registryFront, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &registryFront{addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	f.srv = &http.Server{
		Handler:           backend,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			f.mu.Lock()
			defer f.mu.Unlock()
			switch st {
			case http.StateNew:
				if f.ln == nil {
					c.Close() // accepted just before going down
					return
				}
				f.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(f.conns, c)
			}
		},
	}
	f.serve(ln)
	return f, nil
}

func (f *registryFront) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		// Serve returns when down (or close) closes the listener.
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintf(os.Stderr, "harness: schema registry front: %v\n", err)
		}
	}()
}

func (f *registryFront) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

func (f *registryFront) up() error {
	f.mu.Lock()
	if f.ln != nil {
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; retry briefly while the kernel lets
	// it go.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			f.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func (f *registryFront) close() {
	f.down()
	_ = f.srv.Close()
}
