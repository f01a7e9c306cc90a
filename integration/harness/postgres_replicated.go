package harness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// ReplicationOptions shape a primary and its streaming standby.
type ReplicationOptions struct {
	// Synchronous makes the standby synchronous
	// (synchronous_standby_names = 'standby', synchronous_commit = on):
	// a COMMIT, PREPARE TRANSACTION or COMMIT PREPARED returns only once
	// the standby has flushed its WAL. Off, replication is asynchronous.
	Synchronous bool
}

// PostgresReplicated is a PostgreSQL primary and a streaming standby made
// from it with pg_basebackup, on a private Docker network, each published
// on 127.0.0.1. Both run with the same max_prepared_transactions (a
// standby needs at least the primary's), so prepared transactions replay
// on the standby and survive its promotion.
type PostgresReplicated struct {
	// URL names both servers with target_session_attrs=read-write: a
	// client connects to whichever is the primary, the standby once it
	// was promoted.
	URL string
	// PrimaryURL and StandbyURL reach one server each.
	PrimaryURL, StandbyURL string

	primary, standby *managedContainer
	synchronous      bool
}

// Settings of the replicated pair.
const (
	primaryAlias = "pg-primary"
	standbyName  = "standby" // the standby's application_name
)

// replicationHBA lets the standby stream from the primary.
const replicationHBA = `#!/bin/sh
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
`

// standbyEntrypoint clones the primary once (an empty data directory),
// configures streaming from it and starts the server through the image's
// own entry point. The same contract holds for the official image and the
// stand-in (docker-entrypoint.sh, PGDATA, setpriv in the image).
const standbyEntrypoint = `set -e
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	mkdir -p "$PGDATA"
	chown postgres:postgres "$PGDATA"
	chmod 0700 "$PGDATA"
	until PGPASSWORD="$POSTGRES_PASSWORD" setpriv --reuid=postgres --regid=postgres --init-groups \
		pg_basebackup -h ` + primaryAlias + ` -U "$POSTGRES_USER" -D "$PGDATA" -X stream; do
		rm -rf "$PGDATA"/*
		sleep 1
	done
	touch "$PGDATA/standby.signal"
	echo "primary_conninfo = 'host=` + primaryAlias + ` port=5432 user=$POSTGRES_USER password=$POSTGRES_PASSWORD application_name=` + standbyName + `'" >> "$PGDATA/postgresql.auto.conf"
	chown postgres:postgres "$PGDATA/standby.signal"
fi
exec docker-entrypoint.sh "$@"
`

// StartPostgresReplicated starts a primary and a standby for t alone (a
// failover consumes them) and terminates them when t ends. It skips the
// test with the reason when no Docker engine answers.
func StartPostgresReplicated(t testing.TB, o ReplicationOptions) *PostgresReplicated {
	t.Helper()
	requireDocker(t, "(none: the failover tests kill the primary)")
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	r, err := startPostgresReplicated(ctx, t, o)
	if err != nil {
		t.Fatalf("harness: starting a replicated PostgreSQL: %v", err)
	}
	return r
}

func startPostgresReplicated(ctx context.Context, t testing.TB, o ReplicationOptions) (*PostgresReplicated, error) {
	nw, err := network.New(ctx, network.WithLabels(labels("postgres-replicated")))
	if err != nil {
		return nil, err
	}
	register(t, false, resource{name: "postgres-replicated network", terminate: func(ctx context.Context) error { return nw.Remove(ctx) }})
	// synchronous_standby_names is set with ALTER SYSTEM, not on the
	// command line: a command-line setting would outrank the ALTER SYSTEM
	// that clears it on the promoted standby (see Promote).
	args := append(postgresArgs(), "-c", "wal_level=replica", "-c", "max_wal_senders=10", "-c", "hot_standby=on", "-c", "wal_keep_size=256MB")
	r := &PostgresReplicated{synchronous: o.Synchronous}
	var primaryURL string
	r.primary, err = startWithFreePort(func(port int) (*managedContainer, error) {
		primaryURL = postgresURL(port)
		return startContainer(ctx, t, false, containerSpec{
			name:     "postgres-primary",
			image:    envOr(EnvPostgresImage, DefaultPostgresImage),
			env:      postgresEnv(),
			cmd:      args,
			ports:    map[string]int{"5432/tcp": port},
			files:    []testcontainers.ContainerFile{{Reader: strings.NewReader(replicationHBA), ContainerFilePath: "/docker-entrypoint-initdb.d/10-replication.sh", FileMode: 0o755}},
			networks: []string{nw.Name},
			aliases:  map[string][]string{nw.Name: {primaryAlias}},
		})
	})
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, r.primary, "PostgreSQL primary", func(ctx context.Context) error { return postgresReady(ctx, primaryURL) }); err != nil {
		return nil, err
	}
	if o.Synchronous {
		if err := setSynchronousStandby(ctx, primaryURL, standbyName); err != nil {
			return nil, err
		}
	}
	var standbyURL string
	r.standby, err = startWithFreePort(func(port int) (*managedContainer, error) {
		standbyURL = postgresURL(port)
		return startContainer(ctx, t, false, containerSpec{
			name:       "postgres-standby",
			image:      envOr(EnvPostgresImage, DefaultPostgresImage),
			env:        postgresEnv(),
			entrypoint: []string{"bash", "-c", standbyEntrypoint, "standby-entrypoint"},
			cmd:        args,
			ports:      map[string]int{"5432/tcp": port},
			networks:   []string{nw.Name},
			aliases:    map[string][]string{nw.Name: {"pg-standby"}},
		})
	})
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, r.standby, "PostgreSQL standby", func(ctx context.Context) error { return postgresReady(ctx, standbyURL) }); err != nil {
		return nil, err
	}
	r.PrimaryURL, r.StandbyURL = primaryURL, standbyURL
	r.URL = multiHostURL(primaryURL, standbyURL)
	if err := waitReady(ctx, r.standby, "streaming replication", r.streaming); err != nil {
		return nil, err
	}
	return r, nil
}

