package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/internal/jsonscan"
)

// Kafka coordinate columns (pk.mode=kafka style). When a table has them,
// every row carries its record's topic, partition and offset, and a redo
// can check which blocks are already present.
const (
	ColTopic     = "__connect_topic"
	ColPartition = "__connect_partition"
	ColOffset    = "__connect_offset"
)

// column is one column of a target table.
type column struct {
	Name string
	Type *chType
	// HasDefault: DEFAULT expression; the column is only written when a
	// record sets it (rows are grouped by the set of such columns).
	HasDefault bool
	// Insertable is false for MATERIALIZED and ALIAS columns.
	Insertable bool
}

// table is a target table as read from system.tables and system.columns.
type table struct {
	DB, Name string
	Ident    string // `db`.`name`
	Columns  []*column
	byName   map[string]*column
	Engine   Engine
}

func (t *table) column(name string) *column { return t.byName[name] }

// hasCoordinates reports whether the table has the three Kafka coordinate
// columns.
func (t *table) hasCoordinates() bool {
	return t.column(ColTopic) != nil && t.column(ColPartition) != nil && t.column(ColOffset) != nil
}

// quoteIdent quotes a ClickHouse identifier with backquotes.
func quoteIdent(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(s) + "`"
}

func tableIdent(db, name string) string { return quoteIdent(db) + "." + quoteIdent(name) }

// loadTable reads a table's engine and columns; it returns an error
// wrapping ErrTableNotFound when the table does not exist.
func loadTable(ctx context.Context, q querier, f Features, db, name string) (*table, error) {
	var engine, full string
	err := q.QueryRow(ctx, "SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", db, name).Scan(&engine, &full)
	if err != nil {
		if isNoRows(err) {
			return nil, fmt.Errorf("clickhouse: table %s: %w", tableIdent(db, name), ErrTableNotFound)
		}
		return nil, fmt.Errorf("clickhouse: read table %s: %w", tableIdent(db, name), err)
	}
	t := &table{DB: db, Name: name, Ident: tableIdent(db, name), byName: map[string]*column{}, Engine: parseEngine(engine, full, f)}
	if t.Engine.Replicated {
		var zk string
		if err := q.QueryRow(ctx, "SELECT zookeeper_path FROM system.replicas WHERE database = ? AND table = ?", db, name).Scan(&zk); err == nil {
			t.Engine.ZooKeeperPath = zk
		}
	}
	rows, err := q.Query(ctx, "SELECT name, type, default_kind FROM system.columns WHERE database = ? AND table = ?", db, name)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read columns of %s: %w", t.Ident, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, typ, dk string
		if err := rows.Scan(&n, &typ, &dk); err != nil {
			return nil, err
		}
		ct, err := parseType(typ)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: table %s column %s: %w", t.Ident, n, err)
		}
		c := &column{Name: n, Type: ct, HasDefault: dk == "DEFAULT", Insertable: dk != "MATERIALIZED" && dk != "ALIAS"}
		t.Columns = append(t.Columns, c)
		t.byName[n] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range t.Columns {
		if c.Insertable && !c.HasDefault && !c.Type.supported() {
			return nil, fmt.Errorf("clickhouse: table %s column %s %s: %w (give it a DEFAULT or change its type)", t.Ident, c.Name, c.Type.Name, ErrUnsupportedColumn)
		}
	}
	return t, nil
}

func isNoRows(err error) bool {
	return err != nil && (errors.Is(err, errNoRows) || strings.Contains(err.Error(), "no rows in result set"))
}

// mapping is the table-mapping part of the configuration.
type mapping struct {
	VersionColumn string   // filled with the record's offset
	DeletedColumn string   // 1 for tombstones when DeleteEnabled
	DeleteEnabled bool     // tombstones become deletion rows
	KeyFields     []string // key columns of a deletion row (a primitive key fills the first)
}

// block is one INSERT: rows of one column set, in offset order. Its
// content is a pure function of the records and the table, so a redo sends
// the same bytes (invariant 6).
type block struct {
	Cols    []*column
	Rows    [][]any
	Offsets []int64 // the record offset of each row
}

// rowGroup collects rows with the same column set.
type rowGroup struct {
	shape string
	cols  []*column
	rows  [][]any
	offs  []int64
}

// mapRecords converts records (one partition, offset order) into rows of
// t. Bad records come back as RecordErrors in offset order; err is for
// problems that are not a record's fault.
func mapRecords(t *table, m mapping, recs []*kgo.Record) (groups []*rowGroup, bad []*RecordError, err error) {
	byShape := map[string]*rowGroup{}
	sc := newSlots(t)
	for _, r := range recs {
		cols, vals, shape, rerr := mapRecord(t, m, r, sc)
		if rerr != nil {
			if errors.Is(rerr, ErrUnsupportedColumn) {
				return nil, nil, fmt.Errorf("clickhouse: table %s: %w", t.Ident, rerr)
			}
			bad = append(bad, recordError(r, rerr))
			continue
		}
		g := byShape[shape]
		if g == nil {
			g = &rowGroup{shape: shape, cols: cols}
			byShape[shape] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, vals)
		g.offs = append(g.offs, r.Offset)
	}
	return groups, bad, nil
}

