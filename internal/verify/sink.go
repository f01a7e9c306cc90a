package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SinkOptions say where and how a PostgreSQL or ClickHouse sink keeps a
// connector's data.
type SinkOptions struct {
	// URL connects to the sink database: postgres://… for PostgreSQL,
	// clickhouse://host:port/db (or tcp://…) for ClickHouse (the
	// clickhouse connector's connection.url form; the path is the
	// database of every table).
	URL string
	// User and Password, when set, override the URL's credentials
	// (ClickHouse; for PostgreSQL put them in the URL).
	User, Password string
	// Connector is the connector name (the offsets rows' key).
	Connector string
	// Schema holds the target, offsets and dead-letter tables; default
	// "public". Not used for ClickHouse (the URL's database is).
	Schema string
	// Table is the target table name, "${topic}" replaced by each topic
	// (the connector's table.name.format); default "${topic}".
	Table string
	// TopicColumn, PartitionColumn and OffsetColumn hold each row's Kafka
	// coordinates; defaults __connect_topic, __connect_partition,
	// __connect_offset. TopicColumn "-" means the table has no topic
	// column (one topic per table).
	TopicColumn, PartitionColumn, OffsetColumn string
	// IDColumn holds the payload id: a column name, or "column->field"
	// for a field of a json/jsonb column. "" disables id checks.
	IDColumn string
	// CompareColumns are compared, as text, with the record fields of
	// Extractor.Fields at the same position.
	CompareColumns []string
	// OffsetsTable is the connector's offsets.table; default
	// txsink_offsets.
	OffsetsTable string
	// IntentsTable is a ClickHouse connector's intents.table; default
	// txsink_intents.
	IntentsTable string
	// DeadLetterTable is the connector's
	// errors.deadletterqueue.table.name ("" when none): records there
	// count as delivered.
	DeadLetterTable string
}

func (o *SinkOptions) defaults() {
	if o.Schema == "" {
		o.Schema = "public"
	}
	if o.Table == "" {
		o.Table = "${topic}"
	}
	if o.TopicColumn == "" {
		o.TopicColumn = "__connect_topic"
	}
	if o.PartitionColumn == "" {
		o.PartitionColumn = "__connect_partition"
	}
	if o.OffsetColumn == "" {
		o.OffsetColumn = "__connect_offset"
	}
	if o.OffsetsTable == "" {
		o.OffsetsTable = "txsink_offsets"
	}
	if o.IntentsTable == "" {
		o.IntentsTable = "txsink_intents"
	}
}

// TxsinkGIDPrefix starts the gid of every prepared transaction of one
// batch txsink creates (connectors/postgres.GIDPrefix), and
// TxsinkRoundGIDPrefix that of one holding several batches of a round
// (connectors/postgres.RoundGIDPrefix).
const (
	TxsinkGIDPrefix      = "txsink1_"
	TxsinkRoundGIDPrefix = "txsink2_"
)

// GIDPrefix returns the prefix of the connector's prepared transactions of
// one batch: txsink1_<first 8 bytes of sha256(connector), hex>_ (the gid
// layout the README documents; gid_test checks it against
// connectors/postgres.GID).
func GIDPrefix(connector string) string {
	return TxsinkGIDPrefix + connectorHash(connector) + "_"
}

// RoundGIDPrefix returns the prefix of the connector's prepared
// transactions of a round: txsink2_<the same hash>_.
func RoundGIDPrefix(connector string) string {
	return TxsinkRoundGIDPrefix + connectorHash(connector) + "_"
}

func connectorHash(connector string) string {
	h := sha256.Sum256([]byte(connector))
	return hex.EncodeToString(h[:8])
}

