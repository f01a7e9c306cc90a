package record

import (
	"errors"
	"strconv"
	"strings"
)

// Op is what a sink does with a record.
type Op uint8

// Ops. A record that is not a change event is an OpUpsert (a tombstone
// among them: a sink's delete.enabled decides what it means), and the
// sink's insert mode applies; a change event's op comes from its envelope.
const (
	// OpUpsert writes Value: for a change event, an upsert of the row by
	// the record key.
	OpUpsert Op = iota
	// OpDelete deletes the row of the record key; Value is null.
	OpDelete
	// OpTruncate empties the target table; Key and Value are null.
	OpTruncate
)

var opNames = [...]string{"upsert", "delete", "truncate"}

// String names the op.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "invalid"
}

// Change describes the change data capture event (a Debezium envelope) a
// record came from. It is filled by the pipeline's change-event stage and
// read by the sinks for routing (${source.table}), for the version of a
// ClickHouse row and for the optional columns __op, __source_ts_ms, __lsn
// and __deleted.
type Change struct {
	// Op is the envelope's op as Debezium writes it: 'c' (create), 'r'
	// (read, a snapshot row), 'u' (update), 'd' (delete), 't' (truncate).
	Op byte
	// DB, Schema and Table are source.db, source.schema and
	// source.table ("" when the source has no such field).
	DB, Schema, Table string
	// TsMs is source.ts_ms: when the change happened in the source
	// database (HasTsMs false when absent).
	TsMs    int64
	HasTsMs bool
	// LSN is source.lsn, the PostgreSQL log sequence number of the change
	// (HasLSN false for other sources).
	LSN    int64
	HasLSN bool
	// Deleted is true for a delete written as a row with __deleted = true
	// (cdc.delete.handling.mode=rewrite).
	Deleted bool
	// Unavailable names the fields of an update's value that hold the
	// source connector's placeholder for an unchanged value it could not
	// read (PostgreSQL TOAST under REPLICA IDENTITY DEFAULT): they carry
	// no value, and a sink keeps the row's own or refuses the record.
	Unavailable []string
}

// OpText returns the change's op as Debezium writes it ("c", "u", …).
func (c *Change) OpText() string { return string(c.Op) }

// Position returns the record's source position, the version a
// de-duplicating (ReplacingMergeTree) table keeps the greatest of: a
// change event's source.lsn when it has one (PostgreSQL), else the
// record's Kafka offset. Both grow with the source's order for one key:
// the LSN across the whole database, the offset within the partition that
// Debezium's keying by primary key sends every change of a row to.
func (r *Record) Position() uint64 {
	if r.Change != nil && r.Change.HasLSN && r.Change.LSN >= 0 {
		return uint64(r.Change.LSN)
	}
	if r.Raw != nil && r.Raw.Offset >= 0 {
		return uint64(r.Raw.Offset)
	}
	return 0
}

// Table name placeholders of table.name.format.
const (
	PlaceholderTopic        = "${topic}"
	PlaceholderSourceDB     = "${source.db}"
	PlaceholderSourceSchema = "${source.schema}"
	PlaceholderSourceTable  = "${source.table}"
)

// ErrNotChange: table.name.format names a ${source.…} field that the
// record does not have (it is not a change event, or its source lacks the
// field).
var ErrNotChange = errors.New("table.name.format needs a change event's source")

// CheckTableNameFormat validates a table.name.format: every ${…} must be
// one of ${topic}, ${source.db}, ${source.schema}, ${source.table}.
func CheckTableNameFormat(format string) error {
	rest := format
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return errors.New("unterminated ${ in " + strconv.Quote(format))
		}
		switch p := rest[i : i+j+1]; p {
		case PlaceholderTopic, PlaceholderSourceDB, PlaceholderSourceSchema, PlaceholderSourceTable:
		default:
			return errors.New("unknown placeholder " + p + " (known: ${topic}, ${source.db}, ${source.schema}, ${source.table})")
		}
		rest = rest[i+j+1:]
	}
}

// TableName expands a table.name.format (checked by CheckTableNameFormat)
// for r: ${topic} is the record's topic as transforms left it, and
// ${source.db}, ${source.schema} and ${source.table} come from a change
// event's source. A ${source.…} placeholder on a record without that
// field is an error wrapping ErrNotChange (a bad record).
func (r *Record) TableName(format string) (string, error) {
	if !strings.Contains(format, "${") {
		return format, nil
	}
	var b strings.Builder
	rest := format
	for {
		i := strings.Index(rest, "${")
		j := strings.IndexByte(rest[max(i, 0):], '}')
		if i < 0 || j < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		p := rest[i : i+j+1]
		rest = rest[i+j+1:]
		v := ""
		switch {
		case p == PlaceholderTopic:
			v = r.Topic
		case r.Change == nil:
		case p == PlaceholderSourceDB:
			v = r.Change.DB
		case p == PlaceholderSourceSchema:
			v = r.Change.Schema
		case p == PlaceholderSourceTable:
			v = r.Change.Table
		}
		if v == "" {
			return "", Errorf(ErrNotChange, "table.name.format %q uses %s, which the record does not have (not a change event, or its source has no such field)", format, p)
		}
		b.WriteString(v)
	}
}
