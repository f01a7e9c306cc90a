package record

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Conversions shared by the sinks: each reads a value as what a column
// wants, accepting every kind that means the same thing, and fails with an
// error wrapping ErrCoerce otherwise. A sink adds only its own type's range
// checks. Every conversion is a pure function of the value, so a redo of a
// batch converts to the same column values (invariant 6).
//
//	AsString     strings
//	AsText       strings; numbers, booleans, dates, times and timestamps as their text
//	AsInt64      integers; floats, decimals and numbers (or numeric strings) that are integral
//	AsUint64     as AsInt64, non-negative, up to 2^64-1
//	AsFloat      numbers and numeric strings; "NaN", "Infinity", "-Infinity"
//	AsDecimal    numbers and numeric strings, exact; "NaN", "Infinity", "-Infinity" as specials
//	AsBool       booleans; 0 and 1; "true"/"false"/"t"/"f"/"yes"/"no"/"y"/"n"/"on"/"off"/"1"/"0"
//	AsTimestamp  timestamps; dates (midnight UTC); integers as epoch milliseconds; RFC 3339 strings
//	             ("T" or " ", a missing offset means UTC); "infinity", "-infinity"
//	AsDate       dates; timestamps at midnight UTC; integers as days since the epoch; date or
//	             RFC 3339 strings (the date as written); "infinity", "-infinity"
//	AsTimeOfDay  times; integers as milliseconds since midnight; "HH:MM[:SS[.fffffffff]]"
//	AsBytes      bytes; base64 strings (standard alphabet, padding optional)
//	AsUUID       strings (with or without hyphens or braces); 16 bytes
//	AppendJSON   anything, as JSON text

// AsString returns a string value.
func (v Value) AsString() (string, error) {
	if v.kind != KindString {
		return "", coerceErr("want a string, got %s", v.Describe())
	}
	return v.str()
}

// str returns a string value's text.
func (v Value) str() (string, error) {
	switch {
	case v.flags&flagJSON == 0 && v.x != nil:
		return v.x.s, nil
	case v.flags&flagJSON == 0:
		return string(v.b), nil
	case bytes.IndexByte(v.b, '\\') < 0:
		return string(v.b[1 : len(v.b)-1]), nil
	}
	var s string
	if err := json.Unmarshal(v.b, &s); err != nil {
		return "", coerceErr("%v", err)
	}
	return s, nil
}

// StringLen returns the length in bytes of a string value without
// decoding it where it can (for a length check before the conversion).
func (v Value) StringLen() int {
	switch {
	case v.kind != KindString:
		return 0
	case v.flags&flagJSON == 0 && v.x != nil:
		return len(v.x.s)
	case v.flags&flagJSON == 0:
		return len(v.b)
	case bytes.IndexByte(v.b, '\\') < 0:
		return len(v.b) - 2
	}
	s, _ := v.str()
	return len(s)
}

// AsText returns a scalar as text: a string as it is, a number as its
// digits (a schemaless JSON number as written), a boolean as true or
// false, dates, times and timestamps in ISO 8601.
func (v Value) AsText() (string, error) {
	switch v.kind {
	case KindString:
		return v.str()
	case KindNumber:
		return string(v.b), nil
	case KindBool:
		if v.n != 0 {
			return "true", nil
		}
		return "false", nil
	case KindInt:
		return strconv.FormatInt(int64(v.n), 10), nil
	case KindUint:
		return strconv.FormatUint(v.n, 10), nil
	case KindFloat:
		return formatFloat(v.float(), v.IsFloat32()), nil
	case KindDecimal:
		return v.decimalText(), nil
	case KindDate:
		return dateText(int64(v.n)), nil
	case KindTime:
		return timeOfDayText(int64(v.n)), nil
	case KindTimestamp:
		return v.timestamp().Format(time.RFC3339Nano), nil
	case KindDuration:
		return v.durationText(), nil
	}
	return "", coerceErr("want a string, got %s", v.Describe())
}

