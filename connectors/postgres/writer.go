package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// Insert modes, pk modes and error tolerances of WriterConfig.
const (
	InsertModeInsert = "insert"
	InsertModeUpsert = "upsert"

	PKModeNone        = "none"
	PKModeRecordKey   = "record_key"
	PKModeRecordValue = "record_value"
	PKModeKafka       = "kafka"

	ToleranceNone = "none"
	ToleranceAll  = "all"
)

// Defaults applied by NewWriter (and assumed by Validate) to empty fields.
const (
	DefaultSchema          = "public"
	DefaultTableNameFormat = "${topic}"
)

// DefaultKafkaPKFields are the columns pk.mode=kafka writes when pk.fields
// is empty, as in Kafka Connect's JDBC sink.
var DefaultKafkaPKFields = []string{"__connect_topic", "__connect_partition", "__connect_offset"}

// WriterConfig is the table-mapping part of a postgres connector's config.
type WriterConfig struct {
	Connector       string   // connector name (for DLQ context)
	Schema          string   // target schema, default "public"
	TableNameFormat string   // "table.name.format", default "${topic}"; ${topic} replaced; the result is an identifier, always quoted
	InsertMode      string   // "insert.mode": "insert" (COPY) | "upsert" (INSERT … ON CONFLICT (pk) DO UPDATE)
	PKMode          string   // "pk.mode": "none" | "record_key" | "record_value" | "kafka"
	PKFields        []string // "pk.fields"; empty: the table's primary key (record_key, record_value) or DefaultKafkaPKFields (kafka)
	DeleteEnabled   bool     // "delete.enabled": tombstone with a key → DELETE by pk; requires pk.mode=record_key
	ErrorsTolerance string   // "errors.tolerance": "none" | "all"
	DLQTable        string   // "errors.deadletterqueue.table.name": "table" (in Schema) or "schema.table"; required when tolerance=all without DLQTopic; created if missing
	DLQTopic        string   // "errors.deadletterqueue.topic.name": the runtime's dead-letter topic, an alternative to DLQTable (the runtime produces WriteStats.Bad)
	// Pipeline converts records (the connector's converters); nil: txsink's
	// default JSON converter.
	Pipeline *convert.Pipeline
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.TableNameFormat == "" {
		c.TableNameFormat = DefaultTableNameFormat
	}
	if c.InsertMode == "" {
		c.InsertMode = InsertModeInsert
	}
	if c.PKMode == "" {
		c.PKMode = PKModeNone
	}
	if c.ErrorsTolerance == "" {
		c.ErrorsTolerance = ToleranceNone
	}
	return c
}

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are truncated
// by the server, so they are refused here.
const maxIdentifier = 63

func checkIdent(key, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s: must not be empty", key)
	case len(s) > maxIdentifier:
		return fmt.Errorf("%s: %q is longer than %d bytes", key, s, maxIdentifier)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s: must not contain NUL", key)
	}
	return nil
}

