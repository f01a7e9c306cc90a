package clickhouse

import "errors"

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
	// ErrSchemaChangeFailed: a CREATE TABLE (auto.create) or ALTER TABLE
	// (auto.evolve) failed. Not a bad record.
	ErrSchemaChangeFailed = errors.New("schema change failed")

	// Bad records wrap the sentinels of package record (record.ErrDecode,
	// record.ErrCoerce, …).
)
