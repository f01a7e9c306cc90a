package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/internal/box"
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
			return nil, fmt.Errorf("clickhouse: table %s: %w (create it, or set auto.create=true to have txsink create it from the first record)", tableIdent(db, name), ErrTableNotFound)
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
	VersionColumn string   // filled with the record's offset, or a change event's source position
	DeletedColumn string   // 1 for deletion rows (tombstones when DeleteEnabled, delete events)
	DeleteEnabled bool     // tombstones become deletion rows
	KeyFields     []string // key columns of a deletion row (a primitive key fills the first)
	Format        string   // table.name.format
	AutoEvolve    bool     // add columns for new fields
	Modern        bool     // the server has Bool, Date32, DateTime64 and Map (auto.evolve's types)
	// Create returns auto.create's DDL for a missing table from the
	// first record that writes it; nil: auto.create is off.
	Create func(name string, rec *record.Record) (string, error)
}

// block is one INSERT: rows of one column set of one table, in offset
// order. Its content is a pure function of the records and the table, so
// a redo sends the same bytes (invariant 6).
type block struct {
	T       *table
	Cols    []*column
	Rows    [][]any
	Offsets []int64 // the record offset of each row
	// Spans are the runs of rows of one partition, in order, in a block
	// of a round of several batches; nil in a batch's own block.
	Spans []span
}

// rowGroup collects rows of one table with the same column set.
type rowGroup struct {
	t     *table
	shape string
	cols  []*column
	rows  [][]any
	offs  []int64
	spans []span // nil in a batch's own group
}

// span is a run of n rows of one partition.
type span struct {
	topic     string
	partition int32
	n         int
}

// cutSpans returns the spans of rows i..j-1 of spans.
func cutSpans(spans []span, i, j int) []span {
	var out []span
	at := 0
	for _, sp := range spans {
		lo, hi := max(at, i), min(at+sp.n, j)
		if lo < hi {
			out = append(out, span{topic: sp.topic, partition: sp.partition, n: hi - lo})
		}
		at += sp.n
	}
	return out
}

// row is one row a record maps to.
type row struct {
	t     *table
	cols  []*column
	vals  []any
	shape string // the DEFAULT columns it sets: rows with the same shape share a block
}

// snapshot is the tables a batch's rows are planned against: the
// descriptions read in this build, and those the sink's cache held when
// the build first needed them. Planning reads it and takes what it lacks
// from from, never from the server; the build adds what a plan asks for
// (tables read, created or altered) between passes.
type snapshot struct {
	tables map[string]*snapTable
	// from returns a description the snapshot lacks (nil: none) and
	// whether it is fresh (read in this build).
	from func(name string) (t *table, fresh bool)
}

// snapTable is one table of a snapshot.
type snapTable struct {
	t       *table // nil: the table does not exist (auto.create; known fresh)
	fresh   bool   // read from the server in this build
	evolved bool   // altered by auto.evolve in this build
	created bool   // created by auto.create in this build
}

// fixedTable is a snapshot in which every name is t, as read in this
// build (tests, and a table known in advance).
func fixedTable(t *table) *snapshot {
	return &snapshot{tables: map[string]*snapTable{}, from: func(string) (*table, bool) { return t, true }}
}

func (s *snapshot) lookup(name string) *snapTable {
	if st := s.tables[name]; st != nil {
		return st
	}
	if s.from == nil {
		return nil
	}
	t, fresh := s.from(name)
	if t == nil {
		return nil
	}
	st := &snapTable{t: t, fresh: fresh}
	s.tables[name] = st
	return st
}

// set makes t (nil: no such table) name's description, read in this build.
func (s *snapshot) set(name string, t *table) *snapTable {
	st := s.tables[name]
	if st == nil {
		st = &snapTable{}
		s.tables[name] = st
	}
	st.t, st.fresh = t, true
	return st
}

