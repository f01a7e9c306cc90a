package convert

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

// Change data capture setting names.
const (
	KeyCDCFormat      = "cdc.format"
	KeyCDCDeleteMode  = "cdc.delete.handling.mode"
	KeyCDCTruncate    = "cdc.truncate"
	KeyCDCColumns     = "cdc.columns"
	KeyCDCUnavailable = "cdc.unavailable.value.placeholder"
	// DefaultUnavailable is Debezium's unavailable.value.placeholder.
	DefaultUnavailable = "__debezium_unavailable_value"
	CDCFormatAuto      = "auto"
	CDCFormatDebezium  = "debezium"
	CDCFormatNone      = "none"
	CDCDeleteNone      = "none"
	CDCDeleteDrop      = "drop"
	CDCDeleteRewrite   = "rewrite"
	CDCTruncateRefuse  = "refuse"
	CDCTruncateApply   = "apply"
	ColumnOp           = "__op"
	ColumnSourceTsMs   = "__source_ts_ms"
	ColumnLSN          = "__lsn"
	ColumnDeleted      = "__deleted"
	debeziumEnvelopeSx = ".Envelope"
)

// CDCColumns are the optional change columns, in the order auto.create
// adds them. A sink fills each one a table has from the record's Change.
var CDCColumns = []string{ColumnOp, ColumnSourceTsMs, ColumnLSN, ColumnDeleted}

// CDCDefs are the change data capture settings of every connector.
var CDCDefs = config.Defs{
	{Name: KeyCDCFormat, Type: config.String, Default: CDCFormatAuto, Enum: []string{CDCFormatAuto, CDCFormatDebezium, CDCFormatNone}, Group: "Change data capture",
		Doc: "auto: a value that is a Debezium change event (a struct with op, source and before/after; with a schema, one named *.Envelope) becomes an upsert of its after, or a delete, by the record key; other records are written as they are. debezium: every non-null value must be a change event (anything else is a bad record) and tombstones are dropped. none: change events are plain structs. See docs/cdc.md."},
	{Name: KeyCDCDeleteMode, Type: config.String, Default: CDCDeleteNone, Enum: []string{CDCDeleteNone, CDCDeleteDrop, CDCDeleteRewrite}, Group: "Change data capture",
		Doc: "What a delete event (op d) does, as Debezium's ExtractNewRecordState delete.handling.mode: none deletes the row with the record key; drop ignores the event (the row stays); rewrite writes the event's before (or its key) as the row with __deleted = true (a soft delete)."},
	{Name: KeyCDCTruncate, Type: config.String, Default: CDCTruncateRefuse, Enum: []string{CDCTruncateRefuse, CDCTruncateApply}, Group: "Change data capture",
		Doc: "What a truncate event (op t) does: refuse makes it a bad record naming it (errors.tolerance applies: the partition stops there, or it is dead-lettered); apply empties the target table inside the batch's transaction (PostgreSQL only)."},
	{Name: KeyCDCColumns, Type: config.List, Group: "Change data capture", Check: checkCDCColumns,
		Doc: "Change columns that auto.create adds to the tables it creates: any of __op (the event's op: c, r, u, d), __source_ts_ms (source.ts_ms), __lsn (source.lsn), __deleted (true for a rewritten delete). A table that has such a column gets it filled whatever this setting says."},
	{Name: KeyCDCUnavailable, Type: config.String, Default: DefaultUnavailable, Group: "Change data capture",
		Doc: "The source connector's unavailable.value.placeholder: what Debezium sends, in an update, for a value stored out of line (PostgreSQL TOAST) that the update left unchanged and the WAL does not carry (REPLICA IDENTITY DEFAULT). An update field holding it (as text, or as the bytes of a bytea column) is not a value: PostgreSQL keeps the copy's value of that column; ClickHouse, which replaces rows whole, refuses the record naming the field. Set REPLICA IDENTITY FULL on such source tables (docs/cdc.md)."},
}

func checkCDCColumns(v string) error {
	for _, c := range strings.Split(v, ",") {
		if c = strings.TrimSpace(c); c != "" && !slices.Contains(CDCColumns, c) {
			return fmt.Errorf("unknown change column %q; known: %s", c, strings.Join(CDCColumns, ", "))
		}
	}
	return nil
}

