package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
)

// Sentinels wrapped by the errors of this package. Match them with
// errors.Is.
var (
	// ErrTableNotFound: the target table of a topic does not exist and
	// auto.create is off (with it, the sink creates the table). Not a bad
	// record: the whole batch fails.
	ErrTableNotFound = errors.New("table not found")
	// ErrUnsupportedColumn: a record sets a column whose type the writer
	// cannot encode. Not a bad record (the table, not the record, is at
	// fault): the whole batch fails.
	ErrUnsupportedColumn = errors.New("unsupported column type")
	// ErrNoConflictTarget: upsert needs a unique index or primary key on
	// exactly the pk columns. Not a bad record.
	ErrNoConflictTarget = errors.New("no unique index on the primary key columns")
	// ErrSchemaChange: the batch needs a schema change (auto.create,
	// auto.evolve) or a TRUNCATE, which takes an ACCESS EXCLUSIVE lock
	// that a prepared transaction keeps until its round's decision; Write
	// was told not to make one (its transaction shares a round with
	// others, which would wait on that lock while the decision waits on
	// them). Nothing was written: run the batch in a round of its own.
	ErrSchemaChange = errors.New("schema change needs a round of its own")
	// ErrSchemaChangeFailed: a CREATE TABLE, ALTER TABLE or TRUNCATE
	// failed. Never a bad record.
	ErrSchemaChangeFailed = errors.New("schema change failed")

	// Bad records wrap the sentinels of package record (record.ErrDecode,
	// record.ErrCoerce, …) and, when the database rejected the record,
	// ErrRejected.

	// ErrRejected: the database rejected the record (see IsBadRecord for the
	// SQLSTATEs). The *pgconn.PgError is wrapped as well.
	ErrRejected = errors.New("rejected by the database")
)

// IsBadRecord reports whether err is the fault of one record, that is a
// *record.Error or a PostgreSQL error whose SQLSTATE says the data is at
// fault:
//
//   - class 22, data exception (22001 value too long, 22003 numeric out of
//     range, 22007/22008 bad datetime, 22021 NUL byte or bad encoding,
//     22P02 invalid text representation, 22P05 untranslatable character, …);
//   - class 23, integrity constraint violation (23502 not null, 23503
//     foreign key, 23505 unique, 23514 check, 23P01 exclusion);
//   - 54000 program limit exceeded (an index row too large for the value).
//
// A failure to write the dead-letter table (ErrDeadLetter) or to change
// the schema (ErrSchemaChangeFailed) is never a bad record.
//
// Everything else is not a bad record, by default: connection failures
// (class 08, io errors), serialization failures and deadlocks (40001,
// 40P01), shutdowns and cancellations (class 57), resource shortages (class
// 53), and schema problems (class 42: undefined table or column, permission
// denied, 42804 datatype mismatch) fail the whole batch, so the caller
// retries or stops it instead of dead-lettering good records. IsRetryable
// tells the transient ones apart.
func IsBadRecord(err error) bool {
	if errors.Is(err, ErrDeadLetter) || errors.Is(err, ErrSchemaChangeFailed) {
		return false
	}
	if record.IsBadRecord(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return badRecordSQLState(pe.Code)
	}
	return false
}

func badRecordSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "22", "23":
		return true
	}
	return code == "54000"
}

// IsRetryable reports whether err is transient: retrying the whole batch in
// a new transaction may succeed. True for connection errors (class 08 and
// errors pgconn reports as safe to retry or as timeouts), 40001
// serialization failure, 40P01 deadlock, 55P03 lock not available, class 53
// insufficient resources, 57P01/57P02/57P03 administrator or crash
// shutdown / cannot connect now, and 57014 query canceled (statement
// timeout). False for bad records and for everything else (the default).
func IsRetryable(err error) bool {
	if err == nil || IsBadRecord(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:2] == "53"):
			return true
		}
		switch pe.Code {
		case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "57014":
			return true
		}
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// Unavailable reports whether err says the database cannot take writes
// for a while, through no fault of the batch: SQLSTATE class 53
// (insufficient resources: 53100 disk full, 53200 out of memory, 53300
// too many connections), 57P01/57P02/57P03 (shutting down, crashed, not
// accepting connections yet), or a connection that could not be made.
// A broken connection in the middle of a commit is not one of them: its
// outcome is unknown, which recovery resolves.
func Unavailable(err error) bool {
	if err == nil || IsBadRecord(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return (len(pe.Code) == 5 && pe.Code[:2] == "53") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// markUnavailable marks err with connectors.ErrSinkUnavailable (keeping
// its message) when the database cannot be reached or cannot take work
// for a while (unreachable), so that the runtime shows the task waiting
// for the database and retries, instead of failing it. A refused login,
// a certificate that does not verify, a server that refuses TLS, a host
// name that does not exist or a missing database are not marked: a
// person must act.
func markUnavailable(err error) error {
	return mark(err, unreachable(err, false))
}

// markUnreachableAtOpen is markUnavailable for the sink's first
// connection, narrower: only a server that cannot be reached at all (the
// dial fails or times out) or that says it cannot take work is marked.
// A connection the server closes during the handshake is a mismatch of
// settings (sslnegotiation=direct against a server without TLS), which
// a person must fix.
func markUnreachableAtOpen(err error) error {
	return mark(err, unreachable(err, true))
}

func mark(err error, unavailable bool) error {
	if !unavailable || errors.Is(err, connectors.ErrSinkUnavailable) {
		return err
	}
	return unavailableError{err}
}

// unreachable reports whether err says the server could not be reached
// or cannot take work for a while: a server error of Unavailable's
// classes, or a network failure (refused, timed out; unless dialOnly,
// also reset or closed).
func unreachable(err error, dialOnly bool) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return Unavailable(err)
	}
	var cv *tls.CertificateVerificationError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	var de *net.DNSError
	if errors.As(err, &cv) || errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ie) ||
		errors.As(err, &de) && de.IsNotFound {
		return false // a person must fix the certificate or the host name
	}
	var op *net.OpError
	var ce *pgconn.ConnectError
	if errors.As(err, &op) && op.Op == "dial" || errors.As(err, &ce) && errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if dialOnly {
		return false
	}
	var ne net.Error
	return op != nil || errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{connectors.ErrSinkUnavailable, e.err} }

// pgCode returns err's SQLSTATE, or "" when err is not a PostgreSQL error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// rejected wraps a database error that IsBadRecord accepts so that it
// matches ErrRejected as well.
type rejected struct{ pg error }

func (r rejected) Error() string   { return ErrRejected.Error() + ": " + r.pg.Error() }
func (r rejected) Unwrap() []error { return []error{ErrRejected, r.pg} }
