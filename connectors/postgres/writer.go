package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
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
	AutoCreate      bool     // "auto.create": create a missing target table from the record's schema, in the batch's transaction
	AutoEvolve      bool     // "auto.evolve": add a nullable column for a new field, in the batch's transaction
	CDCColumns      []string // "cdc.columns": change columns auto.create adds
	// Pipeline converts records (the connector's converters); nil: txsink's
	// default JSON converter.
	Pipeline *convert.Pipeline
	// Log receives the schema changes; nil: slog.Default().
	Log *slog.Logger
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
	case !utf8.ValidString(s):
		return fmt.Errorf("%s: %q is not valid UTF-8", key, s)
	}
	return nil
}

// Validate checks the configuration (with defaults applied to empty fields)
// and returns its first problem. Every message starts with the offending
// config key.
func (c WriterConfig) Validate() error {
	if errs := c.problems(); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// problems returns every problem of the configuration (with defaults
// applied to empty fields), each message starting with the offending
// config key, so that validate can report them all at once.
func (c WriterConfig) problems() []error {
	c = c.withDefaults()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.Connector == "" || strings.IndexByte(c.Connector, 0) >= 0 {
		add(errors.New("name: the connector name must be set (and contain no NUL)"))
	}
	if err := checkIdent("table.name.format", c.Schema); err != nil {
		add(fmt.Errorf("schema: %w", err))
	}
	if strings.IndexByte(c.TableNameFormat, 0) >= 0 {
		add(errors.New("table.name.format: must not contain NUL"))
	} else if err := record.CheckTableNameFormat(c.TableNameFormat); err != nil {
		add(fmt.Errorf("table.name.format: %w", err))
	}
	switch c.InsertMode {
	case InsertModeInsert, InsertModeUpsert:
	default:
		add(fmt.Errorf("insert.mode: must be %q or %q, got %q", InsertModeInsert, InsertModeUpsert, c.InsertMode))
	}
	switch c.PKMode {
	case PKModeNone, PKModeRecordKey, PKModeRecordValue, PKModeKafka:
	default:
		add(fmt.Errorf("pk.mode: must be one of none, record_key, record_value, kafka, got %q", c.PKMode))
	}
	if c.InsertMode == InsertModeUpsert && c.PKMode == PKModeNone {
		add(errors.New("pk.mode: insert.mode=upsert needs a primary key: set pk.mode to record_key, record_value or kafka"))
	}
	if c.PKMode == PKModeNone && len(c.PKFields) > 0 {
		add(errors.New("pk.fields: must be empty when pk.mode=none"))
	}
	if c.PKMode == PKModeKafka && len(c.PKFields) != 0 && len(c.PKFields) != 3 {
		add(fmt.Errorf("pk.fields: pk.mode=kafka takes none or exactly 3 names (topic, partition, offset columns), got %d", len(c.PKFields)))
	}
	seen := map[string]bool{}
	for _, f := range c.PKFields {
		if err := checkIdent("pk.fields", f); err != nil {
			add(err)
		} else if seen[f] {
			add(fmt.Errorf("pk.fields: %q is listed twice", f))
		}
		seen[f] = true
	}
	if c.DeleteEnabled && c.PKMode != PKModeRecordKey {
		add(fmt.Errorf("delete.enabled: requires pk.mode=record_key, got pk.mode=%s", c.PKMode))
	}
	switch c.ErrorsTolerance {
	case ToleranceNone:
	case ToleranceAll:
		if c.DLQTable == "" && c.DLQTopic == "" {
			add(errors.New("errors.deadletterqueue.table.name: required when errors.tolerance=all (or set errors.deadletterqueue.topic.name)"))
		}
	default:
		add(fmt.Errorf("errors.tolerance: must be %q or %q, got %q", ToleranceNone, ToleranceAll, c.ErrorsTolerance))
	}
	if c.DLQTable != "" {
		s, t := c.dlqName()
		if err := checkIdent("errors.deadletterqueue.table.name", s); err != nil {
			add(err)
		} else {
			add(checkIdent("errors.deadletterqueue.table.name", t))
		}
	}
	return errs
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
	cfg WriterConfig
	// records converts the batches Write is given as Kafka records
	// (tests, tools): the runtime's pipeline, built from cfg.Pipeline and
	// cfg.ErrorsTolerance. The runtime converts its batches itself.
	records *connectors.RecordPipeline
	log     *slog.Logger
	tables  tableCache
}

// NewWriter validates cfg, applies its defaults and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Writer{cfg: cfg, records: connectors.NewRecordPipeline(cfg.Pipeline, cfg.ErrorsTolerance, cfg.readsKeys()), log: log}, nil
}

