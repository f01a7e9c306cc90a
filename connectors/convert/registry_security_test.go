package convert

// The Schema Registry client against a hostile registry (issue 25, items
// 3-5): answers without end, redirects that carry the credentials
// elsewhere, addresses a registry URL must not reach, and answers whose
// text must not reach the status. Every connection a test makes goes to
// 127.0.0.1: each policy here carries a beforeConnect hook that refuses,
// and reports, any other address, so a defence that fails can never send
// a packet off the machine.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/hostilesr"
)

// guard returns a policy p whose connections are recorded and refused
// (failing the test) unless they go to the loopback address.
func guard(t *testing.T, p RegistryPolicy) (RegistryPolicy, func() []netip.AddrPort) {
	t.Helper()
	var mu sync.Mutex
	var dialled []netip.AddrPort
	p.beforeConnect = func(ap netip.AddrPort) error {
		mu.Lock()
		dialled = append(dialled, ap)
		mu.Unlock()
		if !ap.Addr().Unmap().IsLoopback() {
			t.Errorf("a connection to %s got past the address checks (refused by the test's guard, no packet sent)", ap)
			return errors.New("test guard: not loopback")
		}
		return nil
	}
	return p, func() []netip.AddrPort {
		mu.Lock()
		defer mu.Unlock()
		return append([]netip.AddrPort(nil), dialled...)
	}
}

func hostile(t *testing.T, a hostilesr.Answer) *hostilesr.Server {
	s := hostilesr.New(a)
	t.Cleanup(func() { s.Close(); forgetRegistry(s.URL) })
	return s
}

