package postgres

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/connectors"
)

// cleanPGEnv empties the libpq environment and the home directory, so that
// what pgx reads comes from the connection string only.
func cleanPGEnv(t testing.TB) {
	for _, k := range []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGSSLMODE", "PGSSLCERT", "PGSSLKEY", "PGSSLROOTCERT", "PGOPTIONS", "PGAPPNAME", "PGSSLCERTMODE", "PGREQUIREAUTH", "PGTARGETSESSIONATTRS", "PGCONNECT_TIMEOUT", "PGSSLNEGOTIATION", "PGCHANNELBINDING", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION", "PGTZ", "PGSSLSNI", "PGSSLPASSWORD"} {
		t.Setenv(k, "") // restored at the end of the test
		os.Unsetenv(k)
	}
	if tt, ok := t.(*testing.T); ok {
		tt.Setenv("HOME", tt.TempDir())
	} else if f, ok := t.(*testing.F); ok {
		f.Setenv("HOME", f.TempDir())
	}
}

func TestParseConnStringRefuses(t *testing.T) {
	cleanPGEnv(t)
	sock := t.TempDir()
	for _, raw := range []string{
		// pgx ends the user information at the first '@', even in the query.
		"postgres://127.0.0.1:5432?application_name=@127.0.0.1:5432/db?host=" + sock,
		"jdbc:postgresql://127.0.0.1:5432?application_name=@127.0.0.1:5432/db?host=" + sock,
		// Other spellings of a key outside the allowlist.
		"postgres://u@h/db?sslrootcert=/etc/passwd",
		"postgres://u@h/db?sslrootcert=/etc/passwd;",
		"postgres://u@h/db?x=1;sslrootcert=/etc/passwd",
		"postgres://u@h/db?ssl%72ootcert=/etc/passwd",
		"postgres://u@h/db?passfile=/etc/passwd",
		"postgres://u@h/db?service=x",
		"postgres://u@h/db?servicefile=/etc/passwd",
		"postgres://u@h/db?sslmode=disable&sslkey=/k&sslcert=/c",
		"postgres://u@h/db?krbsrvname=x",
		"postgres://u@h/db?require_auth=none",
		"postgres://u@h/db?search_path=evil",
		"postgres://u@h/db?pool_max_conns=1000",
		"postgres://u@h/db?default_query_exec_mode=simple_protocol",
		// Unix sockets and empty hosts, every spelling.
		"postgres://u@h/db?host=" + sock,
		"postgres://u@h/db?h%6fst=" + sock,
		"postgres://u@h/db?host=h&host=" + sock,
		"postgres://u@[::1]:5432/db?host=" + sock,
		"postgres://u@%2Ftmp/db",
		"postgres://u@h1,/db",
		"postgres://u@/db",
		"postgres://u@:5432/db",
		"postgres:///db",
		"postgres://u@h/db?host=",
		// Session settings.
		"postgres://u@h/db?options=-c%20synchronous_commit%3Doff",
		"postgres://u@h/db?options=--synchronous-commit=off",
		"postgres://u@h/db?options=-csynchronous_commit=local",
		"postgres://u@h/db?options=-c%20SYNCHRONOUS_COMMIT=remote_write",
		"postgres://u@h/db?options=-c%20fsync=off",
		"postgres://u@h/db?options=-c%20session_replication_role=replica",
		"postgres://u@h/db?options=-F",
		"postgres://u@h/db?options=-c%20statement_timeout=1%20-c%20synchronous_commit=off",
		"jdbc:postgresql://h/db?user=u&options=-c%20synchronous_commit=off",
		// A password with an unencoded @: pgx reads the rest as the host.
		"postgres://u:p@ss@h/db",
		// Not a PostgreSQL URL.
		"host=h user=u",
		"mysql://h/db",
	} {
		cs, err := ParseConnString(raw, connectors.Policy{})
		if err == nil {
			t.Errorf("accepted %s (endpoints %v)", raw, cs.Endpoints)
			continue
		}
		if !errors.Is(err, ErrConnString) {
			t.Errorf("%s: error %v does not wrap ErrConnString", raw, err)
		}
	}
}

