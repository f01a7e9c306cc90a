package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// How a replica comparison reads values: both databases print each column
// as text (PostgreSQL col::text in a UTC session, ClickHouse toString),
// and the text is normalised by the source column's type, the way the
// sinks convert Debezium's values, so that equal values compare equal
// whichever column type the target gave them: 12.50 and 12.5, t and 1
// and true, a timestamptz in PostgreSQL and its ISO string in a ClickHouse
// String column, JSON with its keys in another order, a timestamp rounded
// to a coarser target column.

// valueKind says how a column's values are normalised.
type valueKind int

const (
	kindText        valueKind = iota // compared as written (text, varchar, enums)
	kindInt                          // integers
	kindDecimal                      // numeric: 12.50 = 12.5; also Debezium's VariableScaleDecimal as JSON
	kindFloat32                      // real
	kindFloat64                      // double precision
	kindBool                         // t/true/1 and f/false/0
	kindUUID                         // case-insensitive
	kindJSON                         // json, jsonb: keys sorted, spacing dropped
	kindBytes                        // bytea: lowercase hex
	kindDate                         // date
	kindTimestamp                    // timestamp without time zone
	kindTimestampTZ                  // timestamptz: as an instant
	kindTime                         // time without time zone
	kindOther                        // other types: the text as the database prints it
)

var kindNames = map[valueKind]string{
	kindText: "text", kindInt: "integer", kindDecimal: "decimal", kindFloat32: "float32", kindFloat64: "float64",
	kindBool: "boolean", kindUUID: "uuid", kindJSON: "json", kindBytes: "bytes", kindDate: "date",
	kindTimestamp: "timestamp", kindTimestampTZ: "timestamptz", kindTime: "time", kindOther: "other",
}

func (k valueKind) String() string { return kindNames[k] }

// pgKind is the kind of a PostgreSQL type, by its name in pg_type (a
// domain's base type) and its category.
func pgKind(typname string, category string) valueKind {
	switch typname {
	case "int2", "int4", "int8", "oid":
		return kindInt
	case "numeric":
		return kindDecimal
	case "float4":
		return kindFloat32
	case "float8":
		return kindFloat64
	case "bool":
		return kindBool
	case "uuid":
		return kindUUID
	case "json", "jsonb":
		return kindJSON
	case "bytea":
		return kindBytes
	case "date":
		return kindDate
	case "timestamp":
		return kindTimestamp
	case "timestamptz":
		return kindTimestampTZ
	case "time":
		return kindTime
	case "text", "varchar", "bpchar", "name", "citext", "xml":
		return kindText
	}
	if category == "E" { // enums arrive as their label
		return kindText
	}
	return kindOther
}

// fracDigits is the number of fractional-second digits a timestamp or
// time column keeps: PostgreSQL's typmod (-1: 6), ClickHouse's
// DateTime64(p) (DateTime: 0).
func pgFracDigits(typmod int32) int {
	if typmod < 0 || typmod > 6 {
		return 6
	}
	return int(typmod)
}

// chFracDigits is the fractional-second digits of a ClickHouse column
// type (Nullable and LowCardinality unwrapped): DateTime 0,
// DateTime64(p) p, anything else (a String holding an ISO text) 6.
func chFracDigits(typ string) int {
	t := chBaseType(typ)
	switch {
	case t == "DateTime" || strings.HasPrefix(t, "DateTime("):
		return 0
	case strings.HasPrefix(t, "DateTime64("):
		args := strings.TrimSuffix(strings.TrimPrefix(t, "DateTime64("), ")")
		p, _, _ := strings.Cut(args, ",")
		if n, err := strconv.Atoi(strings.TrimSpace(p)); err == nil && n >= 0 {
			return min(n, 9)
		}
	}
	return 6
}

// chBaseType strips Nullable(…) and LowCardinality(…) from a ClickHouse
// type.
func chBaseType(typ string) string {
	t := strings.TrimSpace(typ)
	for {
		switch {
		case strings.HasPrefix(t, "Nullable(") && strings.HasSuffix(t, ")"):
			t = t[len("Nullable(") : len(t)-1]
		case strings.HasPrefix(t, "LowCardinality(") && strings.HasSuffix(t, ")"):
			t = t[len("LowCardinality(") : len(t)-1]
		default:
			return t
		}
	}
}

// normalizeValue returns the canonical text of raw (a value as its
// database printed it) for a column of kind k whose compared timestamps
// keep digits fractional-second digits. Text that does not parse as the
// kind is returned as it is (it then compares unequal to a well-formed
// value, which is the point).
func normalizeValue(k valueKind, digits int, raw string) string {
	s := strings.TrimSpace(raw)
	switch k {
	case kindText, kindOther:
		return raw
	case kindInt:
		if n, ok := new(big.Int).SetString(s, 10); ok {
			return n.String()
		}
	case kindDecimal:
		if strings.HasPrefix(s, "{") {
			if d, ok := variableScaleDecimal(s); ok {
				return d
			}
		}
		if d, ok := canonicalDecimal(s); ok {
			return d
		}
	case kindFloat32, kindFloat64:
		bits := 64
		if k == kindFloat32 {
			bits = 32
		}
		if f, err := strconv.ParseFloat(s, bits); err == nil {
			return strconv.FormatFloat(f, 'g', -1, bits)
		}
	case kindBool:
		switch strings.ToLower(s) {
		case "t", "true", "1", "y", "yes", "on":
			return "true"
		case "f", "false", "0", "n", "no", "off":
			return "false"
		}
	case kindUUID:
		return strings.ToLower(s)
	case kindJSON:
		if j, ok := canonicalJSON(s); ok {
			return j
		}
	case kindBytes:
		return strings.ToLower(strings.TrimPrefix(s, `\x`))
	case kindDate:
		if d, _, ok := strings.Cut(s, " "); ok {
			s = d // a date in a DateTime column: its date part
		}
		if t, err := time.Parse(time.DateOnly, s); err == nil {
			return t.Format(time.DateOnly)
		}
	case kindTimestamp:
		if t, ok := parseTimestamp(s, false); ok {
			return formatFrac(roundFrac(t, digits), "2006-01-02 15:04:05", digits)
		}
	case kindTimestampTZ:
		if t, ok := parseTimestamp(s, true); ok {
			return formatFrac(roundFrac(t.UTC(), digits), "2006-01-02 15:04:05", digits) + "Z"
		}
	case kindTime:
		if t, err := time.Parse("15:04:05.999999999", s); err == nil {
			return formatFrac(roundFrac(t, digits), "15:04:05", digits)
		}
		if s == "24:00:00" {
			return s
		}
	}
	return raw
}

