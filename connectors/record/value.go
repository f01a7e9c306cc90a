package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"time"
	"unsafe"

	"github.com/txsink/txsink/connectors/internal/jsonscan"
)

// Kind is the kind of data a Value holds.
type Kind uint8

// Value kinds.
const (
	KindNull Kind = iota
	KindBool
	KindInt       // a signed integer (int8 … int64)
	KindUint      // an unsigned integer that may exceed int64 (Protobuf uint64)
	KindFloat     // float32 or float64
	KindNumber    // an exact number given as text (a schemaless JSON number)
	KindDecimal   // unscaled integer × 10^-scale
	KindString    // text
	KindBytes     // bytes
	KindDate      // days since 1970-01-01
	KindTime      // time of day, nanoseconds since midnight
	KindTimestamp // an instant; or, flagged local, a wall time without a zone
	KindDuration  // seconds and nanoseconds
	KindStruct    // named fields
	KindArray     // elements
	KindMap       // key/value entries
)

var kindNames = [...]string{"null", "boolean", "int", "uint", "float", "number", "decimal", "string", "bytes", "date", "time", "timestamp", "duration", "struct", "array", "map"}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

const (
	flagJSON    uint8 = 1 << iota // b holds JSON text (schemaless JSON)
	flagFloat32                   // a float of 32 bits
	flagLocal                     // a timestamp without a zone
	flagSmall                     // a decimal whose unscaled value is in n
)

// Value is one typed value of a converted record: Kafka Connect's data
// model (a schema and its value) in one struct, without boxing.
//
// Values converted from schemaless JSON are lazy: they keep the validated
// JSON text and decode it only when asked, so a sink that fills column
// slots from an object's members pays for one scan of the record and for
// the conversions of the fields it writes, as the hand-written scanner
// path did before the pipeline existed. Such a value must not outlive the
// record bytes (and, for a top-level object, the Scratch) it came from.
//
// The zero Value is a schemaless null.
//
// A Value is kept small (56 bytes, three pointers), since the sinks copy
// one per field of every record: what few values need lives behind x.
type Value struct {
	kind  Kind
	flags uint8
	aux   int32  // Decimal: scale; Timestamp and Duration: nanoseconds
	n     uint64 // Bool, Int, Uint, Float bits, Date days, Time nanos, Timestamp and Duration seconds, small Decimal
	b     []byte // JSON text (flagJSON); Bytes; String bytes
	sch   *Schema
	x     *ext
}

// ext holds the parts of a value that only some kinds have.
type ext struct {
	s     string            // String from a Go string
	names []string          // field names of a struct without a schema (Object)
	big   *big.Int          // Decimal unscaled value (unless flagSmall)
	elems []Value           // Array elements; Struct fields in schema order; Map keys and values interleaved
	obj   []jsonscan.Member // a schemaless JSON object's members, already scanned
}

func (v Value) elems() []Value {
	if v.x == nil {
		return nil
	}
	return v.x.elems
}

func (v Value) members() []jsonscan.Member {
	if v.x == nil {
		return nil
	}
	return v.x.obj
}

// Null returns a null value of schema s (nil: schemaless).
func Null(s *Schema) Value { return Value{sch: s} }

// Bool returns a boolean.
func Bool(b bool) Value {
	v := Value{kind: KindBool}
	if b {
		v.n = 1
	}
	return v
}

// Int returns a signed integer.
func Int(n int64) Value { return Value{kind: KindInt, n: uint64(n)} }

// Uint returns an unsigned integer.
func Uint(n uint64) Value { return Value{kind: KindUint, n: n} }

// Float64 returns a 64-bit float.
func Float64(f float64) Value { return Value{kind: KindFloat, n: math.Float64bits(f)} }

// Float32 returns a 32-bit float.
func Float32(f float32) Value {
	return Value{kind: KindFloat, flags: flagFloat32, n: math.Float64bits(float64(f))}
}

// Decimal returns unscaled × 10^-scale.
func Decimal(unscaled *big.Int, scale int32) Value {
	if unscaled.IsInt64() {
		return Value{kind: KindDecimal, flags: flagSmall, n: uint64(unscaled.Int64()), aux: scale}
	}
	return Value{kind: KindDecimal, x: &ext{big: unscaled}, aux: scale}
}

// DecimalInt returns unscaled × 10^-scale for an int64 unscaled value.
func DecimalInt(unscaled int64, scale int32) Value {
	return Value{kind: KindDecimal, flags: flagSmall, n: uint64(unscaled), aux: scale}
}