// Validate checks the configuration (with defaults applied to empty fields).
// Every message starts with the offending config key.
func (c WriterConfig) Validate() error {
	c = c.withDefaults()
	if c.Connector == "" || strings.IndexByte(c.Connector, 0) >= 0 {
		return errors.New("name: the connector name must be set (and contain no NUL)")
	}
	if err := checkIdent("table.name.format", c.Schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if strings.IndexByte(c.TableNameFormat, 0) >= 0 {
		return errors.New("table.name.format: must not contain NUL")
	}
	switch c.InsertMode {
	case InsertModeInsert, InsertModeUpsert:
	default:
		return fmt.Errorf("insert.mode: must be %q or %q, got %q", InsertModeInsert, InsertModeUpsert, c.InsertMode)
	}
	switch c.PKMode {
	case PKModeNone, PKModeRecordKey, PKModeRecordValue, PKModeKafka:
	default:
		return fmt.Errorf("pk.mode: must be one of none, record_key, record_value, kafka, got %q", c.PKMode)
	}
	if c.InsertMode == InsertModeUpsert && c.PKMode == PKModeNone {
		return errors.New("pk.mode: insert.mode=upsert needs a primary key: set pk.mode to record_key, record_value or kafka")
	}
	if c.PKMode == PKModeNone && len(c.PKFields) > 0 {
		return errors.New("pk.fields: must be empty when pk.mode=none")
	}
	if c.PKMode == PKModeKafka && len(c.PKFields) != 0 && len(c.PKFields) != 3 {
		return fmt.Errorf("pk.fields: pk.mode=kafka takes none or exactly 3 names (topic, partition, offset columns), got %d", len(c.PKFields))
	}
	seen := map[string]bool{}
	for _, f := range c.PKFields {
		if err := checkIdent("pk.fields", f); err != nil {
			return err
		}
		if seen[f] {
			return fmt.Errorf("pk.fields: %q is listed twice", f)
		}
		seen[f] = true
	}
	if c.DeleteEnabled && c.PKMode != PKModeRecordKey {
		return fmt.Errorf("delete.enabled: requires pk.mode=record_key, got pk.mode=%s", c.PKMode)
	}
	switch c.ErrorsTolerance {
	case ToleranceNone:
	case ToleranceAll:
		if c.DLQTable == "" && c.DLQTopic == "" {
			return errors.New("errors.deadletterqueue.table.name: required when errors.tolerance=all (or set errors.deadletterqueue.topic.name)")
		}
	default:
		return fmt.Errorf("errors.tolerance: must be %q or %q, got %q", ToleranceNone, ToleranceAll, c.ErrorsTolerance)
	}
	if c.DLQTable != "" {
		s, t := c.dlqName()
		if err := checkIdent("errors.deadletterqueue.table.name", s); err != nil {
			return err
		}
		if err := checkIdent("errors.deadletterqueue.table.name", t); err != nil {
			return err
		}
	}
	return nil
}

// dlqName splits DLQTable into schema and table.
func (c WriterConfig) dlqName() (schema, name string) {
	if i := strings.IndexByte(c.DLQTable, '.'); i >= 0 {
		return c.DLQTable[:i], c.DLQTable[i+1:]
	}
	return c.Schema, c.DLQTable
}

// Writer writes batches of Kafka records into PostgreSQL tables inside
// transactions its caller owns. It caches table descriptions per table and
// is safe for concurrent use by different transactions.
type Writer struct {
	cfg    WriterConfig
	pipe   *convert.Pipeline
	tables tableCache
}

// NewWriter validates cfg, applies its defaults and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pipe := cfg.Pipeline
	if pipe == nil {
		pipe = convert.DefaultPipeline()
	}
	return &Writer{cfg: cfg.withDefaults(), pipe: pipe}, nil
}

// Config returns the writer's configuration with defaults applied.
func (w *Writer) Config() WriterConfig { return w.cfg }

// TableName returns the (unquoted) target table of topic.
func (w *Writer) TableName(topic string) string {
	return strings.ReplaceAll(w.cfg.TableNameFormat, "${topic}", topic)
}

// WriteStats counts what one Write did with its records. Written, Deleted,
// DeadLettered, Superseded and Dropped add up to the number of records.
type WriteStats struct {
	Written      int // records written as rows (COPY, insert or upsert)
	Deleted      int // tombstones applied as DELETE by key (whether or not a row existed)
	DeadLettered int // bad records set aside (errors.tolerance=all): written to the dead-letter table, if any, and listed in Bad
	Superseded   int // upsert mode: records replaced by a later record with the same key in the batch
	Dropped      int // records a transform filtered out
	// Bad are the dead-lettered records' errors, in offset order, for the
	// runtime's dead-letter topic.
	Bad []*record.Error
}

// op is one record's pending change.
type op struct {
	rec   *kgo.Record
	del   bool
	cols  []*column // value columns in table order (inserts), pk columns (deletes)
	vals  []any
	shape string // the column set, groups ops into one statement
	key   string // de-duplication key (upsert mode)
}