// rowPlan is a batch's rows, or what the build must do before they can
// be planned.
type rowPlan struct {
	groups []*rowGroup     // in the order their first row appeared
	bad    []*record.Error // records the mapping refused, in offset order
	// reads are tables to read from the server: missing from the
	// snapshot, or taken from the cache while a record has a field they
	// have no column for.
	reads []string
	// creates are auto.create's statements by table, evolves
	// auto.evolve's columns by table, in order of need.
	creates []tableCreate
	evolves []*tableEvolve
	waiting map[string]bool // tables whose records are planned again once read or changed
}

type tableCreate struct{ name, ddl string }

type tableEvolve struct {
	t    *table
	cols [][2]string // name, type (with its DEFAULT)
}

// complete reports whether p's rows can be inserted as they are.
func (p *rowPlan) complete() bool {
	return len(p.reads) == 0 && len(p.creates) == 0 && len(p.evolves) == 0
}

func (p *rowPlan) wait(name string) {
	if p.waiting == nil {
		p.waiting = map[string]bool{}
	}
	p.waiting[name] = true
}

// mapRecords plans converted records (one partition, offset order; the
// runtime's pipeline converted them) into rows of their tables
// (table.name.format) against snap, without I/O on the server. Groups
// come in the order their first row appeared. Records the mapping
// refuses come back as record errors in offset order, for the runtime's
// tolerance operator; err is for problems that are not a record's fault
// (an unsupported column) and for records wrapping record.ErrIncompatible,
// which are never dead-lettered. A plan that is not complete lists the
// tables to read, create or alter before planning again.
func mapRecords(ctx context.Context, m mapping, snap *snapshot, c *connectors.Converted) (*rowPlan, error) {
	// Rows group by table name and column list, never by the *table a
	// lookup returned: a redo must cut the same blocks whatever the
	// cache held.
	p := &rowPlan{}
	byShape := map[groupKey]*rowGroup{}
	var last *rowGroup // the group of the previous row
	slotsOf := map[*table]*slots{}
	mapErr := false // Each's error is the mapping's
	err := c.Each(ctx, func(rec *record.Record) error {
		r := rec.Raw
		rows, rerr := mapOne(m, snap, rec, slotsOf, p)
		if rerr != nil {
			if errors.Is(rerr, ErrUnsupportedColumn) || !record.IsCause(rerr) {
				mapErr = true
				return rerr
			}
			re := record.Locate(r, rerr)
			if errors.Is(re, record.ErrIncompatible) {
				mapErr = true
				return re
			}
			p.bad = append(p.bad, re)
			return nil
		}
		for _, rw := range rows {
			t := rw.t
			g := last
			if !sameRow(g, rw) {
				k := groupKey{t.Name, rw.shape, colNames(rw.cols)}
				g = byShape[k]
				if g == nil {
					g = &rowGroup{t: t, shape: rw.shape, cols: rw.cols}
					byShape[k] = g
					p.groups = append(p.groups, g)
				}
				last = g
			}
			g.rows = append(g.rows, rw.vals)
			g.offs = append(g.offs, r.Offset)
		}
		return nil
	})
	var re *record.Error
	switch {
	case err == nil:
	case !mapErr && errors.As(err, &re) && !errors.Is(err, record.ErrIncompatible):
		// A record the pipeline could not convert (errors.tolerance=none):
		// nothing after it matters; the lowest bad record fails the batch.
		p.bad = append(p.bad, re)
	default:
		return nil, err
	}
	return p, nil
}

// sameRow reports whether rw goes into g without looking its group up:
// the same table and shape, and the very column slice g's rows have
// (slots.row hands out one slice for as long as the columns repeat).
func sameRow(g *rowGroup, rw row) bool {
	return g != nil && g.t == rw.t && g.shape == rw.shape && len(rw.cols) > 0 && len(g.cols) == len(rw.cols) && &g.cols[0] == &rw.cols[0]
}

// groupKey is what rows of one group share: the table's name (never the
// *table a lookup returned: a redo must cut the same blocks whatever the
// cache held), the DEFAULT columns set, and the column list.
type groupKey struct{ name, shape, cols string }

