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
	"github.com/jackc/pgx/v5/pgconn"
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
	Written   int // records written as rows (COPY, insert or upsert)
	Deleted   int // tombstones and delete events applied as DELETE by key (whether or not a row existed)
	Truncated int // truncate events applied (cdc.truncate=apply)
	// ReadsTable is set when the write ran a DELETE, an upsert or a
	// TRUNCATE: statements whose effect depends on the rows already in
	// the table, so the write is only right after the previous batch
	// committed (a batch written ahead would miss its uncommitted rows).
	ReadsTable   bool
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

// plan is what a Write needs about its table beyond the catalog.
type plan struct {
	t      *table
	pkCols []*column // the pk columns of pk.mode in pk.fields order; nil for pk.mode=none
	pkErr  error     // why pk.mode's columns cannot be used with this table (met by the first record that needs them)
	// cdcKeys caches the key columns of change events by key field names.
	cdcKeys map[string][]*column
	// checked caches the narrowing check of auto.evolve by value schema.
	checked map[*record.Schema]error
}

// target is one table a Write writes.
type target struct {
	name    string
	p       *plan
	sc      *scratch
	ops     []*op
	fresh   bool // read from the catalog during this Write
	changed bool // created or altered in this transaction: never cached
	missing bool // does not exist (auto.create): deletes and truncates are no-ops until a record creates it
}

// writeState is one Write's progress.
type writeState struct {
	w       *Writer
	tx      pgx.Tx
	ddl     bool
	targets map[string]*target
	order   []*target
	stats   *WriteStats
	// deletes and truncates of tables that do not exist (auto.create)
	noopDeletes, noopTruncates int
}

// errRemap restarts a Write's mapping: a table's description changed
// (reloaded, altered), so the ops mapped so far against it are stale.
var errRemap = errors.New("remap")

// maxRemaps bounds the restarts of one Write's mapping: each follows a
// table read again or given columns, so a batch needs a few at most.
const maxRemaps = 100

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
func (w *Writer) WriteBatch(ctx context.Context, tx pgx.Tx, c *connectors.Converted, schemaChanges bool) (WriteStats, error) {
	var stats WriteStats
	ws := &writeState{w: w, tx: tx, ddl: schemaChanges, targets: map[string]*target{}, stats: &stats}
	var bad []*record.Error
	for remaps := 0; ; remaps++ {
		var err error
		bad, err = ws.mapAll(ctx, c)
		if errors.Is(err, errRemap) && remaps < maxRemaps {
			continue
		}
		if errors.Is(err, errRemap) {
			return WriteStats{}, fmt.Errorf("postgres: the target tables kept changing while the batch was mapped (%d times)", remaps)
		}
		if err != nil {
			return WriteStats{}, err
		}
		break
	}
	if !c.Tolerant() && len(bad) > 0 {
		// Nothing at or after the first bad offset matters, but a record
		// before it that the database rejects comes first.
		first := bad[0].Offset
		for _, tg := range ws.order {
			tg.ops = slices.DeleteFunc(tg.ops, func(o *op) bool { return o.rec.Offset >= first })
		}
	}
	for _, tg := range ws.order {
		dbBad, err := w.apply(ctx, tx, tg, &stats)
		if err != nil {
			if code := pgCode(err); tg.p != nil && (code == "42P01" || code == "42703" || code == "42804") {
				w.tables.forget(tg.p.t.Ident) // the table changed under the cache
			}
			return WriteStats{}, err
		}
		bad = append(bad, dbBad...)
	}
	for _, tg := range ws.order {
		if tg.fresh && !tg.changed && tg.p != nil {
			w.tables.put(tg.p.t.Ident, tg.p.t)
		}
	}
	// The records the database or the mapping refused go to the
	// runtime's tolerance operator: with errors.tolerance=none the
	// lowest fails the write; with all they are dead letters.
	if err := c.Reject(bad); err != nil {
		return WriteStats{}, err
	}
	letters := c.DeadLetters()
	if len(letters) == 0 {
		return stats, nil
	}
	if w.cfg.DLQTable != "" {
		if err := w.deadLetter(ctx, tx, letters, schemaChanges); err != nil {
			return WriteStats{}, err
		}
	}
	stats.DeadLettered, stats.Bad = len(letters), make([]*record.Error, len(letters))
	for i, l := range letters {
		stats.Bad[i] = l.Err
	}
	return stats, nil
}

