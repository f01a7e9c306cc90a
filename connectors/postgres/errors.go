package postgres

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinels wrapped by the errors of this package. Match them with
// errors.Is.
var (
	// ErrTableNotFound: the target table of a topic does not exist. The sink
	// never creates target tables. Not a bad record: the whole batch fails.
	ErrTableNotFound = errors.New("table not found")
	// ErrUnsupportedColumn: a record sets a column whose type the writer
	// cannot encode. Not a bad record (the table, not the record, is at
	// fault): the whole batch fails.
	ErrUnsupportedColumn = errors.New("unsupported column type")
	// ErrNoConflictTarget: upsert needs a unique index or primary key on
	// exactly the pk columns. Not a bad record.
	ErrNoConflictTarget = errors.New("no unique index on the primary key columns")

	// The following mark bad records (see IsBadRecord).

	// ErrDecode: the key or value is not the JSON the writer expects.
	ErrDecode = errors.New("cannot decode record")
	// ErrUnknownField: the value has a field for which the table has no
	// column (no automatic schema evolution, as Kafka Connect's JDBC sink
	// without auto.evolve).
	ErrUnknownField = errors.New("no column for field")
	// ErrCoerce: a field's value cannot be converted to its column's type
	// (wrong JSON type, out of range, too long, NUL byte in text, …).
	ErrCoerce = errors.New("cannot convert value")
	// ErrMissingKey: a pk column (or a tombstone's key) is missing.
	ErrMissingKey = errors.New("missing primary key")
	// ErrTombstone: a record with a null value arrived while delete.enabled
	// is false.
	ErrTombstone = errors.New("tombstone record but delete.enabled=false")
	// ErrRejected: the database rejected the record (see IsBadRecord for the
	// SQLSTATEs). The *pgconn.PgError is wrapped as well.
	ErrRejected = errors.New("rejected by the database")
)

// RecordError is a bad record: one that cannot be decoded, converted or
// written whatever the retries. With errors.tolerance=none Write returns the
// RecordError of the lowest bad offset; with errors.tolerance=all the error's
// text goes to the dead-letter table.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Field     string // column or JSON field, "" if not applicable
	Err       error  // wraps one of the bad-record sentinels, and *pgconn.PgError when the database rejected the record
}

// Error names the record's coordinates, the field and the cause.
func (e *RecordError) Error() string {
	s := "bad record " + e.Topic + "[" + strconv.Itoa(int(e.Partition)) + "]@" + strconv.FormatInt(e.Offset, 10)
	if e.Field != "" {
		s += " field " + strconv.Quote(e.Field)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }

// IsBadRecord reports whether err is the fault of one record, that is a
// *RecordError or a PostgreSQL error whose SQLSTATE says the data is at
// fault:
//
//   - class 22, data exception (22001 value too long, 22003 numeric out of
//     range, 22007/22008 bad datetime, 22021 NUL byte or bad encoding,
//     22P02 invalid text representation, 22P05 untranslatable character, …);
//   - class 23, integrity constraint violation (23502 not null, 23503
//     foreign key, 23505 unique, 23514 check, 23P01 exclusion);
//   - 54000 program limit exceeded (an index row too large for the value).
//
// A failure to write the dead-letter table (ErrDeadLetter) is never a bad
// record.
//
// Everything else is not a bad record, by default: connection failures
// (class 08, io errors), serialization failures and deadlocks (40001,
// 40P01), shutdowns and cancellations (class 57), resource shortages (class
// 53), and schema problems (class 42: undefined table or column, permission
// denied, 42804 datatype mismatch) fail the whole batch, so the caller
// retries or stops it instead of dead-lettering good records. IsRetryable
// tells the transient ones apart.
func IsBadRecord(err error) bool {
	if errors.Is(err, ErrDeadLetter) {
		return false
	}
	var re *RecordError
	if errors.As(err, &re) {
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

// fieldError is a bad-record cause tied to one field; recordError turns it
// into a RecordError.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %q: %v", e.field, e.err) }
func (e *fieldError) Unwrap() error { return e.err }

func errField(field string, sentinel error, format string, args ...any) error {
	return &fieldError{field: field, err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)}
}
