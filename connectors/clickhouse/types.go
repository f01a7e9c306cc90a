package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	chcol "github.com/ClickHouse/clickhouse-go/v2/lib/column"
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
	return fmt.Errorf("%w: "+format, append([]any{ErrCoerce}, args...)...)
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
	}
	return nil
}

// coerce converts one JSON value to the Go value clickhouse-go appends to a
// column of type t. The accepted inputs:
//
//	Int8…Int64, UInt8…UInt64   integer number or numeric string (1, "1", 1.0, 1e3), range-checked; true/false as 1/0
//	Float32, Float64           number or numeric string; "NaN", "Infinity", "-Infinity"
//	Decimal(P, S)              number or numeric string, exact; at most P-S integer digits, rounded to S places refused
//	String                     string; any other JSON value as its JSON text (objects and arrays: JSON text into String)
//	FixedString(N)             string of at most N bytes
//	UUID                       string
//	Date                       "YYYY-MM-DD" or RFC 3339; integer days since the epoch
//	DateTime, DateTime64       RFC 3339 (a missing offset means UTC) or "YYYY-MM-DD hh:mm:ss"; integer epoch milliseconds
//	Bool                       true/false
//	Enum8/16                   the label as a string
//	Nullable(T)                null or T
//	LowCardinality(T)          as T
//	Array(T)                   JSON array of T
//	Map(String, T)             JSON object of T (written in key order, so a redo is byte-identical)
//
// Every conversion is deterministic: the same JSON gives the same value,
// which a redo's de-duplication needs.
func coerce(t *chType, raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if t.nullable() {
			return nil, nil
		}
		return nil, coerceErr("null for non-Nullable type %s", t.Name)
	}
	switch t.Kind {
	case kindNullable, kindLowCardinality:
		return coerce(t.Elem, raw)
	case kindInt, kindUint:
		s, err := numberText(raw, true)
		if err != nil {
			return nil, err
		}
		return parseIntValue(t, s)
	case kindFloat32, kindFloat64:
		s, err := numberText(raw, false)
		if err != nil {
			return nil, err
		}
		bits := 64
		if t.Kind == kindFloat32 {
			bits = 32
		}
		f, err := parseFloat(s, bits)
		if err != nil {
			return nil, err
		}
		if bits == 32 {
			return float32(f), nil
		}
		return f, nil
	case kindDecimal:
		s, err := numberText(raw, false)
		if err != nil {
			return nil, err
		}
		return decimalValue(t, s)
	case kindString:
		if raw[0] == '"' {
			return stringOf(raw)
		}
		return string(raw), nil // JSON text into String
	case kindFixedString:
		s, err := stringOf(raw)
		if err != nil {
			return nil, err
		}
		if len(s) > t.Size {
			return nil, coerceErr("%d bytes do not fit %s", len(s), t.Name)
		}
		return s, nil
	case kindEnum:
		return stringOf(raw)
	case kindUUID:
		s, err := stringOf(raw)
		if err != nil {
			return nil, err
		}
		return parseUUID(s)
	case kindBool:
		switch string(raw) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, coerceErr("want true or false, got %s", jsonKind(raw))
	case kindDate:
		return parseDate(raw)
	case kindDateTime, kindDateTime64:
		return parseDateTime(t, raw)
	case kindArray:
		if raw[0] != '[' {
			return nil, coerceErr("want a JSON array, got %s", jsonKind(raw))
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, coerceErr("%v", err)
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			v, err := coerce(t.Elem, e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	case kindMap:
		if raw[0] != '{' {
			return nil, coerceErr("want a JSON object, got %s", jsonKind(raw))
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, coerceErr("%v", err)
		}
		m := &orderedMap{}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, err := coerce(t.Elem, fields[k])
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			m.Put(k, v)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupportedColumn, t.Name)
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

func parseIntValue(t *chType, s string) (any, error) {
	if t.Bits <= 64 {
		// Plain decimal integers (the usual case) without big.Rat; the
		// rest (exponents, fractions, out of range) goes the exact way.
		if t.Kind == kindInt {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && (t.Bits == 64 || (n >= -1<<(t.Bits-1) && n < 1<<(t.Bits-1))) {
				return intOfBits(n, t.Bits), nil
			}
		} else if n, err := strconv.ParseUint(s, 10, 64); err == nil && (t.Bits == 64 || n < 1<<t.Bits) {
			return uintOfBits(n, t.Bits), nil
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() {
		return nil, coerceErr("%q is not an integer", truncate(s, 40))
	}
	n := r.Num()
	if t.Kind == kindInt {
		lo := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), uint(t.Bits-1)))
		hi := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(t.Bits-1)), big.NewInt(1))
		if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
			return nil, coerceErr("%s is out of range for %s", truncate(s, 40), t.Name)
		}
		return intOfBits(n.Int64(), t.Bits), nil
	}
	hi := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(t.Bits)), big.NewInt(1))
	if n.Sign() < 0 || n.Cmp(hi) > 0 {
		return nil, coerceErr("%s is out of range for %s", truncate(s, 40), t.Name)
	}
	return uintOfBits(n.Uint64(), t.Bits), nil
}