func newConverterWith(t testing.TB, settings map[string]string, p RegistryPolicy) Converter {
	t.Helper()
	c, err := New(AvroClass, settings, false, WithRegistryPolicy(p))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// An answer larger than the limit is not read further, whether or not it
// declares its length: the client's memory stays bounded, the error names
// the limit and the worker setting, and it is the environment's failure,
// never a bad record. A failure is not cached, so the next attempt
// (after the task's backoff) asks again, and an answer within the limit
// works.
func TestRegistryResponseLimit(t *testing.T) {
	const size = 600 << 20 // the reported answer
	for _, declare := range []bool{true, false} {
		t.Run(fmt.Sprintf("content-length=%v", declare), func(t *testing.T) {
			srv := hostile(t, hostilesr.Oversized(size, declare))
			p, _ := guard(t, RegistryPolicy{})
			c := newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
			runtime.ReadMemStats(&after)
			wantUnavailable(t, err, srv.URL, config.KeyRegistryMaxResponse, "4194304")
			if !errors.Is(err, ErrRegistryRefused) {
				t.Errorf("err = %v, want ErrRegistryRefused", err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("the client allocated %d MiB for a %d MiB answer, want < 64 MiB", alloc>>20, size>>20)
			}
			if sent := srv.BytesSent(); sent > 64<<20 {
				t.Errorf("the registry got %d MiB out before the client stopped reading, want < 64 MiB", sent>>20)
			}
			// Not cached: the next attempt asks again.
			n := len(srv.Requests())
			_, err = c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
			wantUnavailable(t, err, srv.URL, config.KeyRegistryMaxResponse)
			if got := len(srv.Requests()); got != n+1 {
				t.Errorf("%d requests after a second attempt, want %d", got, n+1)
			}
			srv.Set(hostilesr.Schema(simpleAvro))
			convertOK(t, c, simpleRecord(t, 1))
		})
	}
	t.Run("setting", func(t *testing.T) {
		// A smaller limit: an answer of 2 KiB passes 4 KiB, not 1 KiB.
		srv := hostile(t, hostilesr.Oversized(2048, false))
		p, _ := guard(t, RegistryPolicy{MaxResponseBytes: 1024})
		c := newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, srv.URL, config.KeyRegistryMaxResponse+"=1024")
		p.MaxResponseBytes = 4096
		forgetRegistry(srv.URL)
		c = newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
		_, err = c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		// Read whole: the padding is no Avro schema, which is the schema's
		// fault.
		if err == nil || errors.Is(err, record.ErrUnavailable) {
			t.Fatalf("err = %v, want the schema refused after reading the whole answer", err)
		}
	})
}

// A redirect to another scheme, host or port is refused before the
// request is sent there, whatever the status code and however the other
// origin is spelled; one within the same origin is followed with the
// credentials.
func TestRegistryRedirects(t *testing.T) {
	other := hostile(t, hostilesr.Schema(simpleAvro))
	otherURL, _ := url.Parse(other.URL)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ann:s3cret"))
	settings := func(u string) map[string]string {
		return map[string]string{SettingRegistryURL: u, SettingBasicAuthSource: "USER_INFO", SettingBasicAuthUserInfo: "ann:s3cret"}
	}
	origin := hostile(t, nil)
	originURL, _ := url.Parse(origin.URL)
	targets := map[string]string{
		"other port":               other.URL,
		"other port, localhost":    "http://localhost:" + otherURL.Port(),
		"same port, localhost":     "http://localhost:" + originURL.Port(),
		"same port, https":         "https://127.0.0.1:" + originURL.Port(),
		"same port, [::1]":         "http://[::1]:" + originURL.Port(),
		"same port, 127.0.0.2":     "http://127.0.0.2:" + originURL.Port(),
		"relative, //other":        "//localhost:" + otherURL.Port() + "/x",
		"with user information":    "http://ann:s3cret@127.0.0.1:" + otherURL.Port() + "/x",
		"other port, upper case":   "HTTP://127.0.0.1:" + otherURL.Port(),
		"other port, trailing dot": "http://localhost.:" + otherURL.Port(),
	}
	for _, code := range []int{301, 302, 303, 307, 308} {
		for name, target := range targets {
			t.Run(fmt.Sprintf("%d %s", code, name), func(t *testing.T) {
				origin.Set(hostilesr.Redirect(code, target+"/schemas/ids/1"))
				forgetRegistry(origin.URL)
				p, _ := guard(t, RegistryPolicy{})
				c := newConverterWith(t, settings(origin.URL), p)
				before := len(other.Requests())
				_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
				wantUnavailable(t, err, origin.URL, "redirect", "refused")
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("err = %v shows the password", err)
				}
				for _, r := range other.Requests()[before:] {
					t.Errorf("the other origin got %s %s (Authorization %q)", r.Method, r.Path, r.Authorization)
				}
			})
		}
	}
	t.Run("chain", func(t *testing.T) {
		// Two hops within the origin, then out of it.
		origin.Set(hostilesr.ByPath(map[string]hostilesr.Answer{
			"/schemas/": hostilesr.Redirect(307, "/hop1"),
			"/hop1":     hostilesr.Redirect(302, origin.URL+"/hop2"),
			"/hop2":     hostilesr.Redirect(308, other.URL+"/schemas/ids/1"),
		}, nil))
		forgetRegistry(origin.URL)
		p, _ := guard(t, RegistryPolicy{})
		c := newConverterWith(t, settings(origin.URL), p)
		before := len(other.Requests())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, origin.URL, "redirect", otherURL.Port())
		if got := other.Requests()[before:]; len(got) != 0 {
			t.Errorf("the other origin got %d requests", len(got))
		}
	})
	t.Run("same origin is followed", func(t *testing.T) {
		origin.Set(hostilesr.ByPath(map[string]hostilesr.Answer{
			"/schemas/": hostilesr.Redirect(307, "/v2/schemas/ids/1"),
			"/v2/":      hostilesr.Schema(simpleAvro),
		}, nil))
		forgetRegistry(origin.URL)
		p, _ := guard(t, RegistryPolicy{})
		c := newConverterWith(t, settings(strings.Replace(origin.URL, "http://", "HTTP://", 1)), p)
		before := len(origin.Requests())
		convertOK(t, c, simpleRecord(t, 1))
		reqs := origin.Requests()[before:]
		if len(reqs) != 2 || reqs[1].Authorization != auth {
			t.Errorf("requests after the redirect: %+v, want 2 with the credentials", reqs)
		}
	})
	t.Run("loop", func(t *testing.T) {
		origin.Set(hostilesr.Redirect(307, "/schemas/ids/1"))
		forgetRegistry(origin.URL)
		p, _ := guard(t, RegistryPolicy{})
		c := newConverterWith(t, settings(origin.URL), p)
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, origin.URL, "redirects")
	})
}

