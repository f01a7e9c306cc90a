package config

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Worker setting names, as written in a worker file. Each is also read
// from the environment variable EnvKey(name) (TXSINK_ + the name in upper
// case with '.' and '-' as '_', e.g. TXSINK_BOOTSTRAP_SERVERS).
const (
	KeyWorkerListen          = "listen"
	KeyRESTListeners         = "listeners"
	KeyRESTAdvertisedHost    = "rest.advertised.host.name"
	KeyRESTAdvertisedPort    = "rest.advertised.port"
	KeyWorkerBootstrap       = "bootstrap.servers"
	KeyWorkerID              = "worker.id"
	KeyWorkerDataDir         = "data.dir"
	KeyWorkerLogFormat       = "log.format"
	KeyWorkerLogLevel        = "log.level"
	KeyKafkaSecurityProtocol = "kafka.security.protocol"
	KeyKafkaSSLCAFile        = "kafka.ssl.ca.file"
	KeyKafkaSSLCertFile      = "kafka.ssl.cert.file"
	KeyKafkaSSLKeyFile       = "kafka.ssl.key.file"
	KeyKafkaSASLMechanism    = "kafka.sasl.mechanism"
	KeyKafkaSASLUsername     = "kafka.sasl.username"
	KeyKafkaSASLPassword     = "kafka.sasl.password"
	KeyRESTBasicUser         = "rest.auth.basic.user"
	KeyRESTBasicPassword     = "rest.auth.basic.password"
	KeyRESTBearerToken       = "rest.auth.bearer.token"
	KeyRESTTLSCertFile       = "rest.tls.cert.file"
	KeyRESTTLSKeyFile        = "rest.tls.key.file"
	KeyRESTTLSClientCAFile   = "rest.tls.client.ca.file"
	KeyRESTMaxBodyBytes      = "rest.max.body.bytes"
	KeyRESTAllowedHosts      = "rest.allowed.hosts"
	KeyCORSAllowOrigin       = "access.control.allow.origin"
	KeyCORSAllowMethods      = "access.control.allow.methods"
	KeyConnUnixSocket        = "connection.unix.socket.enabled"
	KeyConnEnvCredHosts      = "connection.env.credentials.hosts"
	KeyRegistryAllowedHosts  = "schema.registry.allowed.hosts"
	KeyRegistryMaxResponse   = "schema.registry.max.response.bytes"
	KeyRegistryTimeoutMs     = "schema.registry.request.timeout.ms"
	KeyRestartEnabled        = "task.restart.enabled"
	KeyRestartInitialMs      = "task.restart.backoff.initial.ms"
	KeyRestartMaxMs          = "task.restart.backoff.max.ms"
	KeyMemoryBudget          = "memory.budget.bytes"
)

