package postgres

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
)

// Conversions from JSON to column types. Each returns a Go value that pgx
// encodes in the binary format (COPY and parameters alike), or an error
// wrapping ErrCoerce. The accepted inputs:
//
//	text, varchar, char, citext  string; number or boolean (their literal text). No NUL byte; at most n characters for varchar(n)/char(n)
//	smallint, integer, bigint    integer number or numeric string (1, "1", 1.0, 1e3), range-checked
//	numeric                      number or numeric string, kept exact as decimal text; "NaN", "Infinity", "-Infinity"
//	real, double precision       number or numeric string; "NaN", "Infinity", "-Infinity"
//	boolean                      true/false; "true"/"false"/"t"/"f"/"yes"/"no"/"on"/"off"/"1"/"0"; 0/1
//	timestamptz, timestamp       RFC 3339 string (a missing offset means UTC; "T" or " " between date and time); integer epoch milliseconds; "infinity"/"-infinity". timestamp stores the UTC wall time
//	date                         "YYYY-MM-DD" or an RFC 3339 timestamp (the date as written); integer days since the epoch (Connect's Date)
//	time                         "HH:MM[:SS[.ffffff]]"; integer milliseconds since midnight (Connect's Time)
//	uuid                         string, with or without hyphens or braces
//	json, jsonb                  any JSON value, stored as its JSON text (jsonb refuses \u0000)
//	bytea                        base64 string (standard alphabet, padding optional)
//	enum                         string (the label)
//	other types pgx knows        string in the type's text syntax (inet, interval, macaddr, …), parsed client-side
//	arrays of the above          JSON array (one dimension); elements convert as above, null elements allowed
//
// JSON null is NULL, refused for NOT NULL columns.

// coerce converts raw to the column's type.
func coerce(c *column, raw json.RawMessage) (any, error) {
	if len(raw) == 0 || raw[0] == 'n' {
		if c.NotNull {
			return nil, errField(c.Name, ErrCoerce, "null in NOT NULL column")
		}
		return nil, nil
	}
	v, err := coerceType(&c.Type, c.MaxLen, raw)
	if err != nil {
		return nil, &fieldError{field: c.Name, err: err}
	}
	return v, nil
}

func coerceErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCoerce}, args...)...)
}