// colNames joins the names of cols (for grouping rows by column list).
func colNames(cols []*column) string {
	var b strings.Builder
	for _, c := range cols {
		b.WriteString(c.Name)
		b.WriteByte(0)
	}
	return b.String()
}

// mapOne maps a converted record to its rows (none when it is a delete of
// a table that does not exist, or when its table must be read, created or
// altered first: p then says so). (The runtime converted the key with the
// value when a tombstone may need it, see Sink.ReadsKeys; change events
// convert theirs anyway.)
func mapOne(m mapping, snap *snapshot, rec *record.Record, slotsOf map[*table]*slots, p *rowPlan) ([]row, error) {
	format := m.Format
	if format == "" {
		format = record.PlaceholderTopic
	}
	name, err := rec.TableName(format)
	if err != nil {
		return nil, err
	}
	if name == "" || strings.ContainsAny(name, "\x00`") {
		return nil, record.Errorf(record.ErrDecode, "target table %q of the record: must be non-empty and contain no NUL or backquote", name)
	}
	if p.waiting[name] {
		return nil, nil
	}
	st := snap.lookup(name)
	if st == nil {
		p.reads = append(p.reads, name)
		p.wait(name)
		return nil, nil
	}
	t := st.t
	if t == nil {
		// The table does not exist (auto.create): a delete has nothing to
		// remove; the first record with a value creates it.
		if rec.Op != record.OpUpsert || rec.Value.IsNull() {
			return nil, nil
		}
		if m.Create == nil || st.created {
			return nil, fmt.Errorf("clickhouse: table %q: %w", name, ErrTableNotFound)
		}
		ddl, err := m.Create(name, rec)
		if err != nil {
			return nil, err
		}
		p.creates = append(p.creates, tableCreate{name: name, ddl: ddl})
		p.wait(name)
		return nil, nil
	}
	sc := slotsOf[t]
	if sc == nil {
		sc = newSlots(t)
		slotsOf[t] = sc
	}
	rows, err := rowsOf(t, m, rec, sc)
	if errors.Is(err, ErrUnsupportedColumn) {
		return nil, fmt.Errorf("clickhouse: table %s: %w", t.Ident, err)
	}
	if !errors.Is(err, record.ErrUnknownField) || len(sc.Unknown) == 0 {
		return rows, err
	}
	// A field without a column: the table is read again (it may have
	// gained columns since it was cached), then, with auto.evolve, given
	// the column; each at most once per build.
	switch {
	case !st.fresh:
		p.reads = append(p.reads, name)
		p.wait(name)
		return nil, nil
	case !m.AutoEvolve || st.evolved:
		return rows, err
	}
	var ev *tableEvolve
	for _, e := range p.evolves {
		if e.t == t {
			ev = e
		}
	}
	if ev == nil {
		ev = &tableEvolve{t: t}
		p.evolves = append(p.evolves, ev)
	}
	for _, n := range sc.Unknown {
		if !slices.ContainsFunc(ev.cols, func(c [2]string) bool { return c[0] == n }) {
			ev.cols = append(ev.cols, [2]string{n, evolveType(rec.Value, n, m.Modern)})
		}
	}
	return nil, nil
}

// slots hold a record's fields by column position, reused from one record
// to the next.
type slots struct {
	record.Slots
	// Scratch and carving space for rows, reused from one record to the
	// next: a row's columns are the previous row's slice when they are
	// the same, its values are carved from chunk, and rowsOf returns its
	// rows in out (valid until the next record).
	cols      []*column
	vals      []any
	last      []*column
	shape     []byte
	lastShape string
	chunk     []any
	out       []row
	box       box.Boxes // the rows' String and Int64 values
}

func newSlots(t *table) *slots { return &slots{Slots: record.NewSlots(len(t.Columns))} }

// coerce is coerce, with String and Int64 values boxed in the slots'
// chunks instead of one allocation each.
func (sc *slots) coerce(t *chType, v *record.Value) (any, error) {
	switch {
	case v.IsNull():
	case t.Kind == kindString:
		s, err := stringOf(v)
		if err != nil {
			return nil, err
		}
		return sc.box.String(s), nil
	case t.Kind == kindInt && t.Bits == 64:
		n, err := intOrBool(v)
		if err != nil {
			return nil, err
		}
		return sc.box.Int64(n), nil
	}
	return coerce(t, v)
}