// Kafka security protocols (kafka.security.protocol).
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// WorkerDefs are the worker's settings (distributed mode's are in
// ClusterDefs).
var WorkerDefs = slices.Concat(Defs{
	{Name: KeyWorkerListen, Type: String, Default: "127.0.0.1:8083", Group: "REST", Doc: "HTTP listen address of the REST API. The default listens on the loopback interface only; listening elsewhere without authentication logs a warning."},
	{Name: KeyRESTListeners, Type: String, Group: "REST", Doc: "Kafka Connect's spelling of the listen address: one URL, http://host:port or https://host:port (https needs rest.tls.cert.file; an empty host listens on every interface). Set it or listen, not both with different addresses; txsink serves one listener.",
		Check: checkListeners},
	{Name: KeyRESTAdvertisedHost, Type: String, Group: "REST", Doc: "Host name of this worker's REST API as others reach it, as in Kafka Connect. With the port it makes the worker's id shown as worker_id in statuses (host:port, Connect's form), which health checks such as kafka-connect-healthcheck compare. Default: the host of listen, or the machine's host name when listen names no specific address."},
	{Name: KeyRESTAdvertisedPort, Type: Int, Min: 1, Max: 65535, Group: "REST", Doc: "Port of this worker's REST API as others reach it (worker_id's port), as in Kafka Connect. Default: the port the API listens on."},
	{Name: KeyWorkerBootstrap, Type: List, Default: "127.0.0.1:9092", Group: "Kafka", Doc: "Kafka bootstrap servers, comma-separated."},
	{Name: KeyWorkerID, Type: String, Group: "Worker", Doc: "Stable id of this worker (default: the host name). Part of the Kafka transactional ids, so a restarted worker with the same id fences its previous incarnation; two live workers must use different ids. (worker_id in statuses is the advertised host:port; see rest.advertised.host.name.)"},
	{Name: KeyWorkerDataDir, Type: String, Default: "txsink-data", Group: "Worker", Doc: "Directory of the standalone worker's state (connector configurations, target states, task states), written atomically. Holds connector passwords: keep it private (txsink creates it with mode 0700)."},
	{Name: KeyWorkerLogFormat, Type: String, Default: "text", Enum: []string{"text", "json"}, Group: "Worker", Doc: "Log format."},
	{Name: KeyWorkerLogLevel, Type: String, Default: "info", Enum: []string{"trace", "debug", "info", "warn", "error"}, Group: "Worker", Doc: "Level of the root logger; /admin/loggers changes levels at run time."},
	{Name: KeyKafkaSecurityProtocol, Type: String, Default: ProtocolPlaintext, Enum: []string{ProtocolPlaintext, ProtocolSSL, ProtocolSASLPlaintext, ProtocolSASLSSL}, Group: "Kafka", Doc: "How the worker's Kafka clients connect."},
	{Name: KeyKafkaSSLCAFile, Type: String, Group: "Kafka", Doc: "PEM file of CA certificates for the brokers (default: the system roots)."},
	{Name: KeyKafkaSSLCertFile, Type: String, Group: "Kafka", Doc: "PEM client certificate (mutual TLS)."},
	{Name: KeyKafkaSSLKeyFile, Type: String, Group: "Kafka", Doc: "PEM private key of the client certificate."},
	{Name: KeyKafkaSASLMechanism, Type: String, Default: "PLAIN", Enum: []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, Group: "Kafka", Doc: "SASL mechanism (SASL_PLAINTEXT, SASL_SSL)."},
	{Name: KeyKafkaSASLUsername, Type: String, Group: "Kafka", Doc: "SASL user name."},
	{Name: KeyKafkaSASLPassword, Type: Password, Group: "Kafka", Doc: "SASL password."},
	{Name: KeyRESTBasicUser, Type: String, Group: "REST", Doc: "Enables HTTP basic authentication with this user name (GET /health stays open)."},
	{Name: KeyRESTBasicPassword, Type: Password, Group: "REST", Doc: "Basic authentication password."},
	{Name: KeyRESTBearerToken, Type: Password, Group: "REST", Doc: "Enables bearer token authentication (Authorization: Bearer <token>)."},
	{Name: KeyRESTTLSCertFile, Type: String, Group: "REST", Doc: "PEM server certificate: the API is served over TLS."},
	{Name: KeyRESTTLSKeyFile, Type: String, Group: "REST", Doc: "PEM private key of the server certificate."},
	{Name: KeyRESTTLSClientCAFile, Type: String, Group: "REST", Doc: "PEM CA certificates: clients must present a certificate they signed (mutual TLS). GET /health is exempt, so that probes and txsink healthcheck work without one; a certificate a client does present must verify, on /health too."},
	{Name: KeyRESTMaxBodyBytes, Type: Long, Default: "1048576", Min: 1024, Max: 64 << 20, Group: "REST", Doc: "Largest accepted request body; larger ones get HTTP 413."},
	{Name: KeyRESTAllowedHosts, Type: List, Group: "REST", Doc: "Host names the API answers to (the request's Host header), comma-separated, besides localhost, IP addresses and the host of listen: other names get HTTP 403, which stops DNS-rebinding attacks from web pages. Entries: a name, *.domain for its subdomains, or * for any (turns the check off).",
		Check: checkAllowedHosts},
	{Name: KeyCORSAllowOrigin, Type: String, Group: "REST", Doc: "Kafka Connect's CORS setting: origins (scheme://host[:port], comma-separated, or *) whose web pages may call the API from a browser. Empty: none, and a state-changing request that carries another site's Origin header gets HTTP 403.",
		Check: checkOrigins},
	{Name: KeyCORSAllowMethods, Type: String, Group: "REST", Doc: "Kafka Connect's CORS setting: the methods allowed cross-origin (Access-Control-Allow-Methods), comma-separated. Empty: GET, POST, HEAD."},
	{Name: KeyConnUnixSocket, Type: Boolean, Default: "false", Group: "Security", Doc: "Let connectors connect to PostgreSQL over a Unix-domain socket (a host that is a directory, or an empty host). Off, because over the local socket a database may let in the worker's OS user without a password."},
	{Name: KeyConnEnvCredHosts, Type: List, Group: "Security", Doc: "host or host:port entries (or *) to which connectors may send the worker's own PostgreSQL credentials from its environment: PGUSER (or the OS user name) when a connector names no user, and PGPASSWORD, the password file (PGPASSFILE, ~/.pgpass), a service file's password and client certificates (PGSSLCERT, ~/.postgresql) when it names no password. Empty: never."},
	{Name: KeyRegistryAllowedHosts, Type: List, Group: "Security", Doc: "Schema Registry hosts the converters of connectors may reach (their schema.registry.url), comma-separated: host, host:port, *.domain, an IP address, or * for any. Empty: any host. Link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata services (169.254.169.254, fd00:ec2::254, 100.100.100.200, metadata.google.internal, …) are refused even with *, unless listed here by address (or, for a metadata name, by that name); the addresses a name resolves to are checked again on every connection.",
		Check: checkRegistryHosts},
	{Name: KeyRegistryMaxResponse, Type: Long, Default: "4194304", Min: 1024, Max: 1 << 30, Group: "Security", Doc: "Largest Schema Registry answer a converter reads, in bytes; a larger one is not read further and the task waits and retries (an environment failure, never a bad record)."},
	{Name: KeyRegistryTimeoutMs, Type: Long, Default: "10000", Min: 100, Max: 600000, Group: "Security", Doc: "Time one Schema Registry request may take, reading the whole answer included (a registry that sends its answer a byte at a time is cut off)."},
	{Name: KeyRestartEnabled, Type: Boolean, Default: "true", Group: "Restarts", Doc: "Restart failed tasks and connectors automatically with exponential backoff. A task stopped at a bad record (errors.tolerance=none) is never restarted automatically."},
	{Name: KeyRestartInitialMs, Type: Long, Default: "1000", Min: 10, Max: 3600000, Group: "Restarts", Doc: "First automatic restart delay; it doubles with each consecutive failure."},
	{Name: KeyRestartMaxMs, Type: Long, Default: "60000", Min: 10, Max: 86400000, Group: "Restarts", Doc: "Largest automatic restart delay."},
	{Name: KeyMemoryBudget, Type: Long, Default: "134217728", Min: 0, Max: 1 << 40, Group: "Worker", Doc: "Memory the worker may use (its resident set), in bytes (0: no budget). Go's soft memory limit is set to it less an eighth, at most 16 MiB, for the memory Go does not manage (unless the GOMEMLIMIT environment variable sets one); a task whose connector sets no fetch.max.bytes fetches at most an eighth of its share (the budget over the worker's running tasks) in decoded bytes, learning from the fetched batches how much a compressed byte becomes; and a round stops polling early while the heap live after the last garbage collection holds more than half of it, so that under pressure rounds shrink instead of the worker growing; while the heap live after a collection passes three quarters of Go's limit, those fetch and round shares halve, down to 1 MiB. See the README, Memory.",
		Check: func(v string) error {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n != 0 && n < 16<<20 {
				return fmt.Errorf("must be 0 (no budget) or at least 16777216 (16 MiB), got %d", n)
			}
			return nil
		}},
}, ClusterDefs, ProviderDefs)

