package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/internal/box"
	"github.com/txsink/txsink/connectors/record"
)

// Planning. A write is a plan and its application: plan maps a batch's
// records to the statements that write them (ops per table, in record
// order) and names the schema changes they need, against a catalog
// snapshot and without reading or writing the database; WriteBatch
// applies it. When a plan needs tables the snapshot lacks, or schema
// changes, WriteBatch reads those tables or makes those changes (reading
// the changed tables again) and plans once more: per write, a table is
// read at most once before any change, created at most once and altered
// by auto.evolve at most once, so the passes are few and the same for the
// same batch and database.

// catalog is the snapshot of the target tables' descriptions a write is
// planned against: descriptions cached by earlier writes, and those read
// from the database (or changed) in this write's transaction. Planning
// reads it and takes the tables it lacks from the writer's cache, never
// from the database; WriteBatch adds what a plan asks for between passes.
type catalog struct {
	schema  string
	cache   *tableCache // nil: no cache (a snapshot given whole)
	entries map[string]*catEntry
}

// catEntry is one table of a catalog.
type catEntry struct {
	name    string
	m       *mapping // nil: the table does not exist (auto.create; known fresh)
	sc      *scratch // what planning reuses from one record of the table to the next
	fresh   bool     // read from the database in this write, not taken from the cache
	changed bool     // created or altered in this write's transaction: never cached
	evolved bool     // altered by auto.evolve in this write
}

// newCatalog returns an empty snapshot that takes tables from cache.
func newCatalog(schema string, cache *tableCache) *catalog {
	return &catalog{schema: schema, cache: cache, entries: map[string]*catEntry{}}
}

// set makes t (nil: no such table) name's description in the snapshot.
func (cat *catalog) set(w *Writer, name string, t *table, fresh bool) *catEntry {
	e := cat.entries[name]
	if e == nil {
		e = &catEntry{name: name}
		cat.entries[name] = e
	}
	e.m, e.sc, e.fresh = nil, nil, fresh
	if t != nil {
		e.m, e.sc = w.newMapping(t), newScratch(t)
	}
	return e
}

// lookup returns name's entry, taking it from the cache when the snapshot
// lacks it; nil when neither has it (the table must be read).
func (cat *catalog) lookup(w *Writer, name string) *catEntry {
	if e := cat.entries[name]; e != nil {
		return e
	}
	if cat.cache == nil {
		return nil
	}
	t := cat.cache.get(pgx.Identifier{cat.schema, name}.Sanitize())
	if t == nil {
		return nil
	}
	return cat.set(w, name, t, false)
}

// mapping is what planning needs about a table beyond its description.
type mapping struct {
	t      *table
	pkCols []*column // the pk columns of pk.mode in pk.fields order; nil for pk.mode=none
	pkErr  error     // why pk.mode's columns cannot be used with this table (met by the first record that needs them)
	// cdcKeys caches the key columns of change events by key field names.
	cdcKeys map[string][]*column
	// checked caches the narrowing check of auto.evolve by value schema.
	checked map[*record.Schema]error
}

// tablePlan is what a plan writes to one table.
type tablePlan struct {
	e    *catEntry // nil while the table is to be read (wait)
	ops  []*op     // in record order
	wait bool      // the table must be read (again) before its records can be planned
	// change is the schema change the table needs before its records
	// can be planned; nil for none.
	change *schemaChange
}

// schemaChange is a schema change a plan needs.
type schemaChange struct {
	table   string
	create  string   // auto.create: the CREATE TABLE statement
	columns []colDef // auto.evolve: the columns to add, in order of first use
}

