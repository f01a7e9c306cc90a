package convert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/txsink/txsink/connectors/record"
)

// The converter tests talk to a Schema Registry we did not write: franz-go's
// srfake (an in-memory implementation of Confluent's REST API), or, when
// TXSINK_TEST_SCHEMA_REGISTRY_URL names one, a real registry. Either sits
// behind a front on 127.0.0.1 that counts the schema fetches and can fail
// on purpose (down, 500, 401), so every test runs unchanged against both.
const registryURLEnv = "TXSINK_TEST_SCHEMA_REGISTRY_URL"

// testRegistry is the front of a registry for one test.
type testRegistry struct {
	t     *testing.T
	srv   *httptest.Server
	URL   string
	admin *sr.Client
	// Real says a real registry is behind the front.
	Real bool

	fetches sync.Map // path → *atomic.Int64 (GET /schemas/ids/…)
	mu      sync.Mutex
	fail    func(w http.ResponseWriter, r *http.Request) bool
	suffix  string
}

type frontOpt func(*frontCfg)

type frontCfg struct {
	tls       bool
	clientCA  bool // TLS with a required client certificate
	wantAuth  string
	certsPool *testCerts
}

func withTLS(c *testCerts, requireClientCert bool) frontOpt {
	return func(f *frontCfg) { f.tls, f.clientCA, f.certsPool = true, requireClientCert, c }
}

// withAuth makes the front refuse requests without exactly this
// Authorization header (401 when missing, 403 when wrong), as srfake's
// WithAuth does, and strip it before the registry.
func withAuth(header string) frontOpt { return func(f *frontCfg) { f.wantAuth = header } }

