//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/twophase"
)

// busyTracer counts the statements that failed with SQLSTATE 55000
// ("prepared transaction … is busy").
type busyTracer struct{ busy atomic.Int64 }

func (b *busyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (b *busyTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	var pgErr *pgconn.PgError
	if errors.As(d.Err, &pgErr) && pgErr.Code == "55000" {
		b.busy.Add(1)
	}
}

// TestRoundCommitWaitsOutBusy: while another session is inside COMMIT
// PREPARED of a round's transaction (two new owners of its partitions
// recovering it at once), the transaction is busy (55000) to everyone
// else. CommitRound waits that out, and when the other session's commit
// ends it finds the transaction gone and the round's offsets stored:
// committed, not an error, and nothing written twice.
//
// The other session is held inside its COMMIT PREPARED for as long as
// the test likes by synchronous replication to a standby that does not
// exist (synchronous_standby_names on a server of the test's own); the
// sink's sessions commit with synchronous_commit=local and do not wait.
// Cancelling the held session ends its wait with the transaction
// committed locally, as PostgreSQL documents.
func TestRoundCommitWaitsOutBusy(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := srv.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "local"
	tracer := &busyTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := &testDB{t: t, pool: pool}
	db.exec(`CREATE TABLE ev (id text)`)

	e := newEvSink(t, db, "busy", 0, 1)
	s := e.Sink
	s.SetRoundParallelism(1) // both batches in one round transaction
	bs := []*twophase.Batch{e.batch(0, 0, 3), e.batch(1, 0, 4)}
	for i, err := range s.PrepareRound(ctx, bs) {
		if err != nil {
			t.Fatalf("PrepareRound: %s: %v", bs[i].ID, err)
		}
	}
	gids := db.strings(`SELECT gid FROM pg_prepared_xacts WHERE database = current_database()`)
	if len(gids) != 1 || !strings.HasPrefix(gids[0], RoundGIDPrefix) {
		t.Fatalf("prepared %v, want one round transaction", gids)
	}

	db.exec(`ALTER SYSTEM SET synchronous_standby_names = 'txsink_test_nobody'`)
	db.exec(`SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `ALTER SYSTEM RESET synchronous_standby_names`)
		_, _ = pool.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})

	hcfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	hcfg.RuntimeParams["synchronous_commit"] = "on" // waits for the standby
	holder, err := pgx.ConnectConfig(ctx, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	var holderPID int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	// The reload is asynchronous: the postmaster passes it on to the
	// backends when it gets to it, and a backend takes it before its next
	// statement. Wait until the held session itself has it, so that its
	// COMMIT PREPARED waits for the standby.
	waitFor(t, ctx, "the other session to take the reloaded synchronous_standby_names", func() bool {
		var v string
		if err := holder.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v == "txsink_test_nobody"
	})
	held := make(chan error, 1)
	go func() {
		_, err := holder.Exec(ctx, `COMMIT PREPARED '`+gids[0]+`'`)
		held <- err
	}()
	waitFor(t, ctx, "the other session inside COMMIT PREPARED, waiting for the standby", func() bool {
		select {
		case err := <-held:
			t.Fatalf("the other session's COMMIT PREPARED ended (%v) instead of waiting for the standby", err)
		default:
		}
		got := db.strings(`SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1`, holderPID)
		return len(got) == 1 && got[0] == "SyncRep"
	})

	done := make(chan []error, 1)
	go func() { done <- s.CommitRound(ctx, []twophase.BatchID{bs[0].ID, bs[1].ID}) }()
	// CommitRound meets the busy transaction and tries again.
	waitFor(t, ctx, "CommitRound to meet the busy transaction twice", func() bool {
		select {
		case errs := <-done:
			t.Fatalf("CommitRound returned while the transaction was busy: %v", errs)
		default:
		}
		return tracer.busy.Load() >= 2
	})

	db.exec(`SELECT pg_cancel_backend($1)`, holderPID)
	if err := <-held; err != nil {
		t.Fatalf("the other session's COMMIT PREPARED: %v (a cancelled wait for the standby leaves it committed locally)", err)
	}
	for i, err := range <-done {
		if err != nil {
			t.Errorf("CommitRound: %s: %v, want committed (by the other session)", bs[i].ID, err)
		}
	}
	if n := db.count("ev"); n != 7 {
		t.Errorf("%d rows, want 7", n)
	}
	if got := db.strings(`SELECT gid FROM pg_prepared_xacts WHERE database = current_database()`); len(got) != 0 {
		t.Errorf("prepared transactions left: %v", got)
	}
	if n := db.count("txsink_offsets_rounds"); n != 0 {
		t.Errorf("%d membership rows left, want 0", n)
	}
}

// waitFor polls cond until it holds, failing the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