// rowVals is a slice of n values of its own, carved from a chunk the
// slots share with the other rows of the batch (one allocation per chunk,
// not per row).
func (sc *slots) rowVals(n int) []any {
	if cap(sc.chunk)-len(sc.chunk) < n {
		sc.chunk = make([]any, 0, max(4096, n))
	}
	at := len(sc.chunk)
	sc.chunk = sc.chunk[:at+n]
	return sc.chunk[at : at+n : at+n]
}

// fill maps the fields of a struct onto the insertable columns of t, the
// last of duplicate names winning; only names in keep, when set, are
// taken. A field without an insertable column is an error naming the first
// such field in sorted order (sc.Unknown lists them in the value's order).
func (sc *slots) fill(t *table, v record.Value, keep []string) error {
	err := sc.Fill(v, keep, func(name []byte) (int, bool) { i, ok := t.pos[string(name)]; return i, ok })
	if err != nil {
		return err
	}
	first, n := sc.FirstUnknown()
	if n == 0 {
		return nil
	}
	return record.FieldErrorf(first, record.ErrUnknownField, "table %s has no insertable column %q (%d unknown field(s))",
		t.Ident, record.Truncate(first, 63), n)
}

// fillKey maps a deletion row's key onto the key columns: a struct key's
// fields (those of keyFields when set), or a primitive key into the first
// of keyFields.
func (sc *slots) fillKey(t *table, keyFields []string, key record.Value) error {
	switch {
	case key.Kind() == record.KindStruct:
		for _, k := range keyFields {
			if _, ok := key.Get(k); !ok {
				return record.FieldErrorf(k, record.ErrMissingKey, "the key has no field %q", k)
			}
		}
		return sc.fill(t, key, keyFields)
	case !key.IsNull() && len(keyFields) > 0:
		i, ok := t.pos[keyFields[0]]
		if !ok {
			return record.FieldErrorf(keyFields[0], record.ErrUnknownField, "table %s has no insertable column %q", t.Ident, keyFields[0])
		}
		sc.Vals[i], sc.Set[i] = key, true
		return nil
	}
	return record.Errorf(record.ErrMissingKey, "a deletion needs a key (a struct, or a primitive with pk.fields)")
}