// ReadSink reads the sink. PostgreSQL: in one REPEATABLE READ READ ONLY
// transaction, the connector's stored offsets, the rows of every topic's
// table, its dead letters and the prepared transactions of txsink in the
// database. ClickHouse (IsClickHouseURL): the stored offsets, the
// unfinished intents (as Prepared with Intent set), the rows and the dead
// letters, in that order and without a snapshot.
func ReadSink(ctx context.Context, o SinkOptions, topics []string) ([]PartitionSink, []Prepared, error) {
	o.defaults()
	if o.URL == "" {
		return nil, nil, errors.New("sink: no URL")
	}
	if IsClickHouseURL(o.URL) {
		return readClickHouse(ctx, o, topics)
	}
	conn, err := pgx.Connect(ctx, o.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("sink: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	parts := map[tp]*PartitionSink{}
	get := func(topic string, p int32) *PartitionSink {
		k := tp{topic, p}
		if parts[k] == nil {
			parts[k] = &PartitionSink{Topic: topic, Partition: p, Next: -1}
		}
		return parts[k]
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}

	// Offsets.
	offs, err := pgStoredOffsets(ctx, tx, pgx.Identifier{o.Schema, o.OffsetsTable}.Sanitize(), o.Connector)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: read offsets: %w", err)
	}
	for _, so := range offs {
		if want[so.topic] {
			ps := get(so.topic, so.partition)
			ps.HasOffsets, ps.Fence, ps.Next = true, so.fence, so.next
		}
	}

	// Rows, per distinct table.
	byTable := map[string][]string{}
	var tables []string
	for _, t := range topics {
		name := strings.ReplaceAll(o.Table, "${topic}", t)
		if byTable[name] == nil {
			tables = append(tables, name)
		}
		byTable[name] = append(byTable[name], t)
	}
	idExpr, err := columnExpr(o.IDColumn)
	if err != nil {
		return nil, nil, err
	}
	for _, table := range tables {
		ts := byTable[table]
		if o.TopicColumn == "-" && len(ts) > 1 {
			return nil, nil, fmt.Errorf("sink: table %s holds topics %v but has no topic column", table, ts)
		}
		cols := []string{}
		if o.TopicColumn != "-" {
			cols = append(cols, pgx.Identifier{o.TopicColumn}.Sanitize()+"::text")
		} else {
			cols = append(cols, "$1::text")
		}
		cols = append(cols, pgx.Identifier{o.PartitionColumn}.Sanitize()+"::int4", pgx.Identifier{o.OffsetColumn}.Sanitize()+"::int8")
		if idExpr != "" {
			cols = append(cols, "("+idExpr+")::text")
		} else {
			cols = append(cols, "NULL::text")
		}
		for _, c := range o.CompareColumns {
			e, err := columnExpr(c)
			if err != nil {
				return nil, nil, err
			}
			cols = append(cols, "("+e+")::text")
		}
		q := `SELECT ` + strings.Join(cols, ", ") + ` FROM ` + pgx.Identifier{o.Schema, table}.Sanitize()
		var args []any
		if o.TopicColumn != "-" {
			q += ` WHERE ` + pgx.Identifier{o.TopicColumn}.Sanitize() + ` = ANY($1)`
			args = []any{ts}
		} else {
			args = []any{ts[0]}
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("sink: read %s.%s: %w", o.Schema, table, err)
		}
		n := 3 + 1 + len(o.CompareColumns)
		for rows.Next() {
			var topic *string
			var p *int32
			var off *int64
			var id *string
			dest := []any{&topic, &p, &off, &id}
			fields := make([]*string, len(o.CompareColumns))
			for i := range fields {
				dest = append(dest, &fields[i])
			}
			if len(dest) != n {
				panic("verify: column count")
			}
			if err := rows.Scan(dest...); err != nil {
				return nil, nil, fmt.Errorf("sink: read %s.%s: %w", o.Schema, table, err)
			}
			if topic == nil || p == nil || off == nil {
				return nil, nil, fmt.Errorf("sink: %s.%s has a row with NULL Kafka coordinates", o.Schema, table)
			}
			r := Row{Offset: *off, Fields: fields}
			if id != nil {
				r.ID, r.HasID = *id, true
			}
			ps := get(*topic, *p)
			ps.Rows = append(ps.Rows, r)
		}
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("sink: read %s.%s: %w", o.Schema, table, err)
		}
	}

	// Dead letters.
	if o.DeadLetterTable != "" {
		schema, name := o.Schema, o.DeadLetterTable
		if i := strings.IndexByte(name, '.'); i > 0 {
			schema, name = name[:i], name[i+1:]
		}
		dlq := pgx.Identifier{schema, name}.Sanitize()
		if ok, err := tableExists(ctx, tx, dlq); err != nil {
			return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
		} else if ok {
			rows, err := tx.Query(ctx, `SELECT topic, "partition", kafka_offset FROM `+dlq+` WHERE connector = $1`, o.Connector)
			if err != nil {
				return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
			}
			for rows.Next() {
				var topic string
				var p int32
				var off int64
				if err := rows.Scan(&topic, &p, &off); err != nil {
					return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
				}
				if want[topic] {
					ps := get(topic, p)
					ps.DeadLetters = append(ps.DeadLetters, off)
				}
			}
			if err := rows.Err(); err != nil {
				return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
			}
		}
	}

	// Prepared transactions of txsink in this database.
	prefix, rprefix := GIDPrefix(o.Connector), RoundGIDPrefix(o.Connector)
	rows, err := tx.Query(ctx, `SELECT gid, owner::text, database::text, extract(epoch from (now() - prepared))::float8
		FROM pg_prepared_xacts WHERE database = current_database() AND left(gid, $2) IN ($1, $3) ORDER BY prepared`,
		TxsinkGIDPrefix, len(TxsinkGIDPrefix), TxsinkRoundGIDPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: read pg_prepared_xacts: %w", err)
	}
	var prepared []Prepared
	for rows.Next() {
		var p Prepared
		var age float64
		if err := rows.Scan(&p.GID, &p.Owner, &p.Database, &age); err != nil {
			return nil, nil, fmt.Errorf("sink: read pg_prepared_xacts: %w", err)
		}
		p.Age = time.Duration(age * float64(time.Second))
		p.Ours = strings.HasPrefix(p.GID, prefix) || strings.HasPrefix(p.GID, rprefix)
		prepared = append(prepared, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sink: read pg_prepared_xacts: %w", err)
	}

	out := make([]PartitionSink, 0, len(parts))
	for _, ps := range parts {
		out = append(out, *ps)
	}
	return out, prepared, nil
}

// columnExpr turns "col" or "col->field" into a safe SQL expression.
func columnExpr(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	col, field, isJSON := strings.Cut(c, "->")
	col = strings.TrimSpace(col)
	if col == "" {
		return "", fmt.Errorf("sink: bad column %q", c)
	}
	if !isJSON {
		return pgx.Identifier{col}.Sanitize(), nil
	}
	field = strings.TrimSpace(field)
	if field == "" {
		return "", fmt.Errorf("sink: bad column %q: empty JSON field", c)
	}
	return pgx.Identifier{col}.Sanitize() + "->>" + quoteLiteral(field), nil
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// tableExists reports whether the quoted, qualified table exists (without
// failing the transaction when it does not).
func tableExists(ctx context.Context, tx pgx.Tx, quoted string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoted).Scan(&ok)
	return ok, err
}
