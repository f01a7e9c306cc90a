package transform

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/txsink/txsink/connectors/record"
)

// side is the part of a record a transform works on: Kafka Connect's
// $Key and $Value variants of a transform class.
type side uint8

const (
	onValue side = iota
	onKey
)

func (s side) get(r *record.Record) record.Value {
	if s == onKey {
		return r.Key
	}
	return r.Value
}

func (s side) set(r *record.Record, v record.Value) {
	if s == onKey {
		r.Key = v
	} else {
		r.Value = v
	}
}

// String returns "key" or "value".
func (s side) String() string {
	if s == onKey {
		return "key"
	}
	return "value"
}

// registerSides registers the $Value and $Key classes of a transform
// family; build makes one for a side (the $Key one needs keys).
func registerSides(base string, build func(s side, settings map[string]string) (Transform, error)) {
	for _, s := range []side{onValue, onKey} {
		registerTransform(TransformPlugin{Class: s.className(base), NeedsKey: s == onKey,
			New: func(m map[string]string) (Transform, error) { return build(s, m) }})
	}
}

// className returns the class of a $Key/$Value transform family.
func (s side) className(base string) string {
	if s == onKey {
		return base + "$Key"
	}
	return base + "$Value"
}

// cache maps an input schema (by pointer: schemas are immutable and
// shared by every record that has them) to what a transform derives
// from it, so a transform builds a derived schema once, not once per
// record. It is safe for concurrent use. It holds at most cacheMax
// entries: past that it starts again, which costs rebuilding and never
// changes a result.
type cache[K comparable, V any] struct {
	m sync.Map
	n atomic.Int64
}

const cacheMax = 1024

func (c *cache[K, V]) get(k K, build func() V) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	v := build()
	if c.n.Add(1) > cacheMax {
		c.m.Clear()
		c.n.Store(1)
	}
	got, _ := c.m.LoadOrStore(k, v)
	return got.(V)
}

// errField is a record a transform cannot handle, because of one field.
func errField(field, format string, args ...any) error {
	return record.FieldErrorf(field, record.ErrTransform, format, args...)
}

// errRecord is a record a transform cannot handle as a whole.
func errRecord(format string, args ...any) error {
	return record.Errorf(record.ErrTransform, format, args...)
}

// wantStruct checks that v, the record's key or value, is a struct (with
// a struct schema, or a schemaless object), as Connect's
// requireStruct and requireMap do.
func wantStruct(class string, s side, v record.Value) error {
	if v.Kind() != record.KindStruct {
		if sch := v.Schema(); sch != nil {
			return errRecord("%s: the record %s has schema %s; a struct is needed", class, s, sch)
		}
		return errRecord("%s: the record %s is %s; an object is needed", class, s, v.Describe())
	}
	return nil
}

// typedFields returns the values of a struct with a schema, in field
// order, with room for extra more.
func typedFields(v record.Value, extra int) []record.Value {
	out := make([]record.Value, 0, len(v.Schema().Fields)+extra)
	_ = v.Range(func(_ []byte, fv record.Value) error {
		out = append(out, fv)
		return nil
	})
	return out
}

// fieldNames interns the field names of schemaless objects, so that a
// transform that rebuilds an object does not allocate a string per field
// of every record. Reads are lock-free (an immutable map swapped on
// write); it learns at most maxNames names of at most maxNameLen bytes,
// and allocates others as usual.
type fieldNames struct {
	m atomic.Pointer[map[string]string]
}

const (
	maxNames   = 4096
	maxNameLen = 128
)

func (n *fieldNames) intern(b []byte) string {
	if m := n.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	if len(s) > maxNameLen {
		return s
	}
	for {
		old := n.m.Load()
		size := 0
		if old != nil {
			size = len(*old)
		}
		if size >= maxNames {
			return s
		}
		next := make(map[string]string, size+1)
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[s] = s
		if n.m.CompareAndSwap(old, &next) {
			return s
		}
	}
}

// names is the process-wide interning of field names: names repeat
// across transforms and connectors.
var names fieldNames