// readsKeys reports whether every record's key is needed (pk.mode=record_key).
func (c WriterConfig) readsKeys() bool { return c.PKMode == PKModeRecordKey }

// Config returns the writer's configuration with defaults applied.
func (w *Writer) Config() WriterConfig { return w.cfg }

// WriteStats counts what one Write did with its records. Written, Deleted,
// Truncated, DeadLettered, Superseded and Dropped add up to the number of
// records.
type WriteStats struct {
	Written      int // records written as rows (COPY, insert or upsert)
	Deleted      int // tombstones and delete events applied as DELETE by key (whether or not a row existed)
	Truncated    int // truncate events applied (cdc.truncate=apply)
	DeadLettered int // bad records set aside (errors.tolerance=all): written to the dead-letter table, if any, and listed in Bad
	Superseded   int // records replaced by a later record with the same key in the batch, or emptied by a later truncate
	Dropped      int // records a transform or the change-event stage dropped
	// Bad are the dead-lettered records' errors, in offset order, for the
	// runtime's dead-letter topic.
	Bad []*record.Error
	// SchemaChanges counts the CREATE TABLE and ALTER TABLE statements
	// the write ran in its transaction (auto.create, auto.evolve); each is
	// logged.
	SchemaChanges int
}

// Write writes one partition's batch (records in offset order, all of the
// same topic and partition) inside tx. Each record goes to the table
// table.name.format names for it (${topic}, and for change events
// ${source.db}, ${source.schema}, ${source.table}), so one batch may write
// several tables, all in tx.
//
// Rows go in with COPY (insert.mode=insert) or one INSERT … SELECT FROM
// unnest(…) ON CONFLICT DO UPDATE per column set (upsert), tombstones
// become one DELETE. Change events (see convert.Pipeline) are applied by
// the record key whatever insert.mode and pk.mode say: an upsert, a
// DELETE, or a TRUNCATE (cdc.truncate=apply). Keyed writes (upsert mode,
// change events) apply only a key's last record of the batch, which is
// what applying them one by one leaves. Each statement runs under a
// savepoint; when the database rejects a record (see IsBadRecord) the
// statement is bisected to isolate it.
//
// auto.create creates a missing table from the first record that needs it
// and auto.evolve adds a nullable column for a new field, in tx (see
// WriteBatch).
//
// errors.tolerance=all: bad records go to the dead-letter table in tx, once
// each (a redo cannot duplicate them), when one is set, and are listed in
// WriteStats.Bad; the rest of the batch is written. A record wrapping
// record.ErrIncompatible (a change auto.evolve cannot make) is never
// dead-lettered but returned, as with none.
// errors.tolerance=none: Write returns the *record.Error of the lowest bad
// offset and tx must be rolled back.
//
// Any error that is not a *record.Error (connection loss, serialization
// failure, missing table or column, …) means the batch was not written: tx
// must be rolled back and the batch retried or stopped (see IsRetryable).
// Cancelling ctx aborts the statement in progress; tx must then be rolled
// back.
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, records []*kgo.Record) (WriteStats, error) {
	c, err := w.records.Convert(ctx, records)
	if err != nil {
		return WriteStats{}, err
	}
	return w.WriteBatch(ctx, tx, c, true)
}