// batchPlan is a batch's plan.
type batchPlan struct {
	tables []*tablePlan // in order of their first record
	byName map[string]*tablePlan
	// bad are the records the plan refuses, in offset order (with
	// errors.tolerance=none only the first: nothing after it matters).
	bad []*record.Error
	// reads are the tables to read from the database before planning
	// again: missing from the snapshot, or taken from the cache while a
	// record has a field they have no column for.
	reads []string
	// changes are the schema changes to make (auto.create,
	// auto.evolve) before planning again, in order of need.
	changes []*schemaChange
	dropped int // records a transform or the change-event stage dropped
	// deletes and truncates of tables that do not exist (auto.create)
	noopDeletes, noopTruncates int
}

// newFields is prepareOne's answer to a value with fields its table has no
// column for.
type newFields struct {
	err   error // the bad-record error naming the first such field
	value record.Value
	names []string // every such field (valid during the record's call only)
}

func (e *newFields) Error() string { return e.err.Error() }
func (e *newFields) Unwrap() error { return e.err }

// plan converts c's records (one at a time, into reused buffers) and maps
// each to its table's ops against cat, without I/O on the database. err
// is for problems that are not a record's fault (an unsupported column
// type, an unavailable schema registry, a needed schema change that tx
// may not make (ddl false), an incompatible record); a plan with reads or
// changes is incomplete: its ops are not to be applied.
func (w *Writer) plan(ctx context.Context, cat *catalog, c *connectors.Converted, ddl bool) (*batchPlan, error) {
	p := &batchPlan{byName: map[string]*tablePlan{}}
	// With errors.tolerance=none the first bad record ends the pass:
	// nothing after it matters.
	errStop := errors.New("stop")
	mapErr := false // Each's error is the mapping's
	err := c.Each(ctx, func(rec *record.Record) error {
		err := w.planOne(cat, p, rec, ddl)
		if err == nil {
			return nil
		}
		mapErr = true
		if errors.Is(err, ErrUnsupportedColumn) || errors.Is(err, ErrSchemaChange) || !record.IsCause(err) {
			return err
		}
		re := badRecord(rec.Raw, err)
		if errors.Is(re, record.ErrIncompatible) {
			return re // never dead-lettered: the partition stops here
		}
		p.bad = append(p.bad, re)
		if !c.Tolerant() {
			return errStop
		}
		return nil
	})
	var re *record.Error
	switch {
	case err == nil, err == errStop:
	case !mapErr && errors.As(err, &re) && !errors.Is(err, record.ErrIncompatible):
		// A record the pipeline could not convert (errors.tolerance=none):
		// the first bad one, as a record the mapping refused.
		p.bad = append(p.bad, re)
	default:
		return nil, err
	}
	p.dropped = c.Dropped()
	return p, nil
}

// planOne maps a converted record and appends its ops to its table's; a
// record whose table must be read or changed first adds that to the plan
// and no ops.
func (w *Writer) planOne(cat *catalog, p *batchPlan, rec *record.Record, ddl bool) error {
	name, err := rec.TableName(w.cfg.TableNameFormat)
	if err != nil {
		return err
	}
	if err := checkIdent("table.name.format", name); err != nil {
		return record.Errorf(record.ErrDecode, "target table of the record: %v", err)
	}
	tp := p.byName[name]
	if tp == nil {
		tp = &tablePlan{e: cat.lookup(w, name)}
		if tp.e == nil {
			tp.wait = true
			p.reads = append(p.reads, name)
		}
		p.byName[name] = tp
		p.tables = append(p.tables, tp)
	}
	if tp.wait {
		return nil // planned again once the table is read
	}
	e := tp.e
	if e.m == nil {
		// The table does not exist (auto.create).
		if rec.Op != record.OpUpsert || rec.Value.IsNull() {
			// A delete or truncate of a table that does not exist yet.
			if rec.Op == record.OpTruncate {
				p.noopTruncates++
			} else {
				p.noopDeletes++
			}
			return nil
		}
		if tp.change != nil {
			return nil // planned again once the table is created
		}
		if !ddl {
			return schemaChangeNeeded(name, "auto.create")
		}
		if rec.Value.Kind() != record.KindStruct {
			return record.Errorf(record.ErrDecode, "auto.create: value must be a struct (a JSON object), got %s", rec.Value.Describe())
		}
		sql, err := w.createTableSQL(pgx.Identifier{w.cfg.Schema, name}.Sanitize(), rec)
		if err != nil {
			return err
		}
		tp.change = &schemaChange{table: name, create: sql}
		p.changes = append(p.changes, tp.change)
		return nil
	}
	o, moved, err := w.prepareOne(e, rec, ddl)
	if err != nil {
		return w.planFailed(p, tp, err, ddl)
	}
	if moved != nil {
		tp.ops = append(tp.ops, moved)
	}
	tp.ops = append(tp.ops, o)
	return nil
}