// plan is what a Write needs about its table beyond the catalog.
type plan struct {
	t      *table
	pkCols []*column // the pk columns in pk.fields order; nil for pk.mode=none
}

// Write writes one partition's batch (records in offset order, all of the
// same topic and partition) inside tx, into the table TableName(topic).
//
// Rows go in with COPY (insert.mode=insert) or one INSERT … SELECT FROM
// unnest(…) ON CONFLICT DO UPDATE per column set (upsert), tombstones
// become one DELETE. In upsert mode a batch that repeats a key applies only
// the key's last record (a tombstone last deletes, a value last upserts).
// Each statement runs under a savepoint; when the database rejects a record
// (see IsBadRecord) the statement is bisected to isolate it.
//
// errors.tolerance=all: bad records go to the dead-letter table in tx, once
// each (a redo cannot duplicate them), when one is set, and are listed in
// WriteStats.Bad; the rest of the batch is written.
// errors.tolerance=none: Write returns the *record.Error of the lowest bad
// offset and tx must be rolled back.
//
// Any error that is not a *record.Error (connection loss, serialization
// failure, missing table or column, …) means the batch was not written: tx
// must be rolled back and the batch retried or stopped (see IsRetryable).
// Cancelling ctx aborts the statement in progress; tx must then be rolled
// back.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, records []*kgo.Record) (WriteStats, error) {
	var stats WriteStats
	if len(records) == 0 {
		return stats, nil
	}
	name := w.TableName(records[0].Topic)
	if err := checkIdent("table.name.format", name); err != nil {
		return stats, fmt.Errorf("postgres: topic %q: %w", records[0].Topic, err)
	}
	p, fresh, err := w.plan(ctx, tx, name)
	if err != nil {
		return stats, err
	}
	ops, bad, err := w.prepare(ctx, p, records)
	if err != nil {
		return stats, err
	}
	if !fresh && hasUnknownField(bad) {
		// The table may have gained columns since it was cached.
		w.tables.forget(p.t.Ident)
		if p, _, err = w.plan(ctx, tx, name); err != nil {
			return stats, err
		}
		if ops, bad, err = w.prepare(ctx, p, records); err != nil {
			return stats, err
		}
	}
	stats.Dropped = len(records) - len(ops) - len(bad)
	if w.cfg.ErrorsTolerance == ToleranceNone && len(bad) > 0 {
		// Nothing at or after the first bad offset matters.
		first := bad[0].Offset
		ops = slices.DeleteFunc(ops, func(o *op) bool { return o.rec.Offset >= first })
	}

	var dbBad []*record.Error
	if w.cfg.InsertMode == InsertModeUpsert {
		dbBad, err = w.applyKeyed(ctx, tx, p, ops, &stats)
	} else {
		dbBad, err = w.applyOrdered(ctx, tx, p, ops, &stats)
	}
	if err != nil {
		if code := pgCode(err); code == "42P01" || code == "42703" || code == "42804" {
			w.tables.forget(p.t.Ident) // the table changed under the cache
		}
		return WriteStats{}, err
	}
	bad = append(bad, dbBad...)
	if len(bad) == 0 {
		return stats, nil
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Offset < bad[j].Offset })
	if w.cfg.ErrorsTolerance == ToleranceNone {
		return WriteStats{}, bad[0]
	}
	if w.cfg.DLQTable != "" {
		byOffset := make(map[int64]*kgo.Record, len(records))
		for _, r := range records {
			byOffset[r.Offset] = r
		}
		if err := w.deadLetter(ctx, tx, byOffset, bad); err != nil {
			return WriteStats{}, err
		}
	}
	stats.DeadLettered, stats.Bad = len(bad), bad
	return stats, nil
}

func hasUnknownField(bad []*record.Error) bool {
	for _, b := range bad {
		if errors.Is(b.Err, record.ErrUnknownField) {
			return true
		}
	}
	return false
}