// AsTextShared is AsText for a caller that keeps the text no longer than
// the bytes the value was converted from: where AsText copies bytes into
// a new string (a string held as bytes without escapes, as a schemaless
// JSON string, a StringConverter or an Avro string; a JSON number as
// written), the text shares their memory instead. It is as valid as
// those bytes are unchanged. Converters hand out only the record's bytes
// or bytes of their own allocation, never a buffer they reuse (see
// convert.Converter), and a Kafka record's bytes are never rewritten
// while the record is held, so a row that is written before its record
// is released may hold such text.
func (v Value) AsTextShared() (string, error) {
	switch {
	case v.kind == KindString && v.flags&flagJSON == 0 && v.x == nil:
		return sharedString(v.b), nil
	case v.kind == KindString && v.flags&flagJSON != 0 && bytes.IndexByte(v.b, '\\') < 0:
		return sharedString(v.b[1 : len(v.b)-1]), nil
	case v.kind == KindNumber:
		return sharedString(v.b), nil
	}
	return v.AsText()
}

// sharedString is b's text without a copy (see AsTextShared).
func sharedString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (v Value) float() float64 { return math.Float64frombits(v.n) }

func formatFloat(f float64, f32 bool) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f32 {
		return strconv.FormatFloat(f, 'g', -1, 32)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// numberText returns the text of a number, or of a string holding one
// (the JSON number grammar, or NaN/Infinity/-Infinity).
func (v Value) numberText() (string, error) {
	switch v.kind {
	case KindNumber:
		return string(v.b), nil
	case KindString:
		s, err := v.str()
		if err != nil {
			return "", err
		}
		s = strings.TrimSpace(s)
		switch s {
		case "NaN", "Infinity", "-Infinity":
			return s, nil
		}
		if !ValidNumber(s) {
			return "", coerceErr("%q is not a number", Truncate(s, 40))
		}
		return s, nil
	case KindInt, KindUint, KindFloat, KindDecimal:
		return v.AsText()
	}
	return "", coerceErr("want a number, got %s", v.Describe())
}

// AsInt64 returns an integral value as an int64.
func (v Value) AsInt64() (int64, error) {
	switch v.kind {
	case KindInt:
		return int64(v.n), nil
	case KindUint:
		if v.n > math.MaxInt64 {
			return 0, coerceErr("%d is out of range for a 64-bit integer", v.n)
		}
		return int64(v.n), nil
	case KindFloat:
		f := v.float()
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, coerceErr("%s is not an integer", formatFloat(f, v.IsFloat32()))
		}
		if f < -(1<<63) || f >= 1<<63 {
			return 0, coerceErr("%s is out of range for a 64-bit integer", formatFloat(f, v.IsFloat32()))
		}
		return int64(f), nil
	case KindDecimal:
		if v.flags&flagSmall != 0 && v.aux == 0 {
			return int64(v.n), nil
		}
	case KindDuration:
		// Whole milliseconds, the unit AsDuration reads integers in (the
		// documented mapping of a Protobuf Duration to bigint and Int64
		// columns); a fraction of a millisecond is refused, never dropped.
		d, err := v.AsDuration()
		if err != nil {
			return 0, err
		}
		if d%time.Millisecond != 0 {
			return 0, coerceErr("duration %s has a fraction of a millisecond: it does not fit an integer column of milliseconds", v.durationText())
		}
		return int64(d / time.Millisecond), nil
	case KindNumber:
		if n, ok := smallInteger(v.b); ok {
			return n, nil
		}
	}
	s, err := v.numberText()
	if err != nil {
		return 0, err
	}
	return ParseInteger(s)
}

// smallInteger parses an optional minus sign and 1 to 18 decimal digits
// (which cannot overflow an int64), the common case of AsInt64, without
// copying b into a string; ok is false for anything else.
func smallInteger(b []byte) (n int64, ok bool) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(b) {
		n = -n
	}
	return n, true
}

// AsUint64 returns a non-negative integral value as a uint64.
func (v Value) AsUint64() (uint64, error) {
	switch v.kind {
	case KindUint:
		return v.n, nil
	case KindInt:
		if int64(v.n) < 0 {
			return 0, coerceErr("%d is negative", int64(v.n))
		}
		return v.n, nil
	}
	s, err := v.numberText()
	if err != nil {
		return 0, err
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n, nil
	}
	d, err := ParseDecimal(s)
	if err != nil {
		return 0, err
	}
	n, ok := d.integer()
	if !ok {
		return 0, coerceErr("%s is not an integer", Truncate(s, 40))
	}
	if n.Sign() < 0 || !n.IsUint64() {
		return 0, coerceErr("%s is out of range for a 64-bit unsigned integer", Truncate(s, 40))
	}
	return n.Uint64(), nil
}

