package convert

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

const simpleAvro = `{"type":"record","name":"S","fields":[{"name":"a","type":"long"}]}`

func simpleRecord(t testing.TB, id int) []byte {
	return avroFrame(t, simpleAvro, id, map[string]any{"a": int64(7)})
}

// One fetch per id, whatever the concurrency: 8 goroutines miss the cache
// at once and the registry serves the id once.
func TestRegistryFetchesEachIDOnce(t *testing.T) {
	reg := newTestRegistry(t)
	id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
	// The front holds the fetch until every goroutine has started its
	// conversions, so that they miss the cache while it is in flight.
	release, fetching := make(chan struct{}), make(chan struct{})
	var fetched sync.Once
	reg.failWith(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			fetched.Do(func() { close(fetching) })
			<-release
		}
		return false
	})
	c := newConverter(t, AvroClass, reg.settings())
	data := simpleRecord(t, id)
	var wg, started sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			for range 100 {
				v, err := c.Convert(context.Background(), "t", nil, data, &Buffer{})
				if err != nil {
					errs <- err
					return
				}
				if got := v.GoString(); got != `struct:{"a":7}` {
					errs <- errors.New("got " + got)
					return
				}
			}
		}()
	}
	started.Wait()
	select {
	case <-fetching:
	case <-time.After(30 * time.Second):
		t.Fatal("no fetch of the schema after 30s")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := reg.fetchCount(id); n != 1 {
		t.Errorf("schema id %d fetched %d times, want 1", id, n)
	}
	// A second converter on the same registry (another task) uses the
	// process-wide cache.
	c2 := newConverter(t, AvroClass, reg.settings())
	convertOK(t, c2, data)
	if n := reg.fetchCount(id); n != 1 {
		t.Errorf("after a second converter: fetched %d times, want 1", n)
	}
}

// wantUnavailable asserts err is the environment's fault, never a bad
// record, and says which registry and why.
func wantUnavailable(t *testing.T, err error, regURL string, why ...string) {
	t.Helper()
	if !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if errors.Is(err, record.ErrDecode) || record.IsBadRecord(err) {
		t.Fatalf("err = %v is also a bad record", err)
	}
	if !strings.Contains(err.Error(), regURL) {
		t.Errorf("err = %v, want it to name %s", err, regURL)
	}
	for _, w := range why {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v, want it to say %q", err, w)
		}
	}
}

func TestRegistryFailuresAreUnavailable(t *testing.T) {
	t.Run("500", func(t *testing.T) {
		reg := newTestRegistry(t)
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		reg.failWith(func(w http.ResponseWriter, _ *http.Request) bool {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error_code":50001,"message":"Error in the backend data store"}`))
			return true
		})
		c := newConverter(t, AvroClass, reg.settings())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL, "HTTP 500", "backend data store")
		// Once the registry recovers, the same record converts: nothing
		// was cached from the failure.
		reg.failWith(nil)
		convertOK(t, c, simpleRecord(t, id))
	})
	t.Run("429", func(t *testing.T) {
		reg := newTestRegistry(t)
		reg.failWith(func(w http.ResponseWriter, _ *http.Request) bool {
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		})
		c := newConverter(t, AvroClass, reg.settings())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, reg.URL, "429")
	})
	t.Run("401", func(t *testing.T) {
		reg := newTestRegistry(t, withAuth("Bearer right"))
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		c := newConverter(t, AvroClass, reg.settings())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL, "HTTP 401")
		c = newConverter(t, AvroClass, reg.settings(SettingBearerAuthSource, "STATIC_TOKEN", SettingBearerAuthToken, "wrong-secret"))
		_, err = c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL, "HTTP 403")
		if strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("err = %v prints the token", err)
		}
	})
	t.Run("down", func(t *testing.T) {
		reg := newTestRegistry(t)
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		c := newConverter(t, AvroClass, reg.settings())
		reg.srv.Close()
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL, "connection refused")
	})
	t.Run("404 without a registry error code", func(t *testing.T) {
		reg := newTestRegistry(t)
		reg.failWith(func(w http.ResponseWriter, _ *http.Request) bool {
			http.NotFound(w, nil)
			return true
		})
		c := newConverter(t, AvroClass, reg.settings())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, 1), &Buffer{})
		wantUnavailable(t, err, reg.URL, "base URL")
	})
	t.Run("cancelled", func(t *testing.T) {
		reg := newTestRegistry(t)
		block := make(chan struct{})
		defer close(block)
		reg.failWith(func(http.ResponseWriter, *http.Request) bool { <-block; return true })
		c := newConverter(t, AvroClass, reg.settings())
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Convert(ctx, "t", nil, simpleRecord(t, 1), &Buffer{})
		if !errors.Is(err, record.ErrUnavailable) || errors.Is(err, record.ErrDecode) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	})
}