// checkChangeTable refuses a change event for a table that cannot apply
// it: one without the version column, without the deleted column (a
// delete), or whose key is not the event's.
func checkChangeTable(t *table, m mapping, rec *record.Record) error {
	if m.VersionColumn == "" || t.column(m.VersionColumn) == nil || !t.Engine.Replacing {
		return record.Errorf(record.ErrIncompatible, "change events need a ReplacingMergeTree table with the version column (version.column, filled with the source position); table %s is %s and version.column is %q: recreate the table (or let auto.create make it) and set version.column", t.Ident, t.Engine.Name, m.VersionColumn)
	}
	if (rec.Op == record.OpDelete || !rec.OldKey.IsNull()) && (m.DeletedColumn == "" || t.column(m.DeletedColumn) == nil) {
		return record.Errorf(record.ErrIncompatible, "a delete needs the deletion flag column %q (deleted.column) in table %s: add it (ALTER TABLE %s ADD COLUMN %s UInt8) and restart the task", m.DeletedColumn, t.Ident, t.Ident, quoteIdent(m.DeletedColumn))
	}
	if rec.Key.Kind() != record.KindStruct {
		return nil
	}
	var names []string
	_ = rec.Key.Range(func(n []byte, _ record.Value) error { names = append(names, string(n)); return nil })
	if sk := t.sortingKey(); sk != nil && !sameSet(sk, names) {
		return record.Errorf(record.ErrIncompatible, "the change event's key (%s) is not the ORDER BY key (%s) of table %s: the source's key changed; recreate the table ordered by (%s), then restart the task",
			strings.Join(names, ", "), strings.Join(sk, ", "), t.Ident, strings.Join(names, ", "))
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

var orderByRE = regexp.MustCompile(`(?i)\bORDER BY\s+(\(([^()]*)\)|[^\s]+)`)

// sortingKey returns the columns of the table's ORDER BY, nil when it is
// not a plain list of columns (expressions, or none found).
func (t *table) sortingKey() []string {
	m := orderByRE.FindStringSubmatch(t.Engine.Full)
	if m == nil {
		return nil
	}
	list := m[1]
	if m[2] != "" || strings.HasPrefix(m[1], "(") {
		list = m[2]
	}
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && p[0] == '`' && p[len(p)-1] == '`' {
			p = strings.NewReplacer("\\`", "`", "\\\\", "\\").Replace(p[1 : len(p)-1])
		} else if p == "" || strings.ContainsAny(p, "()` ") {
			return nil
		}
		out = append(out, p)
	}
	if len(out) == 1 && out[0] == "tuple" {
		return nil
	}
	return out
}

// rowsOf maps a converted record to its rows in t: one row; a deletion
// row (key columns, version, deleted = 1) for a tombstone or a delete
// event; for an update that moved its key, a deletion row of the old key
// first.
func rowsOf(t *table, m mapping, rec *record.Record, sc *slots) ([]row, error) {
	cdc := rec.Change != nil
	if rec.Op == record.OpTruncate {
		return nil, record.Errorf(record.ErrTruncate, "the ClickHouse sink cannot apply a truncate (an insert-only table has no transactional TRUNCATE that a redo could repeat safely); skip the record or empty the table by hand")
	}
	if cdc {
		if rec.Key.IsNull() {
			if rec.Op == record.OpDelete || rec.Change.Op == 'u' {
				return nil, record.Errorf(record.ErrMissingKey, "a change event with op %q and a null key: the source table has no primary key", rec.Change.OpText())
			}
		} else if err := checkChangeTable(t, m, rec); err != nil {
			return nil, err
		}
		if u := rec.Change.Unavailable; len(u) > 0 {
			return nil, record.FieldErrorf(u[0], record.ErrCoerce, "the update carries the source's placeholder for an unchanged value it could not read (a TOASTed column of a table with REPLICA IDENTITY DEFAULT; %d such field(s)), and a ClickHouse row is replaced whole, so the copy would lose the value: set ALTER TABLE … REPLICA IDENTITY FULL on the source table %s", len(u), rec.Change.Table)
		}
	}
	var keyFields []string
	if cdc && rec.Key.Kind() == record.KindStruct {
		_ = rec.Key.Range(func(n []byte, _ record.Value) error { keyFields = append(keyFields, string(n)); return nil })
	} else {
		keyFields = m.KeyFields
	}
	out := sc.out[:0]
	defer func() { sc.out = out[:0] }()
	if !rec.OldKey.IsNull() {
		clear(sc.Set)
		if err := sc.fillKey(t, keyFields, rec.OldKey); err != nil {
			return nil, err
		}
		rw, err := sc.row(t, m, rec, true)
		if err != nil {
			return nil, err
		}
		out = append(out, rw)
	}
	clear(sc.Set)
	deleted := false
	switch value := rec.Value; {
	case rec.Op == record.OpDelete || value.IsNull():
		if !cdc && !m.DeleteEnabled {
			return nil, record.ErrTombstone
		}
		if err := sc.fillKey(t, keyFields, rec.Key); err != nil {
			return nil, err
		}
		deleted = true
	case value.Kind() != record.KindStruct:
		return nil, record.Errorf(record.ErrDecode, "value must be a struct (a JSON object), got %s", value.Describe())
	default:
		if err := sc.fill(t, value, nil); err != nil {
			return nil, err
		}
	}
	rw, err := sc.row(t, m, rec, deleted)
	if err != nil {
		return nil, err
	}
	out = append(out, rw)
	return out, nil
}

// row builds the row of the filled slots: every insertable column in
// table order, the record's coordinates, version and deletion flag in
// theirs, the change columns of a change event, zero values for the
// columns without a default the record does not set.
func (sc *slots) row(t *table, m mapping, rec *record.Record, deleted bool) (row, error) {
	r := rec.Raw
	sc.shape = sc.shape[:0]
	var fixed record.Value // a column filled from the record's coordinates
	cols, vals := sc.cols[:0], sc.vals[:0]
	for i, c := range t.Columns {
		if !c.Insertable {
			continue
		}
		var v *record.Value
		switch c.Name {
		case ColTopic:
			if c.Type.Kind == kindString {
				cols, vals = append(cols, c), append(vals, sc.box.String(r.Topic))
				continue
			}
			fixed, v = record.String(r.Topic), &fixed
		case ColPartition:
			if c.Type.Kind == kindInt && c.Type.Bits == 32 {
				cols, vals = append(cols, c), append(vals, r.Partition)
				continue
			}
			fixed, v = record.Int(int64(r.Partition)), &fixed
		case ColOffset:
			if c.Type.Kind == kindInt && c.Type.Bits == 64 {
				cols, vals = append(cols, c), append(vals, sc.box.Int64(r.Offset))
				continue
			}
			fixed, v = record.Int(r.Offset), &fixed
		case m.VersionColumn:
			fixed, v = record.Uint(rec.Position()), &fixed
		case m.DeletedColumn:
			if m.DeleteEnabled || rec.Change != nil {
				fixed, v = record.Int(0), &fixed
				if deleted {
					fixed = record.Int(1)
				}
				break
			}
			fallthrough
		default:
			if sc.Set[i] {
				v = &sc.Vals[i]
			} else if rec.Change != nil {
				if cv, ok := convert.ChangeColumn(c.Name, rec.Change); ok {
					fixed, v = cv, &fixed
				}
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
			return row{}, fmt.Errorf("column %s %s: %w", c.Name, c.Type.Name, ErrUnsupportedColumn)
		}
		x, err := sc.coerce(c.Type, v)
		if err != nil {
			return row{}, record.InField(c.Name, err)
		}
		cols = append(cols, c)
		vals = append(vals, x)
		if c.HasDefault {
			sc.shape = strconv.AppendInt(sc.shape, int64(i), 10)
			sc.shape = append(sc.shape, ',')
		}
	}
	sc.cols, sc.vals = cols, vals
	if !slices.Equal(cols, sc.last) {
		sc.last = slices.Clone(cols)
	}
	if string(sc.shape) != sc.lastShape {
		sc.lastShape = string(sc.shape)
	}
	own := sc.rowVals(len(vals))
	copy(own, vals)
	clear(vals) // the scratch holds no value past its row
	return row{t: t, cols: sc.last, vals: own, shape: sc.lastShape}, nil
}

// blocks cuts groups into blocks of at most blockRows rows, in group order.
func blocks(groups []*rowGroup, blockRows int) []*block {
	var out []*block
	for _, g := range groups {
		for i := 0; i < len(g.rows); i += blockRows {
			j := min(i+blockRows, len(g.rows))
			out = append(out, &block{T: g.t, Cols: g.cols, Rows: g.rows[i:j], Offsets: g.offs[i:j], Spans: cutSpans(g.spans, i, j)})
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

// createOpts are the choices auto.create's DDL is made of.
type createOpts struct {
	coords           bool     // the coordinate columns first (pk.mode=kafka)
	orderBy          []string // ORDER BY columns (never Nullable); empty: tuple()
	engine, settings string   // a complete ENGINE clause body, and SETTINGS (or "")
	deleted          bool     // add the deletion flag column (delete.enabled, change events)
	changeCols       []string // the change columns of cdc.columns
}

// changeColumnTypes are the ClickHouse types of the change columns.
var changeColumnTypes = map[string]string{
	convert.ColumnOp:         "String",
	convert.ColumnSourceTsMs: "Nullable(Int64)",
	convert.ColumnLSN:        "Nullable(Int64)",
	convert.ColumnDeleted:    "UInt8",
}

// createTableSQL is auto.create's DDL for the table of rec: the
// coordinate columns when o.coords; one column per field of the value
// (sorted by name) and of the key when the value lacks it; the version and
// deletion flag columns; the change columns; ORDER BY o.orderBy (or
// tuple()), ENGINE o.engine.
func createTableSQL(ident string, rec *record.Record, modern bool, m mapping, o createOpts) (string, error) {
	value := rec.Value
	if value.IsNull() {
		return "", record.Errorf(record.ErrDecode, "auto.create: the record is a tombstone; cannot infer columns")
	}
	if value.Kind() != record.KindStruct {
		return "", record.Errorf(record.ErrDecode, "auto.create: the record's value is %s, not a struct", value.Describe())
	}
	fields := map[string]string{}
	add := func(v record.Value) error {
		return v.Range(func(name []byte, fv record.Value) error {
			if _, ok := fields[string(name)]; !ok {
				fields[string(name)] = fieldType(v, string(name), fv, modern)
			}
			return nil
		})
	}
	if err := add(value); err != nil {
		return "", err
	}
	if rec.Change != nil && rec.Key.Kind() == record.KindStruct {
		if err := add(rec.Key); err != nil {
			return "", err
		}
	}
	type col struct{ name, typ string }
	var cols []col
	seen := map[string]bool{}
	if o.coords {
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
		typ := fields[k]
		if slices.Contains(o.orderBy, k) {
			typ = strings.TrimSuffix(strings.TrimPrefix(typ, "Nullable("), ")")
		}
		cols = append(cols, col{k, typ})
		seen[k] = true
	}
	for _, k := range o.orderBy {
		if !seen[k] {
			return "", record.FieldErrorf(k, record.ErrMissingKey, "auto.create: the key column %q is not a field of the record", k)
		}
	}
	if m.VersionColumn != "" && !seen[m.VersionColumn] {
		cols = append(cols, col{m.VersionColumn, "UInt64"})
		seen[m.VersionColumn] = true
	}
	if o.deleted && m.DeletedColumn != "" && !seen[m.DeletedColumn] {
		cols = append(cols, col{m.DeletedColumn, "UInt8"})
		seen[m.DeletedColumn] = true
	}
	for _, c := range o.changeCols {
		if !seen[c] {
			cols = append(cols, col{c, changeColumnTypes[c]})
			seen[c] = true
		}
	}
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + ident + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c.name) + " " + c.typ)
	}
	b.WriteString(") ENGINE = " + o.engine + " ORDER BY ")
	switch len(o.orderBy) {
	case 0:
		b.WriteString("tuple()")
	default:
		q := make([]string, len(o.orderBy))
		for i, k := range o.orderBy {
			q[i] = quoteIdent(k)
		}
		b.WriteString("(" + strings.Join(q, ", ") + ")")
	}
	if o.settings != "" {
		b.WriteString(" SETTINGS " + o.settings)
	}
	return b.String(), nil
}

// fieldType is the column type of field name (value fv) of struct v: from
// the struct's schema when it has one, else from the value.
func fieldType(v record.Value, name string, fv record.Value, modern bool) string {
	if s := v.Schema(); s != nil {
		if f := s.Field(name); f != nil && f.Schema != nil {
			return inferFromSchema(f.Schema, modern, 0)
		}
	}
	return inferType(fv, modern)
}

// evolveType is the type auto.evolve gives field name of value: always
// nullable (Nullable, or an empty Array or Map), with an explicit DEFAULT
// so that rows which do not set it, and a redo of a batch built before the
// column existed, leave it out of their blocks.
func evolveType(value record.Value, name string, modern bool) string {
	fv, _ := value.Get(name)
	t := fieldType(value, name, fv, modern)
	switch {
	case strings.HasPrefix(t, "Nullable("):
		return t + " DEFAULT NULL"
	case strings.HasPrefix(t, "Array("):
		return t + " DEFAULT []"
	case strings.HasPrefix(t, "Map("):
		return t + " DEFAULT map()"
	}
	return "Nullable(" + t + ") DEFAULT NULL"
}