// plan loads (or takes from the cache) the table and resolves the pk
// columns. fresh reports whether the table was read from the catalog now.
func (w *Writer) plan(ctx context.Context, tx pgx.Tx, name string) (*plan, bool, error) {
	ident := pgx.Identifier{w.cfg.Schema, name}.Sanitize()
	t := w.tables.get(ident)
	fresh := false
	if t == nil {
		var err error
		if t, err = loadTable(ctx, tx, w.cfg.Schema, name); err != nil {
			return nil, false, err
		}
		fresh = true
	}
	p := &plan{t: t}
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
			return nil, false, fmt.Errorf("pk.fields: empty and table %s has no primary key: list the key columns in pk.fields", t.Ident)
		}
	}
	for _, n := range names {
		c := t.column(n)
		if c == nil {
			return nil, false, fmt.Errorf("pk.fields: table %s has no column %q", t.Ident, n)
		}
		p.pkCols = append(p.pkCols, c)
	}
	if w.cfg.InsertMode == InsertModeUpsert && !t.hasUnique(names) {
		return nil, false, fmt.Errorf("postgres: upsert into %s on (%s): %w", t.Ident, strings.Join(names, ", "), ErrNoConflictTarget)
	}
	if fresh {
		w.tables.put(ident, t)
	}
	return p, fresh, nil
}

// prepare converts every record through the pipeline and maps it to its
// columns. Bad records come back as record errors in offset order; err is
// only for problems that are not a record's fault (an unsupported column
// type, an unavailable schema registry).
func (w *Writer) prepare(ctx context.Context, p *plan, records []*kgo.Record) (ops []*op, bad []*record.Error, err error) {
	ops = make([]*op, 0, len(records))
	sc := newScratch(p.t)
	for _, r := range records {
		o, err := w.prepareOne(ctx, p, r, sc)
		if errors.Is(err, ErrUnsupportedColumn) {
			return nil, nil, fmt.Errorf("postgres: table %s: %w", p.t.Ident, err)
		}
		if err != nil {
			if !record.IsCause(err) {
				return nil, nil, err
			}
			bad = append(bad, badRecord(r, err))
			continue
		}
		if o == nil {
			continue // dropped by a transform
		}
		ops = append(ops, o)
	}
	return ops, bad, nil
}

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
	conv   convert.Scratch
	slots  []record.Value // the value's field per column (t.Columns order)
	set    []bool         // whether the value sets the column
	shape  []byte
	cols   []*column
	shapes map[string]shape // interned shapes: most batches have one
	vals   []any            // carved into ops' vals
	// unknown collects field names without a column.
	unknown []string
}

