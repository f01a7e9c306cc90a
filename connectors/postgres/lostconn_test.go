//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/internal/pgtest"
)

// TestLostConnectionResetsThePool: a call that timed out or lost its
// connection closes the pool's idle connections (they may lead to a server
// that is gone); an error the server answered does not.
func TestLostConnectionResetsThePool(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := &Sink{pool: pool, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	warm := func() {
		t.Helper()
		var conns []*pgxpool.Conn
		for range 3 {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	for _, tc := range []struct {
		name  string
		err   error
		reset bool
	}{
		{"server error", &pgconn.PgError{Code: "40001"}, false},
		{"cancelled", context.Canceled, false},
		{"timed out", context.DeadlineExceeded, true},
		{"connection lost", io.ErrUnexpectedEOF, true},
		{"unrelated", errors.New("bad record"), false},
	} {
		warm()
		// A reset takes the idle connections out of the pool before it
		// returns (they close in the background).
		s.resetOnLostConnection(tc.err)
		if n := pool.Stat().TotalConns(); (n == 0) != tc.reset {
			t.Errorf("%s: %d connections left in the pool; reset wanted: %v", tc.name, n, tc.reset)
		}
	}
}

// TestUnavailable: the errors of a database that cannot take writes for a
// while are told apart from bad records and from other failures.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "53100"}, true},  // disk full
		{&pgconn.PgError{Code: "53300"}, true},  // too many connections
		{&pgconn.PgError{Code: "57P03"}, true},  // cannot connect now
		{&pgconn.PgError{Code: "57014"}, false}, // query canceled
		{&pgconn.PgError{Code: "23505"}, false}, // a bad record
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table
		{&pgconn.ConnectError{}, true},
		{io.ErrUnexpectedEOF, false}, // a broken commit: unknown, not unavailable
		{nil, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%#v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