// planFailed handles prepareOne's error for a record of tp (out of
// planOne's path so that a record mapped without one allocates nothing
// for it).
func (w *Writer) planFailed(p *batchPlan, tp *tablePlan, err error, ddl bool) error {
	var nf *newFields
	switch {
	case errors.As(err, &nf):
		return w.planColumns(p, tp, nf, ddl)
	case errors.Is(err, ErrUnsupportedColumn):
		return fmt.Errorf("postgres: table %s: %w", tp.e.m.t.Ident, err)
	}
	return err
}

// planColumns resolves a record with fields tp's table has no column for:
// a table taken from the cache is read again (it may have gained them
// since); a table read in this write gets them from auto.evolve, or the
// record is refused.
func (w *Writer) planColumns(p *batchPlan, tp *tablePlan, nf *newFields, ddl bool) error {
	e := tp.e
	switch {
	case !e.fresh:
		tp.wait = true
		tp.ops = nil
		p.reads = append(p.reads, e.name)
		return nil
	case !w.cfg.AutoEvolve:
		return nf.err
	case !ddl:
		return schemaChangeNeeded(e.name, "auto.evolve")
	}
	// Every name is checked before any is planned: a name no column can
	// have is the record's fault (dead-lettered under
	// errors.tolerance=all), and its record adds none of its columns.
	for _, n := range nf.names {
		if err := checkIdent("column", n); err != nil {
			return record.FieldErrorf(n, record.ErrUnknownField, "cannot be a PostgreSQL column name (%v): rename the field with a transform (ReplaceField)", err)
		}
	}
	if e.evolved {
		// The plan before the change asked for every column its records
		// lacked: a table that lacks one again changed under the write.
		return fmt.Errorf("postgres: table %s still lacks columns %v after auto.evolve altered it in this transaction", e.m.t.Ident, nf.names)
	}
	if tp.change == nil {
		tp.change = &schemaChange{table: e.name}
		p.changes = append(p.changes, tp.change)
	}
	for _, n := range nf.names {
		if slices.ContainsFunc(tp.change.columns, func(c colDef) bool { return c.name == n }) {
			continue
		}
		typ, _ := fieldType(nf.value, n)
		tp.change.columns = append(tp.change.columns, colDef{name: n, typ: typ})
	}
	return nil
}

// op is one record's pending change.
type op struct {
	rec   *kgo.Record
	del   bool
	trunc bool      // TRUNCATE the table: every earlier op of the table is moot
	keyed bool      // applied by key, a key's last op winning (upsert mode, change events)
	extra bool      // a second op of its record (the delete of a moved key): not counted
	pk    []*column // key columns: the conflict target of an upsert, the WHERE of a delete
	cols  []*column // value columns in table order (inserts), pk columns (deletes)
	vals  []any
	// keep are columns of an upsert whose value the source could not
	// send (record.Change.Unavailable): the row keeps its own, and a new
	// row reads it from the row of its key, if any (so a NOT NULL column
	// without it is refused, never written empty).
	keep  []*column
	shape string // the column set and key, groups ops into one statement
	key   string // de-duplication key (keyed ops)
}