// Registry URLs that name a link-local address, a cloud metadata service
// or a name some resolver reads as an address are refused when the
// converter is built (validation: HTTP 400), before any connection; so
// are hosts outside schema.registry.allowed.hosts when it is set.
func TestRegistryAddressPolicy(t *testing.T) {
	refused := []string{
		"http://169.254.169.254",
		"http://169.254.169.254:80/latest/meta-data",
		"https://169.254.169.254.",
		"http://169.254.170.2",
		"http://[fe80::1]:8081",
		"http://[fe80::1%25eth0]:8081",
		"http://[FE80::a9fe:a9fe]",
		"http://[::ffff:169.254.169.254]",
		"http://[::ffff:a9fe:a9fe]",
		"http://[::169.254.169.254]",
		"http://[64:ff9b::a9fe:a9fe]",
		"http://[2002:a9fe:a9fe::1]",
		"http://[fd00:ec2::254]",
		"http://100.100.100.200",
		"http://192.0.0.192",
		"http://metadata.google.internal",
		"http://METADATA.Google.Internal.:80",
		"http://metadata",
		"http://instance-data.ec2.internal",
		"http://2852039166",
		"http://0xa9fea9fe",
		"http://0251.0376.0251.0376",
		"http://169.254.43518",
		"http://0.0.0.0:8081",
		"http://[::]:8081",
		"http://224.0.0.1",
		"http://127.0.0.1:8081,http://169.254.169.254",
	}
	for _, u := range refused {
		p, dialled := guard(t, RegistryPolicy{})
		_, err := New(AvroClass, map[string]string{SettingRegistryURL: u}, false, WithRegistryPolicy(p))
		var fe config.FieldError
		if !errors.As(err, &fe) || fe.Name != SettingRegistryURL {
			t.Errorf("%s: err = %v, want a field error on %s", u, err, SettingRegistryURL)
		} else if !strings.Contains(fe.Msg, config.KeyRegistryAllowedHosts) && !strings.Contains(fe.Msg, "canonical") {
			t.Errorf("%s: %v does not say what decides", u, err)
		}
		if d := dialled(); len(d) > 0 {
			t.Errorf("%s: dialled %v", u, d)
		}
	}
	// Names and addresses a registry may have are accepted (nothing is
	// dialled when a converter is built).
	for _, u := range []string{"http://127.0.0.1:8081", "http://localhost:8081", "https://sr.example.com", "http://10.0.0.5:8081", "http://[::1]:8081", "http://169.254.169.254.example.com"} {
		if _, err := New(AvroClass, map[string]string{SettingRegistryURL: u}, false, WithRegistryPolicy(RegistryPolicy{})); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}

	t.Run("allowlist", func(t *testing.T) {
		srv := hostile(t, hostilesr.Schema(simpleAvro))
		port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
		cases := []struct {
			allowed []string
			u       string
			ok      bool
		}{
			{[]string{"127.0.0.1:" + port}, srv.URL, true},
			{[]string{"127.0.0.1:" + port}, "http://localhost:" + port, false},
			{[]string{"127.0.0.1:" + port}, "http://127.0.0.1:1", false},
			{[]string{"127.0.0.1"}, "http://127.0.0.1:1", true},
			{[]string{"localhost"}, srv.URL, false},
			{[]string{"*.example.com"}, "https://sr.example.com", true},
			{[]string{"*.example.com"}, "https://example.com", false},
			{[]string{"*.example.com"}, "https://sr.example.com.evil.net", false},
			{[]string{"SR.Example.com"}, "https://sr.example.com.", true},
			{[]string{"*"}, "http://registry:8081", true},
			{[]string{"*"}, "http://169.254.169.254", false},
			{[]string{"*.internal"}, "http://metadata.google.internal", false},
			{[]string{"sr.example.com"}, "http://sr.example.com:8081,http://other.example.com", false},
			// An address listed lifts its refusal, for itself only.
			{[]string{"169.254.10.10"}, "http://169.254.10.10:8081", true},
			{[]string{"169.254.10.10"}, "http://169.254.10.11:8081", false},
			{[]string{"[fe80::1]:8081"}, "http://[fe80::1]:8081", true},
			{[]string{"metadata.google.internal"}, "http://metadata.google.internal", true},
		}
		for _, tc := range cases {
			p, dialled := guard(t, RegistryPolicy{AllowedHosts: tc.allowed})
			_, err := New(AvroClass, map[string]string{SettingRegistryURL: tc.u}, false, WithRegistryPolicy(p))
			if tc.ok != (err == nil) {
				t.Errorf("allowed %v, %s: err = %v, want ok=%v", tc.allowed, tc.u, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), SettingRegistryURL) {
				t.Errorf("allowed %v, %s: err = %v does not name the setting", tc.allowed, tc.u, err)
			}
			if d := dialled(); len(d) > 0 {
				t.Errorf("%s: dialled %v", tc.u, d)
			}
		}
		// The allowed registry answers.
		p, _ := guard(t, RegistryPolicy{AllowedHosts: []string{"127.0.0.1:" + port}})
		convertOK(t, newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p), simpleRecord(t, 1))
	})
}

