package transform

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
)

// ClassExtractNewRecordState is Debezium's event flattening transform.
const ClassExtractNewRecordState = "io.debezium.transforms.ExtractNewRecordState"

func init() {
	registerTransform(TransformPlugin{Class: ClassExtractNewRecordState, Aliases: []string{"ExtractNewRecordState"}, New: newExtractNewRecordState})
}

// deleteMode is what ExtractNewRecordState makes of a delete event.
type deleteMode uint8

const (
	deleteDrop        deleteMode = iota // dropped
	deleteTombstone                     // a null value (of the row's schema)
	deleteRewrite                       // the before state with __deleted "true"
	deleteToTombstone                   // a null value without a schema
)

// deleteHandling is what becomes of deletes and tombstones.
type deleteHandling struct {
	deletes        deleteMode
	rewrite        bool // add __deleted to every row
	keepTombstones bool
}

// deleteModes are delete.tombstone.handling.mode's values;
// legacyDeleteModes delete.handling.mode's (drop.tombstones decides on
// tombstones then).
var (
	deleteModes = map[string]deleteHandling{
		"drop":                   {deletes: deleteDrop},
		"tombstone":              {deletes: deleteTombstone},
		"rewrite":                {deletes: deleteRewrite, rewrite: true},
		"rewrite-with-tombstone": {deletes: deleteRewrite, rewrite: true, keepTombstones: true},
		"delete-to-tombstone":    {deletes: deleteToTombstone},
	}
	legacyDeleteModes = map[string]deleteHandling{
		"none":    {deletes: deleteTombstone},
		"drop":    {deletes: deleteDrop},
		"rewrite": {deletes: deleteRewrite, rewrite: true},
	}
)

// extractNewRecordState is Debezium's ExtractNewRecordState: a change
// event envelope (before, after, op, source, ts_ms, transaction) becomes
// the row it describes. Creates, reads and updates become their after
// state; deletes and the tombstones that follow them are dropped, kept,
// or rewritten as delete.tombstone.handling.mode (Debezium 2.5+) or the
// older delete.handling.mode and drop.tombstones say; add.fields and
// add.headers copy envelope and source fields (op, source.ts_ms, lsn,
// table, …) into the row as __op, __source_ts_ms, __lsn, __table, ….
//
// The envelope is recognised with a schema (Connect's JSON envelope,
// Avro, Protobuf, JSON Schema) by Debezium's rule (the schema's name ends
// in .Envelope) or by its fields (op, and before or after), and also
// without a schema (JSON with schemas.enable=false), which Debezium
// passes through unchanged. Anything else passes unchanged, as Debezium's
// heartbeat and schema change events do.
type extractNewRecordState struct {
	deleteHandling
	fields  []dbzRef
	headers []dbzRef
	routeBy string
	plans   cache[dbzPlanKey, dbzPlan]
}

// dbzRef is one add.fields or add.headers entry (Debezium's
// FieldReference): a field of the envelope ("op", "ts_ms"), of source
// ("source.ts_ms", or just "lsn", "table", "db") or of transaction ("id",
// "total_order", "data_collection_order"), and the name it gets.
type dbzRef struct {
	parent string // "" for the envelope itself
	field  string
	out    string
}

// Debezium's field names.
const (
	dbzBefore  = "before"
	dbzAfter   = "after"
	dbzOp      = "op"
	dbzSource  = "source"
	dbzTxn     = "transaction"
	dbzDeleted = "__deleted"
)

func newExtractNewRecordState(settings map[string]string) (Transform, error) {
	c := newConf("ExtractNewRecordState", settings)
	t := &extractNewRecordState{}
	mode, modeSet := c.raw("delete.tombstone.handling.mode")
	legacyMode := c.oneOf("delete.handling.mode", "drop", true, "none", "drop", "rewrite")
	dropTombstones := c.boolean("drop.tombstones", true)
	_, legacyModeSet := settings["delete.handling.mode"]
	_, legacyDropSet := settings["drop.tombstones"]
	// Debezium 3.2 removed the legacy settings; 2.5 to 3.1 read them
	// only when delete.tombstone.handling.mode is not set.
	if modeSet || !legacyModeSet && !legacyDropSet {
		if !modeSet {
			mode = "tombstone"
		}
		h, ok := deleteModes[strings.ToLower(mode)]
		if !ok {
			c.fail("delete.tombstone.handling.mode", "invalid value %q: must be one of drop, tombstone, rewrite, rewrite-with-tombstone, delete-to-tombstone", mode)
		}
		t.deleteHandling = h
	} else {
		t.deleteHandling = legacyDeleteModes[legacyMode]
		t.keepTombstones = !dropTombstones
	}
	t.fields = parseDbzRefs(c, "add.fields", c.str("add.fields.prefix", "__"))
	t.headers = parseDbzRefs(c, "add.headers", c.str("add.headers.prefix", "__"))
	t.routeBy = c.str("route.by.field", "")
	c.boolean("replace.null.with.default", true)
	if h := c.str("drop.fields.header.name", ""); h != "" {
		c.fail("drop.fields.header.name", "not supported by txsink: header values are bytes here, not the typed list of field names Debezium's source connectors put there")
	}
	c.boolean("drop.fields.from.key", false)
	c.boolean("drop.fields.keep.schema.compatible", true)
	c.unsupported("operation.header", "removed in Debezium 1.x; use add.headers=op")
	c.unsupported("add.source.fields", "removed in Debezium 1.x; use add.fields with source fields (for example add.fields=lsn,source.ts_ms)")
	if err := c.done(); err != nil {
		return nil, err
	}
	return t, nil
}