// AsFloat returns a number as a float of bits (32 or 64) bits; a value out
// of the type's range is an error.
func (v Value) AsFloat(bits int) (float64, error) {
	switch v.kind {
	case KindFloat:
		f := v.float()
		if bits == 32 && !v.IsFloat32() && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) > math.MaxFloat32 {
			return 0, coerceErr("%s is out of range for a 32-bit float", formatFloat(f, false))
		}
		return f, nil
	case KindInt:
		return float64(int64(v.n)), nil
	case KindUint:
		return float64(v.n), nil
	}
	s, err := v.numberText()
	if err != nil {
		return 0, err
	}
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
		return 0, coerceErr("%s is out of range for a %d-bit float", Truncate(s, 40), bits)
	}
	return f, nil
}

// AsFloatOf returns a number as a float32 (bits 32) or a float64, for a
// column of that width.
func (v Value) AsFloatOf(bits int) (any, error) {
	f, err := v.AsFloat(bits)
	if err != nil {
		return nil, err
	}
	if bits == 32 {
		return float32(f), nil
	}
	return f, nil
}

// Dec is an exact decimal number: Unscaled × 10^Exp; or, when Special is
// set, "NaN", "Infinity" or "-Infinity" (Unscaled nil).
type Dec struct {
	Unscaled *big.Int
	Exp      int32
	Special  string
}

// integer returns d as an integer when it is one.
func (d Dec) integer() (*big.Int, bool) {
	if d.Special != "" {
		return nil, false
	}
	if d.Exp >= 0 {
		return new(big.Int).Mul(d.Unscaled, pow10(int64(d.Exp))), true
	}
	q, r := new(big.Int).QuoRem(d.Unscaled, pow10(int64(-d.Exp)), new(big.Int))
	return q, r.Sign() == 0
}

// Text formats d exactly, without an exponent.
func (d Dec) Text() string {
	if d.Special != "" {
		return d.Special
	}
	return DecimalText(d.Unscaled, -d.Exp)
}

// AtScale returns d's unscaled value at scale s (digits after the point),
// and false when d has more significant decimal places than s.
func (d Dec) AtScale(s int32) (*big.Int, bool) {
	if d.Special != "" {
		return nil, false
	}
	shift := int64(d.Exp) + int64(s)
	if shift >= 0 {
		return new(big.Int).Mul(d.Unscaled, pow10(shift)), true
	}
	q, r := new(big.Int).QuoRem(d.Unscaled, pow10(-shift), new(big.Int))
	return q, r.Sign() == 0
}

func pow10(n int64) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(n), nil) }

// AsDecimal returns a number exactly.
func (v Value) AsDecimal() (Dec, error) {
	switch v.kind {
	case KindDecimal:
		if v.flags&flagSmall != 0 {
			return Dec{Unscaled: big.NewInt(int64(v.n)), Exp: -v.aux}, nil
		}
		return Dec{Unscaled: new(big.Int).Set(v.x.big), Exp: -v.aux}, nil
	case KindInt:
		return Dec{Unscaled: big.NewInt(int64(v.n))}, nil
	case KindUint:
		return Dec{Unscaled: new(big.Int).SetUint64(v.n)}, nil
	case KindFloat:
		f := v.float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return Dec{Special: formatFloat(f, false)}, nil
		}
		return ParseDecimal(formatFloat(f, v.IsFloat32()))
	}
	s, err := v.numberText()
	if err != nil {
		return Dec{}, err
	}
	return ParseDecimal(s)
}

// decimalLimit bounds the digits and exponent of a parsed decimal,
// generously above PostgreSQL's limits (131072 digits before the point,
// 16383 after), so hostile input cannot make an encoder allocate without
// bound.
const decimalLimit = 200_000

// ParseDecimal parses a number in the JSON grammar (or NaN, Infinity,
// -Infinity) exactly.
func ParseDecimal(s string) (Dec, error) {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return Dec{Special: s}, nil
	}
	neg, digits, exp, ok := SplitNumber(s)
	if !ok || len(digits) > decimalLimit || exp > decimalLimit || exp < -decimalLimit {
		return Dec{}, coerceErr("%s is out of range for a decimal", Truncate(s, 40))
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return Dec{}, coerceErr("%q is not a number", Truncate(s, 40))
	}
	if neg {
		n.Neg(n)
	}
	return Dec{Unscaled: n, Exp: int32(exp)}, nil
}

func (v Value) decimalText() string {
	if v.flags&flagSmall != 0 {
		return DecimalText(big.NewInt(int64(v.n)), v.aux)
	}
	return DecimalText(v.x.big, v.aux)
}

