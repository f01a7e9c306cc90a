package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// Schema changes (auto.create, auto.evolve). They run inside the batch's
// transaction, before PREPARE, so a crash leaves both the change and the
// rows or neither (docs/schema-evolution.md). Names and types come only
// from record schemas (or, for schemaless JSON, from the values), never
// from SQL text; every identifier is quoted.

// columnType maps a Kafka Connect schema to the PostgreSQL type auto.create
// and auto.evolve give a field (docs/formats.md's type tables, read from
// the schema side).
func columnType(s *record.Schema) string {
	switch s.Name {
	case record.LogicalDecimal:
		return "numeric"
	case record.LogicalDate, record.DebeziumDate:
		return "date"
	case record.LogicalTime, record.DebeziumTime, record.DebeziumMicroTime, record.DebeziumNanoTime:
		return "time"
	case record.LogicalTimestamp, record.DebeziumZonedTimestamp:
		return "timestamptz"
	case record.DebeziumTimestamp, record.DebeziumMicroTimestamp, record.DebeziumNanoTimestamp, convert.LocalTimestampName:
		return "timestamp"
	case record.DebeziumUUID:
		return "uuid"
	case record.DebeziumJSON:
		return "jsonb"
	case convert.DurationName:
		return "interval"
	}
	switch s.Type {
	case record.TypeInt8, record.TypeInt16:
		return "smallint"
	case record.TypeInt32:
		return "integer"
	case record.TypeInt64:
		return "bigint"
	case record.TypeFloat32:
		return "real"
	case record.TypeFloat64:
		return "double precision"
	case record.TypeBoolean:
		return "boolean"
	case record.TypeString:
		return "text"
	case record.TypeBytes:
		return "bytea"
	case record.TypeArray:
		if e := s.Elem; e != nil {
			switch et := columnType(e); {
			case e.Type == record.TypeArray, et == "jsonb":
			default:
				return et + "[]"
			}
		}
	}
	return "jsonb"
}

// inferType is the PostgreSQL type of a schemaless value (as ClickHouse's
// auto.create infers one): booleans, integers, other numbers, strings,
// and objects and arrays as jsonb; null as text.
func inferType(v record.Value) string {
	switch v.Kind() {
	case record.KindBool:
		return "boolean"
	case record.KindInt, record.KindUint:
		return "bigint"
	case record.KindNumber:
		if text, _ := v.AsText(); !strings.ContainsAny(text, ".eE") {
			if _, err := v.AsInt64(); err == nil {
				return "bigint"
			}
			return "numeric"
		}
		return "double precision"
	case record.KindFloat:
		return "double precision"
	case record.KindDecimal:
		return "numeric"
	case record.KindStruct, record.KindArray, record.KindMap:
		return "jsonb"
	case record.KindBytes:
		return "bytea"
	case record.KindTimestamp:
		return "timestamptz"
	case record.KindDate:
		return "date"
	case record.KindTime:
		return "time"
	}
	return "text"
}

// fieldType is the type of field name of value v: from its schema when v
// has one, else inferred from the field's value.
func fieldType(v record.Value, name string) (typ string, required bool) {
	if s := v.Schema(); s != nil {
		if f := s.Field(name); f != nil && f.Schema != nil {
			return columnType(f.Schema), !f.Schema.Optional
		}
	}
	fv, _ := v.Get(name)
	return inferType(fv), false
}

// changeColumnTypes are the types of the optional change columns.
var changeColumnTypes = map[string]string{
	convert.ColumnOp:         "text",
	convert.ColumnSourceTsMs: "bigint",
	convert.ColumnLSN:        "bigint",
	convert.ColumnDeleted:    "boolean",
}

// colDef is a column auto.create makes.
type colDef struct {
	name, typ string
	notNull   bool
}