// parseDbzRefs reads add.fields or add.headers: field, struct.field,
// either optionally followed by :newName.
func parseDbzRefs(c *conf, name, prefix string) []dbzRef {
	var out []dbzRef
	for _, item := range c.list(name) {
		spec, rename, renamed := strings.Cut(item, ":")
		if renamed && (rename == "" || strings.Contains(rename, ":")) {
			c.fail(name, "invalid entry %q: want field, struct.field, or either followed by :newName", item)
			return nil
		}
		parts := strings.Split(spec, ".")
		var r dbzRef
		switch len(parts) {
		case 1:
			r = dbzRef{parent: dbzParentOf(parts[0]), field: parts[0], out: prefix + parts[0]}
		case 2:
			r = dbzRef{parent: parts[0], field: parts[1], out: prefix + parts[0] + "_" + parts[1]}
		default:
			c.fail(name, "invalid entry %q: at most one dot (struct.field)", item)
			return nil
		}
		if r.field == "" {
			c.fail(name, "invalid entry %q: empty field name", item)
			return nil
		}
		if renamed {
			r.out = prefix + rename
		}
		out = append(out, r)
	}
	return out
}

// dbzParentOf is Debezium's FieldReference.determineStruct: where an
// unqualified field lives.
func dbzParentOf(field string) string {
	switch field {
	case "id", "total_order", "data_collection_order":
		return dbzTxn
	case dbzOp, "ts_ms", "ts_us", "ts_ns":
		return ""
	case "updateDescription":
		return "updateDescription"
	}
	return dbzSource
}

// envelope is a change event's parts.
type envelope struct {
	v             record.Value // the whole event
	before, after record.Value
	// Without a schema: the source and transaction blocks, scanned on
	// first use, so add.fields and add.headers read them once.
	source, txn         record.Value
	hasSource, hasTxn   bool
	srcScanned, txnScan bool
}

// parent returns the envelope's block called name, and whether it is
// there (schemaless envelopes).
func (e *envelope) parent(name string) (record.Value, bool) {
	switch name {
	case dbzSource:
		if !e.srcScanned {
			e.source, e.srcScanned = e.source.Scanned(), true
		}
		return e.source, e.hasSource
	case dbzTxn:
		if !e.txnScan {
			e.txn, e.txnScan = e.txn.Scanned(), true
		}
		return e.txn, e.hasTxn
	}
	return e.v.Get(name)
}

// lookup reads what ref names in the envelope (Debezium's
// FieldReference): the field in its parent block, else at the top (a
// field another transform put there). ok is false when the envelope has
// neither, and then the field or header is not added. A null parent
// (the transaction block of a snapshot read) gives null.
func (e *envelope) lookup(ref *dbzRef) (record.Value, bool) {
	if s := e.v.Schema(); s != nil {
		if dbzSchemaField(s, ref) == nil {
			return record.Value{}, false
		}
		return dbzValue(e.v, ref), true
	}
	if ref.parent != "" {
		if p, ok := e.parent(ref.parent); ok {
			if p.IsNull() {
				return record.Value{}, true
			}
			if fv, ok := p.Get(ref.field); ok && p.Kind() == record.KindStruct {
				return fv, true
			}
		}
	}
	return e.v.Get(ref.field)
}