func recordError(r *kgo.Record, err error) *RecordError {
	re := &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
	var fe *fieldError
	if errors.As(err, &fe) {
		re.Field, re.Err = fe.field, fe.err
	}
	return re
}

func jsonInt(n int64) json.RawMessage { return json.RawMessage(strconv.FormatInt(n, 10)) }

func jsonString(s string) json.RawMessage { b, _ := json.Marshal(s); return b }

// slots hold a record's fields by column position, reused from one record
// to the next.
type slots struct {
	pos     map[string]int // insertable column name → position in t.Columns
	raws    []json.RawMessage
	members []jsonscan.Member
	noScan  bool // tests: decode every record the slow way
}

func newSlots(t *table) *slots {
	sc := &slots{pos: make(map[string]int, len(t.Columns)), raws: make([]json.RawMessage, len(t.Columns))}
	for i, c := range t.Columns {
		if c.Insertable {
			sc.pos[c.Name] = i
		}
	}
	return sc
}

// scan fills sc.raws from the record value b when it is a plain JSON
// object whose every field names an insertable column, and reports
// whether it did. Everything else (tombstones, envelopes, unknown or
// escaped names, invalid text) is left to decodeValue, which decides it
// the same way and words the error.
func (sc *slots) scan(b []byte) bool {
	if sc.noScan || len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	var ok bool
	if sc.members, ok = jsonscan.Object(b, sc.members[:0]); !ok {
		return false
	}
	if len(sc.members) == 2 && isEnvelopeKey(sc.members[0].Key) && isEnvelopeKey(sc.members[1].Key) {
		return false
	}
	for _, m := range sc.members {
		i, ok := sc.pos[string(m.Key)]
		if !ok || m.Escaped {
			return false
		}
		sc.raws[i] = m.Value // the last of duplicate keys wins, as in a map
	}
	return true
}

func isEnvelopeKey(k []byte) bool { return string(k) == "schema" || string(k) == "payload" }

func mapRecord(t *table, m mapping, r *kgo.Record, sc *slots) (cols []*column, vals []any, shape string, err error) {
	clear(sc.raws)
	deleted := false
	if !sc.scan(r.Value) {
		if deleted, err = slowFields(t, m, r, sc); err != nil {
			return nil, nil, "", err
		}
	}
	var sb strings.Builder
	cols = make([]*column, 0, len(t.Columns))
	vals = make([]any, 0, len(t.Columns))
	for i, c := range t.Columns {
		if !c.Insertable {
			continue
		}
		var raw json.RawMessage
		set := true
		switch c.Name {
		case ColTopic:
			raw = jsonString(r.Topic)
		case ColPartition:
			raw = jsonInt(int64(r.Partition))
		case ColOffset, m.VersionColumn:
			raw = jsonInt(r.Offset)
		case m.DeletedColumn:
			if m.DeleteEnabled {
				raw = json.RawMessage("0")
				if deleted {
					raw = json.RawMessage("1")
				}
				break
			}
			raw, set = sc.raws[i], sc.raws[i] != nil
		default:
			raw, set = sc.raws[i], sc.raws[i] != nil
		}
		if !set {
			if c.HasDefault {
				continue
			}
			cols = append(cols, c)
			vals = append(vals, zero(c.Type))
			continue
		}
		if !c.Type.supported() {
			return nil, nil, "", fmt.Errorf("column %s %s: %w", c.Name, c.Type.Name, ErrUnsupportedColumn)
		}
		v, err := coerce(c.Type, raw)
		if err != nil {
			return nil, nil, "", &fieldError{c.Name, err}
		}
		cols = append(cols, c)
		vals = append(vals, v)
		if c.HasDefault {
			sb.WriteString(strconv.Itoa(i))
			sb.WriteByte(',')
		}
	}
	return cols, vals, sb.String(), nil
}

