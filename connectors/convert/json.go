package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/internal/jsonscan"
	"github.com/txsink/txsink/connectors/record"
)

// Converter class names of Kafka Connect's own converters.
const (
	JSONClass      = "org.apache.kafka.connect.json.JsonConverter"
	StringClass    = "org.apache.kafka.connect.storage.StringConverter"
	ByteArrayClass = "org.apache.kafka.connect.converters.ByteArrayConverter"
)

func init() {
	register(Plugin{Class: JSONClass, Aliases: []string{"JsonConverter", "json"}, Version: "4.1.1", New: newJSONFromSettings})
	register(Plugin{Class: StringClass, Aliases: []string{"StringConverter", "string"}, Version: "4.1.1", New: func(map[string]string, bool, RegistryPolicy) (Converter, error) { return stringConverter{}, nil }})
	register(Plugin{Class: ByteArrayClass, Aliases: []string{"ByteArrayConverter"}, Version: "4.1.1", New: func(map[string]string, bool, RegistryPolicy) (Converter, error) { return byteArrayConverter{}, nil }})
}

// envelopeMode says how the JSON converter treats Kafka Connect's
// envelope {"schema": …, "payload": …}.
type envelopeMode int

const (
	// envelopeAuto: an object with exactly the keys "schema" and
	// "payload", whose schema is null or an object with a "type", is an
	// envelope; anything else is schemaless JSON. txsink's default when no
	// converter is configured.
	envelopeAuto envelopeMode = iota
	// envelopeRequired: schemas.enable=true, as Kafka Connect's
	// JsonConverter: every non-null value must be an envelope.
	envelopeRequired
	// envelopeNever: schemas.enable=false: everything is schemaless JSON.
	envelopeNever
)

// JSON is Kafka Connect's JsonConverter (and txsink's default converter):
// schemaless JSON, or the envelope {"schema": …, "payload": …} whose
// schema gives the payload its types, logical types included (Decimal as
// base64 unscaled bytes or as a number, Date, Time, Timestamp, Debezium's
// time types).
type JSON struct {
	mode envelopeMode
	// lenientKey: bytes that are not JSON are taken as a string, as a
	// StringConverter key (txsink's default key converter).
	lenientKey bool
	schemas    sync.Map // schema text → *record.Schema (or error)
}

// NewDefaultJSON returns txsink's default converter: the JsonConverter
// recognising envelopes by their shape, and, for keys, reading bytes that
// are not JSON as a string.
func NewDefaultJSON(isKey bool) *JSON { return &JSON{mode: envelopeAuto, lenientKey: isKey} }

func newJSONFromSettings(settings map[string]string, _ bool, _ RegistryPolicy) (Converter, error) {
	c := &JSON{mode: envelopeRequired}
	if v, ok := settings["schemas.enable"]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return nil, config.FieldError{Name: SettingSchemasEnable, Msg: fmt.Sprintf("invalid value %q: must be true or false", v)}
		}
		if !b {
			c.mode = envelopeNever
		}
	}
	if v, ok := settings["decimal.format"]; ok {
		// Reading accepts both BASE64 and NUMERIC forms whatever the setting.
		switch strings.ToUpper(strings.TrimSpace(v)) {
		case "BASE64", "NUMERIC":
		default:
			return nil, config.FieldError{Name: "decimal.format", Msg: fmt.Sprintf("invalid value %q: must be BASE64 or NUMERIC", v)}
		}
	}
	return c, nil
}

// Convert decodes JSON. See the type's documentation.
func (c *JSON) Convert(_ context.Context, _ string, _ []kgo.RecordHeader, data []byte, buf *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	if !utf8.Valid(data) {
		if c.lenientKey {
			return record.Value{}, record.Errorf(record.ErrDecode, "key is not valid UTF-8")
		}
		return record.Value{}, record.Errorf(record.ErrDecode, "not valid UTF-8")
	}
	trimmed := record.TrimJSONSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		members, ok := jsonscan.Object(trimmed, buf.members[:0])
		buf.members = members
		if ok {
			if c.mode != envelopeNever {
				if sch, payload, isEnv := c.envelope(members); isEnv {
					return c.fromEnvelope(sch, payload)
				}
				if c.mode == envelopeRequired {
					return record.Value{}, errNotEnvelope
				}
			}
			return buf.object.Object(trimmed, members), nil
		}
	}
	if !jsonscan.Valid(trimmed) && !json.Valid(trimmed) {
		if c.lenientKey {
			return record.String(string(data)), nil
		}
		return record.Value{}, record.Errorf(record.ErrDecode, "invalid JSON")
	}
	v := record.JSON(trimmed)
	if v.Kind() == record.KindStruct && c.mode != envelopeNever {
		// An object deeper than the scanner goes: decode the slow way.
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &fields); err == nil && len(fields) == 2 {
			if raw, ok := fields["schema"]; ok {
				if payload, ok := fields["payload"]; ok {
					if sch, isEnv := c.schemaOf(raw); isEnv {
						return c.fromEnvelope(sch, payload)
					}
				}
			}
		}
	}
	if c.mode == envelopeRequired && !v.IsNull() {
		return record.Value{}, errNotEnvelope
	}
	return v, nil
}