// parseEnvelope recognises a change event (see extractNewRecordState).
func parseEnvelope(v record.Value, env *envelope) bool {
	if v.Kind() != record.KindStruct {
		return false
	}
	env.v = v
	if s := v.Schema(); s != nil {
		if !strings.HasSuffix(s.Name, ".Envelope") && (s.Field(dbzOp) == nil || s.Field(dbzAfter) == nil && s.Field(dbzBefore) == nil) {
			return false
		}
		env.before, _ = v.Get(dbzBefore)
		env.after, _ = v.Get(dbzAfter)
		return true
	}
	hasOp, hasRow := false, false
	_ = v.Range(func(name []byte, fv record.Value) error {
		switch string(name) {
		case dbzOp:
			hasOp = fv.Kind() == record.KindString
		case dbzBefore:
			env.before, hasRow = fv, true
		case dbzAfter:
			env.after, hasRow = fv, true
		case dbzSource:
			env.source, env.hasSource = fv, true
		case dbzTxn:
			env.txn, env.hasTxn = fv, true
		}
		return nil
	})
	return hasOp && hasRow
}

func (t *extractNewRecordState) Apply(r *record.Record) (bool, error) {
	var env envelope
	tombstone := r.Value.IsNull()
	isEnv := !tombstone && parseEnvelope(r.Value, &env)
	if len(t.headers) > 0 && (isEnv || tombstone) {
		if err := t.addHeaders(r, &env, tombstone); err != nil {
			return false, err
		}
	}
	if tombstone {
		return t.keepTombstones, nil
	}
	if !isEnv {
		return true, nil
	}
	if env.after.IsNull() {
		if env.before.IsNull() {
			return false, nil // a truncate event (or an empty one): Debezium drops it
		}
		var out record.Value
		switch t.deletes {
		case deleteDrop:
			return false, nil
		case deleteTombstone:
			out = record.Null(env.after.Schema())
		case deleteToTombstone:
			out = record.Value{}
		case deleteRewrite:
			out = env.before
		}
		if err := t.route(r, env.before); err != nil {
			return false, err
		}
		if out.IsNull() {
			r.Value = out
			return true, nil
		}
		return t.finish(r, &env, out, "true")
	}
	if err := t.route(r, env.after); err != nil {
		return false, err
	}
	return t.finish(r, &env, env.after, "false")
}

// route sets the topic from the route.by.field field of row.
func (t *extractNewRecordState) route(r *record.Record, row record.Value) error {
	if t.routeBy == "" {
		return nil
	}
	if row.Kind() != record.KindStruct {
		return errField(t.routeBy, "ExtractNewRecordState: route.by.field: the row is %s, not a struct", row.Describe())
	}
	fv, ok := row.Get(t.routeBy)
	if !ok {
		return errField(t.routeBy, "ExtractNewRecordState: route.by.field: the row has no such field")
	}
	if fv.IsNull() {
		return nil
	}
	topic, err := fv.AsString()
	if err != nil {
		return errField(t.routeBy, "ExtractNewRecordState: route.by.field: %v", err)
	}
	if strings.TrimSpace(topic) != "" {
		r.Topic = topic
	}
	return nil
}

// dbzPlanKey identifies a derived row schema: the row's schema and the
// envelope's (which the added fields' schemas come from).
type dbzPlanKey struct{ row, env *record.Schema }

// dbzPlan is a derived row schema and where each added field comes from
// (nil: not in the envelope, so not added).
type dbzPlan struct {
	schema *record.Schema
	refs   []*dbzRef
	err    error
}

// finish sets the row as the record's value, with __deleted (in rewrite
// mode) and the add.fields. A row with a schema always gets a derived
// schema, as in Debezium, which copies the row's schema (dropping its
// optionality, as Connect's copySchemaBasics does) even with no fields to
// add.
func (t *extractNewRecordState) finish(r *record.Record, env *envelope, row record.Value, deleted string) (bool, error) {
	if !t.rewrite && len(t.fields) == 0 && row.Schema() == nil {
		r.Value = row
		return true, nil
	}
	if row.Kind() != record.KindStruct {
		if len(t.fields) > 0 {
			return false, errRecord("ExtractNewRecordState: add.fields needs the row to be a struct, got %s", row.Describe())
		}
		r.Value = row // Debezium adds __deleted to structs only
		return true, nil
	}
	if s := row.Schema(); s != nil {
		p := t.plans.get(dbzPlanKey{s, env.v.Schema()}, func() dbzPlan { return t.plan(s, env.v.Schema()) })
		if p.err != nil {
			return false, p.err
		}
		if len(p.schema.Fields) == len(s.Fields) {
			// Nothing to add: the same fields under the derived schema.
			r.Value = row.WithSchema(p.schema)
			return true, nil
		}
		vals := typedFields(row, len(p.schema.Fields)-len(s.Fields))
		if t.rewrite {
			vals = append(vals, deletedValue(deleted, true))
		}
		for _, ref := range p.refs {
			if ref == nil {
				continue
			}
			fs := p.schema.Fields[len(vals)].Schema
			fv := dbzValue(env.v, ref)
			if fv.IsNull() {
				fv = record.Null(fs)
			}
			vals = append(vals, fv.WithSchema(fs))
		}
		r.Value = record.Struct(p.schema, vals)
		return true, nil
	}
	names, vals, err := objectFields(row, len(t.fields)+1)
	if err != nil {
		return false, err
	}
	if t.rewrite {
		names, vals = put(names, vals, dbzDeleted, deletedValue(deleted, false))
	}
	for i := range t.fields {
		ref := &t.fields[i]
		if fv, ok := env.lookup(ref); ok {
			names, vals = put(names, vals, ref.out, fv)
		}
	}
	r.Value = record.Object(names, vals)
	return true, nil
}