// A name that resolves, or later rebinds, to a link-local or metadata
// address is refused when the connection is made: the address check runs
// on the resolved address, before connect(). The names are resolved by
// a fake resolver; the guard shows no connection ever went elsewhere than
// 127.0.0.1.
func TestRegistryDialTimeRefusal(t *testing.T) {
	srv := hostile(t, hostilesr.Schema(simpleAvro))
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	for _, bad := range []string{"169.254.169.254", "169.254.170.2", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "100.100.100.200", "0.0.0.0"} {
		t.Run(bad, func(t *testing.T) {
			var lookups atomic.Int32
			p, dialled := guard(t, RegistryPolicy{})
			p.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
				if host != "rebind.test" {
					return nil, fmt.Errorf("unexpected lookup of %s", host)
				}
				// First the registry, then (DNS rebinding) the metadata
				// service.
				if lookups.Add(1) == 1 {
					return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
				}
				return []netip.Addr{netip.MustParseAddr(bad)}, nil
			}
			u := "http://rebind.test:" + port
			forgetRegistry(u)
			convertOK(t, newConverterWith(t, map[string]string{SettingRegistryURL: u}, p), simpleRecord(t, 1))
			// A new converter (a new connection) resolves again.
			c := newConverterWith(t, map[string]string{SettingRegistryURL: u}, p)
			_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 2), &Buffer{})
			wantUnavailable(t, err, u, config.KeyRegistryAllowedHosts)
			if !errors.Is(err, ErrRegistryRefused) {
				t.Errorf("err = %v, want ErrRegistryRefused", err)
			}
			for _, ap := range dialled() {
				if !ap.Addr().IsLoopback() {
					t.Errorf("dialled %s", ap)
				}
			}
			if n := len(dialled()); n != 1 {
				t.Errorf("%d connections, want 1 (the first, to 127.0.0.1)", n)
			}
			// Listed, the address is dialled: the guard sees it (and
			// refuses it: no packet leaves the machine).
			if bad == "169.254.169.254" {
				p2 := p
				var seen []netip.AddrPort
				p2.AllowedHosts = []string{bad}
				p2.beforeConnect = func(ap netip.AddrPort) error {
					seen = append(seen, ap)
					return errors.New("test guard: not loopback")
				}
				forgetRegistry(u)
				c := newConverterWith(t, map[string]string{SettingRegistryURL: "http://" + bad + ":" + port}, p2)
				_, _ = c.Convert(context.Background(), "t", nil, simpleRecord(t, 3), &Buffer{})
				if len(seen) != 1 || seen[0].Addr().String() != bad {
					t.Errorf("with %s listed, the guard saw %v, want one connection to it", bad, seen)
				}
			}
		})
	}
}