// String returns a string value.
func String(s string) Value { return Value{kind: KindString, x: &ext{s: s}} }

// StringBytes returns a string value held in b, which must be valid UTF-8
// and must not change while the value is used.
func StringBytes(b []byte) Value { return Value{kind: KindString, b: b} }

// Bytes returns a bytes value (b is not copied).
func Bytes(b []byte) Value { return Value{kind: KindBytes, b: b} }

// Date returns a date, as days since 1970-01-01.
func Date(days int64) Value { return Value{kind: KindDate, n: uint64(days)} }

// TimeOfDay returns a time of day, as nanoseconds since midnight.
func TimeOfDay(nanos int64) Value { return Value{kind: KindTime, n: uint64(nanos)} }

// Timestamp returns an instant.
func Timestamp(t time.Time) Value {
	return Value{kind: KindTimestamp, n: uint64(t.Unix()), aux: int32(t.Nanosecond())}
}

// LocalTimestamp returns a wall time without a zone (Avro's
// local-timestamp), given as the same wall time in UTC.
func LocalTimestamp(t time.Time) Value {
	v := Timestamp(t)
	v.flags |= flagLocal
	return v
}

// Duration returns a duration of sec seconds and nanos nanoseconds (both
// of the same sign).
func Duration(sec int64, nanos int32) Value {
	return Value{kind: KindDuration, n: uint64(sec), aux: nanos}
}

// Struct returns a struct of schema s (which must be a struct schema)
// with one value per field, in field order.
func Struct(s *Schema, fields []Value) Value {
	return Value{kind: KindStruct, sch: s, x: &ext{elems: fields}}
}

// Object returns a struct without a schema, as a transform builds from a
// schemaless value: fields named names, in that order, with values vals
// (the same length). Range and Get see them as a struct's fields; it
// renders as a JSON object.
func Object(names []string, vals []Value) Value {
	return Value{kind: KindStruct, x: &ext{names: names, elems: vals}}
}

// Array returns an array.
func Array(s *Schema, elems []Value) Value {
	return Value{kind: KindArray, sch: s, x: &ext{elems: elems}}
}

// Map returns a map whose keys and values alternate in kv. The order is
// kept: converters give it deterministically (as the bytes had it, or
// sorted).
func Map(s *Schema, kv []Value) Value { return Value{kind: KindMap, sch: s, x: &ext{elems: kv}} }

// WithSchema returns v described by schema s.
func (v Value) WithSchema(s *Schema) Value {
	v.sch = s
	return v
}

// JSON returns the schemaless value of raw, which must be exactly one
// valid JSON value (the caller validated it; use ParseJSON otherwise):
// strings, numbers (exact, as text), booleans and null become scalars,
// objects structs and arrays arrays, all decoded lazily.
func JSON(raw []byte) Value { return jsonValue(TrimJSONSpace(raw)) }

// jsonValue is JSON for text without surrounding whitespace (a scanner's
// member or element).
func jsonValue(raw []byte) Value {
	if len(raw) == 0 {
		return Value{}
	}
	v := Value{flags: flagJSON, b: raw}
	switch raw[0] {
	case '"':
		v.kind = KindString
	case '{':
		v.kind = KindStruct
	case '[':
		v.kind = KindArray
	case 't':
		v.kind, v.n = KindBool, 1
	case 'f':
		v.kind = KindBool
	case 'n':
		return Value{}
	default:
		v.kind = KindNumber
	}
	return v
}