// The values of __deleted, built once (values are immutable).
var (
	deletedTrue       = record.String("true")
	deletedFalse      = record.String("false")
	deletedTrueTyped  = deletedTrue.WithSchema(schemaOptionalString)
	deletedFalseTyped = deletedFalse.WithSchema(schemaOptionalString)
)

func deletedValue(deleted string, typed bool) record.Value {
	switch {
	case deleted == "true" && typed:
		return deletedTrueTyped
	case deleted == "true":
		return deletedTrue
	case typed:
		return deletedFalseTyped
	}
	return deletedFalse
}

func (t *extractNewRecordState) plan(row, env *record.Schema) dbzPlan {
	fields := copyFields(row, len(t.fields)+1)
	if t.rewrite {
		fields = append(fields, &record.Field{Name: dbzDeleted, Schema: schemaOptionalString})
	}
	p := dbzPlan{refs: make([]*dbzRef, len(t.fields))}
	for i := range t.fields {
		ref := &t.fields[i]
		f := dbzSchemaField(env, ref)
		if f == nil {
			continue
		}
		fs := *f.Schema
		fs.Optional = true
		fields = append(fields, &record.Field{Name: ref.out, Schema: &fs})
		p.refs[i] = ref
	}
	s, err := deriveStruct(row, fields, false)
	if err != nil {
		return dbzPlan{err: errRecord("ExtractNewRecordState: %v", err)}
	}
	p.schema = s
	return p
}

// dbzSchemaField finds the field a reference reads in the envelope's
// schema: in its parent struct, else in the envelope itself (a field
// another transform put there); nil when neither has it.
func dbzSchemaField(env *record.Schema, ref *dbzRef) *record.Field {
	if ref.parent != "" {
		if pf := env.Field(ref.parent); pf != nil && pf.Schema.Type == record.TypeStruct {
			if f := pf.Schema.Field(ref.field); f != nil {
				return f
			}
		}
	}
	return env.Field(ref.field)
}

// dbzValue reads what ref names in the envelope (Debezium's
// FieldReference.getValue): null when the parent is null.
func dbzValue(env record.Value, ref *dbzRef) record.Value {
	if ref.parent != "" {
		if p, ok := env.Get(ref.parent); ok {
			if p.IsNull() {
				return record.Value{}
			}
			if p.Kind() == record.KindStruct {
				if fv, ok := p.Get(ref.field); ok {
					return fv
				}
			}
		}
	}
	fv, _ := env.Get(ref.field)
	return fv
}

// addHeaders adds the add.headers to r (a copy of its headers: the
// Kafka record's stay as they were read). A tombstone gets only the
// operation, "d".
func (t *extractNewRecordState) addHeaders(r *record.Record, env *envelope, tombstone bool) error {
	hs := slices.Clip(r.Headers)
	for i := range t.headers {
		ref := &t.headers[i]
		if tombstone {
			if ref.field == dbzOp {
				hs = append(hs, kgo.RecordHeader{Key: ref.out, Value: []byte("d")})
			}
			continue
		}
		fv, ok := env.lookup(ref)
		if !ok {
			continue
		}
		b, err := headerBytes(fv)
		if err != nil {
			return errField(ref.out, "ExtractNewRecordState: add.headers: %v", err)
		}
		hs = append(hs, kgo.RecordHeader{Key: ref.out, Value: b})
	}
	r.Headers = hs
	return nil
}

// headerBytes renders a value as a header's bytes: null as no value,
// text as it is, scalars as their text, structs, arrays and maps as JSON.
func headerBytes(v record.Value) ([]byte, error) {
	switch v.Kind() {
	case record.KindNull:
		return nil, nil
	case record.KindStruct, record.KindArray, record.KindMap:
		return v.AppendJSON(nil)
	case record.KindBytes:
		return v.AsBytes()
	}
	s, err := v.AsText()
	if err != nil {
		return nil, fmt.Errorf("cannot render %s as a header", v.Describe())
	}
	return []byte(s), nil
}
