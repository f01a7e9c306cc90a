// Package record is the data model of txsink's record pipeline: Kafka
// Connect's split, in which the runtime converts each Kafka record into a
// typed, schema-carrying [Record] (key and value converters, then
// transforms) and a sink only maps records to rows.
//
// A [Value] holds one typed value without boxing; values converted from
// schemaless JSON stay lazy (validated text, decoded on demand), which
// keeps the JSON path as fast as a scanner that fills column slots from the
// record bytes. The As… conversions read a value as what a column wants;
// both sinks use them, so one connector configuration means the same data
// in PostgreSQL and in ClickHouse. [Error] is the bad-record error both
// sinks and every converter report (invariant 8).
package record

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is a Kafka record after the converters and transforms (Kafka
// Connect's SinkRecord).
type Record struct {
	// Topic is the record's topic, as transforms may have rewritten it
	// (routing); the sink chooses the table from it.
	Topic     string
	Key       Value
	Value     Value
	Timestamp time.Time
	Headers   []kgo.RecordHeader
	// Raw is the Kafka record as read: its topic, partition and offset
	// identify the record in batches, errors and dead letters.
	Raw *kgo.Record
	// Op is what the sink does with the record: OpUpsert for every record
	// that is not a change event.
	Op Op
	// OldKey, when not null, is the key of a row a change moved away from
	// (an update whose before and after differ in a key field): the sink
	// deletes that row before it writes Value.
	OldKey Value
	// Change describes the change event the record came from; nil for
	// records that are not change events.
	Change *Change
}

// Tombstone reports whether the record's value is null.
func (r *Record) Tombstone() bool { return r.Value.IsNull() }