// EnvKey returns the environment variable of a worker setting.
func EnvKey(name string) string {
	return "TXSINK_" + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(name))
}

// Worker is a parsed worker configuration.
type Worker struct {
	Listen    string
	Bootstrap []string
	WorkerID  string
	DataDir   string
	LogFormat string
	LogLevel  string

	Kafka       KafkaSecurity
	REST        REST
	Connections Connections

	RestartEnabled bool
	RestartInitial time.Duration
	RestartMax     time.Duration

	// MemoryBudget is memory.budget.bytes (0: none).
	MemoryBudget int64

	// Cluster holds distributed mode's settings (Cluster.Enabled when
	// group.id is set).
	Cluster Cluster
	// Providers are the config providers (config.providers), in order.
	Providers []ProviderSpec

	// Values are the effective settings (for diagnostics; holds secrets).
	Values Values
}

// KafkaSecurity is how the worker's Kafka clients connect.
type KafkaSecurity struct {
	Protocol                  string
	CAFile, CertFile, KeyFile string
	Mechanism, User, Password string
}

// REST is the API's listener security and limits.
type REST struct {
	BasicUser, BasicPassword          string
	BearerToken                       string
	TLSCertFile, TLSKeyFile, ClientCA string
	MaxBodyBytes                      int64
	// AllowedHosts are the extra Host names the API answers to.
	AllowedHosts []string
	// AllowOrigin and AllowMethods are the CORS settings.
	AllowOrigin, AllowMethods string
	// AdvertisedHost and AdvertisedPort (0: unset) are Connect's
	// rest.advertised.host.name and rest.advertised.port.
	AdvertisedHost string
	AdvertisedPort int
}