// ChangeColumn is the value of the optional change column name (__op,
// __source_ts_ms, __lsn, __deleted) for change event ch; ok is false for
// another name, or a source field the event does not have.
func ChangeColumn(name string, ch *record.Change) (v record.Value, ok bool) {
	switch name {
	case ColumnOp:
		return record.String(ch.OpText()), true
	case ColumnSourceTsMs:
		if ch.HasTsMs {
			return record.Int(ch.TsMs), true
		}
	case ColumnLSN:
		if ch.HasLSN {
			return record.Int(ch.LSN), true
		}
	case ColumnDeleted:
		return record.Bool(ch.Deleted), true
	}
	return record.Value{}, false
}

// PipelineFromSettings builds a pipeline from raw connector settings with
// the defaults of Defs and CDCDefs applied, as a validated connector
// configuration holds them: for tools and tests that have settings but no
// connector. A bad setting is a config.Errors naming it.
func PipelineFromSettings(raw map[string]string) (*Pipeline, error) {
	all := append(append(config.Defs{}, Defs...), CDCDefs...)
	v, errs := all.Validate(raw)
	if errs != nil {
		return nil, errs
	}
	return NewPipeline(v)
}

// cdcStage recognises Debezium change events after the converters and
// transforms and turns them into the records the sinks apply: an upsert of
// after, a delete of the key, a truncate. It is a pure function of the
// record, so a redo builds the same rows (invariant 6).
type cdcStage struct {
	format     string
	deleteMode string
	truncate   string
	// unavailable is Debezium's placeholder for an unchanged TOASTed
	// value, as text and as the base64 text a schemaless bytea has.
	unavailable, unavailable64 string
}

func newCDCStage(v config.Values) *cdcStage {
	s := &cdcStage{format: v[KeyCDCFormat], deleteMode: v[KeyCDCDeleteMode], truncate: v[KeyCDCTruncate]}
	if s.format == "" {
		s.format = CDCFormatAuto
	}
	if s.deleteMode == "" {
		s.deleteMode = CDCDeleteNone
	}
	if s.truncate == "" {
		s.truncate = CDCTruncateRefuse
	}
	s.unavailable = v[KeyCDCUnavailable]
	if s.unavailable == "" {
		s.unavailable = DefaultUnavailable
	}
	s.unavailable64 = base64.StdEncoding.EncodeToString([]byte(s.unavailable))
	return s
}

// envelope holds the parts of a change event.
type envelope struct {
	op, before, after, source record.Value
	hasBefore, hasAfter       bool
}

// parseEnvelope reports whether v is a Debezium change event and returns
// its parts. A value with a schema must be a struct with the fields op,
// source and before or after, and (unless required) be named *.Envelope;
// a schemaless object needs the members op (a string), source (an object)
// and before or after.
func parseEnvelope(v record.Value, required bool) (envelope, bool) {
	var e envelope
	if v.Kind() != record.KindStruct {
		return e, false
	}
	if s := v.Schema(); s != nil {
		if !required && !strings.HasSuffix(s.Name, debeziumEnvelopeSx) {
			return e, false
		}
		var okOp, okSrc bool
		e.op, okOp = v.Get("op")
		e.source, okSrc = v.Get("source")
		e.before, e.hasBefore = v.Get("before")
		e.after, e.hasAfter = v.Get("after")
		return e, okOp && okSrc && (e.hasBefore || e.hasAfter) && e.op.Kind() == record.KindString && e.source.Kind() == record.KindStruct
	}
	if !v.MayHaveMember("op") {
		// Most schemaless records are not change events: no need to
		// scan their members to see it.
		return e, false
	}
	var okOp, okSrc bool
	_ = v.Range(func(name []byte, fv record.Value) error {
		switch string(name) {
		case "op":
			e.op, okOp = fv, true
		case "source":
			e.source, okSrc = fv, true
		case "before":
			e.before, e.hasBefore = fv, true
		case "after":
			e.after, e.hasAfter = fv, true
		}
		return nil
	})
	return e, okOp && okSrc && (e.hasBefore || e.hasAfter) && e.op.Kind() == record.KindString && e.source.Kind() == record.KindStruct
}

