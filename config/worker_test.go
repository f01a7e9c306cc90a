package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestLoadWorkerPrecedence(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "worker.properties")
	if err := os.WriteFile(props, []byte(`# worker
listen = 0.0.0.0:9000
bootstrap.servers: a:9092,\
  b:9092
data.dir=/var/lib/txsink
task.restart.backoff.initial.ms=500
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TXSINK_DATA_DIR": "/env/dir", "TXSINK_WORKER_ID": "env-id"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	w, err := LoadWorker(props, lookup, map[string]string{KeyWorkerID: "flag-id"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Listen != "0.0.0.0:9000" || strings.Join(w.Bootstrap, ",") != "a:9092,b:9092" || w.DataDir != "/env/dir" || w.WorkerID != "flag-id" {
		t.Errorf("precedence: %+v", w)
	}
	if w.RestartInitial != 500*time.Millisecond || w.RestartMax != time.Minute || !w.RestartEnabled {
		t.Errorf("restart: %v %v %v", w.RestartInitial, w.RestartMax, w.RestartEnabled)
	}
	js := filepath.Join(dir, "worker.json")
	_ = os.WriteFile(js, []byte(`{"bootstrap.servers":["k1:9092","k2:9092"],"task.restart.enabled":false,"rest.max.body.bytes":4096}`), 0o600)
	w, err = LoadWorker(js, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Bootstrap, ",") != "k1:9092,k2:9092" || w.RestartEnabled || w.REST.MaxBodyBytes != 4096 || w.Listen != "127.0.0.1:8083" {
		t.Errorf("json: %+v", w)
	}
}

func TestLoadWorkerErrorsNameTheSetting(t *testing.T) {
	for _, c := range []struct {
		raw  map[string]string
		want string
	}{
		{map[string]string{"bogus": "1"}, `unknown setting "bogus"`},
		{map[string]string{KeyRESTTLSCertFile: "c.pem"}, "rest.tls.cert.file and rest.tls.key.file must be set together"},
		{map[string]string{KeyRESTBasicUser: "u"}, "rest.auth.basic.user and rest.auth.basic.password must be set together"},
		{map[string]string{KeyKafkaSecurityProtocol: "SASL_SSL"}, "kafka.sasl.username: SASL_SSL needs kafka.sasl.username and kafka.sasl.password"},
		{map[string]string{KeyKafkaSecurityProtocol: "TLS"}, "kafka.security.protocol: invalid value \"TLS\""},
		{map[string]string{KeyRestartInitialMs: "5000", KeyRestartMaxMs: "100"}, "task.restart.backoff.max.ms: must be at least"},
		{map[string]string{KeyRESTMaxBodyBytes: "1"}, "rest.max.body.bytes: must be between 1024"},
		{map[string]string{KeyRegistryAllowedHosts: "http://sr:8081"}, "schema.registry.allowed.hosts: "},
		{map[string]string{KeyRegistryAllowedHosts: "sr, a b"}, "schema.registry.allowed.hosts: "},
		{map[string]string{KeyRegistryAllowedHosts: "sr:99999"}, "schema.registry.allowed.hosts: "},
		{map[string]string{KeyRegistryAllowedHosts: "user@sr"}, "schema.registry.allowed.hosts: "},
		{map[string]string{KeyRegistryMaxResponse: "10"}, "schema.registry.max.response.bytes: must be between 1024"},
		{map[string]string{KeyRegistryTimeoutMs: "0"}, "schema.registry.request.timeout.ms: must be between 100"},
	} {
		_, err := LoadWorker("", nil, c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.raw, err, c.want)
		}
	}
}

func TestRegistrySettings(t *testing.T) {
	w, err := LoadWorker("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := w.Connections; len(c.RegistryHosts) != 0 || c.RegistryMaxResponse != 4<<20 || c.RegistryTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	w, err = LoadWorker("", nil, map[string]string{KeyRegistryAllowedHosts: "sr.example.com:8081, *.sr.internal,127.0.0.1,[::1]:8081,fe80::1", KeyRegistryMaxResponse: "1048576", KeyRegistryTimeoutMs: "2500"})
	if err != nil {
		t.Fatal(err)
	}
	if c := w.Connections; len(c.RegistryHosts) != 5 || c.RegistryMaxResponse != 1<<20 || c.RegistryTimeout != 2500*time.Millisecond {
		t.Errorf("settings: %+v", c)
	}
}

func TestWorkerKafkaOpts(t *testing.T) {
	w, err := ParseWorker(map[string]string{KeyKafkaSecurityProtocol: "SASL_PLAINTEXT", KeyKafkaSASLMechanism: "SCRAM-SHA-512", KeyKafkaSASLUsername: "u", KeyKafkaSASLPassword: "p"})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := w.KafkaOpts()
	if err != nil || len(opts) != 1 {
		t.Fatalf("SASL opts: %d %v", len(opts), err)
	}
	w, _ = ParseWorker(map[string]string{KeyKafkaSecurityProtocol: "SSL", KeyKafkaSSLCAFile: "/nonexistent.pem"})
	if _, err := w.KafkaOpts(); err == nil || !strings.Contains(err.Error(), KeyKafkaSSLCAFile) {
		t.Errorf("missing CA file: %v", err)
	}
	if tc, err := (Worker{}).TLSConfig(); tc != nil || err != nil {
		t.Errorf("no TLS: %v %v", tc, err)
	}
}

func TestParseProperties(t *testing.T) {
	got, err := ParseProperties([]byte("a=1\n! comment\n  b : two words \nc=x\\\n  y\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "1" || got["b"] != "two words" || got["c"] != "xy" {
		t.Errorf("%v", got)
	}
	if _, err := ParseProperties([]byte("novalue\n")); err == nil {
		t.Error("line without = accepted")
	}
}

// TestAdvertisedID: worker_id in Connect's form, host:port of the
// advertised REST URL, from rest.advertised.host.name/port, listeners or
// listen, and the port the API is bound to.
func TestAdvertisedID(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123}
	for _, c := range []struct {
		raw  map[string]string
		want string
	}{
		{map[string]string{}, "127.0.0.1:40123"},
		{map[string]string{KeyWorkerListen: "0.0.0.0:8083"}, "myhost:40123"},
		{map[string]string{KeyWorkerListen: ":8083"}, "myhost:40123"},
		{map[string]string{KeyRESTListeners: "http://:8083"}, "myhost:40123"},
		{map[string]string{KeyRESTListeners: "http://connect-1.example:8083/"}, "connect-1.example:40123"},
		{map[string]string{KeyWorkerListen: "0.0.0.0:8083", KeyRESTAdvertisedHost: "10.1.2.3"}, "10.1.2.3:40123"},
		{map[string]string{KeyRESTAdvertisedHost: "w1.example", KeyRESTAdvertisedPort: "443"}, "w1.example:443"},
		{map[string]string{KeyWorkerListen: "[::]:8083"}, "myhost:40123"},
		{map[string]string{KeyWorkerListen: "[::1]:8083"}, "[::1]:40123"},
	} {
		w, err := ParseWorker(c.raw)
		if err != nil {
			t.Fatalf("%v: %v", c.raw, err)
		}
		if got := w.AdvertisedID(bound, "myhost"); got != c.want {
			t.Errorf("%v: %s, want %s", c.raw, got, c.want)
		}
	}
	w, _ := ParseWorker(map[string]string{KeyRESTListeners: "http://0.0.0.0:9999"})
	if w.Listen != "0.0.0.0:9999" {
		t.Errorf("listeners did not set the listen address: %q", w.Listen)
	}
}

func TestListenersErrorsNameTheSetting(t *testing.T) {
	for _, c := range []struct {
		raw  map[string]string
		want string
	}{
		{map[string]string{KeyRESTListeners: "http://a:1,http://b:2"}, "listeners: \"http://a:1,http://b:2\": txsink serves one listener"},
		{map[string]string{KeyRESTListeners: "tcp://a:1"}, "listeners: \"tcp://a:1\": want http://host:port"},
		{map[string]string{KeyRESTListeners: "http://a"}, "listeners: \"http://a\": want http://host:port"},
		{map[string]string{KeyRESTListeners: "http://a:1", KeyWorkerListen: "b:2"}, "listeners: listens on a:1 but listen says b:2"},
		{map[string]string{KeyRESTListeners: "https://a:1"}, "listeners: an https listener needs rest.tls.cert.file"},
		{map[string]string{KeyRESTListeners: "http://a:1", KeyRESTTLSCertFile: "c", KeyRESTTLSKeyFile: "k"}, "listeners: rest.tls.cert.file is set"},
		{map[string]string{KeyRESTAdvertisedPort: "70000"}, "rest.advertised.port: must be between 1 and 65535"},
	} {
		_, err := ParseWorker(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.raw, err, c.want)
		}
	}
}

func TestExplainKafkaError(t *testing.T) {
	sasl, _ := ParseWorker(map[string]string{KeyKafkaSecurityProtocol: "SASL_SSL", KeyKafkaSASLMechanism: "SCRAM-SHA-512", KeyKafkaSASLUsername: "u", KeyKafkaSASLPassword: "p"})
	plainW, _ := ParseWorker(map[string]string{})
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	cases := []struct {
		name    string
		w       Worker
		err     error
		setting string // "" when the error must come back unchanged
	}{
		{"sasl refused", sasl, fmt.Errorf("dial: %w", kerr.SaslAuthenticationFailed), KeyKafkaSASLPassword},
		{"mechanism", sasl, kerr.UnsupportedSaslMechanism, KeyKafkaSASLMechanism},
		{"unknown CA", sasl, fmt.Errorf("unable to dial: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), KeyKafkaSSLCAFile},
		{"TLS alert", sasl, fmt.Errorf("unable to dial: %w", alert), KeyKafkaSSLCertFile},
		{"not TLS", sasl, fmt.Errorf("unable to dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), KeyKafkaSecurityProtocol},
		{"TLS alert without TLS", plainW, alert, ""},
		{"broker down", sasl, errors.New("dial tcp: connection refused"), ""},
	}
	for _, tc := range cases {
		got := tc.w.ExplainKafkaError(tc.err)
		var ke *KafkaConnError
		if tc.setting == "" {
			if got != tc.err {
				t.Errorf("%s: got %v, want the error unchanged", tc.name, got)
			}
			continue
		}
		if !errors.As(got, &ke) || ke.Setting != tc.setting {
			t.Errorf("%s: got %v, want a KafkaConnError naming %s", tc.name, got, tc.setting)
			continue
		}
		if !errors.Is(got, tc.err) || !strings.HasPrefix(got.Error(), tc.setting+": ") {
			t.Errorf("%s: %q does not start with the setting or does not wrap the cause", tc.name, got)
		}
	}
}
