package clickhouse

import (
	"errors"
	"strconv"
)

// Sentinels wrapped by the errors of this package. Match them with
// errors.Is.
var (
	// ErrTableNotFound: the target table of a topic does not exist and
	// auto.create is off. Not a bad record: the whole batch fails.
	ErrTableNotFound = errors.New("table not found")
	// ErrUnsupportedColumn: the table has a column whose type the sink
	// cannot fill. Not a bad record.
	ErrUnsupportedColumn = errors.New("unsupported column type")
	// ErrRangeUnreadable: a batch's offset range could not be re-read from
	// Kafka exactly (retention or compaction removed records): the redo of a
	// decided batch is impossible and the batch stays in doubt.
	ErrRangeUnreadable = errors.New("batch range cannot be re-read from Kafka")

	// The following mark bad records.

	// ErrDecode: the key or value is not the JSON the sink expects.
	ErrDecode = errors.New("cannot decode record")
	// ErrUnknownField: the value has a field for which the table has no
	// column.
	ErrUnknownField = errors.New("no column for field")
	// ErrCoerce: a field's value cannot be converted to its column's type.
	ErrCoerce = errors.New("cannot convert value")
	// ErrTombstone: a record with a null value arrived while delete.enabled
	// is false.
	ErrTombstone = errors.New("tombstone record but delete.enabled=false")
	// ErrMissingKey: a delete needs a key field that the record key lacks.
	ErrMissingKey = errors.New("missing key")
)

// RecordError is a bad record: one that cannot be decoded or converted.
// With errors.tolerance=none Prepare returns the RecordError of the lowest
// bad offset (the runtime stops the partition there); with
// errors.tolerance=all its text goes to the dead-letter table.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Field     string // column or JSON field, "" if not applicable
	Err       error  // wraps one of the bad-record sentinels
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

// RecordCoordinates locates the bad record for the runtime
// (connectors.RecordLocator).
func (e *RecordError) RecordCoordinates() (string, int32, int64) {
	return e.Topic, e.Partition, e.Offset
}

// IsBadRecord reports whether err is the fault of one record.
func IsBadRecord(err error) bool {
	var re *RecordError
	return errors.As(err, &re)
}

// fieldError is a bad-record cause tied to one field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return "field " + strconv.Quote(e.field) + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }
