package verify

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/pgcatalog"
)

// ReplicaConfig is one comparison of source tables with their copies (a
// PostgreSQL source replicated by Debezium and txsink into PostgreSQL or
// ClickHouse).
type ReplicaConfig struct {
	// SourceURL connects to the source database (postgres://…).
	SourceURL string
	// Tables are the source tables, "schema.table" or "table" (schema
	// public). Empty: every table of the source database's publications
	// (Debezium's pgoutput publication).
	Tables []string
	// Target is the copy: URL (postgres://… or clickhouse://host:port/db),
	// credentials, Schema (PostgreSQL), and for the Kafka lag the
	// Connector and its OffsetsTable. Target.Table names each target
	// table: ${source.db}, ${source.schema}, ${source.table}, and
	// ${topic} when TopicPrefix is set; default ${source.table}.
	Target SinkOptions
	// TopicPrefix is Debezium's topic.prefix: ${topic} in Target.Table is
	// <prefix>.<schema>.<table>.
	TopicPrefix string
	// IgnoreColumns are not compared: "col" in every table, "table.col"
	// or "schema.table.col".
	IgnoreColumns []string
	// DeletedColumn is the ClickHouse deletion flag column (default
	// is_deleted; the table's ReplacingMergeTree names it on 23.2+): rows
	// with it set are deleted rows.
	DeletedColumn string
	// Bootstrap and KafkaOpts reach Kafka for the connector's lag (with
	// Target.Connector); empty: no Kafka lag.
	Bootstrap []string
	KafkaOpts []kgo.Opt
	// MaxExamples bounds the examples per kind and table; default 10.
	MaxExamples int

	// afterSnapshots, when set (tests), runs once both snapshots are
	// taken, before any row is read.
	afterSnapshots func()
}

// Errors of a replica comparison that are the configuration's (the CLI
// exits with a usage error).
var (
	// ErrReplicaConfig is wrapped by ReplicaConfig.Validate's errors.
	ErrReplicaConfig = errors.New("replica comparison")
)

// Validate names the first missing or inconsistent setting.
func (c *ReplicaConfig) Validate() error {
	switch {
	case c.SourceURL == "":
		return fmt.Errorf("%w: source-url: required", ErrReplicaConfig)
	case IsClickHouseURL(c.SourceURL):
		return fmt.Errorf("%w: source-url: the source must be PostgreSQL (postgres://…)", ErrReplicaConfig)
	case c.Target.URL == "":
		return fmt.Errorf("%w: sink-url: required (the target database)", ErrReplicaConfig)
	case strings.Contains(c.Target.Table, "${topic}") && c.TopicPrefix == "":
		return fmt.Errorf("%w: table: %q needs -topic-prefix (Debezium's topic.prefix) to name each table's topic", ErrReplicaConfig, c.Target.Table)
	}
	return nil
}

// ReplicaReport is the result of a replica comparison.
type ReplicaReport struct {
	CheckedAt time.Time `json:"checked_at"`
	// Source names the source database (host:port/db); Target likewise,
	// TargetKind is postgres or clickhouse.
	Source     string        `json:"source"`
	Target     string        `json:"target"`
	TargetKind string        `json:"target_kind"`
	Tables     []TableReport `json:"tables"`
	Lag        ReplicaLag    `json:"lag"`
	// RowCounts are the totals over the tables.
	RowCounts
	Notes []string `json:"notes,omitempty"`
}

// RowCounts count the rows of a comparison.
type RowCounts struct {
	SourceRows int64 `json:"source_rows"`
	TargetRows int64 `json:"target_rows"`
	// Equal rows have the same key and checksum on both sides; Missing
	// ones are only in the source, Extra ones only in the target (or
	// repeat a key there), Different ones differ in a compared column.
	Equal     int64 `json:"equal"`
	Missing   int64 `json:"missing"`
	Extra     int64 `json:"extra"`
	Different int64 `json:"different"`
}

func (c *RowCounts) add(o RowCounts) {
	c.SourceRows += o.SourceRows
	c.TargetRows += o.TargetRows
	c.Equal += o.Equal
	c.Missing += o.Missing
	c.Extra += o.Extra
	c.Different += o.Different
}

// OK reports whether every target table equals its source, row for row.
func (r *ReplicaReport) OK() bool { return r.Missing == 0 && r.Extra == 0 && r.Different == 0 }

// TableReport is the comparison of one source table with its copy.
type TableReport struct {
	Source string `json:"source_table"`
	Target string `json:"target_table"`
	// TargetExists is false when the target has no such table (every
	// source row is then missing).
	TargetExists bool     `json:"target_exists"`
	Key          []string `json:"key"`
	// Columns are the compared columns; TargetLacks those of them the
	// target does not have (compared as NULL, as rows written before an
	// auto.evolve would read).
	Columns     []string `json:"columns"`
	TargetLacks []string `json:"target_lacks,omitempty"`
	Ignored     []string `json:"ignored,omitempty"`
	RowCounts
	// Read says how the target was read when it matters: ClickHouse
	// FINAL, rows left out as deleted.
	Read     string    `json:"read,omitempty"`
	Examples []RowDiff `json:"examples,omitempty"`
}

// ReplicaLag says how far the target is behind the source when the
// snapshots were taken.
type ReplicaLag struct {
	// SourceLSN is the source's WAL position at its snapshot.
	SourceLSN string `json:"source_lsn"`
	// Slots are the source database's logical replication slots (Debezium
	// keeps one) and how far their confirmed position is behind.
	Slots []SlotLag `json:"slots"`
	// TargetLSN is the newest source position applied to the target (the
	// greatest __lsn, or the ClickHouse version column, over the compared
	// tables; "" when no table has one). TargetBehind is the WAL between
	// it and SourceLSN (it includes WAL that is not replicated: an
	// upper bound).
	TargetLSN    string `json:"target_lsn,omitempty"`
	TargetBehind *int64 `json:"target_behind_bytes,omitempty"`
	// Kafka is the connector's lag per topic (records between its stored
	// next_offset and the last stable offset); nil when not asked for.
	Kafka []TopicLag `json:"kafka,omitempty"`
	// KafkaRecords is their sum; -1 when unknown.
	KafkaRecords int64  `json:"kafka_records"`
	KafkaError   string `json:"kafka_error,omitempty"`
}

// SlotLag is one replication slot of the source.
type SlotLag struct {
	Name      string `json:"name"`
	Plugin    string `json:"plugin"`
	Active    bool   `json:"active"`
	Confirmed string `json:"confirmed_flush_lsn"`
	Behind    *int64 `json:"behind_bytes"`
}

// TopicLag is a connector's lag on one topic.
type TopicLag struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Records    int64  `json:"records"`
}

// sourceTable is a resolved source table.
type sourceTable struct {
	schema, name string
	cols         []pgColumn
	key          []string
}

// pgColumn is a column of a PostgreSQL table.
type pgColumn struct {
	name, typ, typname, category string
	typmod                       int32
}

// pgSessionParams make both PostgreSQL sides print values alike.
var pgSessionParams = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, YMD",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "1",
	"bytea_output":       "hex",
	"application_name":   "txsink-verify",
}

// pgConnect opens a connection with pgSessionParams and begins a
// REPEATABLE READ READ ONLY transaction whose snapshot is taken by its
// first query.
func pgConnect(ctx context.Context, raw, side string) (*pgx.Conn, pgx.Tx, error) {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", side, err)
	}
	for k, v := range pgSessionParams {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: connect: %w", side, err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("%s: begin: %w", side, err)
	}
	return conn, tx, nil
}

// CheckReplica compares each source table with its copy by key and a
// per-row checksum of the normalised column values. It is read-only and
// safe on live databases: one REPEATABLE READ READ ONLY snapshot of the
// source and, for a PostgreSQL target, one of the target, taken one after
// the other before any row is read (a ClickHouse target is read table by
// table, with FINAL and deleted rows left out); the lag between the two
// is reported. Source rows are kept in memory as key and checksum (budget
// roughly 100 bytes per row). An error means the comparison could not be
// done; differences are in the report (ReplicaReport.OK). Cancelling ctx
// abandons the reads (the transactions are rolled back).
func CheckReplica(ctx context.Context, c ReplicaConfig) (*ReplicaReport, error) {
	if c.Target.Table == "" {
		c.Target.Table = "${source.table}"
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.Target.defaults()
	if c.DeletedColumn == "" {
		c.DeletedColumn = "is_deleted"
	}
	r := &ReplicaReport{CheckedAt: time.Now().UTC(), Source: describeURL(c.SourceURL), Target: describeURL(c.Target.URL), TargetKind: "postgres"}

	// The source snapshot first, then the target's at once.
	sconn, stx, err := pgConnect(ctx, c.SourceURL, "source")
	if err != nil {
		return nil, err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	defer stx.Rollback(context.WithoutCancel(ctx))
	srcDB, err := sourcePosition(ctx, stx, &r.Lag)
	if err != nil {
		return nil, err
	}

	var tgt replicaTarget
	if IsClickHouseURL(c.Target.URL) {
		r.TargetKind = "clickhouse"
		tgt, err = openClickHouseTarget(ctx, c)
	} else {
		tgt, err = openPostgresTarget(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	defer tgt.close(context.WithoutCancel(ctx))
	if c.afterSnapshots != nil {
		c.afterSnapshots()
	}

	tables, err := sourceTables(ctx, stx, c.Tables)
	if err != nil {
		return nil, err
	}
	var newest int64 = -1
	for _, st := range tables {
		tr, pos, err := compareTable(ctx, c, stx, tgt, st, srcDB)
		if err != nil {
			return nil, err
		}
		newest = max(newest, pos)
		r.Tables = append(r.Tables, *tr)
		r.add(tr.RowCounts)
	}
	if newest >= 0 {
		r.Lag.TargetLSN = formatLSN(newest)
		if src, err := parseLSN(r.Lag.SourceLSN); err == nil {
			d := int64(src) - newest
			r.Lag.TargetBehind = &d
		}
	}
	r.Lag.KafkaRecords = -1
	if c.Target.Connector != "" && len(c.Bootstrap) > 0 {
		offs, err := tgt.storedOffsets(ctx)
		if err == nil {
			r.Lag.Kafka, err = kafkaLag(ctx, c.Bootstrap, c.KafkaOpts, offs)
		}
		if err != nil {
			r.Lag.KafkaError = err.Error()
		} else {
			r.Lag.KafkaRecords = 0
			for _, l := range r.Lag.Kafka {
				r.Lag.KafkaRecords += l.Records
			}
		}
	}
	switch {
	case r.OK():
	case r.Lag.KafkaRecords > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("the connector has %d records left to apply: rows changed since then differ until it catches up; compare again once it is drained", r.Lag.KafkaRecords))
	case r.Lag.KafkaRecords < 0:
		r.Notes = append(r.Notes, "the connector's Kafka lag is unknown (give -connector and -bootstrap): differences may be changes still on their way; compare again once it is drained")
	}
	return r, nil
}

// sourcePosition takes the source's snapshot (its first query) and reads
// its WAL position and logical replication slots. It returns the
// database's name.
func sourcePosition(ctx context.Context, tx pgx.Tx, lag *ReplicaLag) (string, error) {
	var db, lsn string
	err := tx.QueryRow(ctx, `SELECT current_database(),
		(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).Scan(&db, &lsn)
	if err != nil {
		return "", fmt.Errorf("source: %w", err)
	}
	lag.SourceLSN = lsn
	rows, err := tx.Query(ctx, `SELECT slot_name::text, coalesce(plugin::text, ''), active, coalesce(confirmed_flush_lsn::text, ''),
		pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn)::int8
		FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database() ORDER BY slot_name`, lsn)
	if err != nil {
		return "", fmt.Errorf("source: read pg_replication_slots: %w", err)
	}
	for rows.Next() {
		var s SlotLag
		if err := rows.Scan(&s.Name, &s.Plugin, &s.Active, &s.Confirmed, &s.Behind); err != nil {
			return "", fmt.Errorf("source: read pg_replication_slots: %w", err)
		}
		lag.Slots = append(lag.Slots, s)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("source: read pg_replication_slots: %w", err)
	}
	return db, nil
}

// sourceTables resolves the tables to compare, with their columns and
// primary keys.
func sourceTables(ctx context.Context, tx pgx.Tx, names []string) ([]sourceTable, error) {
	var out []sourceTable
	if len(names) == 0 {
		rows, err := tx.Query(ctx, `SELECT DISTINCT schemaname::text, tablename::text FROM pg_publication_tables ORDER BY 1, 2`)
		if err != nil {
			return nil, fmt.Errorf("source: read pg_publication_tables: %w", err)
		}
		for rows.Next() {
			var st sourceTable
			if err := rows.Scan(&st.schema, &st.name); err != nil {
				return nil, fmt.Errorf("source: read pg_publication_tables: %w", err)
			}
			out = append(out, st)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("source: read pg_publication_tables: %w", err)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: tables: required (the source database has no publication to take them from)", ErrReplicaConfig)
		}
	}
	for _, n := range names {
		schema, name, ok := strings.Cut(n, ".")
		if !ok {
			schema, name = "public", n
		}
		out = append(out, sourceTable{schema: schema, name: name})
	}
	for i := range out {
		st := &out[i]
		ident := pgx.Identifier{st.schema, st.name}.Sanitize()
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ident).Scan(&exists); err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		if !exists {
			return nil, fmt.Errorf("%w: tables: the source has no table %s.%s", ErrReplicaConfig, st.schema, st.name)
		}
		cols, err := pgColumns(ctx, tx, ident)
		if err != nil {
			return nil, fmt.Errorf("source: columns of %s.%s: %w", st.schema, st.name, err)
		}
		st.cols = cols
		rows, err := tx.Query(ctx, `SELECT a.attname::text FROM pg_index i
			CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
			WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n`, ident)
		if err != nil {
			return nil, fmt.Errorf("source: primary key of %s.%s: %w", st.schema, st.name, err)
		}
		st.key, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("source: primary key of %s.%s: %w", st.schema, st.name, err)
		}
		if len(st.key) == 0 {
			return nil, fmt.Errorf("%w: tables: %s.%s has no primary key (rows are compared by key)", ErrReplicaConfig, st.schema, st.name)
		}
	}
	return out, nil
}

// pgColumns reads a table's columns in order: name, type, the base type's
// pg_type name and category (through any depth of domains over domains:
// pgcatalog.BaseType),
// and the type modifier (of the outermost domain that has one, for a
// domain). Generated columns are left out (logical replication does not
// carry them).
func pgColumns(ctx context.Context, q pgx.Tx, ident string) ([]pgColumn, error) {
	rows, err := q.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), bt.typname::text, bt.typcategory::text,
			CASE WHEN t.typtype = 'd' THEN base.typmod ELSE a.atttypmod END
		FROM pg_attribute a
		JOIN pg_type t ON t.oid = a.atttypid
		`+pgcatalog.BaseType("t", "base")+`
		JOIN pg_type bt ON bt.oid = base.oid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, ident)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgColumn, error) {
		var c pgColumn
		err := r.Scan(&c.name, &c.typ, &c.typname, &c.category, &c.typmod)
		return c, err
	})
}

// replicaTarget reads the copies.
type replicaTarget interface {
	// columns returns the table's columns by name (nil: no such table) and
	// how it is read.
	columns(ctx context.Context, table string) (map[string]targetColumn, error)
	// rows reads the table's live rows: for each, the values of exprs in
	// order, as text.
	rows(ctx context.Context, table string, cols []column, tcols map[string]targetColumn, each func([]*string)) (read string, err error)
	// position returns the newest source position applied to the table
	// (-1: unknown).
	position(ctx context.Context, table string, tcols map[string]targetColumn) (int64, error)
	// storedOffsets reads the connector's stored offsets.
	storedOffsets(ctx context.Context) ([]storedOffset, error)
	// name qualifies a table name for messages.
	name(table string) string
	close(ctx context.Context)
}

// targetColumn is a column of a target table.
type targetColumn struct {
	typ    string
	digits int // fractional-second digits of time types
}

// storedOffset is a connector's stored next_offset for a partition.
type storedOffset struct {
	topic     string
	partition int32
	next      int64
	fence     int64
}

// compareTable compares one source table with its copy and returns the
// newest source position applied to the copy (-1: unknown).
func compareTable(ctx context.Context, c ReplicaConfig, stx pgx.Tx, tgt replicaTarget, st sourceTable, srcDB string) (*TableReport, int64, error) {
	tname := expandTableFormat(c.Target.Table, srcDB, st.schema, st.name, c.TopicPrefix)
	tr := &TableReport{Source: st.schema + "." + st.name, Target: tgt.name(tname), Key: st.key}
	tcols, err := tgt.columns(ctx, tname)
	if err != nil {
		return nil, -1, err
	}
	tr.TargetExists = tcols != nil
	var cols []column
	var keyIdx []int
	for _, sc := range st.cols {
		if ignored(c.IgnoreColumns, st.schema, st.name, sc.name) && !slices.Contains(st.key, sc.name) {
			tr.Ignored = append(tr.Ignored, sc.name)
			continue
		}
		col := column{Name: sc.name, kind: pgKind(sc.typname, sc.category), SourceType: sc.typ, digits: 6}
		if col.kind == kindTimestamp || col.kind == kindTimestampTZ || col.kind == kindTime {
			col.digits = pgFracDigits(sc.typmod)
		}
		if tc, ok := tcols[sc.name]; ok {
			col.TargetType = tc.typ
			col.digits = min(col.digits, tc.digits)
		} else if tcols != nil {
			tr.TargetLacks = append(tr.TargetLacks, sc.name)
		}
		if slices.Contains(st.key, sc.name) {
			keyIdx = append(keyIdx, len(cols))
		}
		cols = append(cols, col)
		tr.Columns = append(tr.Columns, sc.name)
	}
	if tcols != nil {
		for _, k := range st.key {
			if _, ok := tcols[k]; !ok {
				return nil, -1, fmt.Errorf("target table %s lacks the key column %q of %s: it is not a copy of it", tr.Target, k, tr.Source)
			}
		}
	}
	// The key's columns in the key's order.
	ordered := make([]int, len(st.key))
	for _, i := range keyIdx {
		ordered[slices.Index(st.key, cols[i].Name)] = i
	}
	cmp := newTableCompare(cols, ordered, c.MaxExamples)
	srcQuery := pgSelect(cols, pgx.Identifier{st.schema, st.name}.Sanitize(), nil)
	if err := pgRows(ctx, stx, srcQuery, len(cols), cmp.addSource); err != nil {
		return nil, -1, fmt.Errorf("source: read %s: %w", tr.Source, err)
	}
	pos := int64(-1)
	if tcols != nil {
		tr.Read, err = tgt.rows(ctx, tname, cols, tcols, cmp.addTarget)
		if err != nil {
			return nil, -1, err
		}
		if pos, err = tgt.position(ctx, tname, tcols); err != nil {
			return nil, -1, err
		}
	}
	need := cmp.finish()
	if len(need) > 0 {
		// The examples' source rows, from the same snapshot.
		err := pgRows(ctx, stx, srcQuery, len(cols), cmp.addSourceExample)
		if err != nil {
			return nil, -1, fmt.Errorf("source: read %s: %w", tr.Source, err)
		}
	}
	tr.RowCounts = cmp.RowCounts
	tr.Examples = cmp.diffs()
	return tr, pos, nil
}

// ignored reports whether a column is in the ignore list.
func ignored(list []string, schema, table, col string) bool {
	for _, s := range list {
		if s == col || s == table+"."+col || s == schema+"."+table+"."+col {
			return true
		}
	}
	return false
}

// expandTableFormat names a source table's copy.
func expandTableFormat(format, db, schema, table, prefix string) string {
	return strings.NewReplacer("${source.db}", db, "${source.schema}", schema, "${source.table}", table,
		"${topic}", prefix+"."+schema+"."+table).Replace(format)
}

// pgSelect reads cols of a PostgreSQL table as text; present says which
// columns the table has (nil: all), the others read as NULL.
func pgSelect(cols []column, ident string, present map[string]targetColumn, where ...string) string {
	exprs := make([]string, len(cols))
	for i, c := range cols {
		if _, ok := present[c.Name]; present != nil && !ok {
			exprs[i] = "NULL::text"
			continue
		}
		exprs[i] = pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + ident
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q
}

// pgRows runs a query of n text columns and calls each with every row's
// values (nil for NULL). The slice is reused between calls.
func pgRows(ctx context.Context, tx pgx.Tx, q string, n int, each func([]*string)) error {
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]*string, n)
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != n {
			return fmt.Errorf("got %d columns, want %d", len(raw), n)
		}
		for i, b := range raw {
			if b == nil {
				vals[i] = nil
				continue
			}
			s := string(b)
			vals[i] = &s
		}
		each(vals)
	}
	return rows.Err()
}

// postgresTarget is a PostgreSQL copy, read in one snapshot.
type postgresTarget struct {
	c    ReplicaConfig
	conn *pgx.Conn
	tx   pgx.Tx
}

func openPostgresTarget(ctx context.Context, c ReplicaConfig) (*postgresTarget, error) {
	conn, tx, err := pgConnect(ctx, c.Target.URL, "target")
	if err != nil {
		return nil, err
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil { // takes the snapshot
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("target: %w", err)
	}
	return &postgresTarget{c: c, conn: conn, tx: tx}, nil
}

func (t *postgresTarget) ident(table string) string {
	return pgx.Identifier{t.c.Target.Schema, table}.Sanitize()
}

func (t *postgresTarget) name(table string) string { return t.c.Target.Schema + "." + table }

func (t *postgresTarget) columns(ctx context.Context, table string) (map[string]targetColumn, error) {
	cols, err := pgColumns(ctx, t.tx, t.ident(table))
	if err != nil {
		return nil, fmt.Errorf("target: columns of %s: %w", t.name(table), err)
	}
	if len(cols) == 0 {
		return nil, nil
	}
	out := map[string]targetColumn{}
	for _, c := range cols {
		out[c.name] = targetColumn{typ: c.typ, digits: pgFracDigits(c.typmod)}
	}
	return out, nil
}

func (t *postgresTarget) rows(ctx context.Context, table string, cols []column, tcols map[string]targetColumn, each func([]*string)) (string, error) {
	var where []string
	read := ""
	if _, ok := tcols["__deleted"]; ok {
		where = append(where, `"__deleted" IS NOT TRUE`)
		read = "without the rows marked __deleted"
	}
	if err := pgRows(ctx, t.tx, pgSelect(cols, t.ident(table), tcols, where...), len(cols), each); err != nil {
		return "", fmt.Errorf("target: read %s: %w", t.name(table), err)
	}
	return read, nil
}

func (t *postgresTarget) position(ctx context.Context, table string, tcols map[string]targetColumn) (int64, error) {
	if _, ok := tcols["__lsn"]; !ok {
		return -1, nil
	}
	var pos *int64
	if err := t.tx.QueryRow(ctx, `SELECT max("__lsn")::int8 FROM `+t.ident(table)).Scan(&pos); err != nil {
		return -1, fmt.Errorf("target: read %s: %w", t.name(table), err)
	}
	if pos == nil {
		return -1, nil
	}
	return *pos, nil
}

func (t *postgresTarget) storedOffsets(ctx context.Context) ([]storedOffset, error) {
	return pgStoredOffsets(ctx, t.tx, pgx.Identifier{t.c.Target.Schema, t.c.Target.OffsetsTable}.Sanitize(), t.c.Target.Connector)
}

func (t *postgresTarget) close(ctx context.Context) {
	_ = t.tx.Rollback(ctx)
	_ = t.conn.Close(ctx)
}

// pgStoredOffsets reads a connector's rows of a PostgreSQL offsets table
// (table quoted and qualified; none when it does not exist; next -1 when
// NULL).
func pgStoredOffsets(ctx context.Context, tx pgx.Tx, table, connector string) ([]storedOffset, error) {
	if ok, err := tableExists(ctx, tx, table); err != nil || !ok {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT topic, partition, coalesce(next_offset, -1), fence FROM `+table+` WHERE connector = $1`, connector)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedOffset, error) {
		var o storedOffset
		err := r.Scan(&o.topic, &o.partition, &o.next, &o.fence)
		return o, err
	})
}

// clickhouseTarget is a ClickHouse copy: each table read with FINAL in
// one query, deleted rows left out.
type clickhouseTarget struct {
	c    ReplicaConfig
	conn driver.Conn
	db   string
}

func openClickHouseTarget(ctx context.Context, c ReplicaConfig) (*clickhouseTarget, error) {
	opts, db, err := clickhouseOptions(c.Target)
	if err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("target: connect: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("target: connect: %w", err)
	}
	return &clickhouseTarget{c: c, conn: conn, db: db}, nil
}

func (t *clickhouseTarget) qual(table string) string { return chIdent(t.db) + "." + chIdent(table) }

func (t *clickhouseTarget) name(table string) string { return t.db + "." + table }

func (t *clickhouseTarget) columns(ctx context.Context, table string) (map[string]targetColumn, error) {
	rows, err := t.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = "+chLiteral(t.db)+" AND table = "+chLiteral(table))
	if err != nil {
		return nil, fmt.Errorf("target: columns of %s: %w", t.name(table), err)
	}
	defer rows.Close()
	var out map[string]targetColumn
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("target: columns of %s: %w", t.name(table), err)
		}
		if out == nil {
			out = map[string]targetColumn{}
		}
		out[name] = targetColumn{typ: typ, digits: chFracDigits(typ)}
	}
	return out, rows.Err()
}

// engine reads a table's engine and its ReplacingMergeTree version and
// deletion columns.
func (t *clickhouseTarget) engine(ctx context.Context, table string) (engine, version, deleted string, err error) {
	var full string
	err = t.conn.QueryRow(ctx, "SELECT engine, engine_full FROM system.tables WHERE database = "+chLiteral(t.db)+" AND name = "+chLiteral(table)).Scan(&engine, &full)
	if err != nil {
		return "", "", "", fmt.Errorf("target: engine of %s: %w", t.name(table), err)
	}
	version, deleted = replacingColumns(full)
	return engine, version, deleted, nil
}

func (t *clickhouseTarget) rows(ctx context.Context, table string, cols []column, tcols map[string]targetColumn, each func([]*string)) (string, error) {
	engine, _, deleted, err := t.engine(ctx, table)
	if err != nil {
		return "", err
	}
	if deleted == "" {
		deleted = t.c.DeletedColumn
	}
	from := t.qual(table)
	read := "without FINAL (engine " + engine + ")"
	if strings.Contains(engine, "Replacing") {
		from = "(SELECT * FROM " + from + " FINAL)"
		read = "with FINAL"
	}
	var where []string
	for _, d := range []string{deleted, "__deleted"} {
		if _, ok := tcols[d]; ok && !slices.Contains(where, chIdent(d)+" = 0") {
			where = append(where, chIdent(d)+" = 0")
			read += ", without the rows marked " + d
		}
	}
	var exprs []string
	var idx []int
	for i, c := range cols {
		tc, ok := tcols[c.Name]
		if !ok {
			continue
		}
		// A value and its NULL flag (clickhouse-go scans Nullable results
		// of every server alike this way).
		v := "assumeNotNull(" + chIdent(c.Name) + ")"
		switch base := chBaseType(tc.typ); {
		case strings.HasPrefix(base, "DateTime"):
			v = "toString(" + v + ", 'UTC')"
		case c.kind == kindBytes && (base == "String" || strings.HasPrefix(base, "FixedString")):
			v = "hex(" + v + ")"
		default:
			v = "toString(" + v + ")"
		}
		exprs = append(exprs, v, "toUInt8(isNull("+chIdent(c.Name)+"))")
		idx = append(idx, i)
	}
	q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := t.conn.Query(ctx, q)
	if err != nil {
		return "", fmt.Errorf("target: read %s: %w", t.name(table), err)
	}
	defer rows.Close()
	got := make([]string, len(idx))
	nulls := make([]uint8, len(idx))
	dest := make([]any, 0, 2*len(idx))
	for i := range got {
		dest = append(dest, &got[i], &nulls[i])
	}
	vals := make([]*string, len(cols))
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return "", fmt.Errorf("target: read %s: %w", t.name(table), err)
		}
		clear(vals)
		for j, i := range idx {
			if nulls[j] == 0 {
				v := got[j]
				vals[i] = &v
			}
		}
		each(vals)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("target: read %s: %w", t.name(table), err)
	}
	return read, nil
}

func (t *clickhouseTarget) position(ctx context.Context, table string, tcols map[string]targetColumn) (int64, error) {
	_, version, _, err := t.engine(ctx, table)
	if err != nil || version == "" {
		return -1, err
	}
	if _, ok := tcols[version]; !ok {
		return -1, nil
	}
	var pos int64
	var rows uint64
	if err := t.conn.QueryRow(ctx, "SELECT toInt64(max("+chIdent(version)+")), count() FROM "+t.qual(table)).Scan(&pos, &rows); err != nil {
		return -1, fmt.Errorf("target: read %s: %w", t.name(table), err)
	}
	if rows == 0 {
		return -1, nil
	}
	return pos, nil
}

func (t *clickhouseTarget) storedOffsets(ctx context.Context) ([]storedOffset, error) {
	return chStoredOffsets(ctx, t.conn, t.db, t.c.Target.OffsetsTable, t.c.Target.Connector)
}

func (t *clickhouseTarget) close(context.Context) { _ = t.conn.Close() }

// replacingColumns returns the version and deletion columns named by a
// ReplacingMergeTree engine (Replicated or not) in system.tables'
// engine_full: ReplacingMergeTree(ver[, is_deleted]) or
// ReplicatedReplacingMergeTree('path', 'replica'[, ver[, is_deleted]]).
func replacingColumns(engineFull string) (version, deleted string) {
	i := strings.Index(engineFull, "ReplacingMergeTree(")
	if i < 0 {
		return "", ""
	}
	rest := engineFull[i+len("ReplacingMergeTree("):]
	var args []string
	depth, quoted, start := 0, false, 0
	for j := 0; j < len(rest); j++ {
		switch ch := rest[j]; {
		case quoted:
			if ch == '\\' {
				j++
			} else if ch == '\'' {
				quoted = false
			}
		case ch == '\'':
			quoted = true
		case ch == '(':
			depth++
		case ch == ')' && depth > 0:
			depth--
		case ch == ')' || (ch == ',' && depth == 0):
			args = append(args, strings.TrimSpace(rest[start:j]))
			start = j + 1
			if ch == ')' {
				j = len(rest)
			}
		}
	}
	var names []string
	for _, a := range args {
		if a == "" || strings.HasPrefix(a, "'") {
			continue // the ZooKeeper path and replica name
		}
		names = append(names, strings.Trim(a, "`\""))
	}
	if len(names) > 0 {
		version = names[0]
	}
	if len(names) > 1 {
		deleted = names[1]
	}
	return version, deleted
}

// kafkaLag compares stored offsets with the last stable offsets.
func kafkaLag(ctx context.Context, bootstrap []string, opts []kgo.Opt, offs []storedOffset) ([]TopicLag, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var topics []string
	for _, o := range offs {
		if !slices.Contains(topics, o.topic) {
			topics = append(topics, o.topic)
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	ends, err := stableEnds(ctx, bootstrap, opts, topics)
	if err != nil {
		return nil, err
	}
	by := map[string]*TopicLag{}
	var out []TopicLag
	for _, t := range topics {
		out = append(out, TopicLag{Topic: t})
	}
	for i := range out {
		by[out[i].Topic] = &out[i]
	}
	for _, o := range offs {
		end, ok := ends[tp{o.topic, o.partition}]
		if !ok {
			continue
		}
		l := by[o.topic]
		l.Partitions++
		next := max(o.next, 0)
		if end > next {
			l.Records += end - next
		}
	}
	return out, nil
}

// describeURL names a database for the report: host:port/path, no
// credentials.
func describeURL(raw string) string {
	u, err := url.Parse(strings.TrimPrefix(raw, "jdbc:"))
	if err != nil || u.Host == "" {
		return "(database)"
	}
	return u.Host + u.Path
}

// parseLSN parses PostgreSQL's "X/Y" LSN text.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("bad LSN %q", s)
	}
	var h, l uint64
	if _, err := fmt.Sscanf(hi+" "+lo, "%x %x", &h, &l); err != nil {
		return 0, fmt.Errorf("bad LSN %q", s)
	}
	return h<<32 | l, nil
}

// formatLSN writes an LSN as PostgreSQL does.
func formatLSN(n int64) string { return fmt.Sprintf("%X/%X", uint64(n)>>32, uint64(n)&0xffffffff) }