// WriteBatch is Write, told whether tx may change the schema. A schema
// change (CREATE TABLE, ALTER TABLE) or a TRUNCATE takes an ACCESS
// EXCLUSIVE lock that a prepared transaction keeps until its round's
// decision, so the other batches of the round that touch the table would
// wait for a decision that waits for them. With schemaChanges false, a
// batch that needs one fails with an error wrapping ErrSchemaChange and
// nothing written; the runtime then gives the batch a round of its own.
//
// The batch is planned (see plan) against a snapshot of the cached table
// descriptions; the tables the plan lacks are read and the schema changes
// it needs are made in tx, each followed by a pass planned against the
// new snapshot; the complete plan is then applied.
func (w *Writer) WriteBatch(ctx context.Context, tx pgx.Tx, c *connectors.Converted, schemaChanges bool) (WriteStats, error) {
	var stats WriteStats
	cat := newCatalog(w.cfg.Schema, &w.tables)
	var p *batchPlan
	for {
		var err error
		if p, err = w.plan(ctx, cat, c, schemaChanges); err != nil {
			return WriteStats{}, err
		}
		switch {
		case len(p.reads) > 0:
			err = w.read(ctx, tx, cat, p.reads)
		case len(p.changes) > 0:
			err = w.changeSchema(ctx, tx, cat, p.changes, &stats)
		}
		if err != nil {
			return WriteStats{}, err
		}
		if len(p.reads) == 0 && len(p.changes) == 0 {
			break
		}
	}
	stats.Dropped, stats.Deleted, stats.Truncated = p.dropped, p.noopDeletes, p.noopTruncates
	p.stopAtBad(c.Tolerant())
	dbBad, err := w.applyTables(ctx, tx, p.tables, &stats)
	if err != nil {
		return WriteStats{}, err
	}
	letters, err := w.settle(ctx, tx, c, append(p.bad, dbBad...), schemaChanges)
	if err != nil {
		return WriteStats{}, err
	}
	if len(letters) > 0 {
		stats.DeadLettered, stats.Bad = len(letters), make([]*record.Error, len(letters))
		for i, l := range letters {
			stats.Bad[i] = l.Err
		}
	}
	return stats, nil
}

// errKeyedWrite is WriteBatches' answer, with appendOnly, for a batch
// whose write depends on the rows already in its tables.
var errKeyedWrite = errors.New("the batch needs keyed writes (deletes, upserts or truncates)")

// keyed reports whether the plan's write depends on the rows already in
// its tables, as the previous batch left them: a keyed write (an upsert,
// a change event), a delete or a truncate, or a delete or truncate taken
// for a no-op because its table does not exist in this transaction (an
// earlier round may be creating it). A batch written ahead would miss
// that batch's uncommitted rows, or the table it created.
func (p *batchPlan) keyed() bool {
	if p.noopDeletes+p.noopTruncates > 0 {
		return true
	}
	for _, tp := range p.tables {
		if slices.ContainsFunc(tp.ops, func(o *op) bool { return o.keyed || o.trunc || o.del }) {
			return true
		}
	}
	return false
}

// stopAtBad drops, when the batch is not tolerant (errors.tolerance=none),
// every op at or after its first bad offset: nothing there matters, but a
// record before it that the database refuses comes first.
func (p *batchPlan) stopAtBad(tolerant bool) {
	if tolerant || len(p.bad) == 0 {
		return
	}
	first := p.bad[0].Offset
	for _, tp := range p.tables {
		tp.ops = slices.DeleteFunc(tp.ops, func(o *op) bool { return o.rec.Offset >= first })
	}
}