// errNotChangeEvent is the bad record of cdc.format=debezium.
var errNotChangeEvent = record.Errorf(record.ErrDecode, "not a Debezium change event (cdc.format=debezium needs a struct with op, source and before/after)")

// apply turns r into the change its value describes, filling ch (which r
// then points to). keep is false when the record is to be dropped (a
// tombstone with cdc.format=debezium, a delete with
// delete.handling.mode=drop). key converts r's key when the pipeline did
// not yet: change events are applied by key. Errors wrap record.ErrDecode
// (not an event, an unknown op), record.ErrTruncate, or the key's
// conversion error.
func (s *cdcStage) apply(r *record.Record, ch *record.Change, key func() error) (keep bool, err error) {
	if s == nil || s.format == CDCFormatNone {
		return true, nil
	}
	if r.Value.IsNull() {
		// The tombstone Debezium sends after a delete carries nothing new.
		return s.format != CDCFormatDebezium, nil
	}
	e, ok := parseEnvelope(r.Value, s.format == CDCFormatDebezium)
	if !ok {
		if s.format == CDCFormatDebezium {
			return false, errNotChangeEvent
		}
		return true, nil
	}
	opText, err := e.op.AsString()
	if err != nil || len(opText) != 1 || !strings.Contains("crudt", opText) {
		return false, record.FieldErrorf("op", record.ErrDecode, "unknown change event op %q (want c, r, u, d or t)", record.Truncate(opText, 20))
	}
	*ch = record.Change{Op: opText[0]}
	if err := readSource(e.source, ch); err != nil {
		return false, err
	}
	r.Change = ch
	switch ch.Op {
	case 't':
		if s.truncate != CDCTruncateApply {
			return false, record.Errorf(record.ErrTruncate, "a truncate event of %s (set cdc.truncate=apply to empty the table, or skip the record)", sourceName(ch))
		}
		r.Op, r.Key, r.Value = record.OpTruncate, record.Value{}, record.Value{}
		return true, nil
	case 'd':
		if s.deleteMode == CDCDeleteDrop {
			return false, nil
		}
		if err := key(); err != nil {
			return false, err
		}
		if s.deleteMode == CDCDeleteRewrite {
			r.Op, ch.Deleted = record.OpUpsert, true
			r.Value = e.before
			if r.Value.IsNull() {
				r.Value = r.Key // no before image: the key's fields are the row
			}
			return true, nil
		}
		r.Op, r.Value = record.OpDelete, record.Value{}
		return true, nil
	}
	if e.after.IsNull() {
		return false, record.FieldErrorf("after", record.ErrDecode, "a change event with op %q has no after", opText)
	}
	if err := key(); err != nil {
		return false, err
	}
	r.Op, r.Value = record.OpUpsert, e.after
	if ch.Op == 'u' {
		if ch.Unavailable, err = s.unavailableFields(e.after); err != nil {
			return false, err
		}
		if e.hasBefore && !e.before.IsNull() {
			r.OldKey = movedKey(r.Key, e.before, e.after)
		}
	}
	return true, nil
}

// unavailableFields lists the fields of an update's after that hold
// Debezium's placeholder for an unchanged value it could not read (a
// TOASTed column under REPLICA IDENTITY DEFAULT): the text itself, the
// bytes of a bytea, or, without a schema, the base64 text a bytea
// becomes in JSON.
func (s *cdcStage) unavailableFields(after record.Value) ([]string, error) {
	var names []string
	err := after.Range(func(name []byte, fv record.Value) error {
		var hit bool
		switch fv.Kind() {
		case record.KindString:
			t, _ := fv.AsString()
			hit = t == s.unavailable || after.Schema() == nil && t == s.unavailable64
		case record.KindBytes:
			b, _ := fv.AsBytes()
			hit = string(b) == s.unavailable
		}
		if hit {
			names = append(names, string(name))
		}
		return nil
	})
	return names, err
}

