package transform

import (
	"fmt"
	"math"
	"time"

	"github.com/txsink/txsink/connectors/record"
)

// ClassTimestampConverter is the base of TimestampConverter$Key and
// TimestampConverter$Value.
const ClassTimestampConverter = "org.apache.kafka.connect.transforms.TimestampConverter"

func init() { registerSides(ClassTimestampConverter, newTimestampConverter) }

// Target types of TimestampConverter (Connect's names).
const (
	tsString    = "string"
	tsUnix      = "unix"
	tsDate      = "Date"
	tsTime      = "Time"
	tsTimestamp = "Timestamp"
)

const msPerDay = 86_400_000

// timestampConverter is Kafka Connect's TimestampConverter: it converts
// the field (or, with field empty, the whole key or value) between a
// string in a SimpleDateFormat pattern, Unix time (an int64 in
// unix.precision), Date, Time and Timestamp. As in Connect, the value
// passes through a java.util.Date, so sub-millisecond parts are lost.
// The source type comes from the value: a Timestamp, Date or Time (also
// Debezium's time types, which the converters read as such), a string
// (parsed with format), or an integer (Unix time; with a schema, it must
// be int64).
type timestampConverter struct {
	side      side
	class     string
	field     string
	target    string
	format    *javaDateFormat
	precision string
	plans     cache[*record.Schema, tsPlan]
}

// tsPlan is the derived schema of one input struct schema and the index
// of the converted field (-1: the schema has no such field).
type tsPlan struct {
	schema *record.Schema
	index  int
	err    error
}

func newTimestampConverter(s side, settings map[string]string) (Transform, error) {
	t := &timestampConverter{side: s, class: s.className("TimestampConverter")}
	c := newConf(t.class, settings)
	t.field = c.str("field", "")
	t.target = c.oneOf("target.type", "", false, tsString, tsUnix, tsDate, tsTime, tsTimestamp)
	if _, ok := settings["target.type"]; !ok {
		c.fail("target.type", "missing required setting: one of string, unix, Date, Time, Timestamp")
	}
	if pattern := c.str("format", ""); pattern != "" {
		f, err := parseJavaDateFormat(pattern)
		if err != nil {
			c.fail("format", "%v", err)
		}
		t.format = f
	} else if t.target == tsString {
		c.fail("format", "target.type=string needs a SimpleDateFormat pattern in format")
	}
	t.precision = c.oneOf("unix.precision", "milliseconds", false, "seconds", "milliseconds", "microseconds", "nanoseconds")
	c.boolean("replace.null.with.default", true)
	if err := c.done(); err != nil {
		return nil, err
	}
	return t, nil
}

// targetSchema is the schema of a converted value.
func (t *timestampConverter) targetSchema(optional bool) *record.Schema {
	switch t.target {
	case tsString:
		return optionalIf(optional, schemaOptionalString, schemaString)
	case tsUnix:
		return optionalIf(optional, schemaOptionalInt64, schemaInt64)
	case tsDate:
		return optionalIf(optional, schemaOptionalDate, schemaDate)
	case tsTime:
		return optionalIf(optional, schemaOptionalTime, schemaTime)
	}
	return optionalIf(optional, schemaOptionalTimestmp, schemaTimestamp)
}

func (t *timestampConverter) Apply(r *record.Record) (bool, error) {
	v := t.side.get(r)
	s := v.Schema()
	if t.field == "" {
		if v.IsNull() {
			if s != nil {
				t.side.set(r, record.Null(t.targetSchema(s.Optional)))
			}
			return true, nil
		}
		out, err := t.convert(v, s)
		if err != nil {
			return false, errRecord("%s: the record %s: %v", t.class, t.side, err)
		}
		if s != nil {
			out = out.WithSchema(t.targetSchema(s.Optional))
		}
		t.side.set(r, out)
		return true, nil
	}
	if s == nil {
		if v.IsNull() {
			return true, nil
		}
		if err := wantStruct(t.class, t.side, v); err != nil {
			return false, err
		}
		names, vals, err := objectFields(v, 1)
		if err != nil {
			return false, err
		}
		var cur record.Value
		for i, n := range names {
			if n == t.field {
				cur = vals[i]
			}
		}
		// Connect puts the converted value (null for a missing field).
		out, err := t.convert(cur, nil)
		if err != nil {
			return false, errField(t.field, "%s: %v", t.class, err)
		}
		names, vals = put(names, vals, t.field, out)
		t.side.set(r, record.Object(names, vals))
		return true, nil
	}
	if s.Type != record.TypeStruct {
		return false, errRecord("%s: the record %s has schema %s; a struct is needed to convert field %q", t.class, t.side, s, t.field)
	}
	p := t.plans.get(s, func() tsPlan { return t.plan(s) })
	if p.err != nil {
		return false, p.err
	}
	if p.index < 0 {
		return true, nil // no such field: Connect copies the struct as it is
	}
	if v.IsNull() {
		t.side.set(r, record.Null(p.schema))
		return true, nil
	}
	vals := typedFields(v, 0)
	fs := p.schema.Fields[p.index].Schema
	out, err := t.convert(vals[p.index], s.Fields[p.index].Schema)
	if err != nil {
		return false, errField(t.field, "%s: %v", t.class, err)
	}
	if out.IsNull() {
		out = record.Null(fs)
	}
	vals[p.index] = out.WithSchema(fs)
	t.side.set(r, record.Struct(p.schema, vals))
	return true, nil
}