// Connections is what the worker lets connectors' connection settings
// make it do (connectors.Policy).
type Connections struct {
	UnixSockets        bool
	EnvCredentialHosts []string
	// RegistryHosts, RegistryMaxResponse and RegistryTimeout bound the
	// converters' Schema Registry clients (schema.registry.*).
	RegistryHosts       []string
	RegistryMaxResponse int64
	RegistryTimeout     time.Duration
}

// LoadWorker merges the worker settings from, in increasing precedence:
// the defaults, the file (JSON object or Java properties; "" for none),
// the environment (lookup, usually os.LookupEnv) and flags (settings given
// on the command line). It validates the result and names the offending
// setting in each error.
func LoadWorker(file string, lookup func(string) (string, bool), flags map[string]string) (Worker, error) {
	raw := map[string]string{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return Worker{}, fmt.Errorf("worker config: %w", err)
		}
		fromFile, err := ParseWorkerFile(b)
		if err != nil {
			return Worker{}, fmt.Errorf("worker config %s: %w", file, err)
		}
		for k, v := range fromFile {
			if _, ok := WorkerDefs.Lookup(k); !ok && !isProviderKey(k) {
				return Worker{}, fmt.Errorf("worker config %s: unknown setting %q", file, k)
			}
			raw[k] = v
		}
	}
	if lookup != nil {
		for _, d := range WorkerDefs {
			if v, ok := lookup(EnvKey(d.Name)); ok && v != "" {
				raw[d.Name] = v
			}
		}
		providerClassesFromEnv(raw, lookup)
	}
	for k, v := range flags {
		if _, ok := WorkerDefs.Lookup(k); !ok && !isProviderKey(k) {
			return Worker{}, fmt.Errorf("worker config: unknown setting %q", k)
		}
		raw[k] = v
	}
	return ParseWorker(raw)
}