// newMapping resolves pk.mode's columns in t.
func (w *Writer) newMapping(t *table) *mapping {
	p := &mapping{t: t}
	var names []string
	switch w.cfg.PKMode {
	case PKModeNone:
	case PKModeKafka:
		names = w.cfg.PKFields
		if len(names) == 0 {
			names = DefaultKafkaPKFields
		}
	default:
		names = w.cfg.PKFields
		if len(names) == 0 {
			names = t.PrimaryKey
		}
		if len(names) == 0 {
			p.pkErr = fmt.Errorf("pk.fields: empty and table %s has no primary key: list the key columns in pk.fields", t.Ident)
			return p
		}
	}
	for _, n := range names {
		c := t.column(n)
		if c == nil {
			p.pkErr = fmt.Errorf("pk.fields: table %s has no column %q", t.Ident, n)
			return p
		}
		p.pkCols = append(p.pkCols, c)
	}
	if w.cfg.InsertMode == InsertModeUpsert && !t.hasUnique(names) {
		p.pkErr = fmt.Errorf("postgres: upsert into %s on (%s): %w", t.Ident, strings.Join(names, ", "), ErrNoConflictTarget)
	}
	return p
}

// cdcKey returns the key columns of a change event's key: the fields of a
// struct key, or the table's one-column primary key for a primitive key.
// They must be the table's primary key (or a unique index): a key that
// changed is an incompatible change.
func (p *mapping) cdcKey(key record.Value) ([]*column, error) {
	var names []string
	if key.Kind() == record.KindStruct {
		err := key.Range(func(name []byte, _ record.Value) error {
			names = append(names, string(name))
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else if len(p.t.PrimaryKey) == 1 {
		names = p.t.PrimaryKey
	}
	sig := strings.Join(names, "\x00")
	if cols, ok := p.cdcKeys[sig]; ok {
		return cols, nil
	}
	what := "(" + strings.Join(names, ", ") + ")"
	if len(names) == 0 {
		return nil, record.Errorf(record.ErrIncompatible, "the change event's key is %s but table %s has no one-column primary key to apply it to", key.Describe(), p.t.Ident)
	}
	var cols []*column
	for _, n := range names {
		c := p.t.column(n)
		if c == nil {
			return nil, record.FieldErrorf(n, record.ErrIncompatible, "the change event's key %s has a field %q that table %s has no column for: the source's key changed; give the table that primary key (or recreate it with auto.create), then restart the task", what, n, p.t.Ident)
		}
		cols = append(cols, c)
	}
	if !p.t.hasUnique(names) {
		return nil, record.Errorf(record.ErrIncompatible, "the change event's key %s is not the primary key (nor a unique index) of table %s (primary key (%s)): the source's key changed; change the table's primary key to %s, then restart the task", what, p.t.Ident, strings.Join(p.t.PrimaryKey, ", "), what)
	}
	if p.cdcKeys == nil {
		p.cdcKeys = map[string][]*column{}
	}
	p.cdcKeys[sig] = cols
	return cols, nil
}

// badRecord is the bad-record error of r for cause err; a database
// rejection names the column the server reported.
func badRecord(r *kgo.Record, err error) *record.Error {
	re := record.Locate(r, err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && re.Field == "" {
		re.Field = pe.ColumnName
	}
	return re
}

// scratch is what prepare reuses from one record to the next.
type scratch struct {
	record.Slots // the value's fields per column (t.Columns order)
	shape        []byte
	cols         []*column
	shapes       map[string]shape // interned shapes: most batches have one
	last         shape            // the shape of the last op without kept columns ("": none yet)
	lastKeyed    bool             // whether that op was keyed, on lastPK
	lastPK       []*column
	order        []*column // the column of each field position of the last value (nil: none)
	vals         []any     // carved into ops' vals
	ops          []op      // carved into ops
	boxes        box.Boxes // the boxes of ops' text and bigint values
}

func newScratch(t *table) *scratch {
	return &scratch{Slots: record.NewSlots(len(t.Columns)), shapes: map[string]shape{}}
}

// shape is a column set: its key and its columns (shared by the ops).
type shape struct {
	key  string
	cols []*column
}

// valSlice returns an empty slice with room for n values, carved from a
// larger allocation.
func (sc *scratch) valSlice(n int) []any {
	if len(sc.vals) < n {
		sc.vals = make([]any, max(n*256, 1024))
	}
	v := sc.vals[:0:n]
	sc.vals = sc.vals[n:]
	return v
}

// newOp returns a zero op carved from a larger allocation: ops live as
// long as their plan, and a slot is handed out once.
func (sc *scratch) newOp() *op {
	if len(sc.ops) == 0 {
		sc.ops = make([]op, 256)
	}
	o := &sc.ops[0]
	sc.ops = sc.ops[1:]
	return o
}

// shapeOf returns the shape of o: its columns sc.cols, its kept columns
// (sorted here) and, when keyed, its key columns; allocating once per
// distinct shape. An op without kept columns whose columns and key are
// those of the last such op (most are) takes its shape without building
// the key again.
func (sc *scratch) shapeOf(o *op) (string, []*column) {
	if len(o.keep) == 0 && sc.last.key != "" && sc.lastKeyed == o.keyed && slices.Equal(sc.last.cols, sc.cols) &&
		(!o.keyed || slices.Equal(sc.lastPK, o.pk)) {
		return sc.last.key, sc.last.cols
	}
	sc.shape = sc.shape[:0]
	for _, c := range sc.cols {
		sc.shape = strconv.AppendInt(sc.shape, int64(c.Index), 10)
		sc.shape = append(sc.shape, ',')
	}
	if len(o.keep) > 0 {
		slices.SortFunc(o.keep, func(a, b *column) int { return a.Index - b.Index })
		sc.shape = appendKeep(sc.shape, o.keep)
	}
	if o.keyed {
		sc.shape = append(sc.shape, '|')
		for _, c := range o.pk {
			sc.shape = strconv.AppendInt(sc.shape, int64(c.Index), 10)
			sc.shape = append(sc.shape, ',')
		}
	}
	s := sc.intern()
	if len(o.keep) == 0 {
		sc.last, sc.lastKeyed, sc.lastPK = s, o.keyed, o.pk
	}
	return s.key, s.cols
}

// intern returns the shape of sc.shape and sc.cols, allocating once per
// distinct shape.
func (sc *scratch) intern() shape {
	if s, ok := sc.shapes[string(sc.shape)]; ok {
		return s
	}
	s := shape{key: string(sc.shape), cols: slices.Clone(sc.cols)}
	sc.shapes[s.key] = s
	return s
}

// fill maps the fields of a struct value onto sc's slots by column name,
// the last of duplicate names winning. A field without a column is an
// error naming the first unknown field in sorted order (sc.Unknown lists
// them all).
func (sc *scratch) fill(t *table, value record.Value) error {
	clear(sc.Set)
	pos := 0
	err := sc.Fill(value, nil, func(name []byte) (int, bool) {
		// Most values name their fields in the same order: the column
		// of the last value's field at this position is tried first.
		p := pos
		pos++
		if p < len(sc.order) && sc.order[p] != nil && sc.order[p].Name == string(name) {
			return sc.order[p].Index, true
		}
		c := t.byName[string(name)]
		switch {
		case p < len(sc.order):
			sc.order[p] = c
		case p < 2*len(t.Columns):
			sc.order = append(sc.order, c)
		}
		if c != nil {
			return c.Index, true
		}
		return 0, false
	})
	if err != nil {
		return err
	}
	first, n := sc.FirstUnknown()
	if n == 0 {
		return nil
	}
	return record.FieldErrorf(first, record.ErrUnknownField, "table %s has no column %q (%d unknown field(s); auto.evolve=true adds them)",
		t.Ident, record.Truncate(first, 63), n)
}

// keyColumns reads the key columns a record key supplies: the fields of a
// struct key, or a primitive key for a single key column.
func keyColumns(pk []*column, key record.Value) (map[string]record.Value, error) {
	if key.IsNull() {
		return nil, record.Errorf(record.ErrMissingKey, "the record has no key (pk.mode=record_key, or a change event)")
	}
	out := make(map[string]record.Value, len(pk))
	if key.Kind() != record.KindStruct {
		if len(pk) != 1 {
			return nil, record.Errorf(record.ErrMissingKey, "primitive key but %d pk columns (%s): use a struct (JSON object) key", len(pk), pkNames(pk))
		}
		out[pk[0].Name] = key
		return out, nil
	}
	for _, c := range pk {
		v, ok := key.Get(c.Name)
		if !ok {
			return nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "the key has no field %q", c.Name)
		}
		out[c.Name] = v
	}
	return out, nil
}

// prepareOne maps a converted record to its op in e's table, and for an
// update that moved its key to the delete of the old key (moved, applied
// before o; nil otherwise). It reads nothing but e: a value with fields
// e's table has no column for is a *newFields error, which plan resolves
// (the table read again, auto.evolve, or the record refused).
func (w *Writer) prepareOne(e *catEntry, rec *record.Record, ddl bool) (o, moved *op, err error) {
	p, sc, r := e.m, e.sc, rec.Raw
	t := p.t
	if rec.Op == record.OpTruncate {
		if !ddl {
			return nil, nil, schemaChangeNeeded(e.name, "a TRUNCATE")
		}
		o = sc.newOp()
		o.rec, o.trunc = r, true
		return o, nil, nil
	}
	o = sc.newOp()
	o.rec, o.keyed = r, w.cfg.InsertMode == InsertModeUpsert

	// The key columns and the values that come from the key.
	var fromKey map[string]record.Value
	switch {
	case rec.Change != nil && rec.Key.IsNull():
		if rec.Op == record.OpDelete || rec.Change.Op == 'u' {
			return nil, nil, record.Errorf(record.ErrMissingKey, "a change event with op %q and a null key: the source table has no primary key (Debezium sends a null key); give it one, or set the source connector's message.key.columns", rec.Change.OpText())
		}
		o.keyed = false // a keyless source table: inserts only
	case rec.Change != nil:
		if o.pk, err = p.cdcKey(rec.Key); err != nil {
			return nil, nil, err
		}
		if fromKey, err = keyColumns(o.pk, rec.Key); err != nil {
			return nil, nil, err
		}
		o.keyed = true
	default:
		if p.pkErr != nil {
			return nil, nil, p.pkErr
		}
		o.pk = p.pkCols
		switch w.cfg.PKMode {
		case PKModeRecordKey:
			if fromKey, err = keyColumns(o.pk, rec.Key); err != nil {
				return nil, nil, err
			}
		case PKModeKafka:
			fromKey = map[string]record.Value{
				o.pk[0].Name: record.String(r.Topic),
				o.pk[1].Name: record.Int(int64(r.Partition)),
				o.pk[2].Name: record.Int(r.Offset),
			}
		}
	}

	value := rec.Value
	if rec.Op == record.OpDelete || value.IsNull() {
		if rec.Op != record.OpDelete && !w.cfg.DeleteEnabled {
			return nil, nil, record.ErrTombstone
		}
		if err := o.setKey(fromKey); err != nil {
			return nil, nil, err
		}
		o.del = true
		return o, nil, nil
	}
	if value.Kind() != record.KindStruct {
		return nil, nil, record.Errorf(record.ErrDecode, "value must be a struct (a JSON object), got %s", value.Describe())
	}
	if err := sc.fill(t, value); err != nil {
		if errors.Is(err, record.ErrUnknownField) {
			return nil, nil, &newFields{err: err, value: value, names: sc.Unknown}
		}
		return nil, nil, err
	}
	if w.cfg.AutoEvolve {
		if s := value.Schema(); s != nil {
			cerr, ok := p.checked[s]
			if !ok {
				cerr = checkNarrowing(t, s)
				if p.checked == nil {
					p.checked = map[*record.Schema]error{}
				}
				p.checked[s] = cerr
			}
			if cerr != nil {
				return nil, nil, cerr
			}
		}
	}

	// Fields holding the source's placeholder for an unchanged value it
	// could not read carry none: the row keeps its own.
	if rec.Change != nil {
		for _, name := range rec.Change.Unavailable {
			if c := t.byName[name]; c != nil && sc.Set[c.Index] && !c.Generated {
				sc.Set[c.Index] = false
				o.keep = append(o.keep, c)
			}
		}
	}

	sc.cols = sc.cols[:0]
	o.vals = sc.valSlice(len(t.Columns))
	for _, c := range t.Columns {
		var v *record.Value
		if fromKey != nil {
			if kv, ok := fromKey[c.Name]; ok {
				v = &kv
			}
		}
		if v == nil && sc.Set[c.Index] {
			v = &sc.Vals[c.Index]
		}
		if v == nil && rec.Change != nil {
			if cv, ok := convert.ChangeColumn(c.Name, rec.Change); ok {
				v = &cv
			}
		}
		if v == nil {
			if c.NotNull && !c.HasDef && !slices.Contains(o.keep, c) {
				return nil, nil, record.FieldErrorf(c.Name, record.ErrCoerce, "no value for NOT NULL column %q, which has no default", c.Name)
			}
			continue
		}
		if c.Generated {
			return nil, nil, record.FieldErrorf(c.Name, record.ErrCoerce, "column %q is generated and cannot be written", c.Name)
		}
		x, err := coerce(c, v, &sc.boxes)
		if err != nil {
			return nil, nil, err
		}
		sc.cols = append(sc.cols, c)
		o.vals = append(o.vals, x)
	}
	if len(sc.cols) == 0 {
		return nil, nil, record.Errorf(record.ErrDecode, "the value sets no column")
	}
	o.shape, o.cols = sc.shapeOf(o)
	if o.keyed {
		keyVals := make([]any, 0, len(o.pk))
		for _, c := range o.pk {
			i := slices.Index(o.cols, c)
			if i < 0 || o.vals[i] == nil {
				return nil, nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "no value for pk column %q", c.Name)
			}
			keyVals = append(keyVals, o.vals[i])
		}
		o.key = keySignature(o.pk) + keyString(keyVals)
	}
	if rec.OldKey.IsNull() || !o.keyed {
		return o, nil, nil
	}
	// An update that moved its row to another key: delete the old one.
	oldKey, err := keyColumns(o.pk, rec.OldKey)
	if err != nil {
		return nil, nil, err
	}
	moved = sc.newOp()
	moved.rec, moved.del, moved.keyed, moved.extra, moved.pk = r, true, true, true, o.pk
	if err := moved.setKey(oldKey); err != nil {
		return nil, nil, err
	}
	return o, moved, nil
}

// setKey makes o a delete of the row whose key columns hold fromKey.
func (o *op) setKey(fromKey map[string]record.Value) error {
	for _, c := range o.pk {
		kv := fromKey[c.Name]
		v, err := coerce(c, &kv, nil)
		if err != nil {
			return err
		}
		if v == nil {
			return record.FieldErrorf(c.Name, record.ErrMissingKey, "null key column")
		}
		o.cols = append(o.cols, c)
		o.vals = append(o.vals, v)
	}
	o.shape = "d" + keySignature(o.pk)
	if o.keyed {
		o.key = keySignature(o.pk) + keyString(o.vals)
	}
	return nil
}

// keySignature names a key's column set, so that keys of different
// column sets never collide.
func keySignature(pk []*column) string {
	var b strings.Builder
	for _, c := range pk {
		b.WriteString(strconv.Itoa(c.Index))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	return b.String()
}