func coerceType(t *pgType, maxLen int, raw json.RawMessage) (any, error) {
	switch t.Kind {
	case kindText, kindEnum:
		s, err := textOf(raw)
		if err != nil {
			return nil, err
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, coerceErr("text contains a NUL byte (\\u0000), which PostgreSQL text cannot store")
		}
		if maxLen >= 0 && len(s) > maxLen {
			n := utf8.RuneCountInString(strings.TrimRight(s, " "))
			if n > maxLen {
				return nil, coerceErr("value of %d characters is too long for the column (max %d)", utf8.RuneCountInString(s), maxLen)
			}
		}
		return s, nil
	case kindInt2, kindInt4, kindInt8:
		s, err := numberText(raw)
		if err != nil {
			return nil, err
		}
		n, err := parseInteger(s)
		if err != nil {
			return nil, err
		}
		switch t.Kind {
		case kindInt2:
			if n < math.MinInt16 || n > math.MaxInt16 {
				return nil, coerceErr("%s is out of range for smallint", s)
			}
			return int16(n), nil
		case kindInt4:
			if n < math.MinInt32 || n > math.MaxInt32 {
				return nil, coerceErr("%s is out of range for integer", s)
			}
			return int32(n), nil
		}
		return n, nil
	case kindNumeric:
		s, err := numberText(raw)
		if err != nil {
			return nil, err
		}
		return parseNumeric(s)
	case kindFloat4, kindFloat8:
		s, err := numberText(raw)
		if err != nil {
			return nil, err
		}
		bits := 64
		if t.Kind == kindFloat4 {
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
	case kindBool:
		return parseBool(raw)
	case kindTimestamptz, kindTimestamp:
		ts, inf, err := parseTimestamp(raw)
		if err != nil {
			return nil, err
		}
		if t.Kind == kindTimestamptz {
			return pgtype.Timestamptz{Time: ts, InfinityModifier: inf, Valid: true}, nil
		}
		return pgtype.Timestamp{Time: ts, InfinityModifier: inf, Valid: true}, nil
	case kindDate:
		return parseDate(raw)
	case kindTime:
		return parseTime(raw)
	case kindUUID:
		s, err := stringOf(raw)
		if err != nil {
			return nil, err
		}
		return parseUUID(s)
	case kindJSON:
		return string(raw), nil
	case kindJSONB:
		if jsonHasNul(raw) {
			return nil, coerceErr("jsonb cannot store \\u0000")
		}
		return string(raw), nil
	case kindBytea:
		s, err := stringOf(raw)
		if err != nil {
			return nil, err
		}
		b, err := decodeBase64(s)
		if err != nil {
			return nil, coerceErr("bytea wants a base64 string: %v", err)
		}
		return b, nil
	case kindOther:
		s, err := textOf(raw)
		if err != nil {
			return nil, err
		}
		return parseViaPgx(t.OID, s)
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
			if len(e) == 0 || e[0] == 'n' {
				continue
			}
			if e[0] == '[' && t.Elem.Kind != kindJSON && t.Elem.Kind != kindJSONB {
				return nil, coerceErr("multidimensional arrays are not supported (element %d)", i)
			}
			v, err := coerceType(t.Elem, -1, e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, ErrUnsupportedColumn
}

// stringOf unquotes a JSON string.
func stringOf(raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return "", coerceErr("want a string, got %s", jsonKind(raw))
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", coerceErr("%v", err)
	}
	return s, nil
}

// textOf accepts a string, or a number or boolean as its literal text.
func textOf(raw json.RawMessage) (string, error) {
	switch raw[0] {
	case '"':
		return stringOf(raw)
	case '{', '[':
		return "", coerceErr("want a string, got %s", jsonKind(raw))
	}
	return string(raw), nil
}

// numberText accepts a JSON number or a string holding one, returning the
// number's text.
func numberText(raw json.RawMessage) (string, error) {
	if raw[0] == '"' {
		s, err := stringOf(raw)
		if err != nil {
			return "", err
		}
		switch s {
		case "NaN", "Infinity", "-Infinity":
			return s, nil
		}
		if !validNumber(s) {
			return "", coerceErr("%q is not a number", truncate(s, 40))
		}
		return s, nil
	}
	if !isJSONNumber(raw) {
		return "", coerceErr("want a number, got %s", jsonKind(raw))
	}
	return string(raw), nil
}

// validNumber checks the JSON number grammar.
func validNumber(s string) bool {
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

// splitNumber splits a valid number into its digits (no sign, no point,
// leading zeros kept) and the power of ten they are multiplied by.
func splitNumber(s string) (neg bool, digits string, exp int64, ok bool) {
	if s != "" && s[0] == '-' {
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

func parseInteger(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	neg, digits, exp, ok := splitNumber(s)
	if !ok || !validNumber(s) {
		return 0, coerceErr("%q is not an integer", truncate(s, 40))
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
		return 0, coerceErr("%s is not an integer", truncate(s, 40))
	}
	if int64(len(digits))+exp > 19 {
		return 0, coerceErr("%s is out of range for bigint", truncate(s, 40))
	}
	n, ok := new(big.Int).SetString(digits+strings.Repeat("0", int(exp)), 10)
	if !ok {
		return 0, coerceErr("%q is not an integer", truncate(s, 40))
	}
	if neg {
		n.Neg(n)
	}
	if !n.IsInt64() {
		return 0, coerceErr("%s is out of range for bigint", truncate(s, 40))
	}
	return n.Int64(), nil
}

// numericLimit bounds the digits and exponent of a numeric, generously
// above PostgreSQL's own limits (131072 digits before the point, 16383
// after), so hostile input cannot make the encoder allocate without bound.
const numericLimit = 200_000

func parseNumeric(s string) (pgtype.Numeric, error) {
	switch s {
	case "NaN":
		return pgtype.Numeric{NaN: true, Valid: true}, nil
	case "Infinity":
		return pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true}, nil
	case "-Infinity":
		return pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, nil
	}
	neg, digits, exp, ok := splitNumber(s)
	if !ok || len(digits) > numericLimit || exp > numericLimit || exp < -numericLimit {
		return pgtype.Numeric{}, coerceErr("%s is out of range for numeric", truncate(s, 40))
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return pgtype.Numeric{}, coerceErr("%q is not a number", truncate(s, 40))
	}
	if neg {
		n.Neg(n)
	}
	return pgtype.Numeric{Int: n, Exp: int32(exp), Valid: true}, nil
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
		name := "double precision"
		if bits == 32 {
			name = "real"
		}
		return 0, coerceErr("%s is out of range for %s", truncate(s, 40), name)
	}
	return f, nil
}

func parseBool(raw json.RawMessage) (bool, error) {
	switch string(raw) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	if raw[0] == '"' {
		s, err := stringOf(raw)
		if err != nil {
			return false, err
		}
		switch strings.ToLower(s) {
		case "true", "t", "yes", "y", "on", "1":
			return true, nil
		case "false", "f", "no", "n", "off", "0":
			return false, nil
		}
		return false, coerceErr("%q is not a boolean", truncate(s, 40))
	}
	return false, coerceErr("want a boolean, got %s", jsonKind(raw))
}

// PostgreSQL's timestamp range is 4713 BC to 294276 AD; checking it here
// also keeps pgx's microsecond arithmetic from overflowing.
var (
	minTime = time.Date(-4712, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(294276, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

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

func parseTimestamp(raw json.RawMessage) (time.Time, pgtype.InfinityModifier, error) {
	if raw[0] != '"' {
		if !isJSONNumber(raw) {
			return time.Time{}, 0, coerceErr("want an RFC 3339 string or epoch milliseconds, got %s", jsonKind(raw))
		}
		ms, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return time.Time{}, 0, coerceErr("epoch milliseconds %s: not an integer in range", truncate(string(raw), 40))
		}
		t := time.UnixMilli(ms).UTC()
		if t.Before(minTime) || t.After(maxTime) {
			return time.Time{}, 0, coerceErr("timestamp %d ms is out of range", ms)
		}
		return t, 0, nil
	}
	s, err := stringOf(raw)
	if err != nil {
		return time.Time{}, 0, err
	}
	switch strings.ToLower(s) {
	case "infinity":
		return time.Time{}, pgtype.Infinity, nil
	case "-infinity":
		return time.Time{}, pgtype.NegativeInfinity, nil
	}
	for _, layout := range timestampLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			t = t.UTC()
			if t.Before(minTime) || t.After(maxTime) {
				return time.Time{}, 0, coerceErr("timestamp %q is out of range", s)
			}
			return t, 0, nil
		}
	}
	return time.Time{}, 0, coerceErr("%q is not an RFC 3339 timestamp", truncate(s, 40))
}

func parseDate(raw json.RawMessage) (pgtype.Date, error) {
	if raw[0] != '"' {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if !isJSONNumber(raw) || err != nil || n < -3_000_000 || n > 100_000_000 {
			return pgtype.Date{}, coerceErr("want a date string or days since the epoch, got %s", truncate(string(raw), 40))
		}
		return pgtype.Date{Time: time.Unix(0, 0).UTC().AddDate(0, 0, int(n)), Valid: true}, nil
	}
	s, err := stringOf(raw)
	if err != nil {
		return pgtype.Date{}, err
	}
	switch strings.ToLower(s) {
	case "infinity":
		return pgtype.Date{InfinityModifier: pgtype.Infinity, Valid: true}, nil
	case "-infinity":
		return pgtype.Date{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, nil
	}
	for _, layout := range timestampLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
			if d.Before(minTime) || d.After(maxTime) {
				return pgtype.Date{}, coerceErr("date %q is out of range", s)
			}
			return pgtype.Date{Time: d, Valid: true}, nil
		}
	}
	return pgtype.Date{}, coerceErr("%q is not a date", truncate(s, 40))
}

const microsPerDay = 24 * 60 * 60 * 1_000_000

func parseTime(raw json.RawMessage) (pgtype.Time, error) {
	if raw[0] != '"' {
		ms, err := strconv.ParseInt(string(raw), 10, 64)
		if !isJSONNumber(raw) || err != nil || ms < 0 || ms > microsPerDay/1000 {
			return pgtype.Time{}, coerceErr("want a time string or milliseconds since midnight, got %s", truncate(string(raw), 40))
		}
		return pgtype.Time{Microseconds: ms * 1000, Valid: true}, nil
	}
	s, err := stringOf(raw)
	if err != nil {
		return pgtype.Time{}, err
	}
	var h, m, sec, frac int64
	bad := func() (pgtype.Time, error) {
		return pgtype.Time{}, coerceErr("%q is not a time of day", truncate(s, 40))
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
			f = (f + "000000000")[:9]
			ns, _ := strconv.ParseInt(f, 10, 64)
			frac = (ns + 500) / 1000 // round to microseconds
			p = p[:i]
		}
		if sec, ok = num(p); !ok {
			return bad()
		}
	}
	us := ((h*60+m)*60+sec)*1_000_000 + frac
	if m > 59 || sec > 60 || us > microsPerDay {
		return bad()
	}
	return pgtype.Time{Microseconds: us, Valid: true}, nil
}

func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	t := strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	t = strings.ReplaceAll(t, "-", "")
	if len(t) != 32 {
		return u, coerceErr("%q is not a UUID", truncate(s, 40))
	}
	if _, err := hex.Decode(u[:], []byte(t)); err != nil {
		return u, coerceErr("%q is not a UUID", truncate(s, 40))
	}
	return u, nil
}