// ParseWorker validates raw worker settings.
func ParseWorker(raw map[string]string) (Worker, error) {
	v, errs := WorkerDefs.Validate(raw)
	add := func(name, msg string) { errs = append(errs, FieldError{Name: name, Msg: msg}) }
	if (v[KeyRESTTLSCertFile] == "") != (v[KeyRESTTLSKeyFile] == "") {
		add(KeyRESTTLSCertFile, "rest.tls.cert.file and rest.tls.key.file must be set together")
	}
	if v[KeyRESTTLSClientCAFile] != "" && v[KeyRESTTLSCertFile] == "" {
		add(KeyRESTTLSClientCAFile, "client certificates need a server certificate (rest.tls.cert.file)")
	}
	if (v[KeyRESTBasicUser] == "") != (v[KeyRESTBasicPassword] == "") {
		add(KeyRESTBasicUser, "rest.auth.basic.user and rest.auth.basic.password must be set together")
	}
	if (v[KeyKafkaSSLCertFile] == "") != (v[KeyKafkaSSLKeyFile] == "") {
		add(KeyKafkaSSLCertFile, "kafka.ssl.cert.file and kafka.ssl.key.file must be set together")
	}
	proto := v[KeyKafkaSecurityProtocol]
	if (proto == ProtocolSASLPlaintext || proto == ProtocolSASLSSL) && (v[KeyKafkaSASLUsername] == "" || v[KeyKafkaSASLPassword] == "") {
		add(KeyKafkaSASLUsername, proto+" needs kafka.sasl.username and kafka.sasl.password")
	}
	if v.Int(KeyRestartMaxMs) < v.Int(KeyRestartInitialMs) && len(errs) == 0 {
		add(KeyRestartMaxMs, fmt.Sprintf("must be at least task.restart.backoff.initial.ms (%d), got %d", v.Int(KeyRestartInitialMs), v.Int(KeyRestartMaxMs)))
	}
	listen := v[KeyWorkerListen]
	if l := v[KeyRESTListeners]; l != "" && len(errs.For(KeyRESTListeners)) == 0 {
		scheme, addr := "", l
		if u, err := url.Parse(strings.TrimSpace(l)); err == nil {
			scheme, addr = u.Scheme, u.Host
		}
		switch {
		case raw[KeyWorkerListen] != "" && raw[KeyWorkerListen] != addr:
			add(KeyRESTListeners, fmt.Sprintf("listens on %s but listen says %s: set one of them", addr, raw[KeyWorkerListen]))
		case strings.EqualFold(scheme, "https") && v[KeyRESTTLSCertFile] == "":
			add(KeyRESTListeners, "an https listener needs rest.tls.cert.file and rest.tls.key.file")
		case strings.EqualFold(scheme, "http") && v[KeyRESTTLSCertFile] != "":
			add(KeyRESTListeners, "rest.tls.cert.file is set, so the API is served over TLS: write https://"+addr)
		}
		listen = addr
	}
	if len(v.List(KeyWorkerBootstrap)) == 0 {
		add(KeyWorkerBootstrap, "at least one bootstrap server is required")
	}
	cluster, cerrs := parseCluster(v)
	errs = append(errs, cerrs...)
	providers, perrs := parseProviders(v)
	errs = append(errs, perrs...)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Name < errs[j].Name })
		return Worker{}, errs
	}
	return Worker{
		Listen:    listen,
		Bootstrap: v.List(KeyWorkerBootstrap),
		WorkerID:  v[KeyWorkerID],
		DataDir:   v[KeyWorkerDataDir],
		LogFormat: v[KeyWorkerLogFormat],
		LogLevel:  v[KeyWorkerLogLevel],
		Kafka: KafkaSecurity{
			Protocol: proto,
			CAFile:   v[KeyKafkaSSLCAFile], CertFile: v[KeyKafkaSSLCertFile], KeyFile: v[KeyKafkaSSLKeyFile],
			Mechanism: v[KeyKafkaSASLMechanism], User: v[KeyKafkaSASLUsername], Password: v[KeyKafkaSASLPassword],
		},
		REST: REST{
			BasicUser: v[KeyRESTBasicUser], BasicPassword: v[KeyRESTBasicPassword], BearerToken: v[KeyRESTBearerToken],
			TLSCertFile: v[KeyRESTTLSCertFile], TLSKeyFile: v[KeyRESTTLSKeyFile], ClientCA: v[KeyRESTTLSClientCAFile],
			MaxBodyBytes: v.Int(KeyRESTMaxBodyBytes),
			AllowedHosts: v.List(KeyRESTAllowedHosts),
			AllowOrigin:  v[KeyCORSAllowOrigin], AllowMethods: v[KeyCORSAllowMethods],
			AdvertisedHost: v[KeyRESTAdvertisedHost], AdvertisedPort: int(v.Int(KeyRESTAdvertisedPort)),
		},
		Connections: Connections{
			UnixSockets:         v.Bool(KeyConnUnixSocket),
			EnvCredentialHosts:  v.List(KeyConnEnvCredHosts),
			RegistryHosts:       v.List(KeyRegistryAllowedHosts),
			RegistryMaxResponse: v.Int(KeyRegistryMaxResponse),
			RegistryTimeout:     time.Duration(v.Int(KeyRegistryTimeoutMs)) * time.Millisecond,
		},
		RestartEnabled: v.Bool(KeyRestartEnabled),
		RestartInitial: time.Duration(v.Int(KeyRestartInitialMs)) * time.Millisecond,
		RestartMax:     time.Duration(v.Int(KeyRestartMaxMs)) * time.Millisecond,
		MemoryBudget:   v.Int(KeyMemoryBudget),
		Cluster:        cluster,
		Providers:      providers,
		Values:         v,
	}, nil
}

// ParseWorkerFile reads a worker file: a JSON object (string, number or
// boolean values) when it starts with '{', Java properties otherwise.
func ParseWorkerFile(b []byte) (map[string]string, error) {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '{' {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(t))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			switch x := v.(type) {
			case string:
				out[k] = x
			case json.Number:
				out[k] = x.String()
			case bool:
				out[k] = strconv.FormatBool(x)
			case []any:
				parts := make([]string, 0, len(x))
				for _, p := range x {
					s, ok := p.(string)
					if !ok {
						return nil, fmt.Errorf("%s: list items must be strings", k)
					}
					parts = append(parts, s)
				}
				out[k] = strings.Join(parts, ",")
			default:
				return nil, fmt.Errorf("%s: value must be a string, number, boolean or list of strings", k)
			}
		}
		return out, nil
	}
	return ParseProperties(b)
}