func newScratch(t *table) *scratch {
	return &scratch{slots: make([]record.Value, len(t.Columns)), set: make([]bool, len(t.Columns)), shapes: map[string]shape{}}
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

// intern returns the shape of sc.shape and sc.cols, allocating once per
// distinct shape.
func (sc *scratch) intern() (string, []*column) {
	if s, ok := sc.shapes[string(sc.shape)]; ok {
		return s.key, s.cols
	}
	s := shape{key: string(sc.shape), cols: slices.Clone(sc.cols)}
	sc.shapes[s.key] = s
	return s.key, s.cols
}

// fill maps the fields of a struct value onto sc.slots by column name,
// the last of duplicate names winning. A field without a column is an
// error naming the first unknown field in sorted order.
func (sc *scratch) fill(t *table, value record.Value) error {
	clear(sc.set)
	sc.unknown = sc.unknown[:0]
	err := value.Range(func(name []byte, fv record.Value) error {
		c := t.byName[string(name)]
		if c == nil {
			sc.unknown = append(sc.unknown, string(name))
			return nil
		}
		sc.slots[c.Index], sc.set[c.Index] = fv, true
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
	return record.FieldErrorf(first, record.ErrUnknownField, "table %s has no column %q (txsink does not add columns; %d unknown field(s))",
		t.Ident, record.Truncate(first, 63), len(slices.Compact(sc.unknown)))
}

// keyColumns reads the pk columns a record key supplies: the fields of a
// struct key, or a primitive key for a single pk column.
func keyColumns(p *plan, key record.Value) (map[string]record.Value, error) {
	if key.IsNull() {
		return nil, record.Errorf(record.ErrMissingKey, "pk.mode=record_key but the record has no key")
	}
	out := make(map[string]record.Value, len(p.pkCols))
	if key.Kind() != record.KindStruct {
		if len(p.pkCols) != 1 {
			return nil, record.Errorf(record.ErrMissingKey, "primitive key but %d pk columns (%s): use a struct (JSON object) key", len(p.pkCols), pkNames(p))
		}
		out[p.pkCols[0].Name] = key
		return out, nil
	}
	for _, c := range p.pkCols {
		v, ok := key.Get(c.Name)
		if !ok {
			return nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "the key has no field %q", c.Name)
		}
		out[c.Name] = v
	}
	return out, nil
}

func (w *Writer) prepareOne(ctx context.Context, p *plan, r *kgo.Record, sc *scratch) (*op, error) {
	t := p.t
	rec, err := w.pipe.Convert(ctx, r, &sc.conv, w.cfg.PKMode == PKModeRecordKey)
	if err != nil || rec == nil {
		return nil, err // rec == nil: a transform dropped r
	}
	o := &op{rec: r}

	// The pk columns that do not come from the value.
	var fromKey map[string]record.Value
	switch w.cfg.PKMode {
	case PKModeRecordKey:
		if fromKey, err = keyColumns(p, rec.Key); err != nil {
			return nil, err
		}
	case PKModeKafka:
		fromKey = map[string]record.Value{
			p.pkCols[0].Name: record.String(r.Topic),
			p.pkCols[1].Name: record.Int(int64(r.Partition)),
			p.pkCols[2].Name: record.Int(r.Offset),
		}
	}

	value := rec.Value
	if value.IsNull() {
		if !w.cfg.DeleteEnabled {
			return nil, record.ErrTombstone
		}
		o.del = true
		for _, c := range p.pkCols {
			kv := fromKey[c.Name]
			v, err := coerce(c, &kv)
			if err != nil {
				return nil, err
			}
			if v == nil {
				return nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "null key column")
			}
			o.cols = append(o.cols, c)
			o.vals = append(o.vals, v)
		}
		o.key = keyString(o.vals)
		return o, nil
	}
	if value.Kind() != record.KindStruct {
		return nil, record.Errorf(record.ErrDecode, "value must be a struct (a JSON object), got %s", value.Describe())
	}
	if err := sc.fill(t, value); err != nil {
		return nil, err
	}

	sc.shape = sc.shape[:0]
	sc.cols = sc.cols[:0]
	o.vals = sc.valSlice(len(t.Columns))
	for _, c := range t.Columns {
		var v *record.Value
		if fromKey != nil {
			if kv, ok := fromKey[c.Name]; ok {
				v = &kv
			}
		}
		if v == nil && sc.set[c.Index] {
			v = &sc.slots[c.Index]
		}
		if v == nil {
			if c.NotNull && !c.HasDef {
				return nil, record.FieldErrorf(c.Name, record.ErrCoerce, "no value for NOT NULL column %q, which has no default", c.Name)
			}
			continue
		}
		if c.Generated {
			return nil, record.FieldErrorf(c.Name, record.ErrCoerce, "column %q is generated and cannot be written", c.Name)
		}
		x, err := coerce(c, v)
		if err != nil {
			return nil, err
		}
		sc.cols = append(sc.cols, c)
		o.vals = append(o.vals, x)
		sc.shape = strconv.AppendInt(sc.shape, int64(c.Index), 10)
		sc.shape = append(sc.shape, ',')
	}
	if len(sc.cols) == 0 {
		return nil, record.Errorf(record.ErrDecode, "the value sets no column")
	}
	o.shape, o.cols = sc.intern()
	if p.pkCols != nil && w.cfg.InsertMode == InsertModeUpsert {
		keyVals := make([]any, 0, len(p.pkCols))
		for _, c := range p.pkCols {
			i := slices.Index(o.cols, c)
			if i < 0 || o.vals[i] == nil {
				return nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "no value for pk column %q", c.Name)
			}
			keyVals = append(keyVals, o.vals[i])
		}
		o.key = keyString(keyVals)
	}
	return o, nil
}

