package clickhouse

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	chcol "github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/txsink/txsink/connectors/record"
)

// kind is the family of a ClickHouse type the sink can fill.
type kind int

const (
	kindUnsupported kind = iota
	kindInt
	kindUint
	kindFloat32
	kindFloat64
	kindDecimal
	kindString
	kindFixedString
	kindUUID
	kindDate
	kindDateTime
	kindDateTime64
	kindBool
	kindEnum
	kindNullable
	kindLowCardinality
	kindArray
	kindMap
	kindJSON
)

// chType is a parsed ClickHouse column type.
type chType struct {
	Name  string // the type's text as the server reports it
	Kind  kind
	Bits  int     // Int/UInt width
	Size  int     // FixedString(N)
	Scale int     // Decimal scale, DateTime64 precision
	Prec  int     // Decimal precision
	Loc   string  // DateTime/DateTime64 time zone argument, "" for the server's
	Elem  *chType // Nullable, LowCardinality, Array element; Map value
	Key   *chType // Map key
}

// parseType parses a type as system.columns reports it: Int32,
// Nullable(String), Array(Nullable(Int64)), Map(String, UInt8),
// Decimal(18, 4), DateTime64(3, 'UTC'), Enum8('a' = 1, 'b' = 2), …
// Types the sink cannot fill parse as kindUnsupported (not an error: the
// column may be left to its default).
func parseType(s string) (*chType, error) {
	p := &typeParser{s: s}
	t, err := p.typ()
	if err != nil {
		return nil, fmt.Errorf("parse type %q: %w", s, err)
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("parse type %q: trailing text at %d", s, p.i)
	}
	return t, nil
}

type typeParser struct {
	s string
	i int
}