func TestParseConnStringAccepts(t *testing.T) {
	cleanPGEnv(t)
	for raw, want := range map[string]string{
		"postgres://u:p@h:5433/db?sslmode=disable":                                                     "u@h:5433",
		"postgresql://u@h/db":                                                                          "u@h:5432",
		"jdbc:postgresql://h:5432/db?user=u&password=p&ssl=true":                                       "u@h:5432",
		"postgres://u@[::1]:5432/db":                                                                   "u@[::1]:5432",
		"postgres://u@h2:1,h1:2/db?target_session_attrs=read-write":                                    "u@h1:2,h2:1",
		"postgres://u@h/db?options=-c%20synchronous_commit%3Don%20--statement-timeout%3D5min":          "u@h:5432",
		"postgres://u@h/db?options=-c%20search_path%3Dapp,public&application_name=x&connect_timeout=5": "u@h:5432",
	} {
		cs, err := ParseConnString(raw, connectors.Policy{})
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if got := cs.Identity(""); got != want {
			t.Errorf("%s: identity %q, want %q", raw, got, want)
		}
	}
	cs, err := ParseConnString("postgres://u@h/db", connectors.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Identity("other"); got != "other@h:5432" {
		t.Errorf("connection.user is the identity's user: %q", got)
	}
}

func TestParseConnStringUnixSocketPolicy(t *testing.T) {
	cleanPGEnv(t)
	sock := t.TempDir()
	raw := "postgres://u@h/db?host=" + sock
	if _, err := ParseConnString(raw, connectors.Policy{}); err == nil {
		t.Fatal("socket accepted by the strict policy")
	}
	cs, err := ParseConnString(raw, connectors.Policy{UnixSockets: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(sock, ".s.PGSQL.5432"); len(cs.Endpoints) != 1 || cs.Endpoints[0] != want {
		t.Errorf("endpoints %v, want %s", cs.Endpoints, want)
	}
}

// TestConnConfigEnvCredentials: the worker's PGPASSWORD, password file and
// PGUSER reach a connection only for the hosts the policy names.
func TestConnConfigEnvCredentials(t *testing.T) {
	cleanPGEnv(t)
	home := os.Getenv("HOME")
	pass := filepath.Join(home, ".pgpass")
	if err := os.WriteFile(pass, []byte("*:*:*:*:FromPassfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSWORD", "FromEnv")
	t.Setenv("PGUSER", "envuser")
	strict := connectors.Policy{}
	lend := connectors.Policy{EnvCredentialHosts: []string{"h:5432"}}
	for _, c := range []struct {
		url, pw      string
		policy       connectors.Policy
		wantPassword string
	}{
		{"postgres://u@h/db", "", strict, ""},
		{"postgres://u@h/db", "", lend, "FromEnv"},
		{"postgres://u@other/db", "", lend, ""},
		{"postgres://u@h/db?password=", "", strict, ""}, // an empty password lets pgx read the password file
		{"postgres://u:@h/db", "", strict, ""},
		{"postgres://u:given@h/db", "", strict, "given"},
		{"postgres://u@h/db?pass%77ord=given", "", strict, "given"},
		{"postgres://u@h/db", "conf", strict, "conf"},
		{"postgres://u:given@h/db", "conf", strict, "conf"},
	} {
		cs, err := ParseConnString(c.url, c.policy)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		if got := cs.ConnConfig("", c.pw, c.policy).Password; got != c.wantPassword {
			t.Errorf("%s (connection.password %q, env hosts %v): password %q, want %q", c.url, c.pw, c.policy.EnvCredentialHosts, got, c.wantPassword)
		}
	}
	// PGUSER is the user only of a connection string without one; the
	// sink's validate refuses that unless the policy lends it (see
	// TestValidateUserRequired).
	cs, err := ParseConnString("postgres://h/db", strict)
	if err != nil {
		t.Fatal(err)
	}
	if cs.HasUser {
		t.Error("HasUser for a URL without a user")
	}
}

func TestCheckOptions(t *testing.T) {
	for _, ok := range []string{"", "-c statement_timeout=5s", "--search-path=a,b", "-csynchronous_commit=ON", "-c synchronous_commit=remote_apply", `-c search_path=a\ b`} {
		if err := checkOptions(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"-c synchronous_commit=off", "--synchronous_commit=false", "-c synchronous_commit=0", "-c fsync=off", "-c", "-c x", "foo", "-B 10", "-c default_transaction_read_only=on", "-Fc statement_timeout=1", `-c\ synchronous_commit=off`} {
		if err := checkOptions(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := checkOptions("-c synchronous_commit=off"); !errors.Is(err, ErrDurability) {
		t.Errorf("synchronous_commit=off: %v, want ErrDurability", err)
	}
	_, err := ParseConnString("postgres://u@h/db?options=--synchronous-commit%3Doff", connectors.Policy{})
	if !errors.Is(err, ErrDurability) || !errors.Is(err, ErrConnString) {
		t.Errorf("connection.url with synchronous_commit=off: %v, want ErrDurability and ErrConnString", err)
	}
}

// FuzzConnString checks the validator against pgx's own parser: whatever
// ParseConnString accepts, pgx parses (with no allowlist at all) into a
// configuration that no key outside the allowlist shaped: no runtime
// parameter but application_name, statement_timeout and options; no file
// read (no CA or client certificate); no Unix socket; the defaults of the
// settings only other keys change. And pgx with the allowlist accepts the
// very string the driver gets. Run longer with
//
//	go test -run '^$' -fuzz FuzzConnString -fuzztime 5m ./connectors/postgres/
func FuzzConnString(f *testing.F) {
	cleanPGEnv(f)
	for _, s := range []string{
		"postgres://u:p@h:5432/db?sslmode=disable",
		"postgres://127.0.0.1:5432?application_name=@127.0.0.1:5432/db?host=/tmp",
		"jdbc:postgresql://h/db?user=u&password=p&sslmode=require",
		"postgres://u@h/db?sslrootcert=/etc/passwd;",
		"postgres://u@h/db?ssl%72ootcert=/etc/passwd",
		"postgres://u@h/db?host=h&host=/tmp",
		"postgres://u@[::1]:5432/db?options=-c%20synchronous_commit%3Doff",
		"postgres://u@h1,h2:5433/db?target_session_attrs=any&ssl=true",
		"postgresql://u@h/db?options=--search-path=x&application_name=a&connect_timeout=3&statement_timeout=9",
		"postgres://u@h/db?krbsrvname=x&sslcertmode=require&min_protocol_version=3.2",
		"postgres://u@h/db?dbname=other&port=1&user=v&pass%77ord=w",
	} {
		f.Add(s)
	}
	allowedRuntime := map[string]bool{"application_name": true, "statement_timeout": true, "options": true}
	f.Fuzz(func(t *testing.T, raw string) {
		cs, err := ParseConnString(raw, connectors.Policy{})
		if err != nil {
			return
		}
		if _, err := pgconn.ParseConfigWithOptions(cs.URL, pgconn.ParseConfigOptions{ConnStringAllowedKeys: connStringKeys}); err != nil {
			t.Fatalf("accepted %q, but pgx with the allowlist refuses %q: %v", raw, cs.URL, err)
		}
		cfg, err := pgconn.ParseConfig(cs.URL)
		if err != nil {
			t.Fatalf("accepted %q, but pgx refuses %q: %v", raw, cs.URL, err)
		}
		for k := range cfg.RuntimeParams {
			if !allowedRuntime[k] {
				t.Fatalf("accepted %q: pgx sends the runtime parameter %q", raw, k)
			}
		}
		if cfg.KerberosSrvName != "" || cfg.KerberosSpn != "" || cfg.RequireAuth != "" || cfg.SSLCertMode != "allow" ||
			cfg.MinProtocolVersion != "3.0" || cfg.MaxProtocolVersion != "3.0" {
			t.Fatalf("accepted %q: a key outside the allowlist changed pgx's config: krb %q/%q require_auth %q sslcertmode %q protocol %s-%s",
				raw, cfg.KerberosSrvName, cfg.KerberosSpn, cfg.RequireAuth, cfg.SSLCertMode, cfg.MinProtocolVersion, cfg.MaxProtocolVersion)
		}
		for _, fb := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
			if network, _ := pgconn.NetworkAddress(fb.Host, fb.Port); network == "unix" {
				t.Fatalf("accepted %q: pgx dials the Unix socket %s", raw, fb.Host)
			}
			if tc := fb.TLSConfig; tc != nil && (tc.RootCAs != nil || len(tc.Certificates) > 0) {
				t.Fatalf("accepted %q: pgx read a certificate file", raw)
			}
		}
		if o := cfg.RuntimeParams["options"]; o != "" {
			for _, w := range strings.Fields(o) {
				if !strings.HasPrefix(w, "-c") && !strings.HasPrefix(w, "--") && !strings.Contains(w, "=") {
					t.Fatalf("accepted %q: options word %q is not a session setting", raw, w)
				}
			}
		}
		// What the driver is handed: no environment credentials.
		if cc := cs.ConnConfig("", "", connectors.Policy{}); cc.TLSConfig != nil && len(cc.TLSConfig.Certificates) > 0 {
			t.Fatalf("accepted %q: the driver config carries a client certificate", raw)
		}
	})
}