// createTableSQL is auto.create's DDL for rec's table: the key's fields
// (record_key, change events) or the coordinate columns (kafka) first,
// then the value's fields in order, then the change columns of
// cdc.columns; the key as PRIMARY KEY.
func (w *Writer) createTableSQL(ident string, rec *record.Record) (string, error) {
	var cols []colDef
	seen := map[string]bool{}
	add := func(c colDef) error {
		if seen[c.name] {
			return nil
		}
		if err := checkIdent("column", c.name); err != nil {
			// The record's fault, not the table's: it is dead-lettered
			// under errors.tolerance=all.
			return record.FieldErrorf(c.name, record.ErrUnknownField, "cannot be a PostgreSQL column name (%v): rename the field with a transform (ReplaceField)", err)
		}
		seen[c.name] = true
		cols = append(cols, c)
		return nil
	}
	var pk []string
	switch {
	case rec.Change != nil || w.cfg.PKMode == PKModeRecordKey:
		key := rec.Key
		switch {
		case key.Kind() == record.KindStruct:
			err := key.Range(func(name []byte, _ record.Value) error {
				typ, _ := fieldType(key, string(name))
				pk = append(pk, string(name))
				return add(colDef{string(name), typ, true})
			})
			if err != nil {
				return "", err
			}
		case !key.IsNull() && len(w.cfg.PKFields) == 1:
			typ := inferType(key)
			if s := key.Schema(); s != nil {
				typ = columnType(s)
			}
			pk = []string{w.cfg.PKFields[0]}
			if err := add(colDef{pk[0], typ, true}); err != nil {
				return "", err
			}
		case rec.Change != nil && !key.IsNull():
			return "", record.Errorf(record.ErrMissingKey, "auto.create: a change event's key must be a struct (the source table's primary key), got %s", key.Describe())
		case w.cfg.PKMode == PKModeRecordKey:
			return "", record.Errorf(record.ErrMissingKey, "auto.create with pk.mode=record_key: the key must be a struct, or a primitive with one name in pk.fields")
		}
	case w.cfg.PKMode == PKModeKafka:
		pk = w.cfg.PKFields
		if len(pk) == 0 {
			pk = DefaultKafkaPKFields
		}
		for i, typ := range []string{"text", "integer", "bigint"} {
			if err := add(colDef{pk[i], typ, true}); err != nil {
				return "", err
			}
		}
	case w.cfg.PKMode == PKModeRecordValue:
		pk = w.cfg.PKFields
	}
	err := rec.Value.Range(func(name []byte, _ record.Value) error {
		typ, required := fieldType(rec.Value, string(name))
		return add(colDef{string(name), typ, required || slices.Contains(pk, string(name))})
	})
	if err != nil {
		return "", err
	}
	for _, c := range w.cfg.CDCColumns {
		if err := add(colDef{c, changeColumnTypes[c], false}); err != nil {
			return "", err
		}
	}
	for _, k := range pk {
		if !seen[k] {
			return "", record.FieldErrorf(k, record.ErrMissingKey, "auto.create: the key column %q is not a field of the record", k)
		}
	}
	var b strings.Builder
	b.WriteString("CREATE TABLE " + ident + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c.name}.Sanitize() + " " + c.typ)
		if c.notNull {
			b.WriteString(" NOT NULL")
		}
	}
	if len(pk) > 0 {
		q := make([]string, len(pk))
		for i, k := range pk {
			q[i] = pgx.Identifier{k}.Sanitize()
		}
		b.WriteString(", PRIMARY KEY (" + strings.Join(q, ", ") + ")")
	}
	b.WriteString(")")
	return b.String(), nil
}

// createTable runs auto.create's planned statement sql for table ident in
// tx, unless another transaction created the table meanwhile; it returns
// sql when it ran it. A transaction-level advisory lock per table
// serialises concurrent creators (two CREATE TABLE of one name would
// otherwise fail on the catalog's unique index); it is held until the
// transaction ends, as the new table's own lock is.
func (w *Writer) createTable(ctx context.Context, tx pgx.Tx, ident, sql string) (string, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "txsink.ddl."+ident); err != nil {
		return "", ddlErr("auto.create "+ident, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ident).Scan(&exists); err != nil {
		return "", ddlErr("auto.create "+ident, err)
	}
	if exists {
		return "", nil
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return "", ddlErr(sql, err)
	}
	return sql, nil
}