func (p *typeParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *typeParser) ident() string {
	p.space()
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// rawArg returns the text of one argument (up to the next top-level comma
// or closing parenthesis), honouring quotes and nesting.
func (p *typeParser) rawArg() (string, error) {
	p.space()
	start, depth := p.i, 0
	for p.i < len(p.s) {
		switch c := p.s[p.i]; c {
		case '\'':
			p.i++
			for p.i < len(p.s) && p.s[p.i] != '\'' {
				if p.s[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
		case '(':
			depth++
		case ')':
			if depth == 0 {
				return strings.TrimSpace(p.s[start:p.i]), nil
			}
			depth--
		case ',':
			if depth == 0 {
				return strings.TrimSpace(p.s[start:p.i]), nil
			}
		}
		p.i++
	}
	return "", fmt.Errorf("unbalanced parentheses")
}

func (p *typeParser) args() ([]string, error) {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != '(' {
		return nil, nil
	}
	p.i++
	var out []string
	for {
		a, err := p.rawArg()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		if p.s[p.i] == ')' {
			p.i++
			return out, nil
		}
		p.i++ // ','
	}
}

func (p *typeParser) typ() (*chType, error) {
	start := p.i
	name := p.ident()
	if name == "" {
		return nil, fmt.Errorf("type name expected at %d", p.i)
	}
	args, err := p.args()
	if err != nil {
		return nil, err
	}
	t := &chType{Name: strings.TrimSpace(p.s[start:p.i])}
	sub := func(i int) (*chType, error) {
		if i >= len(args) {
			return nil, fmt.Errorf("%s: missing argument", name)
		}
		return parseType(args[i])
	}
	intArg := func(i int) (int, error) {
		if i >= len(args) {
			return 0, fmt.Errorf("%s: missing argument", name)
		}
		return strconv.Atoi(args[i])
	}
	switch name {
	case "Int8", "Int16", "Int32", "Int64":
		t.Kind = kindInt
		t.Bits, _ = strconv.Atoi(name[3:])
	case "UInt8", "UInt16", "UInt32", "UInt64":
		t.Kind = kindUint
		t.Bits, _ = strconv.Atoi(name[4:])
	case "Float32":
		t.Kind = kindFloat32
	case "Float64":
		t.Kind = kindFloat64
	case "String":
		t.Kind = kindString
	case "FixedString":
		t.Kind = kindFixedString
		if t.Size, err = intArg(0); err != nil {
			return nil, err
		}
	case "UUID":
		t.Kind = kindUUID
	case "Date", "Date32":
		t.Kind = kindDate
	case "DateTime":
		t.Kind = kindDateTime
		if len(args) > 0 {
			t.Loc = strings.Trim(args[0], "'")
		}
	case "DateTime64":
		t.Kind = kindDateTime64
		if t.Scale, err = intArg(0); err != nil {
			return nil, err
		}
		if len(args) > 1 {
			t.Loc = strings.Trim(args[1], "'")
		}
	case "Bool", "Boolean":
		t.Kind = kindBool
	case "Enum8", "Enum16":
		t.Kind = kindEnum
	case "Decimal":
		t.Kind = kindDecimal
		if t.Prec, err = intArg(0); err != nil {
			return nil, err
		}
		if len(args) > 1 {
			if t.Scale, err = intArg(1); err != nil {
				return nil, err
			}
		}
	case "Decimal32", "Decimal64", "Decimal128", "Decimal256":
		t.Kind = kindDecimal
		t.Prec = map[string]int{"Decimal32": 9, "Decimal64": 18, "Decimal128": 38, "Decimal256": 76}[name]
		if t.Scale, err = intArg(0); err != nil {
			return nil, err
		}
	case "Nullable", "LowCardinality", "Array":
		t.Kind = map[string]kind{"Nullable": kindNullable, "LowCardinality": kindLowCardinality, "Array": kindArray}[name]
		if t.Elem, err = sub(0); err != nil {
			return nil, err
		}
	case "JSON":
		t.Kind = kindJSON
	case "Map":
		t.Kind = kindMap
		if t.Key, err = sub(0); err != nil {
			return nil, err
		}
		if t.Elem, err = sub(1); err != nil {
			return nil, err
		}
	default:
		t.Kind = kindUnsupported
	}
	return t, nil
}

// supported reports whether the sink can produce values of t.
func (t *chType) supported() bool {
	switch t.Kind {
	case kindUnsupported:
		return false
	case kindNullable, kindLowCardinality, kindArray:
		return t.Elem.supported()
	case kindMap:
		return t.Key.Kind == kindString && t.Elem.supported()
	}
	return true
}

// nullable reports whether NULL is storable (possibly under LowCardinality).
func (t *chType) nullable() bool {
	switch t.Kind {
	case kindNullable:
		return true
	case kindLowCardinality:
		return t.Elem.nullable()
	}
	return false
}

func coerceErr(format string, args ...any) error {
	return record.Errorf(record.ErrCoerce, format, args...)
}

// zero returns the value of a column a record does not set: NULL for
// Nullable, else the type's default (0, "", epoch, empty array), as
// ClickHouse itself fills omitted columns.
func zero(t *chType) any {
	switch t.Kind {
	case kindNullable:
		return nil
	case kindLowCardinality:
		return zero(t.Elem)
	case kindInt:
		return intOfBits(0, t.Bits)
	case kindUint:
		return uintOfBits(0, t.Bits)
	case kindFloat32:
		return float32(0)
	case kindFloat64:
		return float64(0)
	case kindDecimal:
		return "0"
	case kindString, kindFixedString, kindEnum:
		return ""
	case kindUUID:
		return "00000000-0000-0000-0000-000000000000"
	case kindDate, kindDateTime, kindDateTime64:
		return time.Unix(0, 0).UTC()
	case kindBool:
		return false
	case kindArray:
		return []any{}
	case kindMap:
		return &orderedMap{}
	case kindJSON:
		return "{}"
	}
	return nil
}

// coerce converts one record value to the Go value clickhouse-go appends
// to a column of type t. The record package's As… conversions decide what
// each value kind may become (the same for both sinks); this adds
// ClickHouse's ranges:
//
//	Int8…Int64, UInt8…UInt64   AsInt64 / AsUint64, range-checked; booleans as 1/0
//	Float32, Float64           AsFloat
//	Decimal(P, S)              AsDecimal, exact: at most P-S integer digits, more than S places refused
//	String                     text; bytes as they are; structs, maps and arrays as JSON text
//	FixedString(N)             a string or bytes of at most N bytes
//	UUID                       AsUUID
//	Date, Date32               AsDate, in the type's range
//	DateTime, DateTime64       AsTimestamp, in the type's range; DateTime refuses a fraction of a second (use DateTime64), DateTime64(p) rounds to p digits
//	Bool                       AsBool
//	Enum8/16                   the label as a string
//	Nullable(T)                null or T
//	LowCardinality(T)          as T
//	Array(T)                   an array of T
//	Map(String, T)             a map or struct of T, written in key order (so a redo is byte-identical)
//	JSON                       a struct or map, sent as its JSON text
//
// Every conversion is deterministic: the same value gives the same column
// value, which a redo's de-duplication needs.
func coerce(t *chType, v *record.Value) (any, error) {
	if v.IsNull() {
		if t.nullable() {
			return nil, nil
		}
		return nil, coerceErr("null for non-Nullable type %s", t.Name)
	}
	switch t.Kind {
	case kindNullable, kindLowCardinality:
		return coerce(t.Elem, v)
	case kindInt:
		n, err := intOrBool(v)
		if err != nil {
			return nil, err
		}
		if t.Bits < 64 && (n < -1<<(t.Bits-1) || n >= 1<<(t.Bits-1)) {
			return nil, coerceErr("%d is out of range for %s", n, t.Name)
		}
		return intOfBits(n, t.Bits), nil
	case kindUint:
		var n uint64
		var err error
		if v.Kind() == record.KindBool {
			var b bool
			b, err = v.AsBool()
			if b {
				n = 1
			}
		} else {
			n, err = v.AsUint64()
		}
		if err != nil {
			return nil, err
		}
		if t.Bits < 64 && n >= 1<<t.Bits {
			return nil, coerceErr("%d is out of range for %s", n, t.Name)
		}
		return uintOfBits(n, t.Bits), nil
	case kindFloat32:
		return v.AsFloatOf(32)
	case kindFloat64:
		return v.AsFloatOf(64)
	case kindDecimal:
		d, err := v.AsDecimal()
		if err != nil {
			return nil, err
		}
		if d.Special != "" {
			return nil, coerceErr("%s does not fit %s", d.Special, t.Name)
		}
		unscaled, ok := d.AtScale(int32(t.Scale))
		if !ok {
			return nil, coerceErr("%s has more than %d decimal places (%s)", record.Truncate(d.Text(), 40), t.Scale, t.Name)
		}
		if new(big.Int).Abs(unscaled).Cmp(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Prec)), nil)) >= 0 {
			return nil, coerceErr("%s does not fit %s", record.Truncate(d.Text(), 40), t.Name)
		}
		return record.DecimalText(unscaled, int32(t.Scale)), nil
	case kindString:
		return stringOf(v)
	case kindFixedString:
		var b []byte
		switch v.Kind() {
		case record.KindBytes:
			b, _ = v.AsBytes()
		default:
			s, err := v.AsString()
			if err != nil {
				return nil, err
			}
			b = []byte(s)
		}
		if len(b) > t.Size {
			return nil, coerceErr("%d bytes do not fit %s", len(b), t.Name)
		}
		return string(b), nil
	case kindEnum:
		return v.AsString()
	case kindUUID:
		u, err := v.AsUUID()
		if err != nil {
			return nil, err
		}
		h := hex.EncodeToString(u[:])
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
	case kindBool:
		return v.AsBool()
	case kindDate:
		d, err := v.AsDate()
		if err != nil {
			return nil, err
		}
		lo, hi := dateRange(t)
		if d.Inf != 0 || d.Time.Before(lo) || d.Time.After(hi) {
			return nil, coerceErr("%s is out of range for %s", dateText(d), t.Name)
		}
		return d.Time, nil
	case kindDateTime, kindDateTime64:
		ts, err := v.AsTimestamp()
		if err != nil {
			return nil, err
		}
		if ts.Inf != 0 {
			return nil, coerceErr("%s is out of range for %s", dateText(ts), t.Name)
		}
		if t.Kind == kindDateTime {
			if ts.Time.Unix() < 0 || ts.Time.Unix() > math.MaxUint32 {
				return nil, coerceErr("%s is out of range for %s", ts.Time.Format(time.RFC3339), t.Name)
			}
			if ts.Time.Nanosecond() != 0 {
				return nil, coerceErr("%s has a fraction of a second, which %s cannot keep: use DateTime64", ts.Time.Format(time.RFC3339Nano), t.Name)
			}
			return ts.Time, nil
		}
		// Round to the type's precision, as ClickHouse's own parsing of
		// a longer fraction keeps its first digits within the unit.
		ts.Time = ts.Time.Round(time.Duration(math.Pow10(9 - min(max(t.Scale, 0), 9))))
		if ts.Time.Before(minDateTime64) || ts.Time.After(maxDateTime64) {
			return nil, coerceErr("%s is out of range for %s", ts.Time.Format(time.RFC3339Nano), t.Name)
		}
		return ts.Time, nil
	case kindArray:
		out := []any{}
		err := v.Elems(func(i int, e record.Value) error {
			x, err := coerce(t.Elem, &e)
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, x)
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	case kindMap:
		type entry struct {
			k string
			v any
		}
		var entries []entry
		err := v.Entries(func(k, e record.Value) error {
			ks, err := k.AsText()
			if err != nil {
				return fmt.Errorf("key: %w", err)
			}
			x, err := coerce(t.Elem, &e)
			if err != nil {
				return fmt.Errorf("key %q: %w", ks, err)
			}
			entries = append(entries, entry{ks, x})
			return nil
		})
		if err != nil {
			return nil, err
		}
		// Key order, the last of duplicate keys winning, as a JSON object
		// decoded into a map: the same bytes always give the same block.
		sort.SliceStable(entries, func(i, j int) bool { return entries[i].k < entries[j].k })
		m := &orderedMap{}
		for i, e := range entries {
			if i+1 < len(entries) && entries[i+1].k == e.k {
				continue
			}
			m.Put(e.k, e.v)
		}
		return m, nil
	case kindJSON:
		return jsonObjectText(v)
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupportedColumn, t.Name)
}

// intOrBool reads an integer, taking booleans as 1 and 0.
func intOrBool(v *record.Value) (int64, error) {
	if v.Kind() == record.KindBool {
		b, err := v.AsBool()
		if b {
			return 1, err
		}
		return 0, err
	}
	return v.AsInt64()
}

// stringOf is a value's text for a String column: strings as they are,
// bytes as they are (a String holds bytes), structs, maps and arrays as
// JSON text, other scalars as their text.
func stringOf(v *record.Value) (string, error) {
	switch v.Kind() {
	case record.KindBytes:
		b, _ := v.AsBytes()
		return string(b), nil
	case record.KindStruct, record.KindArray, record.KindMap:
		b, err := v.JSONText()
		return string(b), err
	}
	// A row is inserted before its record is released (the rows of a
	// round live until its commit, the record's bytes as long as a row
	// refers to them): the text may share the record's bytes.
	return v.AsTextShared()
}

// Ranges of ClickHouse's date and time types.
var (
	minDate       = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate       = time.Date(2149, 6, 6, 0, 0, 0, 0, time.UTC)
	minDate32     = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate32     = time.Date(2299, 12, 31, 0, 0, 0, 0, time.UTC)
	minDateTime64 = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDateTime64 = time.Date(2299, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func dateRange(t *chType) (time.Time, time.Time) {
	if strings.HasPrefix(t.Name, "Date32") {
		return minDate32, maxDate32
	}
	return minDate, maxDate
}

func dateText(i record.Instant) string {
	switch i.Inf {
	case 1:
		return "infinity"
	case -1:
		return "-infinity"
	}
	return i.Time.Format(time.DateOnly)
}

// jsonObjectText is the value of a JSON column: a struct's or map's JSON
// text (a schemaless record's own bytes), which the server parses; the
// same record gives the same bytes, so a redo's block is identical.
// Anything else is a bad value.
func jsonObjectText(v *record.Value) (string, error) {
	switch v.Kind() {
	case record.KindStruct, record.KindMap:
		b, err := v.JSONText()
		return string(b), err
	}
	return "", coerceErr("want an object (a struct or a map) for JSON, got %s", v.Describe())
}

// orderedMap is a Map value written in key order (clickhouse-go's
// IterableOrderedMap): Go maps iterate randomly, which would make a redo's
// block differ from the original and defeat de-duplication.
type orderedMap struct {
	keys []any
	vals []any
}

var _ chcol.IterableOrderedMap = (*orderedMap)(nil)

func (m *orderedMap) Put(k, v any) { m.keys = append(m.keys, k); m.vals = append(m.vals, v) }

func (m *orderedMap) Iterator() chcol.MapIterator { return &mapIter{m: m, i: -1} }

type mapIter struct {
	m *orderedMap
	i int
}

func (it *mapIter) Next() bool { it.i++; return it.i < len(it.m.keys) }
func (it *mapIter) Key() any   { return it.m.keys[it.i] }
func (it *mapIter) Value() any { return it.m.vals[it.i] }

func intOfBits(n int64, bits int) any {
	switch bits {
	case 8:
		return int8(n)
	case 16:
		return int16(n)
	case 32:
		return int32(n)
	}
	return n
}

func uintOfBits(n uint64, bits int) any {
	switch bits {
	case 8:
		return uint8(n)
	case 16:
		return uint16(n)
	case 32:
		return uint32(n)
	}
	return n
}