// slowFields decodes a record the scanner left alone (a tombstone becomes
// its key's fields) into sc.raws, refusing fields without an insertable
// column; deleted reports a tombstone.
func slowFields(t *table, m mapping, r *kgo.Record, sc *slots) (deleted bool, err error) {
	value, err := decodeValue(r.Value)
	if err != nil {
		return false, err
	}
	fields := value.Fields
	if value.Null {
		if !m.DeleteEnabled {
			return false, ErrTombstone
		}
		key, err := decodeDocument(r.Key, true)
		if err != nil {
			return false, err
		}
		fields = map[string]json.RawMessage{}
		switch {
		case key.Fields != nil:
			for _, k := range m.KeyFields {
				v, ok := key.Fields[k]
				if !ok {
					return false, &fieldError{k, fmt.Errorf("%w: the key has no field %q", ErrMissingKey, k)}
				}
				fields[k] = v
			}
			if len(m.KeyFields) == 0 {
				fields = key.Fields
			}
		case key.Scalar != nil && len(m.KeyFields) > 0:
			fields[m.KeyFields[0]] = key.Scalar
		default:
			return false, fmt.Errorf("%w: a tombstone needs a key (an object, or a primitive with pk.fields)", ErrMissingKey)
		}
		deleted = true
	}
	for name := range fields {
		if c := t.column(name); c == nil || !c.Insertable {
			var unknown []string
			for n := range fields {
				if c := t.column(n); c == nil || !c.Insertable {
					unknown = append(unknown, n)
				}
			}
			sort.Strings(unknown)
			return false, &fieldError{unknown[0], fmt.Errorf("%w: table %s has no insertable column %q (%d unknown field(s))", ErrUnknownField, t.Ident, truncate(unknown[0], 63), len(unknown))}
		}
	}
	for name, raw := range fields {
		sc.raws[sc.pos[name]] = raw
	}
	return deleted, nil
}

// blocks cuts groups into blocks of at most blockRows rows, in group order.
func blocks(groups []*rowGroup, blockRows int) []*block {
	var out []*block
	for _, g := range groups {
		for i := 0; i < len(g.rows); i += blockRows {
			j := min(i+blockRows, len(g.rows))
			out = append(out, &block{Cols: g.cols, Rows: g.rows[i:j], Offsets: g.offs[i:j]})
		}
	}
	return out
}

// insertSQL is the INSERT of a block: always with its column list
// (ClickHouse 18.16 needs it).
func insertSQL(ident string, cols []*column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = quoteIdent(c.Name)
	}
	return "INSERT INTO " + ident + " (" + strings.Join(names, ", ") + ")"
}

// inferType is the column type auto.create gives a JSON value.
func inferType(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "Nullable(String)"
	}
	switch raw[0] {
	case '"', '{', '[':
		return "String"
	case 't', 'f':
		return "UInt8"
	case 'n':
		return "Nullable(String)"
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return "Int64"
	}
	return "Float64"
}

// createTableSQL is auto.create's DDL for the first record of a topic: one
// column per field of the value (sorted by name), the coordinate columns
// when coords, the version and deleted columns when set, ORDER BY orderBy
// (or tuple()), and engine (a complete ENGINE clause body with its
// arguments, such as "MergeTree" or "ReplicatedMergeTree('/p', '{replica}')").
func createTableSQL(ident string, first *kgo.Record, m mapping, coords bool, orderBy []string, engine, settings string) (string, error) {
	value, err := decodeValue(first.Value)
	if err != nil {
		return "", err
	}
	if value.Null {
		return "", fmt.Errorf("auto.create: the first record is a tombstone; cannot infer columns")
	}
	type col struct{ name, typ string }
	var cols []col
	seen := map[string]bool{}
	if coords {
		cols = append(cols, col{ColTopic, "String"}, col{ColPartition, "Int32"}, col{ColOffset, "Int64"})
		seen[ColTopic], seen[ColPartition], seen[ColOffset] = true, true, true
	}
	names := make([]string, 0, len(value.Fields))
	for k := range value.Fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if seen[k] {
			continue
		}
		typ := inferType(value.Fields[k])
		for _, key := range orderBy {
			if key == k {
				typ = strings.TrimSuffix(strings.TrimPrefix(typ, "Nullable("), ")")
			}
		}
		cols = append(cols, col{k, typ})
		seen[k] = true
	}
	if m.VersionColumn != "" && !seen[m.VersionColumn] {
		cols = append(cols, col{m.VersionColumn, "UInt64"})
		seen[m.VersionColumn] = true
	}
	if m.DeleteEnabled && m.DeletedColumn != "" && !seen[m.DeletedColumn] {
		cols = append(cols, col{m.DeletedColumn, "UInt8"})
	}
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + ident + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c.name) + " " + c.typ)
	}
	b.WriteString(") ENGINE = " + engine + " ORDER BY ")
	switch len(orderBy) {
	case 0:
		b.WriteString("tuple()")
	default:
		q := make([]string, len(orderBy))
		for i, k := range orderBy {
			q[i] = quoteIdent(k)
		}
		b.WriteString("(" + strings.Join(q, ", ") + ")")
	}
	if settings != "" {
		b.WriteString(" SETTINGS " + settings)
	}
	return b.String(), nil
}