func newTestRegistry(t *testing.T, opts ...frontOpt) *testRegistry {
	t.Helper()
	var cfg frontCfg
	for _, o := range opts {
		o(&cfg)
	}
	tr := &testRegistry{t: t}
	var b [4]byte
	_, _ = rand.Read(b[:])
	tr.suffix = hex.EncodeToString(b[:])
	var backend http.Handler
	if raw := os.Getenv(registryURLEnv); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", registryURLEnv, err)
		}
		tr.Real = true
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
		backend = proxy
	} else {
		backend = srfake.NewRegistry().Handler()
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		fail := tr.fail
		tr.mu.Unlock()
		if fail != nil && fail(w, r) {
			return
		}
		if cfg.wantAuth != "" {
			got := r.Header.Get("Authorization")
			switch {
			case got == "":
				w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error_code":401,"message":"Unauthorized"}`))
				return
			case got != cfg.wantAuth:
				w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"error_code":403,"message":"Forbidden"}`))
				return
			}
			r.Header.Del("Authorization")
		}
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			c, _ := tr.fetches.LoadOrStore(r.URL.Path, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
		}
		backend.ServeHTTP(w, r)
	})
	if cfg.tls {
		tr.srv = httptest.NewUnstartedServer(h)
		tr.srv.TLS = cfg.certsPool.serverTLS(cfg.clientCA)
		tr.srv.StartTLS()
	} else {
		tr.srv = httptest.NewServer(h)
	}
	t.Cleanup(tr.srv.Close)
	tr.URL = tr.srv.URL
	adminOpts := []sr.ClientOpt{sr.URLs(tr.URL)}
	if cfg.wantAuth != "" {
		adminOpts = append(adminOpts, sr.PreReq(func(r *http.Request) error {
			r.Header.Set("Authorization", cfg.wantAuth)
			return nil
		}))
	}
	if cfg.tls {
		adminOpts = append(adminOpts, sr.HTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: cfg.certsPool.clientTLS()}}))
	}
	var err error
	if tr.admin, err = sr.NewClient(adminOpts...); err != nil {
		t.Fatal(err)
	}
	// Each registry gets its own cache entries: ids repeat across srfake
	// instances.
	t.Cleanup(func() { forgetRegistry(tr.URL) })
	return tr
}

// forgetRegistry drops the process-wide cache entries of a registry URL
// (srfake instances reuse ids, and ports are reused).
func forgetRegistry(u string) {
	cache.Range(func(k, _ any) bool {
		if strings.Contains(k.(string), "\x00"+u) {
			cache.Delete(k)
		}
		return true
	})
	served.Range(func(k, _ any) bool {
		if strings.Contains(k.(string), u) {
			served.Delete(k)
		}
		return true
	})
}

// subject returns a subject name unique to this test run.
func (tr *testRegistry) subject(name string) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(tr.t.Name()) + "-" + name + "-" + tr.suffix
}

// register registers a schema under subject (made unique) and returns its
// id and version.
func (tr *testRegistry) register(subject string, s sr.Schema) (id, version int) {
	tr.t.Helper()
	ss, err := tr.admin.CreateSchema(context.Background(), tr.subject(subject), s)
	if err != nil {
		tr.t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID, ss.Version
}

// setCompatibility sets subject's (made unique) compatibility level.
func (tr *testRegistry) setCompatibility(subject string, level sr.CompatibilityLevel) {
	tr.t.Helper()
	for _, r := range tr.admin.SetCompatibility(context.Background(), sr.SetCompatibility{Level: level}, tr.subject(subject)) {
		if r.Err != nil {
			tr.t.Fatalf("set compatibility of %s to %s: %v", subject, level, r.Err)
		}
	}
}

// kind says which registry is behind the front, for the test's log.
func (tr *testRegistry) kind() string {
	if tr.Real {
		return "a real one (" + registryURLEnv + ")"
	}
	return "franz-go srfake"
}

// ref returns the reference to a registered subject's version.
func (tr *testRegistry) ref(name, subject string, version int) sr.SchemaReference {
	return sr.SchemaReference{Name: name, Subject: tr.subject(subject), Version: version}
}

// fetchCount is how many times the front served GET /schemas/ids/<id>.
func (tr *testRegistry) fetchCount(id int) int64 {
	c, ok := tr.fetches.Load("/schemas/ids/" + strconv.Itoa(id))
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// failWith makes the front answer every request with fn (nil: serve).
func (tr *testRegistry) failWith(fn func(w http.ResponseWriter, r *http.Request) bool) {
	tr.mu.Lock()
	tr.fail = fn
	tr.mu.Unlock()
}

// settings returns the converter settings for this registry.
func (tr *testRegistry) settings(extra ...string) map[string]string {
	m := map[string]string{SettingRegistryURL: tr.URL}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// unknownID is a schema id no registry of a test has.
func (tr *testRegistry) unknownID() int {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return 0x7ff00000 + int(b[0])<<8 + int(b[1])
}

// frame puts payload in Confluent's wire format with franz-go's header.
func frame(t testing.TB, id int, index []int, payload []byte) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, index)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

// convertOK converts data and fails the test on an error.
func convertOK(t testing.TB, c Converter, data []byte) record.Value {
	t.Helper()
	v, err := c.Convert(context.Background(), "t", nil, data, &Buffer{})
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	return v
}

// newConverter builds a converter by class with settings.
func newConverter(t testing.TB, class string, settings map[string]string) Converter {
	t.Helper()
	c, err := New(class, settings, false)
	if err != nil {
		t.Fatalf("New(%s): %v", class, err)
	}
	return c
}

// testCerts is a throwaway CA with a server certificate for 127.0.0.1 and
// a client certificate, all PEM.
type testCerts struct {
	CAPEM, ServerPEM, ServerKeyPEM, ClientPEM, ClientKeyPEM string
	pool                                                    *x509.CertPool
}

func newTestCerts(t testing.TB) *testCerts {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txsink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, server bool) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "txsink test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	}
	c := &testCerts{CAPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), pool: x509.NewCertPool()}
	c.pool.AddCert(caCert)
	c.ServerPEM, c.ServerKeyPEM = leaf(2, true)
	c.ClientPEM, c.ClientKeyPEM = leaf(3, false)
	return c
}

func (c *testCerts) serverTLS(requireClient bool) *tls.Config {
	cert, _ := tls.X509KeyPair([]byte(c.ServerPEM), []byte(c.ServerKeyPEM))
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if requireClient {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, c.pool
	}
	return cfg
}

func (c *testCerts) clientTLS() *tls.Config {
	cert, _ := tls.X509KeyPair([]byte(c.ClientPEM), []byte(c.ClientKeyPEM))
	return &tls.Config{RootCAs: c.pool, Certificates: []tls.Certificate{cert}}
}