// applyTables applies tps in order and returns the records the database
// refused. A table whose apply fails because it changed under the cache
// is forgotten; once all are applied, the tables read fresh for them and
// not changed are cached.
func (w *Writer) applyTables(ctx context.Context, tx pgx.Tx, tps []*tablePlan, stats *WriteStats) ([]*record.Error, error) {
	var bad []*record.Error
	for _, tp := range tps {
		dbBad, err := w.apply(ctx, tx, tp, stats)
		if err != nil {
			if code := pgCode(err); tp.e.m != nil && (code == "42P01" || code == "42703" || code == "42804") {
				w.tables.forget(tp.e.m.t.Ident) // the table changed under the cache
			}
			return nil, err
		}
		bad = append(bad, dbBad...)
	}
	for _, tp := range tps {
		if e := tp.e; e.fresh && !e.changed && e.m != nil {
			w.tables.put(e.m.t.Ident, e.m.t)
		}
	}
	return bad, nil
}

// settle hands the records the database or the mapping refused (bad) to
// the runtime's tolerance operator, where errors.tolerance=none makes
// the lowest fail the write and all makes them dead letters, and writes
// the dead letters to the dead-letter table, if any. It returns them.
func (w *Writer) settle(ctx context.Context, tx pgx.Tx, c *connectors.Converted, bad []*record.Error, schemaChanges bool) ([]connectors.DeadLetter, error) {
	if err := c.Reject(bad); err != nil {
		return nil, err
	}
	letters := c.DeadLetters()
	if len(letters) > 0 && w.cfg.DLQTable != "" {
		if err := w.deadLetter(ctx, tx, letters, schemaChanges); err != nil {
			return nil, err
		}
	}
	return letters, nil
}

