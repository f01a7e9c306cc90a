package transform

import (
	"errors"
	"strings"
	"time"

	"github.com/txsink/txsink/connectors/record"
)

// ClassInsertField is the base of InsertField$Key and InsertField$Value.
const ClassInsertField = "org.apache.kafka.connect.transforms.InsertField"

func init() { registerSides(ClassInsertField, newInsertField) }

// insertField is Kafka Connect's InsertField: it adds the record's topic
// (as the transforms so far left it), partition, offset and timestamp,
// and a static string, as fields. A name ending in "!" makes the field
// required in the schema, "?" (or nothing) optional. A null key or value
// passes unchanged. Without a schema the timestamp is epoch milliseconds
// (a Long in Connect); with one it is a Timestamp.
type insertField struct {
	side                                        side
	class                                       string
	topic, partition, offset, timestamp, static insertion
	staticValue                                 string
	plans                                       cache[*record.Schema, insertPlan]
}

// insertion is one configured field: its name and optionality; name ""
// when not configured.
type insertion struct {
	name     string
	optional bool
}

type insertPlan struct {
	schema *record.Schema
	err    error
}

func newInsertField(s side, settings map[string]string) (Transform, error) {
	t := &insertField{side: s, class: s.className("InsertField")}
	c := newConf(t.class, settings)
	spec := func(name string) insertion {
		v, ok := c.raw(name)
		if !ok {
			return insertion{}
		}
		in := insertion{name: v, optional: true}
		if n, ok := strings.CutSuffix(v, "?"); ok {
			in.name = n
		} else if n, ok := strings.CutSuffix(v, "!"); ok {
			in = insertion{name: n}
		}
		if in.name == "" {
			c.fail(name, "the field name must not be empty")
		}
		return in
	}
	t.topic = spec("topic.field")
	t.partition = spec("partition.field")
	t.offset = spec("offset.field")
	t.timestamp = spec("timestamp.field")
	t.static = spec("static.field")
	staticValue, hasStatic := c.raw("static.value")
	t.staticValue = staticValue
	c.boolean("replace.null.with.default", true)
	if t.static.name != "" && !hasStatic {
		c.fail("static.value", "no value set for static field %q", t.static.name)
	}
	if err := c.done(); err != nil {
		return nil, err
	}
	if t.topic.name == "" && t.partition.name == "" && t.offset.name == "" && t.timestamp.name == "" && t.static.name == "" {
		return nil, errNoInsertion
	}
	return t, nil
}

// errNoInsertion: InsertField has nothing to insert (Connect's "No field
// insertion configured").
var errNoInsertion = errors.New("no field insertion configured: set topic.field, partition.field, offset.field, timestamp.field or static.field")

func (t *insertField) Apply(r *record.Record) (bool, error) {
	v := t.side.get(r)
	if v.IsNull() {
		return true, nil
	}
	if err := wantStruct(t.class, t.side, v); err != nil {
		return false, err
	}
	if s := v.Schema(); s != nil {
		p := t.plans.get(s, func() insertPlan { return t.plan(s) })
		if p.err != nil {
			return false, p.err
		}
		vals := typedFields(v, 5)
		for i, what := range t.order() {
			f := p.schema.Fields[len(s.Fields)+i]
			fv, err := t.valueOf(r, what, true)
			if err != nil {
				return false, err
			}
			if fv.IsNull() {
				if !f.Schema.Optional {
					return false, errField(f.Name, "%s: the record has no %s for this required field", t.class, what)
				}
				fv = record.Null(f.Schema)
			}
			vals = append(vals, fv.WithSchema(f.Schema))
		}
		t.side.set(r, record.Struct(p.schema, vals))
		return true, nil
	}
	names, vals, err := objectFields(v, 5)
	if err != nil {
		return false, err
	}
	for _, what := range t.order() {
		fv, err := t.valueOf(r, what, false)
		if err != nil {
			return false, err
		}
		if fv.IsNull() {
			continue // Connect puts only what the record has
		}
		names, vals = put(names, vals, t.field(what).name, fv)
	}
	t.side.set(r, record.Object(names, vals))
	return true, nil
}

// What an insertion inserts, in Connect's order.
type insertWhat uint8

const (
	insertTopic insertWhat = iota
	insertPartition
	insertOffset
	insertTimestamp
	insertStatic
)

var insertWhatNames = [...]string{"topic", "partition", "offset", "timestamp", "static value"}

func (w insertWhat) String() string { return insertWhatNames[w] }

func (t *insertField) field(w insertWhat) insertion {
	return [...]insertion{t.topic, t.partition, t.offset, t.timestamp, t.static}[w]
}

// order lists the configured insertions in Connect's order.
func (t *insertField) order() []insertWhat {
	out := make([]insertWhat, 0, 5)
	for w := insertTopic; w <= insertStatic; w++ {
		if t.field(w).name != "" {
			out = append(out, w)
		}
	}
	return out
}

// valueOf returns what w inserts for r: null when the record does not
// have it (no timestamp).
func (t *insertField) valueOf(r *record.Record, w insertWhat, typed bool) (record.Value, error) {
	switch w {
	case insertTopic:
		return record.String(r.Topic), nil
	case insertPartition, insertOffset:
		if r.Raw == nil {
			return record.Value{}, errField(t.field(w).name, "%s: the record has no Kafka %s", t.class, w)
		}
		if w == insertPartition {
			return record.Int(int64(r.Raw.Partition)), nil
		}
		return record.Int(r.Raw.Offset), nil
	case insertTimestamp:
		if r.Raw != nil && r.Raw.Attrs.TimestampType() < 0 || r.Timestamp.IsZero() {
			return record.Value{}, nil
		}
		ms := r.Timestamp.UnixMilli()
		if typed {
			return record.Timestamp(time.UnixMilli(ms).UTC()), nil
		}
		return record.Int(ms), nil
	}
	return record.String(t.staticValue), nil
}

func (t *insertField) plan(s *record.Schema) insertPlan {
	fields := copyFields(s, 5)
	add := func(in insertion, opt, req *record.Schema) {
		if in.name != "" {
			fields = append(fields, &record.Field{Name: in.name, Schema: optionalIf(in.optional, opt, req)})
		}
	}
	add(t.topic, schemaOptionalString, schemaString)
	add(t.partition, schemaOptionalInt32, schemaInt32)
	add(t.offset, schemaOptionalInt64, schemaInt64)
	add(t.timestamp, schemaOptionalTimestmp, schemaTimestamp)
	add(t.static, schemaOptionalString, schemaString)
	out, err := deriveStruct(s, fields, false)
	if err != nil {
		return insertPlan{err: errRecord("%s: %v", t.class, err)}
	}
	return insertPlan{schema: out}
}