// Several URLs are tried in turn: a dead first URL and a failing second
// one do not stop the third from answering.
func TestRegistryFailover(t *testing.T) {
	dead := newTestRegistry(t)
	dead.srv.Close()
	failing := newTestRegistry(t)
	failing.failWith(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	reg := newTestRegistry(t)
	id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
	c := newConverter(t, AvroClass, map[string]string{SettingRegistryURL: dead.URL + ", " + failing.URL + "," + reg.URL})
	convertOK(t, c, simpleRecord(t, id))
	// All down: the error names each.
	c = newConverter(t, AvroClass, map[string]string{SettingRegistryURL: dead.URL + "," + failing.URL})
	_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
	wantUnavailable(t, err, dead.URL, failing.URL, "HTTP 503")
}

func TestRegistryBasicAuth(t *testing.T) {
	header := "Basic " + base64.StdEncoding.EncodeToString([]byte("ann:s3cret"))
	reg := newTestRegistry(t, withAuth(header))
	id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
	c := newConverter(t, AvroClass, reg.settings(SettingBasicAuthSource, "USER_INFO", SettingBasicAuthUserInfo, "ann:s3cret"))
	convertOK(t, c, simpleRecord(t, id))

	u, _ := url.Parse(reg.URL)
	u.User = url.UserPassword("ann", "s3cret")
	c = newConverter(t, AvroClass, map[string]string{SettingRegistryURL: u.String(), SettingBasicAuthSource: "URL"})
	convertOK(t, c, simpleRecord(t, id))

	// Wrong credentials: unavailable (never a bad record), and the
	// message shows neither the password nor the URL's user information.
	u.User = url.UserPassword("ann", "wrong-pw")
	forgetRegistry(reg.URL)
	c = newConverter(t, AvroClass, map[string]string{SettingRegistryURL: u.String(), SettingBasicAuthSource: "URL"})
	_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
	wantUnavailable(t, err, reg.URL, "403")
	if strings.Contains(err.Error(), "wrong-pw") || strings.Contains(err.Error(), "ann") {
		t.Errorf("err = %v shows credentials", err)
	}
}

func TestRegistryBearerAuth(t *testing.T) {
	reg := newTestRegistry(t, withAuth("Bearer tok-123"))
	id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
	c := newConverter(t, AvroClass, reg.settings(SettingBearerAuthSource, "STATIC_TOKEN", SettingBearerAuthToken, "tok-123"))
	convertOK(t, c, simpleRecord(t, id))
}

func TestRegistryTLS(t *testing.T) {
	certs := newTestCerts(t)
	t.Run("trust store", func(t *testing.T) {
		reg := newTestRegistry(t, withTLS(certs, false))
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		// Without the trust store the certificate is unknown.
		c := newConverter(t, AvroClass, reg.settings())
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL, "certificate")
		c = newConverter(t, AvroClass, reg.settings(SettingTruststoreType, "PEM", SettingTruststoreCerts, certs.CAPEM))
		convertOK(t, c, simpleRecord(t, id))
	})
	t.Run("client certificate", func(t *testing.T) {
		reg := newTestRegistry(t, withTLS(certs, true))
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		c := newConverter(t, AvroClass, reg.settings(SettingTruststoreCerts, certs.CAPEM))
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, reg.URL)
		c = newConverter(t, AvroClass, reg.settings(SettingTruststoreCerts, certs.CAPEM,
			SettingKeystoreType, "PEM", SettingKeystoreCertChain, certs.ClientPEM, SettingKeystoreKey, certs.ClientKeyPEM))
		convertOK(t, c, simpleRecord(t, id))
	})
	t.Run("no host name check", func(t *testing.T) {
		reg := newTestRegistry(t, withTLS(certs, false))
		id, _ := reg.register("s", sr.Schema{Schema: simpleAvro})
		// The certificate is for 127.0.0.1; call it localhost.
		u, _ := url.Parse(reg.URL)
		u.Host = "localhost:" + u.Port()
		c := newConverter(t, AvroClass, map[string]string{SettingRegistryURL: u.String(), SettingTruststoreCerts: certs.CAPEM})
		_, err := c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, u.String(), "certificate")
		c = newConverter(t, AvroClass, map[string]string{SettingRegistryURL: u.String(), SettingTruststoreCerts: certs.CAPEM, SettingEndpointVerification: ""})
		convertOK(t, c, simpleRecord(t, id))
		// An unknown CA still fails without the host name check.
		other := newTestCerts(t)
		c = newConverter(t, AvroClass, map[string]string{SettingRegistryURL: u.String(), SettingTruststoreCerts: other.CAPEM, SettingEndpointVerification: ""})
		forgetRegistry(u.String())
		_, err = c.Convert(context.Background(), "t", nil, simpleRecord(t, id), &Buffer{})
		wantUnavailable(t, err, u.String())
	})
}