// WriteBatches writes several batches (of distinct partitions, in their
// order) in tx as one, without schema changes: each is planned as
// WriteBatch plans it, and the appends to one table are applied together,
// batch after batch, so that a round of many small batches costs one
// COPY per table rather than one per batch (keyed writes and truncates go
// batch by batch). The rows and their order
// within each partition are those of writing the batches one by one in
// tx. On error, at names the batch it belongs to (-1: none in
// particular); a batch that needs a schema change fails with an error
// wrapping ErrSchemaChange, nothing written.
//
// With appendOnly (a round written ahead of its turn, which must not
// depend on rows the previous round has not committed yet), a batch whose
// plan needs a keyed write, a truncate, or a delete that finds no table
// fails with an error wrapping errKeyedWrite, at naming it, before
// anything is written.
func (w *Writer) WriteBatches(ctx context.Context, tx pgx.Tx, cs []*connectors.Converted, appendOnly bool) (at int, err error) {
	cat := newCatalog(w.cfg.Schema, &w.tables)
	plans := make([]*batchPlan, len(cs))
	for i, c := range cs {
		for {
			p, err := w.plan(ctx, cat, c, false)
			if err != nil {
				return i, err
			}
			if len(p.reads) > 0 {
				if err := w.read(ctx, tx, cat, p.reads); err != nil {
					return i, err
				}
				continue
			}
			plans[i] = p
			break
		}
	}
	// Only appends are merged: keyed writes collapse the ops of a key
	// (the last wins) and a truncate drops the ops before it, so merged
	// across batches they would hide a record of an earlier batch that
	// the database refuses (with errors.tolerance=none, the record the
	// partition must stop at). Those go batch by batch, in order. A table
	// read again for a later batch has a new entry: the earlier batches'
	// ops keep theirs.
	var merged []*tablePlan
	open := map[*catEntry]*tablePlan{} // the mergeable plan last added per entry
	for i, p := range plans {
		p.stopAtBad(cs[i].Tolerant())
		if appendOnly && p.keyed() {
			return i, errKeyedWrite
		}
		for _, tp := range p.tables {
			appends := !slices.ContainsFunc(tp.ops, func(o *op) bool { return o.keyed || o.trunc })
			if m := open[tp.e]; m != nil && appends {
				m.ops = append(m.ops, tp.ops...)
				continue
			}
			m := &tablePlan{e: tp.e, ops: slices.Clone(tp.ops)}
			merged = append(merged, m)
			if appends {
				open[tp.e] = m
			} else {
				delete(open, tp.e)
			}
		}
	}
	var stats WriteStats
	bad := make([][]*record.Error, len(cs))
	for i, p := range plans {
		bad[i] = p.bad
	}
	// The batch of each partition, for the records the database refuses.
	type part struct {
		topic     string
		partition int32
	}
	owner := map[part]int{}
	for i, p := range plans {
		for _, t := range p.tables {
			if len(t.ops) > 0 {
				owner[part{t.ops[0].rec.Topic, t.ops[0].rec.Partition}] = i
			}
		}
	}
	batchOf := func(topic string, partition int32) int {
		if i, ok := owner[part{topic, partition}]; ok {
			return i
		}
		return -1
	}
	dbBad, err := w.applyTables(ctx, tx, merged, &stats)
	if err != nil {
		return -1, err
	}
	for _, re := range dbBad {
		i := batchOf(re.Topic, re.Partition)
		if i < 0 {
			return -1, fmt.Errorf("a refused record (%s) of no batch of the write", re)
		}
		bad[i] = append(bad[i], re)
	}
	for i, c := range cs {
		if _, err := w.settle(ctx, tx, c, bad[i], false); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// read reads the tables names from the database into cat (fresh). A table
// that does not exist is an error wrapping ErrTableNotFound, unless
// auto.create is on: then it is known not to exist.
func (w *Writer) read(ctx context.Context, tx pgx.Tx, cat *catalog, names []string) error {
	for _, name := range names {
		t, err := loadTable(ctx, tx, w.cfg.Schema, name)
		if err != nil && !(errors.Is(err, ErrTableNotFound) && w.cfg.AutoCreate) {
			return err
		}
		w.tables.forget(pgx.Identifier{w.cfg.Schema, name}.Sanitize())
		cat.set(w, name, t, true)
	}
	return nil
}

// changeSchema makes changes in tx (auto.create, auto.evolve) and reads
// the changed tables again into cat. A table is altered by auto.evolve
// at most once per write (its plan asks for every column its records
// lack at once).
func (w *Writer) changeSchema(ctx context.Context, tx pgx.Tx, cat *catalog, changes []*schemaChange, stats *WriteStats) error {
	for _, ch := range changes {
		e := cat.entries[ch.table]
		ident := pgx.Identifier{w.cfg.Schema, ch.table}.Sanitize()
		var done []string
		if ch.create != "" {
			sql, err := w.createTable(ctx, tx, ident, ch.create)
			if err != nil {
				return err
			}
			if sql != "" {
				done = append(done, sql)
			}
		} else {
			if e.evolved {
				return fmt.Errorf("postgres: table %s needs a second auto.evolve change in one transaction", ident)
			}
			var err error
			if done, err = w.addColumns(ctx, tx, e.m.t, ch.columns); err != nil {
				return err
			}
			e.evolved = true
		}
		for _, sql := range done {
			stats.SchemaChanges++
			w.log.Info("schema change in the batch's transaction; it commits or rolls back with the batch", "sql", sql)
		}
		e.changed = e.changed || len(done) > 0
		w.tables.forget(ident)
		t, err := loadTable(ctx, tx, w.cfg.Schema, ch.table)
		if err != nil {
			return err
		}
		cat.set(w, ch.table, t, true)
	}
	return nil
}

// apply writes a table's ops: a truncate first (the last one; what came
// before it is moot), then runs of ordered ops (COPY and tombstone
// deletes in insert mode) and keyed ops (upserts, change events) in
// record order.
func (w *Writer) apply(ctx context.Context, tx pgx.Tx, tp *tablePlan, stats *WriteStats) ([]*record.Error, error) {
	ops := tp.ops
	if len(ops) == 0 || tp.e.m == nil {
		return nil, nil
	}
	t := tp.e.m.t
	for i := len(ops) - 1; i >= 0; i-- {
		if !ops[i].trunc {
			continue
		}
		for _, o := range ops[:i] {
			if o.trunc {
				stats.Truncated++
			} else if !o.extra {
				stats.Superseded++
			}
		}
		sql := "TRUNCATE TABLE " + t.Ident
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, ddlErr(sql, err)
		}
		stats.Truncated++
		ops = ops[i+1:]
		break
	}
	var bad []*record.Error
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].keyed == ops[0].keyed {
			n++
		}
		run := ops[:n]
		ops = ops[n:]
		var b []*record.Error
		var err error
		if run[0].keyed {
			b, err = w.applyKeyed(ctx, tx, t, run, stats)
		} else {
			b, err = w.applyOrdered(ctx, tx, t, run, stats)
		}
		if err != nil {
			return nil, err
		}
		bad = append(bad, b...)
	}
	return bad, nil
}

