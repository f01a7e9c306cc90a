package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }

func TestStart(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	var maxPrepared, fsync, version string
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions'), current_setting('fsync'), current_setting('server_version_num')").Scan(&maxPrepared, &fsync, &version); err != nil {
		t.Fatal(err)
	}
	if maxPrepared != "64" || fsync != "off" {
		t.Fatalf("max_prepared_transactions=%s fsync=%s, want 64 and off", maxPrepared, fsync)
	}
	t.Logf("server_version_num=%s url=%s", version, srv.URL)

	// Two-phase commit works.
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "INSERT INTO t VALUES (1)", "PREPARE TRANSACTION 'pgtest'", "COMMIT PREPARED 'pgtest'"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestSharedDatabasesAreSeparate(t *testing.T) {
	srv := pgtest.Shared(t)
	if srv != pgtest.Shared(t) {
		t.Fatal("Shared returned two servers")
	}
	a, b := srv.NewDatabase(t), srv.NewDatabase(t)
	if a == b {
		t.Fatalf("NewDatabase returned %s twice", a)
	}
	ctx := context.Background()
	for _, u := range []string{a, b} {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE only_once (x int)"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
}