func decodeBase64(s string) ([]byte, error) {
	if strings.HasSuffix(s, "=") || len(s)%4 == 0 {
		return base64.StdEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// jsonHasNul reports whether a JSON text contains the escape \u0000.
func jsonHasNul(raw []byte) bool {
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] == 'u' && string(raw[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// pgxTypes is a type map for the types the writer does not convert itself;
// a pgtype.Map caches plans and is not safe for concurrent use.
var pgxTypes struct {
	sync.Mutex
	m *pgtype.Map
}

func knownToPgx(oid uint32) bool {
	pgxTypes.Lock()
	defer pgxTypes.Unlock()
	if pgxTypes.m == nil {
		pgxTypes.m = pgtype.NewMap()
	}
	_, ok := pgxTypes.m.TypeForOID(oid)
	return ok
}

// parseViaPgx parses s in the text syntax of type oid and checks the result
// encodes in the binary format.
func parseViaPgx(oid uint32, s string) (any, error) {
	pgxTypes.Lock()
	defer pgxTypes.Unlock()
	if pgxTypes.m == nil {
		pgxTypes.m = pgtype.NewMap()
	}
	m := pgxTypes.m
	var v any
	if err := m.Scan(oid, pgtype.TextFormatCode, []byte(s), &v); err != nil {
		return nil, coerceErr("%q: %v", truncate(s, 40), err)
	}
	if _, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil); err != nil {
		return nil, coerceErr("%q: %v", truncate(s, 40), err)
	}
	return v, nil
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