func pkNames(pk []*column) string {
	names := make([]string, len(pk))
	for i, c := range pk {
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
func (w *Writer) applyOrdered(ctx context.Context, tx pgx.Tx, t *table, ops []*op, stats *WriteStats) ([]*record.Error, error) {
	var bad []*record.Error
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].del == ops[0].del {
			n++
		}
		run := ops[:n]
		ops = ops[n:]
		if run[0].del {
			b, err := w.bisect(ctx, tx, run, func(ops []*op) error { return w.execDelete(ctx, tx, t, ops) })
			if err != nil {
				return nil, err
			}
			bad = append(bad, failureErrors(b)...)
			stats.Deleted += counted(run) - counted(failedOps(b))
			continue
		}
		for _, group := range groupByShape(run) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execCopy(ctx, tx, t, cols, ops) })
			if err != nil {
				return nil, err
			}
			bad = append(bad, failureErrors(b)...)
			stats.Written += counted(group) - counted(failedOps(b))
		}
	}
	return bad, nil
}

// applyKeyed applies ops in upsert mode: per key only the last op counts.
// When the database rejects a key's last op, the key's previous op is tried
// in the next round, so the table ends as if the records had been applied
// one by one, skipping the bad ones.
func (w *Writer) applyKeyed(ctx context.Context, tx pgx.Tx, t *table, ops []*op, stats *WriteStats) ([]*record.Error, error) {
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
			up, del := collapse(t, history[k])
			if del != nil {
				dels = append(dels, del)
			}
			if up != nil {
				ups = append(ups, up)
			}
		}
		var failed []failure
		for _, group := range groupByShape(dels) {
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execDelete(ctx, tx, t, ops) })
			if err != nil {
				return nil, err
			}
			failed = append(failed, b...)
			stats.Deleted += counted(group) - counted(failedOps(b))
		}
		for _, group := range groupByShape(ups) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execUpsert(ctx, tx, t, cols, ops) })
			if err != nil {
				return nil, err
			}
			failed = append(failed, b...)
			stats.Written += counted(group) - counted(failedOps(b))
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
			stats.Superseded += counted(h[:len(h)-1])
		}
	}
	return bad, nil
}

// collapse returns the statements that leave a key's row as applying its
// ops h (in offset order) one by one would: the last op, when it is an
// upsert that sets fewer columns than the upserts of the key before it
// (a partial record, or an update whose unchanged values the source
// could not send), completed with their latest values of those columns;
// and when a delete of the key precedes those upserts and they do not
// set every column, that delete too, run first, so the other columns
// start from their defaults again.
func collapse(t *table, h []*op) (up, del *op) {
	last := h[len(h)-1]
	if last.del {
		return nil, last
	}
	var extraCols []*column
	var extraVals []any
	for i := len(h) - 2; i >= 0; i-- {
		o := h[i]
		if o.del {
			del = o
			break
		}
		if o.shape == last.shape {
			continue
		}
		for j, c := range o.cols {
			if !slices.Contains(last.cols, c) && !slices.Contains(extraCols, c) {
				extraCols = append(extraCols, c)
				extraVals = append(extraVals, o.vals[j])
			}
		}
	}
	if del != nil {
		if len(last.cols)+len(extraCols) == len(t.Columns) {
			del = nil
		} else {
			d := *del
			d.extra = true // run for the upsert that follows, counted with it
			del = &d
		}
	}
	if len(extraCols) == 0 {
		return last, del
	}
	m := &op{rec: last.rec, keyed: true, pk: last.pk, key: last.key}
	all := append(slices.Clone(last.cols), extraCols...)
	allVals := append(slices.Clone(last.vals), extraVals...)
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return all[a].Index - all[b].Index })
	var shape []byte
	for _, j := range order {
		m.cols, m.vals = append(m.cols, all[j]), append(m.vals, allVals[j])
		shape = strconv.AppendInt(shape, int64(all[j].Index), 10)
		shape = append(shape, ',')
	}
	for _, c := range last.keep {
		if !slices.Contains(extraCols, c) {
			m.keep = append(m.keep, c)
		}
	}
	shape = appendKeep(shape, m.keep)
	shape = append(shape, '|')
	for _, c := range m.pk {
		shape = strconv.AppendInt(shape, int64(c.Index), 10)
		shape = append(shape, ',')
	}
	m.shape = string(shape)
	return m, del
}