// DecimalText formats unscaled × 10^-scale exactly, without an exponent.
func DecimalText(unscaled *big.Int, scale int32) string {
	s := unscaled.String()
	neg := false
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	switch {
	case scale < 0:
		if s != "0" {
			s += strings.Repeat("0", int(-scale))
		}
	case scale > 0:
		if len(s) <= int(scale) {
			s = strings.Repeat("0", int(scale)-len(s)+1) + s
		}
		s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// TwosComplement reads a big-endian two's-complement integer (the
// unscaled bytes of a Connect or Avro decimal).
func TwosComplement(b []byte) *big.Int {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return n
}

// AsBool returns a boolean.
func (v Value) AsBool() (bool, error) {
	switch v.kind {
	case KindBool:
		return v.n != 0, nil
	case KindInt, KindUint:
		switch v.n {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		return false, coerceErr("%d is not a boolean (0 or 1)", int64(v.n))
	case KindNumber:
		switch string(v.b) {
		case "0":
			return false, nil
		case "1":
			return true, nil
		}
		return false, coerceErr("%s is not a boolean (0 or 1)", Truncate(string(v.b), 40))
	case KindString:
		s, err := v.str()
		if err != nil {
			return false, err
		}
		switch strings.ToLower(s) {
		case "true", "t", "yes", "y", "on", "1":
			return true, nil
		case "false", "f", "no", "n", "off", "0":
			return false, nil
		}
		return false, coerceErr("%q is not a boolean", Truncate(s, 40))
	}
	return false, coerceErr("want a boolean, got %s", v.Describe())
}

// Instant is a point in time, or an infinity (PostgreSQL's 'infinity'
// and '-infinity'): Inf is +1 or -1 and Time is zero then.
type Instant struct {
	Time time.Time
	Inf  int8
}

// Bounds of the instants the conversions produce: PostgreSQL's timestamp
// range (4713 BC to 294276 AD), which also keeps microsecond arithmetic
// from overflowing; a sink checks its own narrower range.
var (
	MinTime = time.Date(-4712, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(294276, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func (v Value) timestamp() time.Time { return time.Unix(int64(v.n), int64(v.aux)).UTC() }

var timestampLayouts = []string{
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02 15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

func inRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

// AsTimestamp returns an instant, in UTC.
func (v Value) AsTimestamp() (Instant, error) {
	switch v.kind {
	case KindTimestamp:
		return Instant{Time: v.timestamp()}, nil
	case KindDate:
		d, err := v.AsDate()
		return d, err
	case KindInt, KindNumber, KindDecimal, KindUint:
		ms, err := v.AsInt64()
		if err != nil {
			return Instant{}, coerceErr("epoch milliseconds %s: not an integer in range", v.short())
		}
		t := time.UnixMilli(ms).UTC()
		if !inRange(t) {
			return Instant{}, coerceErr("timestamp %d ms is out of range", ms)
		}
		return Instant{Time: t}, nil
	case KindString:
		s, err := v.str()
		if err != nil {
			return Instant{}, err
		}
		switch strings.ToLower(s) {
		case "infinity":
			return Instant{Inf: 1}, nil
		case "-infinity":
			return Instant{Inf: -1}, nil
		}
		for _, layout := range timestampLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				t = t.UTC()
				if !inRange(t) {
					return Instant{}, coerceErr("timestamp %q is out of range", s)
				}
				return Instant{Time: t}, nil
			}
		}
		return Instant{}, coerceErr("%q is not an RFC 3339 timestamp", Truncate(s, 40))
	}
	return Instant{}, coerceErr("want an RFC 3339 string or epoch milliseconds, got %s", v.Describe())
}

// AsDate returns a date, as midnight UTC of that day.
func (v Value) AsDate() (Instant, error) {
	day := func(n int64) (Instant, error) {
		if n < -3_000_000 || n > 100_000_000 {
			return Instant{}, coerceErr("%d days since the epoch is out of range", n)
		}
		return Instant{Time: time.Unix(0, 0).UTC().AddDate(0, 0, int(n))}, nil
	}
	switch v.kind {
	case KindDate:
		return day(int64(v.n))
	case KindTimestamp:
		t := v.timestamp()
		y, m, d := t.Date()
		day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		if !t.Equal(day) {
			return Instant{}, coerceErr("timestamp %s is not a whole day: a date column would lose its time", t.Format(time.RFC3339Nano))
		}
		return Instant{Time: day}, nil
	case KindInt, KindNumber, KindUint:
		n, err := v.AsInt64()
		if err != nil {
			return Instant{}, coerceErr("want a date string or days since the epoch, got %s", v.short())
		}
		return day(n)
	case KindString:
		s, err := v.str()
		if err != nil {
			return Instant{}, err
		}
		switch strings.ToLower(s) {
		case "infinity":
			return Instant{Inf: 1}, nil
		case "-infinity":
			return Instant{Inf: -1}, nil
		}
		for _, layout := range timestampLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
				if !inRange(d) {
					return Instant{}, coerceErr("date %q is out of range", s)
				}
				return Instant{Time: d}, nil
			}
		}
		return Instant{}, coerceErr("%q is not a date", Truncate(s, 40))
	}
	return Instant{}, coerceErr("want a date string or days since the epoch, got %s", v.Describe())
}

const nanosPerDay = int64(24 * time.Hour)

// AsTimeOfDay returns a time of day as the time since midnight (at most
// 24:00:00).
func (v Value) AsTimeOfDay() (time.Duration, error) {
	switch v.kind {
	case KindTime:
		return time.Duration(v.n), nil
	case KindTimestamp:
		t := v.timestamp()
		return time.Duration(t.Sub(time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC))), nil
	case KindInt, KindNumber, KindUint:
		ms, err := v.AsInt64()
		if err != nil || ms < 0 || ms > nanosPerDay/1e6 {
			return 0, coerceErr("want a time string or milliseconds since midnight, got %s", v.short())
		}
		return time.Duration(ms) * time.Millisecond, nil
	case KindString:
		s, err := v.str()
		if err != nil {
			return 0, err
		}
		return parseTimeOfDay(s)
	}
	return 0, coerceErr("want a time string or milliseconds since midnight, got %s", v.Describe())
}

func parseTimeOfDay(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, coerceErr("%q is not a time of day", Truncate(s, 40))
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad()
	}
	num := func(p string) (int64, bool) {
		if len(p) != 2 || p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9' {
			return 0, false
		}
		return int64(p[0]-'0')*10 + int64(p[1]-'0'), true
	}
	var h, m, sec, frac int64
	var ok bool
	if h, ok = num(parts[0]); !ok {
		return bad()
	}
	if m, ok = num(parts[1]); !ok {
		return bad()
	}
	if len(parts) == 3 {
		p := parts[2]
		if i := strings.IndexByte(p, '.'); i >= 0 {
			f := p[i+1:]
			if f == "" || len(f) > 9 {
				return bad()
			}
			for _, c := range f {
				if c < '0' || c > '9' {
					return bad()
				}
			}
			frac, _ = strconv.ParseInt((f + "000000000")[:9], 10, 64)
			p = p[:i]
		}
		if sec, ok = num(p); !ok {
			return bad()
		}
	}
	ns := ((h*60+m)*60+sec)*int64(time.Second) + frac
	if m > 59 || sec > 60 || ns > nanosPerDay {
		return bad()
	}
	return time.Duration(ns), nil
}