func (t *timestampConverter) plan(s *record.Schema) tsPlan {
	f := s.Field(t.field)
	if f == nil {
		return tsPlan{schema: s, index: -1}
	}
	fields := copyFields(s, 0)
	fields[f.Index].Schema = t.targetSchema(f.Schema.Optional)
	out, err := deriveStruct(s, fields, s.Optional)
	if err != nil {
		return tsPlan{err: errRecord("%s: %v", t.class, err)}
	}
	return tsPlan{schema: out, index: f.Index}
}

// convert converts one value (of schema s, nil without a schema); null
// stays null.
func (t *timestampConverter) convert(v record.Value, s *record.Schema) (record.Value, error) {
	if v.IsNull() {
		return record.Value{}, nil
	}
	ms, err := t.toMillis(v, s)
	if err != nil {
		return record.Value{}, err
	}
	switch t.target {
	case tsString:
		return record.String(t.format.format(ms)), nil
	case tsUnix:
		return record.Int(fromMillis(ms, t.precision)), nil
	case tsDate:
		return record.Date(floorDiv(ms, msPerDay)), nil
	case tsTime:
		return record.TimeOfDay((ms - floorDiv(ms, msPerDay)*msPerDay) * int64(time.Millisecond)), nil
	}
	return record.Timestamp(time.UnixMilli(ms).UTC()), nil
}

// toMillis reads a timestamp as epoch milliseconds (java.util.Date).
func (t *timestampConverter) toMillis(v record.Value, s *record.Schema) (int64, error) {
	switch v.Kind() {
	case record.KindTimestamp, record.KindDate:
		in, err := v.AsTimestamp()
		if err != nil {
			return 0, err
		}
		return in.Time.UnixMilli(), nil
	case record.KindTime:
		d, err := v.AsTimeOfDay()
		if err != nil {
			return 0, err
		}
		return d.Milliseconds(), nil
	case record.KindString:
		if t.format == nil {
			return 0, fmt.Errorf("a string timestamp needs a SimpleDateFormat pattern in format")
		}
		str, err := v.AsString()
		if err != nil {
			return 0, err
		}
		return t.format.parse(str)
	case record.KindInt, record.KindUint, record.KindNumber:
		if s != nil && s.Type != record.TypeInt64 {
			return 0, fmt.Errorf("schema %s does not correspond to a known timestamp type format (Unix time needs int64)", s)
		}
		n, err := v.AsInt64()
		if err != nil {
			return 0, fmt.Errorf("Unix time must be an integer: %v", err)
		}
		return toMillis(n, t.precision), nil
	}
	if s != nil {
		return 0, fmt.Errorf("schema %s does not correspond to a known timestamp type format", s)
	}
	return 0, fmt.Errorf("%s is not a timestamp (want a Timestamp, Date, Time, string or integer)", v.Describe())
}

// toMillis converts Unix time in precision to milliseconds as Java's
// TimeUnit does: truncating toward zero, saturating on overflow.
func toMillis(n int64, precision string) int64 {
	switch precision {
	case "seconds":
		return saturatingMul(n, 1000)
	case "microseconds":
		return n / 1000
	case "nanoseconds":
		return n / 1_000_000
	}
	return n
}

// fromMillis converts milliseconds to Unix time in precision.
func fromMillis(ms int64, precision string) int64 {
	switch precision {
	case "seconds":
		return ms / 1000
	case "microseconds":
		return saturatingMul(ms, 1000)
	case "nanoseconds":
		return saturatingMul(ms, 1_000_000)
	}
	return ms
}

func saturatingMul(n, m int64) int64 {
	switch {
	case n > math.MaxInt64/m:
		return math.MaxInt64
	case n < math.MinInt64/m:
		return math.MinInt64
	}
	return n * m
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