func pkNames(p *plan) string {
	names := make([]string, len(p.pkCols))
	for i, c := range p.pkCols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// keyString encodes converted pk values so that equal keys give equal
// strings (numerics are normalised, times compared as instants).
func keyString(vals []any) string {
	var b strings.Builder
	for _, v := range vals {
		switch x := v.(type) {
		case pgtype.Numeric:
			b.WriteString("n:")
			b.WriteString(numericKey(x))
		case pgtype.Timestamptz:
			fmt.Fprintf(&b, "t:%d.%d.%d", x.Time.Unix(), x.Time.Nanosecond(), x.InfinityModifier)
		case pgtype.Timestamp:
			fmt.Fprintf(&b, "t:%d.%d.%d", x.Time.Unix(), x.Time.Nanosecond(), x.InfinityModifier)
		case pgtype.Date:
			fmt.Fprintf(&b, "d:%d.%d", x.Time.Unix(), x.InfinityModifier)
		case float64:
			if x == 0 {
				x = 0 // -0 == 0
			}
			b.WriteString("f:" + strconv.FormatFloat(x, 'g', -1, 64))
		case float32:
			if x == 0 {
				x = 0
			}
			b.WriteString("f:" + strconv.FormatFloat(float64(x), 'g', -1, 32))
		case string:
			b.WriteString("s:" + strconv.Quote(x))
		default:
			fmt.Fprintf(&b, "%T:%v", v, v)
		}
		b.WriteByte(0)
	}
	return b.String()
}

func numericKey(n pgtype.Numeric) string {
	switch {
	case n.NaN:
		return "NaN"
	case n.InfinityModifier != 0:
		return strconv.Itoa(int(n.InfinityModifier)) + "inf"
	case n.Int == nil || n.Int.Sign() == 0:
		return "0"
	}
	digits := n.Int.String()
	exp := int(n.Exp)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	return digits + "e" + strconv.Itoa(exp)
}

// applyOrdered applies ops in offset order (insert mode): runs of inserts
// between tombstones go in with COPY, one per column set, runs of tombstones
// with one DELETE.
func (w *Writer) applyOrdered(ctx context.Context, tx pgx.Tx, p *plan, ops []*op, stats *WriteStats) ([]*record.Error, error) {
	var bad []*record.Error
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].del == ops[0].del {
			n++
		}
		run := ops[:n]
		ops = ops[n:]
		if run[0].del {
			b, err := w.bisect(ctx, tx, run, func(ops []*op) error { return w.execDelete(ctx, tx, p, ops) })
			if err != nil {
				return nil, err
			}
			bad = append(bad, failureErrors(b)...)
			stats.Deleted += len(run) - len(b)
			continue
		}
		for _, group := range groupByShape(run) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execCopy(ctx, tx, p, cols, ops) })
			if err != nil {
				return nil, err
			}
			bad = append(bad, failureErrors(b)...)
			stats.Written += len(group) - len(b)
		}
	}
	return bad, nil
}