// objectFields returns the fields of a struct without a schema (a
// schemaless JSON object, or an Object a transform built), one per name:
// a name given twice keeps its last value, as a JSON decoder (and the
// Java Map Connect reads it into) does. extra is room for more.
func objectFields(v record.Value, extra int) ([]string, []record.Value, error) {
	v = v.Scanned()
	n := v.Len()
	out := make([]string, 0, n+extra)
	vals := make([]record.Value, 0, n+extra)
	var seen map[string]int // only for large objects
	err := v.Range(func(name []byte, fv record.Value) error {
		if seen != nil {
			if i, ok := seen[string(name)]; ok {
				vals[i] = fv
				return nil
			}
		} else {
			for i, have := range out {
				if have == string(name) {
					vals[i] = fv
					return nil
				}
			}
		}
		s := names.intern(name)
		out = append(out, s)
		vals = append(vals, fv)
		if len(out) == 32 {
			seen = make(map[string]int, 2*len(out))
			for i, have := range out {
				seen[have] = i
			}
		} else if seen != nil {
			seen[s] = len(out) - 1
		}
		return nil
	})
	if err != nil {
		return nil, nil, errRecord("%v", err)
	}
	return out, vals, nil
}

// put sets name to val among an object's fields: in place when the name
// is there, else appended (a Java Map's put, keeping the order).
func put(names []string, vals []record.Value, name string, val record.Value) ([]string, []record.Value) {
	for i, n := range names {
		if n == name {
			vals[i] = val
			return names, vals
		}
	}
	return append(names, name), append(vals, val)
}

// deriveStruct returns a new struct schema with base's name, version,
// doc and parameters and the given fields (new Field values whose schemas
// may be shared), as Connect's SchemaUtil.copySchemaBasics and
// SchemaBuilder.field do; two fields of one name are an error, as in
// SchemaBuilder. Like copySchemaBasics it does not copy optionality: the
// derived schema is optional only when optional says so (Connect's
// TimestampConverter keeps it, ReplaceField, InsertField and Debezium's
// ExtractNewRecordState do not).
//
// The new schema is indexed with record.NewStruct, not Seal: Seal would
// re-index the shared field schemas, which other goroutines are reading.
func deriveStruct(base *record.Schema, fields []*record.Field, optional bool) (*record.Schema, error) {
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if seen[f.Name] {
			return nil, fmt.Errorf("two fields named %q", f.Name)
		}
		seen[f.Name] = true
	}
	s := record.NewStruct(base.Name, optional, fields...)
	s.Version, s.Doc, s.Params = base.Version, base.Doc, base.Params
	return s, nil
}

// copyFields returns new Field values for base's fields (the same names
// and schemas), with room for extra more.
func copyFields(base *record.Schema, extra int) []*record.Field {
	out := make([]*record.Field, 0, len(base.Fields)+extra)
	for _, f := range base.Fields {
		out = append(out, &record.Field{Name: f.Name, Schema: f.Schema})
	}
	return out
}

// Schemas of the values transforms insert (Connect's constants).
var (
	schemaString           = &record.Schema{Type: record.TypeString}
	schemaOptionalString   = &record.Schema{Type: record.TypeString, Optional: true}
	schemaInt32            = &record.Schema{Type: record.TypeInt32}
	schemaOptionalInt32    = &record.Schema{Type: record.TypeInt32, Optional: true}
	schemaInt64            = &record.Schema{Type: record.TypeInt64}
	schemaOptionalInt64    = &record.Schema{Type: record.TypeInt64, Optional: true}
	schemaTimestamp        = &record.Schema{Type: record.TypeInt64, Name: record.LogicalTimestamp, Version: 1}
	schemaOptionalTimestmp = &record.Schema{Type: record.TypeInt64, Name: record.LogicalTimestamp, Version: 1, Optional: true}
	schemaDate             = &record.Schema{Type: record.TypeInt32, Name: record.LogicalDate, Version: 1}
	schemaOptionalDate     = &record.Schema{Type: record.TypeInt32, Name: record.LogicalDate, Version: 1, Optional: true}
	schemaTime             = &record.Schema{Type: record.TypeInt32, Name: record.LogicalTime, Version: 1}
	schemaOptionalTime     = &record.Schema{Type: record.TypeInt32, Name: record.LogicalTime, Version: 1, Optional: true}
)

// optionalIf picks the optional or the required schema.
func optionalIf(optional bool, opt, req *record.Schema) *record.Schema {
	if optional {
		return opt
	}
	return req
}
