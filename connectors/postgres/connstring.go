package postgres

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgpassfile"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/connectors"
)

// allowedURLParams are the query parameters a connection.url may carry.
// File paths (sslkey, sslcert, sslrootcert, passfile, servicefile) and
// service names are refused: a REST client must not make the worker read
// its own files or use its own service definitions.
var allowedURLParams = []string{"sslmode", "application_name", "connect_timeout", "target_session_attrs", "statement_timeout", "options", "user", "password", "sslnegotiation", "channel_binding"}

// connStringKeys are the keys pgx may see in a connection string: the
// parts of the URL (host, port, database, user, password) and
// allowedURLParams. pgx's own allowlist (ConnStringAllowedKeys) refuses
// every other key, in any spelling, before it reads a file or resolves a
// name.
var connStringKeys = append([]string{"host", "port", "database"}, allowedURLParams...)

// ErrConnString is matched (errors.Is) by every error about a
// connection.url; the messages themselves say what is wrong.
var ErrConnString = errors.New("invalid connection.url")

// connStringError is an error about a connection.url.
type connStringError struct{ err error }

func (e *connStringError) Error() string        { return e.err.Error() }
func (e *connStringError) Unwrap() error        { return errors.Unwrap(e.err) }
func (e *connStringError) Is(target error) bool { return target == ErrConnString }

// connStringErrorf formats an error about a connection.url; %w wraps as
// usual.
func connStringErrorf(format string, args ...any) error {
	return &connStringError{err: fmt.Errorf(format, args...)}
}

// ConnString is a validated connection.url: what pgx makes of it, checked
// against the worker's policy.
type ConnString struct {
	// URL is the string pgx parses: the setting without a "jdbc:" prefix.
	URL string
	// Endpoints are the "host:port" addresses pgx would dial, in order.
	Endpoints []string
	// HasUser and HasPassword say whether the URL itself names a user and
	// a password (in its user information or its query).
	HasUser, HasPassword bool

	cfg *pgx.ConnConfig
}

// parseConnConfig is pgx's parser restricted to keys.
func parseConnConfig(s string, keys []string) (*pgx.ConnConfig, error) {
	return pgx.ParseConfigWithOptions(s, pgx.ParseConfigOptions{ParseConfigOptions: pgconn.ParseConfigOptions{ConnStringAllowedKeys: keys}})
}

// ParseConnString validates connection.url with pgx's own parser and
// allowlist (so the driver sees exactly what was validated) and with p:
// a Unix-domain socket or an empty host (the driver's local socket) is
// refused unless p.UnixSockets; the options parameter may only set the
// session settings of checkOptions. Errors wrap ErrConnString and never
// quote the password.
func ParseConnString(raw string, p connectors.Policy) (*ConnString, error) {
	s := strings.TrimSpace(raw)
	if len(s) >= 5 && strings.EqualFold(s[:5], "jdbc:") {
		s = s[5:]
	}
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		return nil, connStringErrorf("must look like postgres://user@host:port/database or jdbc:postgresql://host:port/database")
	}
	cfg, err := parseConnConfig(s, connStringKeys)
	if err != nil {
		return nil, connStringErrorf("%s (allowed query parameters: %s)", parseErrorText(err), strings.Join(allowedURLParams, ", "))
	}
	// Which keys the string itself holds (rather than the environment or
	// the defaults): pgx refuses the string when the key is left out of
	// the allowlist.
	has := func(key string) bool {
		_, err := parseConnConfig(s, slices.DeleteFunc(slices.Clone(connStringKeys), func(k string) bool { return k == key }))
		return err != nil
	}
	cs := &ConnString{URL: s, cfg: cfg, HasUser: has("user"), HasPassword: has("password")}
	if !has("host") && !p.UnixSockets {
		return nil, connStringErrorf("no host: the PostgreSQL driver would use the worker's local Unix socket, which this worker refuses (worker setting connection.unix.socket.enabled)")
	}
	for _, fb := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}, cfg.Fallbacks...) {
		if strings.Contains(fb.Host, "@") {
			// pgx ends the user information at the first '@': the rest of
			// a password holding one would be taken for the host.
			return nil, connStringErrorf("'@' in the host; percent-encode an '@' in the user or password as %%40")
		}
		network, addr := pgconn.NetworkAddress(fb.Host, fb.Port)
		if network == "unix" {
			if !p.UnixSockets {
				return nil, connStringErrorf("host %q is a Unix-domain socket directory (an empty host is one too), which this worker refuses (worker setting connection.unix.socket.enabled)", fb.Host)
			}
		} else if fb.Host == "" {
			return nil, connStringErrorf("empty host")
		}
		if !slices.Contains(cs.Endpoints, addr) {
			cs.Endpoints = append(cs.Endpoints, addr)
		}
	}
	if err := checkOptions(cfg.RuntimeParams["options"]); err != nil {
		return nil, connStringErrorf("options: %w", err)
	}
	return cs, nil
}