// TrimJSONSpace removes JSON's whitespace (space, tab, line feed, carriage
// return) around b; other Unicode spaces are not JSON whitespace.
func TrimJSONSpace(b []byte) []byte {
	isWS := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isWS(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isWS(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// JSONObject returns the schemaless object raw whose members a scan
// already found (jsonscan.Object): a sink's fast path reads them without
// scanning again. members must stay unchanged while the value is used.
func JSONObject(raw []byte, members []jsonscan.Member) Value {
	return Value{kind: KindStruct, flags: flagJSON, b: raw, x: &ext{obj: members}}
}

// ObjectBuffer is JSONObject without an allocation, for a converter that
// converts one record after another on one goroutine: the value it
// returns is valid until its next use. The zero value is ready.
type ObjectBuffer struct{ x ext }

// Object returns the schemaless object raw with its scanned members, as
// JSONObject does, held in o.
func (o *ObjectBuffer) Object(raw []byte, members []jsonscan.Member) Value {
	o.x = ext{obj: members}
	return Value{kind: KindStruct, flags: flagJSON, b: raw, x: &o.x}
}

// ParseJSON validates raw (UTF-8 and JSON) and returns its schemaless
// value; invalid text is an error wrapping ErrDecode.
func ParseJSON(raw []byte) (Value, error) {
	if !jsonscan.Valid(raw) || !validUTF8(raw) {
		if !json.Valid(raw) {
			return Value{}, Errorf(ErrDecode, "invalid JSON")
		}
		if !validUTF8(raw) {
			return Value{}, Errorf(ErrDecode, "not valid UTF-8")
		}
		// Deeper than the scanner goes, but valid.
	}
	return JSON(raw), nil
}

// Kind returns the value's kind.
func (v Value) Kind() Kind { return v.kind }

// Schema returns the value's schema, nil for schemaless values.
func (v Value) Schema() *Schema { return v.sch }

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.kind == KindNull }

// Schemaless reports whether v came from schemaless JSON (it has no
// schema, and its text is kept).
func (v Value) Schemaless() bool { return v.flags&flagJSON != 0 }

// IsFloat32 reports whether a float value has 32 bits.
func (v Value) IsFloat32() bool { return v.flags&flagFloat32 != 0 }

// IsLocal reports whether a timestamp has no zone (Avro local-timestamp).
func (v Value) IsLocal() bool { return v.flags&flagLocal != 0 }

// Describe names what v holds, for error messages: "a string",
// "an object", "a timestamp", ….
func (v Value) Describe() string {
	switch v.kind {
	case KindNull:
		return "null"
	case KindBool:
		return "a boolean"
	case KindInt, KindUint, KindFloat, KindNumber, KindDecimal:
		return "a number"
	case KindString:
		return "a string"
	case KindBytes:
		return "bytes"
	case KindDate:
		return "a date"
	case KindTime:
		return "a time of day"
	case KindTimestamp:
		return "a timestamp"
	case KindDuration:
		return "a duration"
	case KindStruct:
		if v.flags&flagJSON != 0 {
			return "an object"
		}
		return "a struct"
	case KindArray:
		return "an array"
	case KindMap:
		return "a map"
	}
	return "an unknown value"
}

// Scanned returns a schemaless JSON object with its members scanned, so
// that Len, Range and Get read its text once however often they are
// called (a transform that reads several fields of a nested object);
// a value that has its members already, and any other value, is returned
// as it is.
func (v Value) Scanned() Value {
	if v.kind != KindStruct || v.flags&flagJSON == 0 || v.members() != nil {
		return v
	}
	members, ok := jsonscan.Object(v.b, make([]jsonscan.Member, 0, 16))
	if !ok {
		return v
	}
	return JSONObject(v.b, members)
}

// Range calls fn with the name and value of every field of a struct, in
// order, and stops at fn's first error. For a schemaless object these are
// its members in text order, duplicates included (a caller that keeps one
// value per name keeps the last, as a JSON decoder does). name is only
// valid during the call, and fn must not change its bytes. Range on
// anything but a struct returns an error wrapping ErrDecode.
func (v Value) Range(fn func(name []byte, fv Value) error) error {
	if v.kind != KindStruct {
		return Errorf(ErrDecode, "want an object, got %s", v.Describe())
	}
	if v.flags&flagJSON != 0 {
		members := v.members()
		if members == nil {
			var ok bool
			if members, ok = jsonscan.Object(v.b, nil); !ok {
				return v.rangeDeep(fn)
			}
		}
		for _, m := range members {
			name := m.Key
			if m.Escaped {
				name = unescapeKey(m.Key)
			}
			if err := fn(name, jsonValue(m.Value)); err != nil {
				return err
			}
		}
		return nil
	}
	elems := v.elems()
	if v.sch == nil {
		var names []string
		if v.x != nil {
			names = v.x.names
		}
		for i, n := range names {
			// The name's bytes without a copy: fn must not change them,
			// as it must not change a schema's field names either.
			if err := fn(unsafe.Slice(unsafe.StringData(n), len(n)), elems[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for i, f := range v.sch.Fields {
		if err := fn(f.name, elems[i]); err != nil {
			return err
		}
	}
	return nil
}

// rangeDeep is Range for objects nested deeper than the scanner goes.
func (v Value) rangeDeep(fn func(name []byte, fv Value) error) error {
	dec := json.NewDecoder(bytes.NewReader(v.b))
	if _, err := dec.Token(); err != nil {
		return Errorf(ErrDecode, "%v", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Errorf(ErrDecode, "%v", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Errorf(ErrDecode, "%v", err)
		}
		if err := fn([]byte(tok.(string)), JSON(raw)); err != nil {
			return err
		}
	}
	return nil
}

func unescapeKey(k []byte) []byte {
	var s string
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	if json.Unmarshal(q, &s) != nil {
		return k
	}
	return []byte(s)
}

// MayHaveMember reports whether a schemaless JSON object may have a member
// called name, much cheaper than Range or Get: false only when none of
// its scanned members has that name (or an escaped one), or, not scanned
// yet, when its text has no backslash (so no escaped name) and no quoted
// name. It is true for any other value.
func (v Value) MayHaveMember(name string) bool {
	if v.kind != KindStruct || v.flags&flagJSON == 0 {
		return true
	}
	if members := v.members(); members != nil {
		for _, m := range members {
			if m.Escaped || string(m.Key) == name {
				return true
			}
		}
		return false
	}
	if bytes.IndexByte(v.b, '\\') >= 0 {
		return true
	}
	var q [64]byte
	if len(name)+2 > len(q) {
		return true
	}
	quoted := append(append(append(q[:0], '"'), name...), '"')
	return bytes.Contains(v.b, quoted)
}

// Get returns the struct field called name (for a schemaless object the
// last member of that name).
func (v Value) Get(name string) (Value, bool) {
	if v.kind != KindStruct {
		return Value{}, false
	}
	if v.flags&flagJSON == 0 && v.sch != nil {
		f := v.sch.Field(name)
		if f == nil {
			return Value{}, false
		}
		return v.elems()[f.Index], true
	}
	var out Value
	found := false
	_ = v.Range(func(n []byte, fv Value) error {
		if string(n) == name {
			out, found = fv, true
		}
		return nil
	})
	return out, found
}

// Elems calls fn for every element of an array, in order, and stops at
// fn's first error. On anything but an array it returns an error wrapping
// ErrCoerce.
func (v Value) Elems(fn func(i int, e Value) error) error {
	if v.kind != KindArray {
		return coerceErr("want an array, got %s", v.Describe())
	}
	if v.flags&flagJSON == 0 {
		for i, e := range v.elems() {
			if err := fn(i, e); err != nil {
				return err
			}
		}
		return nil
	}
	elems, ok := jsonscan.Array(v.b, nil)
	if !ok {
		var raws []json.RawMessage
		if err := json.Unmarshal(v.b, &raws); err != nil {
			return coerceErr("%v", err)
		}
		for i, r := range raws {
			if err := fn(i, JSON(r)); err != nil {
				return err
			}
		}
		return nil
	}
	for i, e := range elems {
		if err := fn(i, jsonValue(e)); err != nil {
			return err
		}
	}
	return nil
}

// Entries calls fn for every entry of a map, or every field of a struct
// or object (its name as a string key), in order, and stops at fn's first
// error. On anything else it returns an error wrapping ErrCoerce.
func (v Value) Entries(fn func(k, e Value) error) error {
	switch v.kind {
	case KindMap:
		kv := v.elems()
		for i := 0; i+1 < len(kv); i += 2 {
			if err := fn(kv[i], kv[i+1]); err != nil {
				return err
			}
		}
		return nil
	case KindStruct:
		return v.Range(func(name []byte, fv Value) error { return fn(String(string(name)), fv) })
	}
	return coerceErr("want an object or a map, got %s", v.Describe())
}

// Len returns the number of elements of an array, entries of a map or
// fields of a struct.
func (v Value) Len() int {
	switch v.kind {
	case KindArray:
		if v.flags&flagJSON != 0 {
			n := 0
			_ = v.Elems(func(int, Value) error { n++; return nil })
			return n
		}
		return len(v.elems())
	case KindMap:
		return len(v.elems()) / 2
	case KindStruct:
		if v.flags&flagJSON != 0 {
			if m := v.members(); m != nil {
				return len(m)
			}
			n := 0
			_ = v.Range(func([]byte, Value) error { n++; return nil })
			return n
		}
		return len(v.elems())
	}
	return 0
}

// GoString renders v for debugging and test failures.
func (v Value) GoString() string {
	b, err := v.AppendJSON(nil)
	if err != nil {
		return fmt.Sprintf("<%s: %v>", v.kind, err)
	}
	return v.kind.String() + ":" + string(b)
}
