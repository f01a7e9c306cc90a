package record

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinels that mark bad records: a record's fault, which no retry fixes.
// Both sinks and every converter wrap one of them; match with errors.Is.
var (
	// ErrDecode: the key or value cannot be decoded: invalid JSON, a wrong
	// magic byte, an unknown schema id, a payload that does not parse
	// with its schema, a value of a shape the sink cannot use.
	ErrDecode = errors.New("cannot decode record")
	// ErrUnknownField: the value has a field for which the table has no
	// column.
	ErrUnknownField = errors.New("no column for field")
	// ErrCoerce: a field's value cannot be converted to its column's type
	// (wrong type, out of range, too long, …).
	ErrCoerce = errors.New("cannot convert value")
	// ErrMissingKey: a key column, or a tombstone's key, is missing.
	ErrMissingKey = errors.New("missing primary key")
	// ErrTombstone: a record with a null value arrived while deletes are
	// off.
	ErrTombstone = errors.New("tombstone record but delete.enabled=false")
	// ErrTransform: a transform cannot apply to the record (a field it
	// reads is missing or of the wrong type).
	ErrTransform = errors.New("cannot transform record")
	// ErrTruncate: a change event truncates its table while
	// cdc.truncate=refuse (or on a sink that cannot apply it).
	ErrTruncate = errors.New("truncate event refused")
	// ErrIncompatible: the record's schema cannot be written to its table
	// without narrowing a column or changing the key (auto.evolve only adds
	// columns). Unlike the other bad records it is never dead-lettered:
	// the stream and the table disagree, and every following record would
	// go to the dead-letter table too; the partition stops at the record
	// until an operator changes the table.
	ErrIncompatible = errors.New("incompatible schema change")
)

// ErrUnavailable marks failures of the environment the pipeline depends
// on (a Schema Registry that does not answer, or answers 5xx). They are
// never bad records: the task waits and retries, and nothing is skipped.
var ErrUnavailable = errors.New("dependency unavailable")

// Error is a bad record: one that cannot be decoded, converted or written
// whatever the retries. It names the record's coordinates, the field (a
// column or a field of the record, "" when not applicable) and the cause,
// which wraps one of the sentinels above (or a sink's own, such as a
// database's rejection).
type Error struct {
	Topic     string
	Partition int32
	Offset    int64
	Field     string
	Err       error
}

// NewError returns the bad-record error of r for cause err, taking the
// field from a *FieldError in err's chain.
func NewError(r *kgo.Record, err error) *Error {
	e := &Error{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
	var fe *FieldError
	if errors.As(err, &fe) {
		e.Field, e.Err = fe.Field, fe.Err
	}
	return e
}

// Error names the record's coordinates, the field and the cause:
// bad record orders[3]@9 field "qty": cannot convert value: ….
func (e *Error) Error() string {
	s := "bad record " + e.Topic + "[" + strconv.Itoa(int(e.Partition)) + "]@" + strconv.FormatInt(e.Offset, 10)
	if e.Field != "" {
		s += " field " + strconv.Quote(e.Field)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// RecordCoordinates locates the bad record for the runtime, which stops
// the partition exactly there (errors.tolerance=none).
func (e *Error) RecordCoordinates() (topic string, partition int32, offset int64) {
	return e.Topic, e.Partition, e.Offset
}

// IsBadRecord reports whether err is, or wraps, an *Error.
func IsBadRecord(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// FieldError ties a bad-record cause to one field; NewError moves the
// field into the Error.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "field " + strconv.Quote(e.Field) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }

// Errorf returns an error wrapping sentinel with a formatted message:
// "cannot convert value: <message>".
func Errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// FieldErrorf is Errorf tied to a field.
func FieldErrorf(field string, sentinel error, format string, args ...any) error {
	return &FieldError{Field: field, Err: Errorf(sentinel, format, args...)}
}

// InField ties err to a field unless it already names one (an element
// deeper inside keeps its own path).
func InField(field string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: field, Err: err}
}

func coerceErr(format string, args ...any) error { return Errorf(ErrCoerce, format, args...) }

// IsCause reports whether err is a record's fault met while mapping it to
// a row (a conversion or mapping failure not yet tied to the record, or
// an Error already).
func IsCause(err error) bool {
	if IsBadRecord(err) {
		return true
	}
	for _, s := range []error{ErrDecode, ErrCoerce, ErrUnknownField, ErrMissingKey, ErrTombstone, ErrTransform, ErrTruncate, ErrIncompatible, ErrNotChange} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Locate returns the bad-record error of r for cause err: the *Error in
// err's chain, or a new one.
func Locate(r *kgo.Record, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return NewError(r, err)
}