func parseFloat(s string, bits int) (float64, error) {
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(s, bits)
	if err != nil {
		return 0, coerceErr("%q is not a %d-bit float", truncate(s, 40), bits)
	}
	return f, nil
}

// decimalValue checks s against Decimal(P, S) and returns its exact text.
func decimalValue(t *chType, s string) (string, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", coerceErr("%q is not a decimal number", truncate(s, 40))
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil)))
	if !scaled.IsInt() {
		return "", coerceErr("%s has more than %d decimal places (%s)", truncate(s, 40), t.Scale, t.Name)
	}
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Prec)), nil)
	if new(big.Int).Abs(scaled.Num()).Cmp(limit) >= 0 {
		return "", coerceErr("%s does not fit %s", truncate(s, 40), t.Name)
	}
	return r.FloatString(t.Scale), nil
}

func parseUUID(s string) (string, error) {
	h := strings.ToLower(strings.NewReplacer("-", "", "{", "", "}", "").Replace(s))
	if len(h) != 32 {
		return "", coerceErr("%q is not a UUID", truncate(s, 40))
	}
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", coerceErr("%q is not a UUID", truncate(s, 40))
		}
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

func parseDate(raw json.RawMessage) (time.Time, error) {
	if raw[0] != '"' {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 0 || n > 65535 {
			return time.Time{}, coerceErr("want a date string or days since the epoch (0..65535), got %s", truncate(string(raw), 40))
		}
		return time.Unix(0, 0).UTC().AddDate(0, 0, int(n)), nil
	}
	s, err := stringOf(raw)
	if err != nil {
		return time.Time{}, err
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return d, nil
	}
	if ts, err := parseTimestampText(s); err == nil {
		y, m, d := ts.Date()
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), nil
	}
	return time.Time{}, coerceErr("%q is not a date", truncate(s, 40))
}

func parseDateTime(t *chType, raw json.RawMessage) (time.Time, error) {
	var ts time.Time
	if raw[0] != '"' {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return time.Time{}, coerceErr("want a timestamp string or epoch milliseconds, got %s", truncate(string(raw), 40))
		}
		ts = time.UnixMilli(n).UTC()
	} else {
		s, err := stringOf(raw)
		if err != nil {
			return time.Time{}, err
		}
		if ts, err = parseTimestampText(s); err != nil {
			return time.Time{}, coerceErr("%q is not a timestamp", truncate(s, 40))
		}
	}
	if t.Kind == kindDateTime {
		if ts.Unix() < 0 || ts.Unix() > math.MaxUint32 {
			return time.Time{}, coerceErr("%s is out of range for %s", ts.Format(time.RFC3339), t.Name)
		}
		ts = ts.Truncate(time.Second)
	}
	return ts, nil
}

func parseTimestampText(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not a timestamp")
}

// stringOf unquotes a JSON string.
func stringOf(raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return "", coerceErr("want a string, got %s", jsonKind(raw))
	}
	if bytes.IndexByte(raw, '\\') < 0 && len(raw) >= 2 && raw[len(raw)-1] == '"' && utf8.Valid(raw) {
		// Nothing to unescape. raw comes from a validated document, so
		// there is no control character either.
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", coerceErr("%v", err)
	}
	return s, nil
}

// numberText accepts a JSON number or a string holding one (and, for
// integers, true/false as 1/0), returning the number's text.
func numberText(raw json.RawMessage, boolOK bool) (string, error) {
	switch {
	case raw[0] == '"':
		s, err := stringOf(raw)
		if err != nil {
			return "", err
		}
		s = strings.TrimSpace(s)
		switch s {
		case "NaN", "Infinity", "-Infinity":
			return s, nil
		}
		if _, ok := new(big.Rat).SetString(s); !ok || strings.ContainsAny(s, "/") {
			return "", coerceErr("%q is not a number", truncate(s, 40))
		}
		return s, nil
	case boolOK && string(raw) == "true":
		return "1", nil
	case boolOK && string(raw) == "false":
		return "0", nil
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return string(raw), nil
	}
	return "", coerceErr("want a number, got %s", jsonKind(raw))
}

// jsonKind names the JSON type of raw for error messages.
func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