// applyKeyed applies ops in upsert mode: per key only the last op counts.
// When the database rejects a key's last op, the key's previous op is tried
// in the next round, so the table ends as if the records had been applied
// one by one, skipping the bad ones.
func (w *Writer) applyKeyed(ctx context.Context, tx pgx.Tx, p *plan, ops []*op, stats *WriteStats) ([]*record.Error, error) {
	history := make(map[string][]*op) // per key, its ops in offset order
	var keys []string                 // in order of first appearance
	for _, o := range ops {
		if _, ok := history[o.key]; !ok {
			keys = append(keys, o.key)
		}
		history[o.key] = append(history[o.key], o)
	}
	var bad []*record.Error
	pending := keys
	for len(pending) > 0 {
		var dels, ups []*op
		for _, k := range pending {
			h := history[k]
			o := h[len(h)-1]
			if o.del {
				dels = append(dels, o)
			} else {
				ups = append(ups, o)
			}
		}
		var failed []failure
		if len(dels) > 0 {
			b, err := w.bisect(ctx, tx, dels, func(ops []*op) error { return w.execDelete(ctx, tx, p, ops) })
			if err != nil {
				return nil, err
			}
			failed = append(failed, b...)
			stats.Deleted += len(dels) - len(b)
		}
		for _, group := range groupByShape(ups) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execUpsert(ctx, tx, p, cols, ops) })
			if err != nil {
				return nil, err
			}
			failed = append(failed, b...)
			stats.Written += len(group) - len(b)
		}
		bad = append(bad, failureErrors(failed)...)
		// Retry the keys whose last op failed with their previous op.
		failedKeys := make(map[string]bool, len(failed))
		for _, f := range failed {
			failedKeys[f.op.key] = true
		}
		pending = pending[:0:0]
		for _, k := range keys {
			if failedKeys[k] {
				h := history[k]
				history[k] = h[:len(h)-1]
				if len(h) > 1 {
					pending = append(pending, k)
				}
			}
		}
	}
	for _, h := range history {
		if len(h) > 1 {
			stats.Superseded += len(h) - 1
		}
	}
	return bad, nil
}

// groupByShape splits ops by column set, keeping offset order inside each
// group and ordering groups by their first op.
func groupByShape(ops []*op) [][]*op {
	if len(ops) == 0 {
		return nil
	}
	same := true
	for _, o := range ops[1:] {
		if o.shape != ops[0].shape {
			same = false
			break
		}
	}
	if same {
		return [][]*op{ops}
	}
	idx := map[string]int{}
	var groups [][]*op
	for _, o := range ops {
		i, ok := idx[o.shape]
		if !ok {
			i = len(groups)
			idx[o.shape] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], o)
	}
	return groups
}

// failure is an op the database rejected.
type failure struct {
	op  *op
	err *record.Error
}

func failureErrors(fs []failure) []*record.Error {
	out := make([]*record.Error, len(fs))
	for i, f := range fs {
		out[i] = f.err
	}
	return out
}

// bisect runs exec on ops under a savepoint. When the database rejects a
// record, it rolls back to the savepoint and splits ops in halves until the
// bad records are isolated; those come back as record errors. Any other
// error is returned as is: the batch fails.
func (w *Writer) bisect(ctx context.Context, tx pgx.Tx, ops []*op, exec func([]*op) error) ([]failure, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	err = exec(ops)
	if err == nil {
		return nil, sp.Commit(ctx)
	}
	if !IsBadRecord(err) {
		_ = sp.Rollback(ctx)
		return nil, err
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return nil, rerr
	}
	if len(ops) == 1 {
		return []failure{{op: ops[0], err: badRecord(ops[0].rec, rejected{pg: err})}}, nil
	}
	mid := len(ops) / 2
	left, err := w.bisect(ctx, tx, ops[:mid], exec)
	if err != nil {
		return nil, err
	}
	right, err := w.bisect(ctx, tx, ops[mid:], exec)
	if err != nil {
		return nil, err
	}
	return append(left, right...), nil
}

// execCopy writes ops (all with columns cols) with COPY.
func (w *Writer) execCopy(ctx context.Context, tx pgx.Tx, p *plan, cols []*column, ops []*op) error {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{p.t.Schema, p.t.Name}, names,
		pgx.CopyFromSlice(len(ops), func(i int) ([]any, error) { return ops[i].vals, nil }))
	return err
}

// paramType is the cast of a column's unnest parameter: its type as an
// array, or text[] for array columns (unnest would flatten them), cast back
// per element.
func paramType(c *column) (param, cast string) {
	if c.Type.Kind == kindArray {
		return "pg_catalog.text[]", "::" + c.Type.Name
	}
	return c.Type.Name + "[]", ""
}