// AsBytes returns bytes: a bytes value, or a base64 string (how Kafka
// Connect's JsonConverter writes bytes).
func (v Value) AsBytes() ([]byte, error) {
	switch v.kind {
	case KindBytes:
		return v.b, nil
	case KindString:
		s, err := v.str()
		if err != nil {
			return nil, err
		}
		b, err := DecodeBase64(s)
		if err != nil {
			return nil, coerceErr("want a base64 string: %v", err)
		}
		return b, nil
	}
	return nil, coerceErr("want bytes or a base64 string, got %s", v.Describe())
}

// DecodeBase64 decodes standard base64 with or without padding.
func DecodeBase64(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") || len(s)%4 == 0 {
		return base64.StdEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// AsUUID returns a UUID from its text (hyphens and braces optional) or
// its 16 bytes.
func (v Value) AsUUID() ([16]byte, error) {
	var u [16]byte
	switch v.kind {
	case KindBytes:
		if len(v.b) == 16 {
			copy(u[:], v.b)
			return u, nil
		}
		return u, coerceErr("%d bytes are not a UUID", len(v.b))
	case KindString:
		s, err := v.str()
		if err != nil {
			return u, err
		}
		t := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}"), "-", "")
		if len(t) != 32 {
			return u, coerceErr("%q is not a UUID", Truncate(s, 40))
		}
		if _, err := hex.Decode(u[:], []byte(t)); err != nil {
			return u, coerceErr("%q is not a UUID", Truncate(s, 40))
		}
		return u, nil
	}
	return u, coerceErr("want a UUID string, got %s", v.Describe())
}