func TestRegistrySettingsErrors(t *testing.T) {
	certs := newTestCerts(t)
	cases := []struct {
		settings map[string]string
		field    string
	}{
		{map[string]string{}, SettingRegistryURL},
		{map[string]string{SettingRegistryURL: "ftp://x"}, SettingRegistryURL},
		{map[string]string{SettingRegistryURL: "http://x", SettingBasicAuthSource: "USER_INFO", SettingBasicAuthUserInfo: "nocolon"}, SettingBasicAuthUserInfo},
		{map[string]string{SettingRegistryURL: "http://x", SettingBasicAuthUserInfo: "a:b"}, SettingBasicAuthUserInfo},
		{map[string]string{SettingRegistryURL: "http://x", SettingBasicAuthSource: "URL"}, SettingBasicAuthSource},
		{map[string]string{SettingRegistryURL: "http://x", SettingBasicAuthSource: "SASL_INHERIT"}, SettingBasicAuthSource},
		{map[string]string{SettingRegistryURL: "http://x", SettingBearerAuthSource: "STATIC_TOKEN"}, SettingBearerAuthToken},
		{map[string]string{SettingRegistryURL: "http://x", SettingBearerAuthSource: "STATIC_TOKEN", SettingBearerAuthToken: "t", SettingBasicAuthSource: "USER_INFO", SettingBasicAuthUserInfo: "a:b"}, SettingBearerAuthSource},
		{map[string]string{SettingRegistryURL: "http://x", SettingTruststoreType: "JKS"}, SettingTruststoreType},
		{map[string]string{SettingRegistryURL: "http://x", SettingTruststoreCerts: "not pem"}, SettingTruststoreCerts},
		{map[string]string{SettingRegistryURL: "http://x", SettingKeystoreCertChain: certs.ClientPEM}, SettingKeystoreKey},
		{map[string]string{SettingRegistryURL: "http://x", SettingKeystoreCertChain: certs.ClientPEM, SettingKeystoreKey: certs.ServerKeyPEM}, SettingKeystoreCertChain},
		{map[string]string{SettingRegistryURL: "http://x", settingTruststoreLocation: "/etc/passwd"}, settingTruststoreLocation},
	}
	for _, tc := range cases {
		_, err := New(AvroClass, tc.settings, false)
		var fe config.FieldError
		if !errors.As(err, &fe) || fe.Name != tc.field {
			t.Errorf("settings %v: err = %v, want a field error on %s", tc.settings, err, tc.field)
		}
		if err != nil && (strings.Contains(err.Error(), "a:b") || strings.Contains(err.Error(), "PRIVATE KEY")) {
			t.Errorf("err = %v shows a credential", err)
		}
	}
}