// canonicalDecimal writes a decimal number without leading zeros,
// trailing fractional zeros or a sign on zero: "-012.3400" is "-12.34".
func canonicalDecimal(s string) (string, bool) {
	if strings.EqualFold(s, "nan") {
		return "NaN", true
	}
	if strings.ContainsAny(s, "eE") {
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return "", false
		}
		return canonicalDecimal(r.FloatString(decimalPlaces(r)))
	}
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if intPart == "" && frac == "" {
		return "", false
	}
	for _, c := range intPart + frac {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	intPart = strings.TrimLeft(intPart, "0")
	frac = strings.TrimRight(frac, "0")
	if intPart == "" {
		intPart = "0"
	}
	out := intPart
	if frac != "" {
		out += "." + frac
	}
	if neg && out != "0" {
		out = "-" + out
	}
	return out, true
}

// decimalPlaces is how many fractional digits r needs exactly (its
// denominator divides a power of ten), capped at 1000.
func decimalPlaces(r *big.Rat) int {
	d := new(big.Int).Set(r.Denom())
	ten, n := big.NewInt(10), 0
	for n < 1000 && d.Cmp(big.NewInt(1)) != 0 {
		g := new(big.Int).GCD(nil, nil, d, ten)
		if g.Cmp(big.NewInt(1)) == 0 {
			break
		}
		d.Quo(d, g)
		n++
	}
	return n
}

// variableScaleDecimal decodes Debezium's io.debezium.data.VariableScaleDecimal
// (a numeric column without a fixed scale) as the sinks write it into a
// JSON column: {"scale": 2, "value": "<base64 of the big-endian two's
// complement unscaled value>"}.
func variableScaleDecimal(s string) (string, bool) {
	var v struct {
		Scale *int32  `json:"scale"`
		Value *string `json:"value"`
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil || v.Scale == nil || v.Value == nil {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(*v.Value)
	if err != nil || len(b) == 0 {
		return "", false
	}
	n := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 { // negative: two's complement
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	r := new(big.Rat).SetInt(n)
	if *v.Scale > 0 {
		r.Quo(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(*v.Scale)), nil)))
	} else if *v.Scale < 0 {
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-*v.Scale)), nil)))
	}
	return canonicalDecimal(r.FloatString(max(int(*v.Scale), 0)))
}

// canonicalJSON re-encodes a JSON text with sorted keys and no spacing,
// numbers kept as written.
func canonicalJSON(s string) (string, bool) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return "", false
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return "", false
	}
	return strings.TrimSuffix(b.String(), "\n"), true
}

// Layouts of timestamps as PostgreSQL (ISO DateStyle), ClickHouse and
// Debezium's ZonedTimestamp print them.
var (
	timestampLayouts = []string{
		"2006-01-02 15:04:05.999999999",
		"2006-01-02T15:04:05.999999999",
	}
	timestampTZLayouts = []string{
		"2006-01-02 15:04:05.999999999Z07",
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07:00:00",
		time.RFC3339Nano,
		"2006-01-02T15:04:05.999999999Z07",
		"2006-01-02 15:04:05.999999999", // a DateTime64 read in UTC
	}
)

func parseTimestamp(s string, zoned bool) (time.Time, bool) {
	layouts := timestampLayouts
	if zoned {
		layouts = timestampTZLayouts
	}
	for _, l := range layouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// roundFrac rounds t to digits fractional-second digits.
func roundFrac(t time.Time, digits int) time.Time {
	if digits >= 9 {
		return t
	}
	unit := time.Duration(1)
	for range 9 - digits {
		unit *= 10
	}
	return t.Round(unit)
}

// formatFrac formats t with layout and exactly digits fractional-second
// digits (none for 0).
func formatFrac(t time.Time, layout string, digits int) string {
	if digits > 0 {
		layout += "." + strings.Repeat("0", min(digits, 9))
	}
	return t.Format(layout)
}

// rowHasher builds the canonical text of a key and the checksum of a row.
type rowHasher struct {
	buf []byte
}

// appendValue appends a value (nil: NULL) in an unambiguous encoding: a
// tag byte, then for a value its length and bytes.
func appendValue(b []byte, v *string) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(*v)))
	return append(b, *v...)
}

// key returns the canonical key of a row's normalised key values.
func (h *rowHasher) key(vals []*string) string {
	h.buf = h.buf[:0]
	for _, v := range vals {
		h.buf = appendValue(h.buf, v)
	}
	return string(h.buf)
}

// sum returns the checksum of a row's normalised values: the first 16
// bytes of the SHA-256 of their encoding.
func (h *rowHasher) sum(vals []*string) [16]byte {
	h.buf = h.buf[:0]
	for _, v := range vals {
		h.buf = appendValue(h.buf, v)
	}
	full := sha256.Sum256(h.buf)
	var out [16]byte
	copy(out[:], full[:16])
	return out
}