var errNotEnvelope = record.Errorf(record.ErrDecode, `JsonConverter with schemas.enable requires "schema" and "payload" fields and may not contain additional fields; for plain JSON set schemas.enable=false in the converter's configuration`)

// envelope reports whether members form an envelope, returning its schema
// (nil for "schema": null) and payload.
func (c *JSON) envelope(members []jsonscan.Member) (*record.Schema, []byte, bool) {
	if len(members) != 2 {
		return nil, nil, false
	}
	var rawSchema, payload []byte
	for _, m := range members {
		switch {
		case m.Escaped:
			return nil, nil, false
		case string(m.Key) == "schema":
			rawSchema = m.Value
		case string(m.Key) == "payload":
			payload = m.Value
		}
	}
	if rawSchema == nil || payload == nil {
		return nil, nil, false
	}
	sch, ok := c.schemaOf(rawSchema)
	if !ok {
		return nil, nil, false
	}
	return sch, payload, true
}

type schemaEntry struct {
	s   *record.Schema
	err error
}

// schemaOf parses an envelope's schema, cached by its text: the text
// fully determines the schema. ok is false when raw is neither null nor
// an object with a "type" (then the object is not an envelope).
func (c *JSON) schemaOf(raw []byte) (*record.Schema, bool) {
	if string(raw) == "null" {
		return nil, true
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	if e, ok := c.schemas.Load(string(raw)); ok {
		return e.(*schemaEntry).s, e.(*schemaEntry).s != nil || e.(*schemaEntry).err != nil
	}
	var probe struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(raw, &probe) != nil || probe.Type == nil {
		c.schemas.Store(string(raw), &schemaEntry{})
		return nil, false
	}
	s, err := ParseConnectSchema(raw)
	e := &schemaEntry{s: s, err: err}
	if err != nil {
		// Keep the error: fromEnvelope reports it for every record that
		// carries this schema.
		e.s = &record.Schema{Type: record.TypeUnknown, Doc: err.Error()}
	}
	c.schemas.Store(string(raw), e)
	return e.s, true
}

func (c *JSON) fromEnvelope(sch *record.Schema, payload []byte) (record.Value, error) {
	if sch == nil {
		v := record.JSON(payload)
		return v, nil
	}
	if sch.Type == record.TypeUnknown {
		return record.Value{}, record.Errorf(record.ErrDecode, "envelope schema: %s", sch.Doc)
	}
	if string(record.TrimJSONSpace(payload)) == "null" {
		// A null payload is a tombstone, whatever the schema says.
		return record.Null(sch), nil
	}
	return FromConnectJSON(payload, sch, "")
}

// connectJSONSchema is Kafka Connect's JSON form of a schema.
type connectJSONSchema struct {
	Type       string               `json:"type"`
	Optional   bool                 `json:"optional"`
	Name       string               `json:"name"`
	Version    int                  `json:"version"`
	Doc        string               `json:"doc"`
	Parameters map[string]string    `json:"parameters"`
	Field      string               `json:"field"`
	Fields     []*connectJSONSchema `json:"fields"`
	Items      *connectJSONSchema   `json:"items"`
	Keys       *connectJSONSchema   `json:"keys"`
	Values     *connectJSONSchema   `json:"values"`
}

// connectJSONTypes maps the type names the JsonConverter writes for
// FLOAT32 and FLOAT64 ("float", "double") to Connect's type names; the
// others are the same. ("float32" and "float64" are read too.)
var connectJSONTypes = map[string]string{"float": "float32", "double": "float64"}

// ParseConnectSchema parses Kafka Connect's JSON form of a schema (the
// "schema" of a JsonConverter envelope).
func ParseConnectSchema(raw []byte) (*record.Schema, error) {
	var js connectJSONSchema
	if err := json.Unmarshal(raw, &js); err != nil {
		return nil, err
	}
	s, err := js.build(0)
	if err != nil {
		return nil, err
	}
	return s.Seal(), nil
}

func (js *connectJSONSchema) build(depth int) (*record.Schema, error) {
	if depth > 64 {
		return nil, fmt.Errorf("schema nested deeper than 64 levels")
	}
	t, ok := record.ParseType(connectJSONTypes[js.Type])
	if !ok {
		t, ok = record.ParseType(js.Type)
	}
	if !ok {
		return nil, fmt.Errorf("unknown schema type %q", js.Type)
	}
	s := &record.Schema{Type: t, Optional: js.Optional, Name: js.Name, Version: js.Version, Doc: js.Doc, Params: js.Parameters}
	var err error
	switch t {
	case record.TypeStruct:
		seen := map[string]bool{}
		for _, f := range js.Fields {
			if f == nil {
				continue
			}
			if f.Field == "" {
				return nil, fmt.Errorf("struct field without a name")
			}
			if seen[f.Field] {
				return nil, fmt.Errorf("struct field %q declared twice", f.Field)
			}
			seen[f.Field] = true
			fs, err := f.build(depth + 1)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Field, err)
			}
			s.Fields = append(s.Fields, &record.Field{Name: f.Field, Schema: fs})
		}
	case record.TypeArray:
		if js.Items == nil {
			return nil, fmt.Errorf("array schema without items")
		}
		if s.Elem, err = js.Items.build(depth + 1); err != nil {
			return nil, err
		}
	case record.TypeMap:
		if js.Keys == nil || js.Values == nil {
			return nil, fmt.Errorf("map schema without keys or values")
		}
		if s.Key, err = js.Keys.build(depth + 1); err != nil {
			return nil, err
		}
		if s.Elem, err = js.Values.build(depth + 1); err != nil {
			return nil, err
		}
	}
	if s.Name == record.LogicalDecimal {
		if _, err := decimalScale(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func decimalScale(s *record.Schema) (int32, error) {
	p, ok := s.Params[record.DecimalScaleParam]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(p))
	if err != nil || n < -1000 || n > 1000 {
		return 0, fmt.Errorf("Decimal schema: invalid scale parameter %q", p)
	}
	return int32(n), nil
}

// FromConnectJSON converts JSON raw (a JsonConverter payload) to a Value
// of schema s, as Kafka Connect's JsonConverter does: types are checked,
// a struct takes the fields its schema names (others are ignored), a
// missing or null optional field is null, and logical types become their
// kinds. path names the field for errors.
func FromConnectJSON(raw []byte, s *record.Schema, path string) (record.Value, error) {
	raw = record.TrimJSONSpace(raw)
	bad := func(format string, args ...any) (record.Value, error) {
		err := record.Errorf(record.ErrDecode, format, args...)
		if path != "" {
			err = &record.FieldError{Field: path, Err: err}
		}
		return record.Value{}, err
	}
	if len(raw) == 0 || string(raw) == "null" {
		if !s.Optional {
			return bad("null for a required %s", s.Type)
		}
		return record.Null(s), nil
	}
	j := record.JSON(raw)
	if v, handled, err := logicalFromJSON(j, raw, s); handled {
		if err != nil {
			return bad("%s: %v", logicalName(s), err)
		}
		return v.WithSchema(s), nil
	}
	switch s.Type {
	case record.TypeInt8, record.TypeInt16, record.TypeInt32, record.TypeInt64:
		if j.Kind() != record.KindNumber {
			return bad("want %s, got %s", s.Type, j.Describe())
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return bad("%s is not %s", record.Truncate(string(raw), 40), s.Type)
		}
		if bits := map[record.Type]uint{record.TypeInt8: 8, record.TypeInt16: 16, record.TypeInt32: 32}[s.Type]; bits > 0 && (n < -1<<(bits-1) || n >= 1<<(bits-1)) {
			return bad("%d is out of range for %s", n, s.Type)
		}
		return record.Int(n).WithSchema(s), nil
	case record.TypeFloat32, record.TypeFloat64:
		if j.Kind() == record.KindString {
			// JsonConverter writes NaN and infinities as strings.
			str, _ := j.AsString()
			switch str {
			case "NaN", "Infinity", "-Infinity":
				f, _ := j.AsFloat(64)
				if s.Type == record.TypeFloat32 {
					return record.Float32(float32(f)).WithSchema(s), nil
				}
				return record.Float64(f).WithSchema(s), nil
			}
		}
		if j.Kind() != record.KindNumber {
			return bad("want %s, got %s", s.Type, j.Describe())
		}
		if s.Type == record.TypeFloat32 {
			f, err := strconv.ParseFloat(string(raw), 32)
			if err != nil {
				return bad("%s is out of range for float32", record.Truncate(string(raw), 40))
			}
			return record.Float32(float32(f)).WithSchema(s), nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsInf(f, 0) {
			return bad("%s is out of range for float64", record.Truncate(string(raw), 40))
		}
		return record.Float64(f).WithSchema(s), nil
	case record.TypeBoolean:
		if j.Kind() != record.KindBool {
			return bad("want boolean, got %s", j.Describe())
		}
		return j.WithSchema(s), nil
	case record.TypeString:
		if j.Kind() != record.KindString {
			return bad("want string, got %s", j.Describe())
		}
		str, err := j.AsString()
		if err != nil {
			return bad("%v", err)
		}
		return record.String(str).WithSchema(s), nil
	case record.TypeBytes:
		if j.Kind() != record.KindString {
			return bad("want bytes as a base64 string, got %s", j.Describe())
		}
		b, err := j.AsBytes()
		if err != nil {
			return bad("%v", err)
		}
		return record.Bytes(b).WithSchema(s), nil
	case record.TypeArray:
		if j.Kind() != record.KindArray {
			return bad("want array, got %s", j.Describe())
		}
		var elems []record.Value
		err := j.Elems(func(i int, e record.Value) error {
			raw, _ := e.JSONText()
			v, err := FromConnectJSON(raw, s.Elem, elemPath(path, i))
			elems = append(elems, v)
			return err
		})
		if err != nil {
			return record.Value{}, err
		}
		return record.Array(s, elems), nil
	case record.TypeMap:
		return mapFromJSON(j, s, path)
	case record.TypeStruct:
		if j.Kind() != record.KindStruct {
			return bad("want struct, got %s", j.Describe())
		}
		raws := make([][]byte, len(s.Fields))
		err := j.Range(func(name []byte, fv record.Value) error {
			if f := s.Field(string(name)); f != nil {
				raws[f.Index], _ = fv.JSONText()
			}
			return nil
		})
		if err != nil {
			return record.Value{}, err
		}
		fields := make([]record.Value, len(s.Fields))
		for i, f := range s.Fields {
			v, err := FromConnectJSON(raws[i], f.Schema, joinPath(path, f.Name))
			if err != nil {
				return record.Value{}, err
			}
			fields[i] = v
		}
		return record.Struct(s, fields), nil
	}
	return bad("unsupported schema type %s", s.Type)
}

func mapFromJSON(j record.Value, s *record.Schema, path string) (record.Value, error) {
	var kv []record.Value
	if s.Key.Type == record.TypeString && j.Kind() == record.KindStruct {
		err := j.Range(func(name []byte, fv record.Value) error {
			raw, _ := fv.JSONText()
			v, err := FromConnectJSON(raw, s.Elem, joinPath(path, string(name)))
			if err != nil {
				return err
			}
			kv = append(kv, record.String(string(name)).WithSchema(s.Key), v)
			return nil
		})
		if err != nil {
			return record.Value{}, err
		}
		return record.Map(s, kv), nil
	}
	// Other keys: an array of [key, value] pairs.
	if j.Kind() != record.KindArray {
		return record.Value{}, record.InField(path, record.Errorf(record.ErrDecode, "want map, got %s", j.Describe()))
	}
	err := j.Elems(func(i int, e record.Value) error {
		var pair []json.RawMessage
		raw, _ := e.JSONText()
		if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
			return record.InField(elemPath(path, i), record.Errorf(record.ErrDecode, "map entry must be a [key, value] pair"))
		}
		k, err := FromConnectJSON(pair[0], s.Key, elemPath(path, i))
		if err != nil {
			return err
		}
		v, err := FromConnectJSON(pair[1], s.Elem, elemPath(path, i))
		if err != nil {
			return err
		}
		kv = append(kv, k, v)
		return nil
	})
	if err != nil {
		return record.Value{}, err
	}
	return record.Map(s, kv), nil
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func elemPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func logicalName(s *record.Schema) string {
	if i := strings.LastIndexByte(s.Name, '.'); i >= 0 {
		return s.Name[i+1:]
	}
	return s.Name
}

// logicalFromJSON converts the logical types of Kafka Connect and
// Debezium; handled is false for other schemas.
func logicalFromJSON(j record.Value, raw []byte, s *record.Schema) (v record.Value, handled bool, err error) {
	intOf := func() (int64, error) {
		if j.Kind() != record.KindNumber {
			if j.Kind() == record.KindString {
				// Some producers quote integers.
				return j.AsInt64()
			}
			return 0, fmt.Errorf("want an integer, got %s", j.Describe())
		}
		return strconv.ParseInt(string(raw), 10, 64)
	}
	switch s.Name {
	case record.LogicalDecimal:
		scale, err := decimalScale(s)
		if err != nil {
			return v, true, err
		}
		switch j.Kind() {
		case record.KindString:
			b, err := j.AsBytes()
			if err != nil {
				return v, true, fmt.Errorf("want base64 unscaled bytes: %v", err)
			}
			return record.Decimal(record.TwosComplement(b), scale), true, nil
		case record.KindNumber:
			d, err := j.AsDecimal()
			if err != nil {
				return v, true, err
			}
			unscaled, ok := d.AtScale(scale)
			if !ok {
				return v, true, fmt.Errorf("%s has more than %d decimal places", record.Truncate(string(raw), 40), scale)
			}
			return record.Decimal(unscaled, scale), true, nil
		}
		return v, true, fmt.Errorf("want a base64 string or a number, got %s", j.Describe())
	case record.LogicalDate, record.DebeziumDate:
		n, err := intOf()
		if err != nil || n < -100_000_000 || n > 100_000_000 {
			return v, true, fmt.Errorf("want days since the epoch, got %s", record.Truncate(string(raw), 40))
		}
		return record.Date(n), true, nil
	case record.LogicalTime, record.DebeziumTime, record.DebeziumMicroTime, record.DebeziumNanoTime:
		n, err := intOf()
		unit := map[string]time.Duration{record.LogicalTime: time.Millisecond, record.DebeziumTime: time.Millisecond,
			record.DebeziumMicroTime: time.Microsecond, record.DebeziumNanoTime: time.Nanosecond}[s.Name]
		if err != nil || n < 0 || time.Duration(n) > 24*time.Hour/unit {
			return v, true, fmt.Errorf("want time since midnight, got %s", record.Truncate(string(raw), 40))
		}
		return record.TimeOfDay(n * int64(unit)), true, nil
	case record.LogicalTimestamp, record.DebeziumTimestamp, record.DebeziumMicroTimestamp, record.DebeziumNanoTimestamp:
		n, err := intOf()
		if err != nil {
			return v, true, fmt.Errorf("want an integer timestamp, got %s", record.Truncate(string(raw), 40))
		}
		var t time.Time
		switch s.Name {
		case record.DebeziumMicroTimestamp:
			t = time.UnixMicro(n)
		case record.DebeziumNanoTimestamp:
			t = time.Unix(0, n)
		default:
			t = time.UnixMilli(n)
		}
		return record.Timestamp(t), true, nil
	}
	return v, false, nil
}

// stringConverter is Kafka Connect's StringConverter: the bytes as a
// UTF-8 string. Unlike Java, which replaces invalid UTF-8 with U+FFFD,
// invalid bytes are a bad record: replacing them would change the data.
type stringConverter struct{}

func (stringConverter) Convert(_ context.Context, _ string, _ []kgo.RecordHeader, data []byte, _ *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	if !utf8.Valid(data) {
		return record.Value{}, record.Errorf(record.ErrDecode, "not valid UTF-8 (StringConverter)")
	}
	return record.StringBytes(data).WithSchema(optionalString), nil
}

var optionalString = &record.Schema{Type: record.TypeString, Optional: true}

// byteArrayConverter is Kafka Connect's ByteArrayConverter: the bytes as
// they are.
type byteArrayConverter struct{}

func (byteArrayConverter) Convert(_ context.Context, _ string, _ []kgo.RecordHeader, data []byte, _ *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	return record.Bytes(data).WithSchema(optionalBytes), nil
}

var optionalBytes = &record.Schema{Type: record.TypeBytes, Optional: true}