// readSource copies the routing and position fields of a Debezium source
// block into ch.
func readSource(src record.Value, ch *record.Change) error {
	return src.Range(func(name []byte, fv record.Value) error {
		if fv.IsNull() {
			return nil
		}
		var err error
		switch string(name) {
		case "db":
			ch.DB, err = fv.AsText()
		case "schema":
			ch.Schema, err = fv.AsText()
		case "table":
			ch.Table, err = fv.AsText()
		case "ts_ms":
			ch.TsMs, err = fv.AsInt64()
			ch.HasTsMs = err == nil
		case "lsn":
			ch.LSN, err = fv.AsInt64()
			ch.HasLSN = err == nil
		default:
			return nil
		}
		if err != nil {
			return record.InField("source."+string(name), record.Errorf(record.ErrDecode, "%v", err))
		}
		return nil
	})
}

func sourceName(ch *record.Change) string {
	var parts []string
	for _, p := range []string{ch.DB, ch.Schema, ch.Table} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "the source table"
	}
	return strings.Join(parts, ".")
}

// movedKey returns the key of the row an update moved away from: when
// key is a struct whose every field is in before and after, and some
// differ, the key built from before's values; else null. Values compare
// by their JSON text: before and after come from one converter and one
// schema, so equal values have equal text.
func movedKey(key, before, after record.Value) record.Value {
	if key.Kind() != record.KindStruct {
		return record.Value{}
	}
	var names []string
	var vals []record.Value
	moved := false
	var bt, at []byte
	err := key.Range(func(name []byte, _ record.Value) error {
		b, okB := before.Get(string(name))
		a, okA := after.Get(string(name))
		if !okB || !okA || b.IsNull() {
			return errNoMove
		}
		var err error
		if bt, err = b.AppendJSON(bt[:0]); err != nil {
			return err
		}
		if at, err = a.AppendJSON(at[:0]); err != nil {
			return err
		}
		moved = moved || !bytes.Equal(bt, at)
		names = append(names, string(name))
		vals = append(vals, b)
		return nil
	})
	if err != nil || !moved {
		return record.Value{}
	}
	if s := key.Schema(); s != nil && !key.Schemaless() {
		return record.Struct(s, vals)
	}
	return record.Object(names, vals)
}

var errNoMove = fmt.Errorf("no moved key")

// SourceTxn reads what r tells about its source transaction: for a record
// of txnTopic (Debezium's transaction topic) its status (BEGIN or END), id
// and event count; for a change event its transaction.id. A record without
// such metadata, or one that cannot be decoded (its round meets it as a
// bad record), is record.TxnNone. The error is the converter's when it
// is not the record's fault (an unavailable registry).
func (p *Pipeline) SourceTxn(ctx context.Context, r *kgo.Record, txnTopic string, sc *Scratch) (record.TxnMark, error) {
	var none record.TxnMark
	if r.Value == nil {
		return none, nil
	}
	v, err := p.value.Convert(ctx, r.Topic, r.Headers, r.Value, &sc.value)
	if err != nil {
		if errors.Is(err, record.ErrUnavailable) || !errors.Is(err, record.ErrDecode) {
			return none, err
		}
		return none, nil
	}
	text := func(v record.Value, name string) string {
		f, ok := v.Get(name)
		if !ok || f.IsNull() {
			return ""
		}
		s, err := f.AsText()
		if err != nil {
			return ""
		}
		return s
	}
	if r.Topic == txnTopic {
		id := record.TxnID(text(v, "id"))
		switch text(v, "status") {
		case "BEGIN":
			return record.TxnMark{Kind: record.TxnBegin, ID: id}, nil
		case "END":
			f, _ := v.Get("event_count")
			n, err := f.AsInt64()
			if err != nil || id == "" {
				return none, nil
			}
			return record.TxnMark{Kind: record.TxnEnd, ID: id, Count: n}, nil
		}
		return none, nil
	}
	if !v.MayHaveMember("transaction") {
		return none, nil
	}
	t, ok := v.Get("transaction")
	if !ok || t.Kind() != record.KindStruct {
		return none, nil
	}
	if id := record.TxnID(text(t, "id")); id != "" {
		return record.TxnMark{Kind: record.TxnEvent, ID: id}, nil
	}
	return none, nil
}