// AsDuration returns a duration; integers are taken as milliseconds.
func (v Value) AsDuration() (time.Duration, error) {
	switch v.kind {
	case KindDuration:
		sec := int64(v.n)
		if sec > math.MaxInt64/int64(time.Second)-1 || sec < math.MinInt64/int64(time.Second)+1 {
			return 0, coerceErr("duration of %d s is out of range", sec)
		}
		return time.Duration(sec)*time.Second + time.Duration(v.aux), nil
	case KindInt, KindNumber:
		ms, err := v.AsInt64()
		if err != nil {
			return 0, err
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	return 0, coerceErr("want a duration, got %s", v.Describe())
}

// DurationParts returns a duration value's seconds and nanoseconds.
func (v Value) DurationParts() (sec int64, nanos int32) { return int64(v.n), v.aux }

func (v Value) durationText() string {
	sec, nanos := int64(v.n), int64(v.aux)
	neg := sec < 0 || nanos < 0
	if sec < 0 {
		sec = -sec
	}
	if nanos < 0 {
		nanos = -nanos
	}
	s := "PT" + strconv.FormatInt(sec, 10)
	if nanos != 0 {
		s += strings.TrimRight("."+strconv.FormatInt(1e9+nanos, 10)[1:], "0")
	}
	s += "S"
	if neg {
		s = "-" + s
	}
	return s
}

func dateText(days int64) string {
	return time.Unix(0, 0).UTC().AddDate(0, 0, int(days)).Format(time.DateOnly)
}

func timeOfDayText(ns int64) string {
	d := time.Duration(ns)
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := d / time.Second
	d -= s * time.Second
	out := strconv.FormatInt(int64(h+100), 10)[1:] + ":" + strconv.FormatInt(int64(m+100), 10)[1:] + ":" + strconv.FormatInt(int64(s+100), 10)[1:]
	if d > 0 {
		out = strings.TrimRight(out+"."+strconv.FormatInt(int64(d)+1e9, 10)[1:], "0")
	}
	return out
}

// short renders a scalar for an error message.
func (v Value) short() string {
	if v.flags&flagJSON != 0 {
		return Truncate(string(v.b), 40)
	}
	s, err := v.AsText()
	if err != nil {
		return v.Describe()
	}
	return Truncate(s, 40)
}

// ValidNumber checks the JSON number grammar.
func ValidNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == start {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

// SplitNumber splits a valid number into its digits (no sign, no point,
// leading zeros kept) and the power of ten they are multiplied by.
func SplitNumber(s string) (neg bool, digits string, exp int64, ok bool) {
	if !ValidNumber(s) {
		return false, "", 0, false
	}
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return neg, "", 0, false
		}
		exp = e
	}
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		exp -= int64(len(mant) - i - 1)
		mant = mant[:i] + mant[i+1:]
	}
	return neg, mant, exp, true
}

// ParseInteger parses an integral number (1, 1.000, 1e3, 12.5e1) into an
// int64.
func ParseInteger(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	neg, digits, exp, ok := SplitNumber(s)
	if !ok {
		return 0, coerceErr("%q is not an integer", Truncate(s, 40))
	}
	// Drop fractional zeros: 1.000 and 1e3 are integers, 1.5 is not.
	for exp < 0 && len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, nil
	}
	if exp < 0 {
		return 0, coerceErr("%s is not an integer", Truncate(s, 40))
	}
	if int64(len(digits))+exp > 19 {
		return 0, coerceErr("%s is out of range for a 64-bit integer", Truncate(s, 40))
	}
	n, ok := new(big.Int).SetString(digits+strings.Repeat("0", int(exp)), 10)
	if !ok {
		return 0, coerceErr("%q is not an integer", Truncate(s, 40))
	}
	if neg {
		n.Neg(n)
	}
	if !n.IsInt64() {
		return 0, coerceErr("%s is out of range for a 64-bit integer", Truncate(s, 40))
	}
	return n.Int64(), nil
}

// Truncate shortens s to at most n bytes (on a rune boundary), marking
// the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func validUTF8(b []byte) bool { return utf8.Valid(b) }