// columnArrays transposes ops' values into one array per column.
func columnArrays(cols []*column, ops []*op) ([]any, error) {
	args := make([]any, len(cols))
	for j, c := range cols {
		if c.Type.Kind == kindArray {
			arr := make([]*string, len(ops))
			for i, o := range ops {
				v := o.vals[slices.Index(o.cols, c)]
				if v == nil {
					continue
				}
				s, err := arrayText(c, v)
				if err != nil {
					return nil, err
				}
				arr[i] = &s
			}
			args[j] = arr
			continue
		}
		arr := make([]any, len(ops))
		for i, o := range ops {
			arr[i] = o.vals[slices.Index(o.cols, c)]
		}
		args[j] = arr
	}
	return args, nil
}

// arrayText renders an array value in PostgreSQL's text syntax.
func arrayText(c *column, v any) (string, error) {
	pgxTypes.Lock()
	defer pgxTypes.Unlock()
	if pgxTypes.m == nil {
		pgxTypes.m = pgtype.NewMap()
	}
	b, err := pgxTypes.m.Encode(c.Type.OID, pgtype.TextFormatCode, v, nil)
	if err != nil {
		return "", fmt.Errorf("postgres: encode column %q: %w", c.Name, err)
	}
	return string(b), nil
}

// execUpsert writes ops (all with columns cols) with one
// INSERT … SELECT FROM unnest(…) ON CONFLICT (pk) DO UPDATE.
func (w *Writer) execUpsert(ctx context.Context, tx pgx.Tx, p *plan, cols []*column, ops []*op) error {
	var sel, params, names, set strings.Builder
	isPK := func(c *column) bool { return slices.Contains(p.pkCols, c) }
	for j, c := range cols {
		if j > 0 {
			sel.WriteString(", ")
			params.WriteString(", ")
			names.WriteString(", ")
		}
		param, cast := paramType(c)
		fmt.Fprintf(&params, "$%d::%s", j+1, param)
		fmt.Fprintf(&sel, "u.c%d%s", j, cast)
		names.WriteString(pgx.Identifier{c.Name}.Sanitize())
		if !isPK(c) {
			if set.Len() > 0 {
				set.WriteString(", ")
			}
			q := pgx.Identifier{c.Name}.Sanitize()
			set.WriteString(q + " = EXCLUDED." + q)
		}
	}
	alias := make([]string, len(cols))
	for j := range cols {
		alias[j] = "c" + strconv.Itoa(j)
	}
	target := make([]string, len(p.pkCols))
	for i, c := range p.pkCols {
		target[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	action := "DO NOTHING"
	if set.Len() > 0 {
		action = "DO UPDATE SET " + set.String()
	}
	sql := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS u(%s) ON CONFLICT (%s) %s",
		p.t.Ident, names.String(), sel.String(), params.String(), strings.Join(alias, ", "), strings.Join(target, ", "), action)
	args, err := columnArrays(cols, ops)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}

// execDelete deletes the rows of ops' keys with one DELETE … USING unnest.
func (w *Writer) execDelete(ctx context.Context, tx pgx.Tx, p *plan, ops []*op) error {
	var params, where strings.Builder
	alias := make([]string, len(p.pkCols))
	for j, c := range p.pkCols {
		if j > 0 {
			params.WriteString(", ")
			where.WriteString(" AND ")
		}
		param, cast := paramType(c)
		fmt.Fprintf(&params, "$%d::%s", j+1, param)
		alias[j] = "c" + strconv.Itoa(j)
		fmt.Fprintf(&where, "t.%s = d.c%d%s", pgx.Identifier{c.Name}.Sanitize(), j, cast)
	}
	sql := fmt.Sprintf("DELETE FROM %s AS t USING unnest(%s) AS d(%s) WHERE %s",
		p.t.Ident, params.String(), strings.Join(alias, ", "), where.String())
	args, err := columnArrays(p.pkCols, ops)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}
