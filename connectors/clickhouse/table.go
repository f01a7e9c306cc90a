package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
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
	pos      map[string]int // insertable column name → position in Columns
	Engine   Engine
}

// add appends a column and indexes it.
func (t *table) add(c *column) {
	if t.byName == nil {
		t.byName, t.pos = map[string]*column{}, map[string]int{}
	}
	if c.Insertable {
		t.pos[c.Name] = len(t.Columns)
	}
	t.Columns = append(t.Columns, c)
	t.byName[c.Name] = c
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
	t := &table{DB: db, Name: name, Ident: tableIdent(db, name), Engine: parseEngine(engine, full, f)}
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
		t.add(&column{Name: n, Type: ct, HasDefault: dk == "DEFAULT", Insertable: dk != "MATERIALIZED" && dk != "ALIAS"})
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

// mapRecords converts records (one partition, offset order) through the
// pipeline into rows of t. Bad records come back as record errors in
// offset order; err is for problems that are not a record's fault (an
// unsupported column, an unavailable schema registry).
func mapRecords(ctx context.Context, pipe *convert.Pipeline, t *table, m mapping, recs []*kgo.Record) (groups []*rowGroup, bad []*record.Error, err error) {
	byShape := map[string]*rowGroup{}
	sc := newSlots(t)
	for _, r := range recs {
		cols, vals, shape, rerr := mapRecord(ctx, pipe, t, m, r, sc)
		if rerr == nil && cols == nil {
			continue // dropped by a transform
		}
		if rerr != nil {
			if errors.Is(rerr, ErrUnsupportedColumn) {
				return nil, nil, fmt.Errorf("clickhouse: table %s: %w", t.Ident, rerr)
			}
			if !record.IsCause(rerr) {
				return nil, nil, rerr
			}
			bad = append(bad, record.Locate(r, rerr))
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

// slots hold a record's fields by column position, reused from one record
// to the next.
type slots struct {
	conv    convert.Scratch
	vals    []record.Value
	set     []bool
	unknown []string
}

func newSlots(t *table) *slots {
	return &slots{vals: make([]record.Value, len(t.Columns)), set: make([]bool, len(t.Columns))}
}

// fill maps the fields of a struct onto the insertable columns of t, the
// last of duplicate names winning; only names in keep, when set, are
// taken. A field without an insertable column is an error naming the first
// such field in sorted order.
func (sc *slots) fill(t *table, v record.Value, keep []string) error {
	sc.unknown = sc.unknown[:0]
	err := v.Range(func(name []byte, fv record.Value) error {
		if len(keep) > 0 && !slices.Contains(keep, string(name)) {
			return nil
		}
		i, ok := t.pos[string(name)]
		if !ok {
			sc.unknown = append(sc.unknown, string(name))
			return nil
		}
		sc.vals[i], sc.set[i] = fv, true
		return nil
	})
	if err != nil {
		return err
	}
	if len(sc.unknown) == 0 {
		return nil
	}
	slices.Sort(sc.unknown)
	first := sc.unknown[0]
	return record.FieldErrorf(first, record.ErrUnknownField, "table %s has no insertable column %q (%d unknown field(s))",
		t.Ident, record.Truncate(first, 63), len(slices.Compact(sc.unknown)))
}

// fillKey maps a tombstone's key onto the key columns: a struct key's
// fields (those of KeyFields when set), or a primitive key into the first
// of KeyFields.
func (sc *slots) fillKey(t *table, m mapping, key record.Value) error {
	switch {
	case key.Kind() == record.KindStruct:
		for _, k := range m.KeyFields {
			if _, ok := key.Get(k); !ok {
				return record.FieldErrorf(k, record.ErrMissingKey, "the key has no field %q", k)
			}
		}
		return sc.fill(t, key, m.KeyFields)
	case !key.IsNull() && len(m.KeyFields) > 0:
		i, ok := t.pos[m.KeyFields[0]]
		if !ok {
			return record.FieldErrorf(m.KeyFields[0], record.ErrUnknownField, "table %s has no insertable column %q", t.Ident, m.KeyFields[0])
		}
		sc.vals[i], sc.set[i] = key, true
		return nil
	}
	return record.Errorf(record.ErrMissingKey, "a tombstone needs a key (a struct, or a primitive with pk.fields)")
}

func mapRecord(ctx context.Context, pipe *convert.Pipeline, t *table, m mapping, r *kgo.Record, sc *slots) (cols []*column, vals []any, shape string, err error) {
	// Keys are converted (and transformed) with the value when a tombstone
	// may need them.
	rec, err := pipe.Convert(ctx, r, &sc.conv, m.DeleteEnabled)
	if err != nil || rec == nil {
		return nil, nil, "", err // rec == nil: a transform dropped r
	}
	clear(sc.set)
	deleted := false
	switch value := rec.Value; {
	case value.IsNull():
		if !m.DeleteEnabled {
			return nil, nil, "", record.ErrTombstone
		}
		if err := sc.fillKey(t, m, rec.Key); err != nil {
			return nil, nil, "", err
		}
		deleted = true
	case value.Kind() != record.KindStruct:
		return nil, nil, "", record.Errorf(record.ErrDecode, "value must be a struct (a JSON object), got %s", value.Describe())
	default:
		if err := sc.fill(t, value, nil); err != nil {
			return nil, nil, "", err
		}
	}
	var sb strings.Builder
	var fixed record.Value // a column filled from the record's coordinates
	cols = make([]*column, 0, len(t.Columns))
	vals = make([]any, 0, len(t.Columns))
	for i, c := range t.Columns {
		if !c.Insertable {
			continue
		}
		var v *record.Value
		switch c.Name {
		case ColTopic:
			fixed, v = record.String(r.Topic), &fixed
		case ColPartition:
			fixed, v = record.Int(int64(r.Partition)), &fixed
		case ColOffset, m.VersionColumn:
			fixed, v = record.Int(r.Offset), &fixed
		case m.DeletedColumn:
			if m.DeleteEnabled {
				fixed, v = record.Int(0), &fixed
				if deleted {
					fixed = record.Int(1)
				}
				break
			}
			fallthrough
		default:
			if sc.set[i] {
				v = &sc.vals[i]
			}
		}
		if v == nil {
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
		x, err := coerce(c.Type, v)
		if err != nil {
			return nil, nil, "", record.InField(c.Name, err)
		}
		cols = append(cols, c)
		vals = append(vals, x)
		if c.HasDefault {
			sb.WriteString(strconv.Itoa(i))
			sb.WriteByte(',')
		}
	}
	return cols, vals, sb.String(), nil
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

// inferType is the column type auto.create gives a value: from its schema
// when it has one, else from the schemaless JSON value. modern is true on
// servers with Bool, Date32, DateTime64 and Map (ClickHouse 21.12+).
func inferType(v record.Value, modern bool) string {
	if s := v.Schema(); s != nil {
		return inferFromSchema(s, modern, 0)
	}
	switch v.Kind() {
	case record.KindNull:
		return "Nullable(String)"
	case record.KindBool:
		return "UInt8"
	case record.KindNumber, record.KindInt:
		if _, err := v.AsInt64(); err == nil {
			if text, _ := v.AsText(); !strings.ContainsAny(text, ".eE") {
				return "Int64"
			}
		}
		return "Float64"
	case record.KindFloat:
		return "Float64"
	}
	return "String"
}

// inferFromSchema maps a Kafka Connect schema to a ClickHouse type.
func inferFromSchema(s *record.Schema, modern bool, depth int) string {
	t := "String"
	switch s.Name {
	case record.LogicalDecimal:
		scale, _ := strconv.Atoi(s.Params[record.DecimalScaleParam])
		t = fmt.Sprintf("Decimal(38, %d)", min(max(scale, 0), 38))
	case record.LogicalDate, record.DebeziumDate:
		t = "Date"
		if modern {
			t = "Date32"
		}
	case record.LogicalTimestamp, record.DebeziumTimestamp, record.DebeziumMicroTimestamp, record.DebeziumNanoTimestamp:
		t = "DateTime"
		if modern {
			t = "DateTime64(6, 'UTC')"
		}
	case record.LogicalTime, record.DebeziumTime, record.DebeziumMicroTime, record.DebeziumNanoTime:
		t = "String"
	default:
		switch s.Type {
		case record.TypeInt8, record.TypeInt16, record.TypeInt32, record.TypeInt64:
			t = "Int" + strings.TrimPrefix(s.Type.String(), "int")
		case record.TypeFloat32:
			t = "Float32"
		case record.TypeFloat64:
			t = "Float64"
		case record.TypeBoolean:
			t = "UInt8"
			if modern {
				t = "Bool"
			}
		case record.TypeArray:
			if s.Elem != nil && depth < 8 {
				t = "Array(" + inferFromSchema(s.Elem, modern, depth+1) + ")"
			}
		case record.TypeMap:
			if modern && s.Key != nil && s.Key.Type == record.TypeString && s.Elem != nil && depth < 8 {
				t = "Map(String, " + inferFromSchema(s.Elem, modern, depth+1) + ")"
			}
		}
	}
	if s.Optional && !strings.HasPrefix(t, "Array(") && !strings.HasPrefix(t, "Map(") {
		t = "Nullable(" + t + ")"
	}
	return t
}

// createTableSQL is auto.create's DDL for the first record of a topic: one
// column per field of the value (sorted by name), the coordinate columns
// when coords, the version and deleted columns when set, ORDER BY orderBy
// (or tuple()), and engine (a complete ENGINE clause body with its
// arguments, such as "MergeTree" or "ReplicatedMergeTree('/p', '{replica}')").
func createTableSQL(ident string, value record.Value, modern bool, m mapping, coords bool, orderBy []string, engine, settings string) (string, error) {
	if value.IsNull() {
		return "", fmt.Errorf("auto.create: the first record is a tombstone; cannot infer columns")
	}
	if value.Kind() != record.KindStruct {
		return "", fmt.Errorf("auto.create: the first record's value is %s, not a struct", value.Describe())
	}
	fields := map[string]record.Value{}
	if err := value.Range(func(name []byte, fv record.Value) error { fields[string(name)] = fv; return nil }); err != nil {
		return "", err
	}
	type col struct{ name, typ string }
	var cols []col
	seen := map[string]bool{}
	if coords {
		cols = append(cols, col{ColTopic, "String"}, col{ColPartition, "Int32"}, col{ColOffset, "Int64"})
		seen[ColTopic], seen[ColPartition], seen[ColOffset] = true, true, true
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if seen[k] {
			continue
		}
		typ := inferType(fields[k], modern)
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