// ParseProperties reads Java-style properties: "key=value" or "key: value"
// lines, '#' and '!' comments, blank lines, and a trailing backslash to
// continue a line. Escapes other than line continuation are not
// interpreted.
func ParseProperties(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	lineNo := 0
	pending := ""
	for sc.Scan() {
		lineNo++
		line := strings.TrimLeft(sc.Text(), " \t\f")
		if pending == "" && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		if strings.HasSuffix(line, `\`) && !strings.HasSuffix(line, `\\`) {
			pending += strings.TrimSuffix(line, `\`)
			continue
		}
		line, pending = pending+line, ""
		i := strings.IndexAny(line, "=:")
		if i <= 0 {
			return nil, fmt.Errorf("line %d: want key=value", lineNo)
		}
		k := strings.TrimSpace(line[:i])
		if k == "" {
			return nil, fmt.Errorf("line %d: empty key", lineNo)
		}
		out[k] = strings.TrimSpace(line[i+1:])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending != "" {
		return nil, fmt.Errorf("line %d: continuation at end of file", lineNo)
	}
	return out, nil
}

// KafkaOpts returns the franz-go options for the worker's Kafka security.
func (w Worker) KafkaOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	k := w.Kafka
	if k.Protocol == ProtocolSSL || k.Protocol == ProtocolSASLSSL {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if k.CAFile != "" {
			pool, err := loadPool(k.CAFile)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", KeyKafkaSSLCAFile, err)
			}
			tc.RootCAs = pool
		}
		if k.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(k.CertFile, k.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", KeyKafkaSSLCertFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if k.Protocol == ProtocolSASLPlaintext || k.Protocol == ProtocolSASLSSL {
		switch k.Mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: k.User, Pass: k.Password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: k.User, Pass: k.Password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: k.User, Pass: k.Password}.AsSha512Mechanism()))
		}
	}
	return opts, nil
}

// TLSConfig returns the API's server TLS configuration, or nil when the
// API is served over plain HTTP. With rest.tls.client.ca.file a client
// certificate is verified when presented; the API itself refuses requests
// without one (except GET /health).
func (w Worker) TLSConfig() (*tls.Config, error) {
	r := w.REST
	if r.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(r.TLSCertFile, r.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyRESTTLSCertFile, err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if r.ClientCA != "" {
		pool, err := loadPool(r.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyRESTTLSClientCAFile, err)
		}
		tc.ClientCAs = pool
		// A certificate is verified when given; the API requires one on
		// every request but GET /health (probes have none).
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificates", path)
	}
	return pool, nil
}

// AdvertisedID is the worker's id in Kafka Connect's form, the host and
// port of its advertised REST URL ("host:port"), for worker_id in
// statuses. bound is the address the API listens on (its port is used
// when rest.advertised.port is unset, so listen=…:0 works); the host is
// rest.advertised.host.name, else the host of listen when it names a
// specific address, else hostname (the machine's host name; Connect takes
// that name's IP address, which would need a DNS lookup).
func (w Worker) AdvertisedID(bound net.Addr, hostname string) string {
	host, port, _ := net.SplitHostPort(w.Listen)
	if ta, ok := bound.(*net.TCPAddr); ok && ta.Port > 0 {
		port = strconv.Itoa(ta.Port)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = hostname
	}
	if w.REST.AdvertisedHost != "" {
		host = w.REST.AdvertisedHost
	}
	if w.REST.AdvertisedPort > 0 {
		port = strconv.Itoa(w.REST.AdvertisedPort)
	}
	return net.JoinHostPort(host, port)
}

// checkListeners validates listeners: one http:// or https:// URL with a
// port.
func checkListeners(v string) error {
	if strings.Contains(v, ",") {
		return fmt.Errorf("%q: txsink serves one listener; give one URL", v)
	}
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
		return fmt.Errorf("%q: want http://host:port or https://host:port", v)
	}
	return nil
}

// checkAllowedHosts validates rest.allowed.hosts: host names (no ports),
// *.domain, or *.
func checkAllowedHosts(v string) error {
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" || h == "*" {
			continue
		}
		name := strings.TrimPrefix(h, "*.")
		if strings.ContainsAny(name, ":/*@ ") || name == "" {
			return fmt.Errorf("%q: want a host name without port, *.domain, or *", h)
		}
	}
	return nil
}

// checkRegistryHosts validates schema.registry.allowed.hosts: host,
// host:port, [ipv6]:port, *.domain, or *.
func checkRegistryHosts(v string) error {
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" || h == "*" {
			continue
		}
		host := h
		if hh, port, err := net.SplitHostPort(h); err == nil {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("%q: the port must be a number from 1 to 65535", h)
			}
			host = hh
		} else if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			host = ip.String()
		}
		name := strings.TrimPrefix(host, "*.")
		if name == "" || strings.ContainsAny(name, ":/*@ []") && net.ParseIP(name) == nil {
			return fmt.Errorf("%q: want host, host:port, *.domain, an IP address, or *", h)
		}
	}
	return nil
}

// checkOrigins validates access.control.allow.origin: * or origins.
func checkOrigins(v string) error {
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSpace(o)
		if o == "" || o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("%q: want an origin such as https://ui.example.com:8443, or *", o)
		}
	}
	return nil
}

// KafkaConnError is a failure to connect to Kafka that a worker setting
// explains (refused credentials, a certificate that does not verify): it
// names the setting and wraps the client's error.
type KafkaConnError struct {
	// Setting is the worker setting to look at (kafka.sasl.password, …).
	Setting string
	// Msg says what the broker or the handshake refused.
	Msg string
	// Err is the Kafka client's error.
	Err error
}

func (e *KafkaConnError) Error() string { return e.Setting + ": " + e.Msg + ": " + e.Err.Error() }

// Unwrap returns the Kafka client's error.
func (e *KafkaConnError) Unwrap() error { return e.Err }

// ExplainKafkaError returns err as a *KafkaConnError naming the setting to
// fix when the worker's Kafka security settings explain it, and err itself
// otherwise (the broker is down, a timeout, …):
//
//   - the broker refused the SASL credentials (SASL_AUTHENTICATION_FAILED):
//     kafka.sasl.password (with the user name in the message);
//   - the broker does not offer the SASL mechanism: kafka.sasl.mechanism;
//   - the broker's certificate does not verify: kafka.ssl.ca.file;
//   - the broker ended the TLS handshake with an alert (it wants a client
//     certificate its CA signed): kafka.ssl.cert.file;
//   - TLS was spoken to a listener that does not speak it:
//     kafka.security.protocol.
func (w Worker) ExplainKafkaError(err error) error {
	if err == nil {
		return nil
	}
	k := w.Kafka
	tlsOn := k.Protocol == ProtocolSSL || k.Protocol == ProtocolSASLSSL
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var op *net.OpError
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return &KafkaConnError{Setting: KeyKafkaSASLPassword, Err: err,
			Msg: fmt.Sprintf("the broker refused the %s credentials of user %q (check %s and %s)", k.Mechanism, k.User, KeyKafkaSASLUsername, KeyKafkaSASLPassword)}
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return &KafkaConnError{Setting: KeyKafkaSASLMechanism, Err: err,
			Msg: fmt.Sprintf("the broker's listener does not offer SASL mechanism %s", k.Mechanism)}
	case tlsOn && errors.As(err, &cve):
		src := "the system roots"
		if k.CAFile != "" {
			src = k.CAFile
		}
		return &KafkaConnError{Setting: KeyKafkaSSLCAFile, Err: err,
			Msg: "the broker's certificate does not verify against " + src}
	case tlsOn && errors.As(err, &rhe):
		return &KafkaConnError{Setting: KeyKafkaSecurityProtocol, Err: err,
			Msg: fmt.Sprintf("%s speaks TLS, but the broker's listener does not", k.Protocol)}
	case tlsOn && errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the broker: with a good CA and protocol this
		// is the broker refusing our certificate, or its absence.
		msg := "the broker refused the TLS handshake: it wants a client certificate its CA signed (mutual TLS), and none is set"
		if k.CertFile != "" {
			msg = "the broker refused the TLS handshake: it does not accept the client certificate " + k.CertFile
		}
		return &KafkaConnError{Setting: KeyKafkaSSLCertFile, Err: err, Msg: msg}
	}
	return err
}