// mapAll converts every record through the pipeline (one at a time, into
// reused buffers) and maps it to its table's ops. Bad records come back as record errors in offset order
// (with errors.tolerance=none only the first: nothing after it matters);
// err is for problems that are not a record's fault (an unsupported column
// type, an unavailable schema registry, a needed schema change, an
// incompatible one), and errRemap when a table changed and mapping must
// start over.
func (ws *writeState) mapAll(ctx context.Context, c *connectors.Converted) (bad []*record.Error, err error) {
	for _, tg := range ws.order {
		tg.ops = tg.ops[:0]
	}
	ws.noopDeletes, ws.noopTruncates = 0, 0
	// With errors.tolerance=none the first bad record ends the pass:
	// nothing after it matters.
	errStop := errors.New("stop")
	mapErr := false // Each's error is the mapping's
	err = c.Each(ctx, func(rec *record.Record) error {
		_, err := ws.mapOne(ctx, rec)
		if err == nil {
			return nil
		}
		mapErr = true
		if errors.Is(err, errRemap) || errors.Is(err, ErrUnsupportedColumn) || errors.Is(err, ErrSchemaChange) || !record.IsCause(err) {
			return err
		}
		re := badRecord(rec.Raw, err)
		if errors.Is(re, record.ErrIncompatible) {
			return re // never dead-lettered: the partition stops here
		}
		bad = append(bad, re)
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
		bad = append(bad, re)
	default:
		return nil, err
	}
	ws.stats.Dropped = c.Dropped()
	ws.stats.Deleted, ws.stats.Truncated = ws.noopDeletes, ws.noopTruncates
	return bad, nil
}

// mapOne maps a converted record and appends its ops to its table's. It
// returns the ops (an empty slice for a no-op).
func (ws *writeState) mapOne(ctx context.Context, rec *record.Record) ([]*op, error) {
	w := ws.w
	name, err := rec.TableName(w.cfg.TableNameFormat)
	if err != nil {
		return nil, err
	}
	if err := checkIdent("table.name.format", name); err != nil {
		return nil, record.Errorf(record.ErrDecode, "target table of the record: %v", err)
	}
	tg, err := ws.target(ctx, name, rec)
	if err != nil {
		return nil, err
	}
	if tg.missing {
		// A delete or truncate of a table that does not exist yet.
		if rec.Op == record.OpTruncate {
			ws.noopTruncates++
		} else {
			ws.noopDeletes++
		}
		return []*op{}, nil
	}
	ops, err := w.prepareOne(ctx, ws, tg, rec)
	if errors.Is(err, ErrUnsupportedColumn) {
		return nil, fmt.Errorf("postgres: table %s: %w", tg.p.t.Ident, err)
	}
	if err != nil {
		return nil, err
	}
	tg.ops = append(tg.ops, ops...)
	return ops, nil
}

// target returns the table name, loading it (or, with auto.create and a
// record that has columns, creating it) on first use in this Write.
func (ws *writeState) target(ctx context.Context, name string, rec *record.Record) (*target, error) {
	w := ws.w
	tg := ws.targets[name]
	if tg == nil {
		t, fresh, err := w.table(ctx, ws.tx, name)
		switch {
		case errors.Is(err, ErrTableNotFound) && w.cfg.AutoCreate:
			tg = &target{name: name, missing: true}
		case err != nil:
			return nil, err
		default:
			tg = &target{name: name, p: w.newPlan(t), sc: newScratch(t), fresh: fresh}
		}
		ws.targets[name] = tg
		ws.order = append(ws.order, tg)
	}
	if !tg.missing || rec.Op != record.OpUpsert || rec.Value.IsNull() {
		return tg, nil
	}
	if !ws.ddl {
		return nil, schemaChangeNeeded(name, "auto.create")
	}
	if rec.Value.Kind() != record.KindStruct {
		return nil, record.Errorf(record.ErrDecode, "auto.create: value must be a struct (a JSON object), got %s", rec.Value.Describe())
	}
	sql, err := w.createTable(ctx, ws.tx, name, rec)
	if err != nil {
		return nil, err
	}
	if sql != "" {
		ws.schemaChanged(sql)
	}
	t, err := loadTable(ctx, ws.tx, w.cfg.Schema, name)
	if err != nil {
		return nil, err
	}
	tg.p, tg.sc, tg.fresh, tg.changed, tg.missing = w.newPlan(t), newScratch(t), true, sql != "", false
	return nil, errRemap
}

// schemaChanged counts and logs a schema change made in the transaction.
func (ws *writeState) schemaChanged(sql string) {
	ws.stats.SchemaChanges++
	ws.w.log.Info("schema change in the batch's transaction; it commits or rolls back with the batch", "sql", sql)
}

// reload reads tg's table from the catalog again (it may have gained
// columns since it was cached) and restarts the mapping.
func (ws *writeState) reload(ctx context.Context, tg *target) error {
	t, err := loadTable(ctx, ws.tx, ws.w.cfg.Schema, tg.name)
	if err != nil {
		return err
	}
	ws.w.tables.forget(t.Ident)
	tg.p, tg.sc, tg.fresh = ws.w.newPlan(t), newScratch(t), true
	return errRemap
}

// evolve adds the columns of value's fields names (auto.evolve) and
// restarts the mapping.
func (ws *writeState) evolve(ctx context.Context, tg *target, value record.Value, names []string) error {
	if !ws.ddl {
		return schemaChangeNeeded(tg.name, "auto.evolve")
	}
	names = slices.Compact(slices.Clone(names))
	done, err := ws.w.addColumns(ctx, ws.tx, tg.p.t, value, names)
	if err != nil {
		return err
	}
	for _, sql := range done {
		ws.schemaChanged(sql)
	}
	tg.changed = true
	ws.w.tables.forget(tg.p.t.Ident)
	return ws.reload(ctx, tg)
}

// table returns the description of a table, from the cache or, when it is
// not there, from the catalog (fresh).
func (w *Writer) table(ctx context.Context, tx pgx.Tx, name string) (*table, bool, error) {
	if t := w.tables.get(pgx.Identifier{w.cfg.Schema, name}.Sanitize()); t != nil {
		return t, false, nil
	}
	t, err := loadTable(ctx, tx, w.cfg.Schema, name)
	return t, err == nil, err
}

// newPlan resolves pk.mode's columns in t.
func (w *Writer) newPlan(t *table) *plan {
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
func (p *plan) cdcKey(key record.Value) ([]*column, error) {
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
	vals         []any            // carved into ops' vals
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

// fill maps the fields of a struct value onto sc's slots by column name,
// the last of duplicate names winning. A field without a column is an
// error naming the first unknown field in sorted order (sc.Unknown lists
// them all).
func (sc *scratch) fill(t *table, value record.Value) error {
	clear(sc.Set)
	err := sc.Fill(value, nil, func(name []byte) (int, bool) {
		if c := t.byName[string(name)]; c != nil {
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

// prepareOne maps a converted record to its ops in tg: usually one; two
// for an update that moved its key (a delete of the old key first).
func (w *Writer) prepareOne(ctx context.Context, ws *writeState, tg *target, rec *record.Record) ([]*op, error) {
	p, sc, r := tg.p, tg.sc, rec.Raw
	t := p.t
	if rec.Op == record.OpTruncate {
		if !ws.ddl {
			return nil, schemaChangeNeeded(tg.name, "a TRUNCATE")
		}
		return []*op{{rec: r, trunc: true}}, nil
	}
	o := &op{rec: r, keyed: w.cfg.InsertMode == InsertModeUpsert}

	// The key columns and the values that come from the key.
	var fromKey map[string]record.Value
	var err error
	switch {
	case rec.Change != nil && rec.Key.IsNull():
		if rec.Op == record.OpDelete || rec.Change.Op == 'u' {
			return nil, record.Errorf(record.ErrMissingKey, "a change event with op %q and a null key: the source table has no primary key (Debezium sends a null key); give it one, or set the source connector's message.key.columns", rec.Change.OpText())
		}
		o.keyed = false // a keyless source table: inserts only
	case rec.Change != nil:
		if o.pk, err = p.cdcKey(rec.Key); err != nil {
			return nil, err
		}
		if fromKey, err = keyColumns(o.pk, rec.Key); err != nil {
			return nil, err
		}
		o.keyed = true
	default:
		if p.pkErr != nil {
			return nil, p.pkErr
		}
		o.pk = p.pkCols
		switch w.cfg.PKMode {
		case PKModeRecordKey:
			if fromKey, err = keyColumns(o.pk, rec.Key); err != nil {
				return nil, err
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
			return nil, record.ErrTombstone
		}
		if err := o.setKey(fromKey); err != nil {
			return nil, err
		}
		o.del = true
		return []*op{o}, nil
	}
	if value.Kind() != record.KindStruct {
		return nil, record.Errorf(record.ErrDecode, "value must be a struct (a JSON object), got %s", value.Describe())
	}
	if err := sc.fill(t, value); err != nil {
		if !errors.Is(err, record.ErrUnknownField) {
			return nil, err
		}
		if !tg.fresh {
			return nil, ws.reload(ctx, tg) // the table may have gained columns since it was cached
		}
		if w.cfg.AutoEvolve {
			return nil, ws.evolve(ctx, tg, value, sc.Unknown)
		}
		return nil, err
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
				return nil, cerr
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
	o.shape, o.cols = sc.intern()
	if o.keyed {
		keyVals := make([]any, 0, len(o.pk))
		for _, c := range o.pk {
			i := slices.Index(o.cols, c)
			if i < 0 || o.vals[i] == nil {
				return nil, record.FieldErrorf(c.Name, record.ErrMissingKey, "no value for pk column %q", c.Name)
			}
			keyVals = append(keyVals, o.vals[i])
		}
		o.key = keySignature(o.pk) + keyString(keyVals)
	}
	if rec.OldKey.IsNull() || !o.keyed {
		return []*op{o}, nil
	}
	// An update that moved its row to another key: delete the old one.
	oldKey, err := keyColumns(o.pk, rec.OldKey)
	if err != nil {
		return nil, err
	}
	moved := &op{rec: r, del: true, keyed: true, extra: true, pk: o.pk}
	if err := moved.setKey(oldKey); err != nil {
		return nil, err
	}
	return []*op{moved, o}, nil
}

// setKey makes o a delete of the row whose key columns hold fromKey.
func (o *op) setKey(fromKey map[string]record.Value) error {
	for _, c := range o.pk {
		kv := fromKey[c.Name]
		v, err := coerce(c, &kv)
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

// apply writes a table's ops: a truncate first (the last one; what came
// before it is moot), then runs of ordered ops (COPY and tombstone
// deletes in insert mode) and keyed ops (upserts, change events) in
// record order.
func (w *Writer) apply(ctx context.Context, tx pgx.Tx, tg *target, stats *WriteStats) ([]*record.Error, error) {
	ops := tg.ops
	if len(ops) == 0 || tg.p == nil {
		return nil, nil
	}
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
		sql := "TRUNCATE TABLE " + tg.p.t.Ident
		stats.ReadsTable = true
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
			stats.ReadsTable = true
			b, err = w.applyKeyed(ctx, tx, tg.p, run, stats)
		} else {
			b, err = w.applyOrdered(ctx, tx, tg.p, run, stats)
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
			stats.ReadsTable = true
			b, err := w.bisect(ctx, tx, run, func(ops []*op) error { return w.execDelete(ctx, tx, p, ops) })
			if err != nil {
				return nil, err
			}
			bad = append(bad, failureErrors(b)...)
			stats.Deleted += counted(run) - counted(failedOps(b))
			continue
		}
		for _, group := range groupByShape(run) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execCopy(ctx, tx, p, cols, ops) })
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
			up, del := collapse(p.t, history[k])
			if del != nil {
				dels = append(dels, del)
			}
			if up != nil {
				ups = append(ups, up)
			}
		}
		var failed []failure
		for _, group := range groupByShape(dels) {
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execDelete(ctx, tx, p, ops) })
			if err != nil {
				return nil, err
			}
			failed = append(failed, b...)
			stats.Deleted += counted(group) - counted(failedOps(b))
		}
		for _, group := range groupByShape(ups) {
			cols := group[0].cols
			b, err := w.bisect(ctx, tx, group, func(ops []*op) error { return w.execUpsert(ctx, tx, p, cols, ops) })
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
			fmt.Fprintf(&sel, ", (SELECT k.%s FROM %s k WHERE %s)", q, p.t.Ident, where.String())
		}
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

// execDelete deletes the rows of ops' keys (all of the same key columns)
// with one DELETE … USING unnest.
func (w *Writer) execDelete(ctx context.Context, tx pgx.Tx, p *plan, ops []*op) error {
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
		p.t.Ident, params.String(), strings.Join(alias, ", "), where.String())
	args, err := columnArrays(pk, ops)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return err
}