// multiHostURL returns a URL naming both servers' hosts, read-write only.
func multiHostURL(a, b string) string {
	ua, _ := url.Parse(a)
	ub, _ := url.Parse(b)
	ua.Host = ua.Host + "," + ub.Host
	q := ua.Query()
	q.Set("target_session_attrs", "read-write")
	ua.RawQuery = q.Encode()
	return ua.String()
}

// streaming checks the primary streams to the standby (and, when
// synchronous, that the standby is its synchronous one).
func (r *PostgresReplicated) streaming(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.PrimaryURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var state, syncState string
	err = conn.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", standbyName).Scan(&state, &syncState)
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.New("the standby is not connected")
	}
	if err != nil {
		return err
	}
	if state != "streaming" {
		return fmt.Errorf("replication state %q", state)
	}
	if r.synchronous && syncState != "sync" {
		return fmt.Errorf("the standby is %s, not synchronous", syncState)
	}
	return nil
}

// NewDatabase creates a database on the primary (replicated to the
// standby) and returns its URL with both hosts (read-write), and one for
// each server.
func (r *PostgresReplicated) NewDatabase(t testing.TB) (both, primary, standby string) {
	t.Helper()
	name := uniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.PrimaryURL)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("harness: creating database %s: %v", name, err)
	}
	urls := []string{r.URL, r.PrimaryURL, r.StandbyURL}
	for i, u := range urls {
		if urls[i], err = withDatabase(u, name); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	return urls[0], urls[1], urls[2]
}

// KillPrimary kills the primary (SIGKILL); the standby keeps what it
// received.
func (r *PostgresReplicated) KillPrimary(ctx context.Context) error {
	return r.primary.kill(ctx)
}

// Promote promotes the standby (pg_promote) and returns once it accepts
// writes. A synchronous pair's promoted standby would wait, on every
// commit, for a synchronous standby of its own that does not exist (it
// inherited synchronous_standby_names): Promote clears the setting there,
// as a failover manager does until a new standby joins.
func (r *PostgresReplicated) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.StandbyURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("pg_promote: %w", err)
	}
	if !ok {
		return errors.New("pg_promote: the standby was not promoted within 60 s")
	}
	if r.synchronous {
		if err := setSynchronousStandby(ctx, r.StandbyURL, ""); err != nil {
			return err
		}
	}
	return waitReady(ctx, r.standby, "promoted standby", func(ctx context.Context) error {
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
			return err
		}
		if recovering {
			return errors.New("still in recovery")
		}
		return nil
	})
}

// Failover kills the primary and promotes the standby.
func (r *PostgresReplicated) Failover(ctx context.Context) error {
	if err := r.KillPrimary(ctx); err != nil {
		return err
	}
	return r.Promote(ctx)
}

// setSynchronousStandby sets synchronous_standby_names (with ALTER SYSTEM)
// on the server and reloads its configuration; synchronous_commit stays
// on, its default.
func setSynchronousStandby(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(name)); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// PauseReplication stops the standby's WAL receiver (it keeps serving
// reads of what it replayed): with asynchronous replication the primary
// goes on committing, and the standby falls behind.
func (r *PostgresReplicated) PauseReplication(ctx context.Context) error {
	return r.setConnInfo(ctx, "")
}

// setConnInfo sets the standby's primary_conninfo and reloads it.
func (r *PostgresReplicated) setConnInfo(ctx context.Context, info string) error {
	conn, err := pgx.Connect(ctx, r.StandbyURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+quoteLiteral(info)); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// PreparedOnPrimary lists the gids of the prepared transactions on the
// primary (in database db, "" for all).
func (r *PostgresReplicated) PreparedOnPrimary(ctx context.Context, db string) ([]string, error) {
	return preparedXacts(ctx, r.PrimaryURL, db)
}

// PreparedOnStandby lists the gids of the prepared transactions on the
// standby (in database db, "" for all). A hot standby replays PREPAREs but
// lists none of them; once promoted it lists them all: call it after
// Promote.
func (r *PostgresReplicated) PreparedOnStandby(ctx context.Context, db string) ([]string, error) {
	return preparedXacts(ctx, r.StandbyURL, db)
}

func preparedXacts(ctx context.Context, serverURL, db string) ([]string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE $1 = '' OR database = $1 ORDER BY gid", db)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// postgresEnv is the environment of the harness's PostgreSQL containers.
func postgresEnv() map[string]string {
	return map[string]string{
		"POSTGRES_USER":     postgresUser,
		"POSTGRES_PASSWORD": postgresPassword,
		"POSTGRES_DB":       "postgres",
	}
}

// postgresArgs is the server command of the harness's PostgreSQL
// containers.
func postgresArgs() []string {
	return []string{
		"postgres",
		"-c", "max_prepared_transactions=" + strconv.Itoa(PostgresMaxPreparedTransactions),
		"-c", "fsync=on",
		"-c", "max_connections=200",
	}
}

// postgresURL is the superuser URL of a server published on port.
func postgresURL(port int) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", postgresUser, postgresPassword, port)
}
