package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
)

// ErrDeadLetter wraps a failure to write the dead-letter table. It is never
// a bad record, even when the underlying SQLSTATE is a data exception: the
// whole batch fails.
var ErrDeadLetter = errors.New("cannot write dead-letter table")

// dlqError keeps the database error reachable for IsRetryable while
// IsBadRecord refuses it.
type dlqError struct{ err error }

func (e *dlqError) Error() string   { return "postgres: " + ErrDeadLetter.Error() + ": " + e.err.Error() }
func (e *dlqError) Unwrap() []error { return []error{ErrDeadLetter, e.err} }

// dlqDDL creates the dead-letter table. The unique constraint makes a redo
// of the same batch (same connector, topic, partition, offsets) unable to
// duplicate a dead letter.
const dlqDDL = `CREATE TABLE IF NOT EXISTS %s (
	id           bigserial PRIMARY KEY,
	connector    text NOT NULL,
	topic        text NOT NULL,
	"partition"  integer NOT NULL,
	kafka_offset bigint NOT NULL,
	key          bytea,
	value        bytea,
	headers      jsonb,
	error        text NOT NULL,
	failed_at    timestamptz NOT NULL DEFAULT now(),
	UNIQUE (connector, topic, "partition", kafka_offset)
)`

const dlqInsert = `INSERT INTO %s (connector, topic, "partition", kafka_offset, key, value, headers, error)
SELECT $1, u.topic, u.part, u.off, u.key, u.value, u.headers, u.error
FROM unnest($2::text[], $3::int4[], $4::int8[], $5::bytea[], $6::bytea[], $7::jsonb[], $8::text[])
     AS u(topic, part, off, key, value, headers, error)
ON CONFLICT DO NOTHING`

// deadLetter writes the bad records to the dead-letter table in tx,
// creating the table first if it is missing (when create allows it; else
// it returns an error wrapping ErrSchemaChange).
func (w *Writer) deadLetter(ctx context.Context, tx pgx.Tx, letters []connectors.DeadLetter, create bool) error {
	schema, name := w.cfg.dlqName()
	ident := pgx.Identifier{schema, name}.Sanitize()
	if err := ensureDLQ(ctx, tx, schema, name, create); err != nil {
		if errors.Is(err, ErrSchemaChange) {
			return err
		}
		return &dlqError{err: err}
	}
	n := len(letters)
	topics := make([]string, n)
	parts := make([]int32, n)
	offs := make([]int64, n)
	keys := make([][]byte, n)
	values := make([][]byte, n)
	headers := make([]*string, n)
	msgs := make([]string, n)
	for i, l := range letters {
		b, r := l.Err, l.Record
		topics[i], parts[i], offs[i] = b.Topic, b.Partition, b.Offset
		msgs[i] = record.CleanText(b.Error())
		keys[i], values[i] = r.Key, r.Value
		headers[i] = headersJSON(r.Headers)
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(dlqInsert, ident), w.cfg.Connector, topics, parts, offs, keys, values, headers, msgs)
	if err != nil {
		return &dlqError{err: err}
	}
	return nil
}

// ensureDLQ creates the dead-letter table when it does not exist. Creation
// is serialised by a transaction-level advisory lock, because two
// concurrent CREATE TABLE IF NOT EXISTS can fail with a unique violation in
// the catalog; the lock is only taken when the table is missing.
func ensureDLQ(ctx context.Context, tx pgx.Tx, schema, name string, create bool) error {
	ident := pgx.Identifier{schema, name}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ident).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if !create {
		return schemaChangeNeeded(name, "to be created (the dead-letter table)")
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "txsink.dlq."+ident); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(dlqDDL, ident))
	return err
}

// headersJSON is the headers column: record.HeadersJSON, NULL without
// headers.
func headersJSON(hs []kgo.RecordHeader) *string {
	h, ok := record.HeadersJSON(hs)
	if !ok {
		return nil
	}
	return &h
}