// parseErrorText is pgx's parse error without the connection string it
// quotes (pgx redacts the password there only on a best-effort basis).
func parseErrorText(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "cannot parse `"); ok {
		if i := strings.Index(rest, "`: "); i >= 0 {
			return rest[i+3:]
		}
	}
	return msg
}

// ConnConfig returns the driver configuration: the parsed URL with
// connection.user and connection.password (when set) over the URL's. The
// worker's environment credentials (PGUSER and the OS user name,
// PGPASSWORD, the password and service files, client certificates) are
// removed unless p allows them for every endpoint.
func (cs *ConnString) ConnConfig(user, password string, p connectors.Policy) *pgx.ConnConfig {
	cfg := cs.cfg.Copy()
	if user != "" {
		cfg.User = user
	}
	if password != "" {
		cfg.Password = password
	}
	if p.EnvCredentialsFor(cs.Endpoints) {
		return cfg
	}
	if password == "" && (!cs.HasPassword || cfg.Password == passfilePassword(cfg)) {
		// PGPASSWORD, a service file or the password file filled it in.
		cfg.Password = ""
	}
	cfg.TLSConfig = withoutClientCerts(cfg.TLSConfig)
	for i, fb := range cfg.Fallbacks {
		c := *fb
		c.TLSConfig = withoutClientCerts(fb.TLSConfig)
		cfg.Fallbacks[i] = &c
	}
	return cfg
}

// User returns the user the connection logs in as.
func (cs *ConnString) User(user string) string {
	if user != "" {
		return user
	}
	return cs.cfg.User
}

// Identity is the canonical "user@host:port,…" a stored password is bound
// to.
func (cs *ConnString) Identity(user string) string {
	eps := slices.Clone(cs.Endpoints)
	sort.Strings(eps)
	return cs.User(user) + "@" + strings.Join(eps, ",")
}

// TLS is the canonical text of how the driver protects the connection and
// authenticates the server: "sslmode=… sslnegotiation=… channel_binding=…".
// The sslmode is read back from the connection attempts pgx built (its
// TLS configurations, in order), so it is the mode in effect whatever the
// spelling: sslmode=require and JDBC's ssl=true are the same, a
// percent-encoded key counts, and so does the worker's PGSSLMODE when the
// URL names none. A connection over Unix sockets only has no TLS
// ("disable"), as in pgx.
func (cs *ConnString) TLS() string {
	nego := cs.cfg.SSLNegotiation
	if nego == "" {
		nego = "postgres"
	}
	return "sslmode=" + cs.sslMode() + " sslnegotiation=" + nego + " channel_binding=" + cs.cfg.ChannelBinding
}

// sslMode names the sslmode of the attempts pgx makes to the first TCP
// endpoint: libpq's modes give one or two attempts per host (allow: plain
// then TLS; prefer: TLS then plain), each TLS attempt checking the server
// as its mode says.
func (cs *ConnString) sslMode() string {
	all := append([]*pgconn.FallbackConfig{{Host: cs.cfg.Host, Port: cs.cfg.Port, TLSConfig: cs.cfg.TLSConfig}}, cs.cfg.Fallbacks...)
	var first *pgconn.FallbackConfig
	var attempts []*tls.Config
	for _, fb := range all {
		if network, _ := pgconn.NetworkAddress(fb.Host, fb.Port); network == "unix" {
			continue
		}
		if first == nil {
			first = fb
		}
		if fb.Host == first.Host && fb.Port == first.Port {
			attempts = append(attempts, fb.TLSConfig)
		}
	}
	if first == nil {
		return "disable"
	}
	second := func() *tls.Config {
		if len(attempts) > 1 {
			return attempts[1]
		}
		return nil
	}
	switch t := attempts[0]; {
	case t == nil && second() != nil:
		return "allow"
	case t == nil:
		return "disable"
	case !t.InsecureSkipVerify:
		return "verify-full"
	case t.VerifyPeerCertificate != nil:
		return "verify-ca"
	case len(attempts) > 1 && second() == nil:
		return "prefer"
	}
	return "require"
}

// passfilePassword is the password pgx finds in the worker's password file
// (PGPASSFILE or ~/.pgpass) for cfg, "" when none: pgx consults it when the
// connection string gives an empty password.
func passfilePassword(cfg *pgx.ConnConfig) string {
	path := os.Getenv("PGPASSFILE")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".pgpass")
	}
	pf, err := pgpassfile.ReadPassfile(path)
	if err != nil {
		return ""
	}
	host := cfg.Host
	if network, _ := pgconn.NetworkAddress(cfg.Host, cfg.Port); network == "unix" {
		host = "localhost"
	}
	return pf.FindPassword(host, strconv.Itoa(int(cfg.Port)), cfg.Database, cfg.User)
}

// withoutClientCerts returns tc without client certificates (which pgx
// loads only from the environment, the home directory or a service file:
// the connection string may not name certificate files).
func withoutClientCerts(tc *tls.Config) *tls.Config {
	if tc == nil || len(tc.Certificates) == 0 && tc.GetClientCertificate == nil {
		return tc
	}
	c := tc.Clone()
	c.Certificates, c.GetClientCertificate = nil, nil
	return c
}
