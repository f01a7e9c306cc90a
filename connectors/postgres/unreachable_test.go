package postgres

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/connectors"
)

// TestMarkUnavailable: what a person must fix (a refused login, a
// certificate, a missing database) is not marked unavailable, so the task
// fails; a server that cannot be reached or cannot take work is, so the
// task waits (issue 27).
func TestMarkUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name   string
		err    error
		want   bool
		atOpen bool // marked at open too
	}{
		{"connection refused", fmt.Errorf("connect to PostgreSQL at 127.0.0.1:1: %w", refused), true, true},
		{"connection lost", fmt.Errorf("list prepared transactions: %w", io.ErrUnexpectedEOF), true, false},
		{"closed in the handshake", fmt.Errorf("failed to write startup message: %w", io.EOF), true, false},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true, true},
		{"shutting down", fmt.Errorf("x: %w", &pgconn.PgError{Code: "57P01"}), true, true},
		{"password", fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01"}), false, false},
		{"no database", &pgconn.PgError{Code: "3D000"}, false, false},
		{"certificate", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), false, false},
		{"other", errors.New("server refused TLS connection"), false, false},
		{"no such host", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "pg.example", IsNotFound: true}}, false, false},
		{"dns timeout", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "pg.example", IsTimeout: true}}, true, true},
	} {
		err := markUnavailable(c.err)
		if got := errors.Is(err, connectors.ErrSinkUnavailable); got != c.want {
			t.Errorf("%s: marked %v, want %v", c.name, got, c.want)
		}
		if err.Error() != c.err.Error() {
			t.Errorf("%s: message changed to %q", c.name, err)
		}
		// At open only a server that cannot be reached at all, or says
		// it cannot take work, is marked.
		want := c.want && c.atOpen
		if got := errors.Is(markUnreachableAtOpen(c.err), connectors.ErrSinkUnavailable); got != want {
			t.Errorf("%s at open: marked %v, want %v", c.name, got, want)
		}
	}
}