// addColumns is auto.evolve: one nullable column per planned column (their
// names checked by the plan), in order. Columns are never dropped or
// changed.
func (w *Writer) addColumns(ctx context.Context, tx pgx.Tx, t *table, cols []colDef) ([]string, error) {
	var done []string
	for _, c := range cols {
		sql := "ALTER TABLE " + t.Ident + " ADD COLUMN IF NOT EXISTS " + pgx.Identifier{c.name}.Sanitize() + " " + c.typ
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, ddlErr(sql, err)
		}
		done = append(done, sql)
	}
	return done, nil
}

// narrower reports whether a column cannot hold every value of a field
// of schema s, for the kinds where that is certain from the types: a
// narrower integer, an integer column for floats or decimals, a single
// precision column for doubles, a number column for strings and
// booleans. It says what the column should become instead.
func narrower(c *column, s *record.Schema) (bool, string) {
	if s == nil || s.Name != "" && s.Name != record.LogicalDecimal {
		return false, "" // logical types convert by their own rules
	}
	width := map[record.Type]int{record.TypeInt8: 1, record.TypeInt16: 2, record.TypeInt32: 4, record.TypeInt64: 8}
	colWidth := map[colKind]int{kindInt2: 2, kindInt4: 4, kindInt8: 8}
	isDecimal := s.Name == record.LogicalDecimal
	switch c.Type.Kind {
	case kindInt2, kindInt4, kindInt8:
		if w, ok := width[s.Type]; ok && !isDecimal {
			if w > colWidth[c.Type.Kind] {
				return true, columnType(s)
			}
			return false, ""
		}
		switch {
		case isDecimal:
			return true, "numeric"
		case s.Type == record.TypeFloat32, s.Type == record.TypeFloat64, s.Type == record.TypeString, s.Type == record.TypeBoolean:
			return true, columnType(s)
		}
	case kindFloat4:
		if s.Type == record.TypeFloat64 || s.Type == record.TypeInt64 || isDecimal {
			return true, columnType(s)
		}
		fallthrough
	case kindFloat8, kindNumeric:
		if s.Type == record.TypeString || s.Type == record.TypeBoolean {
			return true, columnType(s)
		}
	}
	return false, ""
}

// checkNarrowing refuses a record whose schema has a field that its
// column cannot hold (auto.evolve never changes a column's type).
func checkNarrowing(t *table, s *record.Schema) error {
	if s == nil {
		return nil
	}
	for _, f := range s.Fields {
		c := t.column(f.Name)
		if c == nil || f.Schema == nil {
			continue
		}
		if bad, want := narrower(c, f.Schema); bad {
			return record.FieldErrorf(f.Name, record.ErrIncompatible,
				"the record's schema says %s but column %q of %s is %s: txsink never narrows or changes a column (auto.evolve only adds columns); widen it (ALTER TABLE %s ALTER COLUMN %s TYPE %s), then restart the task",
				f.Schema, c.Name, t.Ident, c.Type.Name, t.Ident, pgx.Identifier{c.Name}.Sanitize(), want)
		}
	}
	return nil
}

// ddlError is a failed schema change: never a bad record (the table or
// the database is at fault), even when its SQLSTATE is of a data class.
type ddlError struct {
	sql string
	err error
}

func (e *ddlError) Error() string {
	return "postgres: schema change failed: " + e.sql + ": " + e.err.Error()
}
func (e *ddlError) Unwrap() []error { return []error{ErrSchemaChangeFailed, e.err} }

func ddlErr(sql string, err error) error { return &ddlError{sql: sql, err: err} }

// schemaChangeNeeded is returned when a batch needs a schema change that
// its transaction may not make (a prepared transaction sharing its round
// with others): nothing was written.
func schemaChangeNeeded(table, what string) error {
	return fmt.Errorf("postgres: table %q needs %s: %w", table, what, ErrSchemaChange)
}