// Of an answer that is not a registry's, nothing reaches the error (and
// so the status) but its status code and size; a registry's error JSON is
// shown.
func TestRegistryNoBodyEcho(t *testing.T) {
	const secret = "AKIAIOSFODNN7EXAMPLE-instance-secret"
	answers := map[string]hostilesr.Answer{
		"500 html":                hostilesr.Raw(500, "text/html", []byte("<html><body>"+secret+"</body></html>")),
		"200 html":                hostilesr.Raw(200, "text/html", []byte("<html><body>"+secret+"</body></html>")),
		"200 text":                hostilesr.Raw(200, "text/plain", []byte(secret)),
		"200 binary":              hostilesr.Raw(200, "application/octet-stream", append([]byte{0, 1, 2, 0xff}, secret...)),
		"403 text":                hostilesr.Raw(403, "text/plain", []byte(secret)),
		"502 text":                hostilesr.Raw(502, "text/plain", []byte(secret)),
		"404 text":                hostilesr.Raw(404, "text/plain", []byte(secret)),
		"500 json without code":   hostilesr.Raw(500, "application/json", []byte(`{"message":"`+secret+`"}`)),
		"500 json other shape":    hostilesr.Raw(500, "application/json", []byte(`{"Code":"Success","SecretAccessKey":"`+secret+`"}`)),
		"200 json other shape":    hostilesr.Raw(200, "application/json", []byte(`["`+secret+`"]`)),
		"200 json, schema number": hostilesr.Raw(200, "application/json", []byte(`{"schema":1,"x":"`+secret+`"}`)),
		"503 json array":          hostilesr.Raw(503, "application/json", []byte(`["`+secret+`"]`)),
	}
	for name, a := range answers {
		t.Run(name, func(t *testing.T) {
			srv := hostile(t, a)
			p, _ := guard(t, RegistryPolicy{})
			c := newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
			_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
			if err == nil {
				t.Fatal("converted")
			}
			if strings.Contains(err.Error(), "AKIA") || strings.Contains(err.Error(), "instance-secret") {
				t.Errorf("err = %v shows the answer", err)
			}
			if !errors.Is(err, record.ErrUnavailable) {
				t.Errorf("err = %v, want ErrUnavailable", err)
			}
		})
	}
	t.Run("registry error JSON", func(t *testing.T) {
		srv := hostile(t, hostilesr.RegistryError(500, 50001, "Error in the backend\x1b[31m data store"))
		p, _ := guard(t, RegistryPolicy{})
		c := newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, srv.URL, "HTTP 500", "Error in the backend?[31m data store")
	})
}

// A registry that sends its answer a byte at a time is cut off by the
// request's total timeout (schema.registry.request.timeout.ms).
func TestRegistrySlowDrip(t *testing.T) {
	body := []byte(`{"schema":"` + strings.ReplaceAll(simpleAvro, `"`, `\"`) + `"}`)
	srv := hostile(t, hostilesr.Drip(body, 20*time.Millisecond))
	p, _ := guard(t, RegistryPolicy{Timeout: 300 * time.Millisecond})
	c := newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p)
	start := time.Now()
	_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
	wantUnavailable(t, err, srv.URL, "timed out", config.KeyRegistryTimeoutMs)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %v, want about 300ms", d)
	}
	// The same answer at full speed converts.
	srv.Set(hostilesr.Drip(body, time.Microsecond))
	p.Timeout = 30 * time.Second
	forgetRegistry(srv.URL)
	convertOK(t, newConverterWith(t, map[string]string{SettingRegistryURL: srv.URL}, p), simpleRecord(t, 1))
}

func TestRegistryOrigin(t *testing.T) {
	same := [][2]string{
		{"http://127.0.0.1:8081", "HTTP://127.0.0.1:8081/x"},
		{"http://localhost", "http://LOCALHOST.:80"},
		{"https://sr.example.com", "https://sr.example.com:443/a"},
		{"http://[::ffff:127.0.0.1]:1", "http://127.0.0.1:1"},
	}
	for _, c := range same {
		a, _ := url.Parse(c[0])
		b, _ := url.Parse(c[1])
		if origin(a) != origin(b) {
			t.Errorf("%s and %s: %s != %s", c[0], c[1], origin(a), origin(b))
		}
	}
	differ := [][2]string{
		{"http://127.0.0.1:8081", "http://127.0.0.1:8082"},
		{"http://127.0.0.1:8081", "http://localhost:8081"},
		{"http://127.0.0.1:443", "https://127.0.0.1:443"},
		{"http://sr.example.com", "http://sr.example.com:8080"},
	}
	for _, c := range differ {
		a, _ := url.Parse(c[0])
		b, _ := url.Parse(c[1])
		if origin(a) == origin(b) {
			t.Errorf("%s and %s: both %s", c[0], c[1], origin(a))
		}
	}
}