// appendKeep appends the keep columns to a shape.
func appendKeep(shape []byte, keep []*column) []byte {
	for _, c := range keep {
		shape = append(shape, 'k')
		shape = strconv.AppendInt(shape, int64(c.Index), 10)
		shape = append(shape, ',')
	}
	return shape
}

// counted is the number of ops that stand for a record of their own (not
// the extra delete of a moved key).
func counted(ops []*op) int {
	n := 0
	for _, o := range ops {
		if !o.extra {
			n++
		}
	}
	return n
}

func failedOps(fs []failure) []*op {
	out := make([]*op, len(fs))
	for i, f := range fs {
		out[i] = f.op
	}
	return out
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
func (w *Writer) execCopy(ctx context.Context, tx pgx.Tx, t *table, cols []*column, ops []*op) error {
	if copyDescribed(cols) {
		return copyOps(ctx, tx, t, cols, ops)
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{t.Schema, t.Name}, names,
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
func (w *Writer) execUpsert(ctx context.Context, tx pgx.Tx, t *table, cols []*column, ops []*op) error {
	var sel, params, names, set strings.Builder
	pk := ops[0].pk
	isPK := func(c *column) bool { return slices.Contains(pk, c) }
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
	target := make([]string, len(pk))
	for i, c := range pk {
		target[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	if keep := ops[0].keep; len(keep) > 0 {
		// The row of the key keeps these columns (not in SET); a new
		// row reads them from the row of its key, which a statement
		// before may have written or deleted.
		var where strings.Builder
		for i, c := range pk {
			if i > 0 {
				where.WriteString(" AND ")
			}
			j := slices.Index(cols, c)
			_, cast := paramType(c)
			fmt.Fprintf(&where, "k.%s = u.c%d%s", target[i], j, cast)
		}
		for _, c := range keep {
			q := pgx.Identifier{c.Name}.Sanitize()
			fmt.Fprintf(&names, ", %s", q)
			fmt.Fprintf(&sel, ", (SELECT k.%s FROM %s k WHERE %s)", q, t.Ident, where.String())
		}
	}
	action := "DO NOTHING"
	if set.Len() > 0 {
		action = "DO UPDATE SET " + set.String()
	}
	sql := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS u(%s) ON CONFLICT (%s) %s",
		t.Ident, names.String(), sel.String(), params.String(), strings.Join(alias, ", "), strings.Join(target, ", "), action)
	args, err := columnArrays(cols, ops)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}

// execDelete deletes the rows of ops' keys (all of the same key columns)
// with one DELETE … USING unnest.
func (w *Writer) execDelete(ctx context.Context, tx pgx.Tx, t *table, ops []*op) error {
	var params, where strings.Builder
	pk := ops[0].pk
	alias := make([]string, len(pk))
	for j, c := range pk {
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
		t.Ident, params.String(), strings.Join(alias, ", "), where.String())
	args, err := columnArrays(pk, ops)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}
