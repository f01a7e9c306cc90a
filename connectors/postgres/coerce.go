package postgres

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txsink/txsink/connectors/internal/box"
	"github.com/txsink/txsink/connectors/record"
)

// Conversions from record values to column types. Each returns a Go value
// that pgx encodes in the binary format (COPY and parameters alike), or an
// error wrapping record.ErrCoerce. The record package's As… conversions
// decide what each value kind may become (the same for both sinks); this
// file adds PostgreSQL's own range and content checks:
//
//	text, varchar, char, citext  AsText; no NUL byte; at most n characters for varchar(n)/char(n)
//	smallint, integer, bigint    AsInt64, range-checked
//	numeric                      AsDecimal, exact; NaN and ±Infinity
//	real, double precision       AsFloat
//	boolean                      AsBool
//	timestamptz, timestamp       AsTimestamp (timestamp stores the UTC wall time; a local timestamp its wall time), rounded to microseconds as PostgreSQL rounds text
//	date                         AsDate
//	time                         AsTimeOfDay, rounded to microseconds
//	uuid                         AsUUID
//	json, jsonb                  any value as JSON text (jsonb refuses \u0000)
//	bytea                        AsBytes
//	interval                     a duration; or AsText in the type's text syntax
//	enum                         AsText (the label)
//	other types pgx knows        AsText in the type's text syntax (inet, macaddr, …), parsed client-side
//	arrays of the above          an array (one dimension); elements convert as above, null elements allowed
//
// Null is NULL, refused for NOT NULL columns.

// coerce converts v to the column's type. With bx, text and bigint
// values are boxed in bx's chunks instead of one allocation each.
func coerce(c *column, v *record.Value, bx *box.Boxes) (any, error) {
	if v.IsNull() {
		if c.NotNull {
			return nil, record.FieldErrorf(c.Name, record.ErrCoerce, "null in NOT NULL column")
		}
		return nil, nil
	}
	var x any
	var err error
	switch k := c.Type.Kind; {
	case bx != nil && (k == kindText || k == kindEnum):
		var s string
		if s, err = coerceText(c.MaxLen, v); err == nil {
			x = bx.String(s)
		}
	case bx != nil && k == kindInt8:
		var n int64
		if n, err = v.AsInt64(); err == nil {
			x = bx.Int64(n)
		}
	default:
		x, err = coerceType(&c.Type, c.MaxLen, v)
	}
	if err != nil {
		return nil, record.InField(c.Name, err)
	}
	return x, nil
}

func coerceErr(format string, args ...any) error {
	return record.Errorf(record.ErrCoerce, format, args...)
}

func coerceType(t *pgType, maxLen int, v *record.Value) (any, error) {
	switch t.Kind {
	case kindText, kindEnum:
		s, err := coerceText(maxLen, v)
		if err != nil {
			return nil, err
		}
		return s, nil
	case kindInt2, kindInt4, kindInt8:
		n, err := v.AsInt64()
		if err != nil {
			return nil, err
		}
		switch t.Kind {
		case kindInt2:
			if n < math.MinInt16 || n > math.MaxInt16 {
				return nil, coerceErr("%d is out of range for smallint", n)
			}
			return int16(n), nil
		case kindInt4:
			if n < math.MinInt32 || n > math.MaxInt32 {
				return nil, coerceErr("%d is out of range for integer", n)
			}
			return int32(n), nil
		}
		return n, nil
	case kindNumeric:
		d, err := v.AsDecimal()
		if err != nil {
			return nil, err
		}
		switch d.Special {
		case "NaN":
			return pgtype.Numeric{NaN: true, Valid: true}, nil
		case "Infinity":
			return pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true}, nil
		case "-Infinity":
			return pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, nil
		}
		return pgtype.Numeric{Int: d.Unscaled, Exp: d.Exp, Valid: true}, nil
	case kindFloat4:
		return v.AsFloatOf(32)
	case kindFloat8:
		return v.AsFloatOf(64)
	case kindBool:
		return v.AsBool()
	case kindTimestamptz, kindTimestamp:
		ts, err := v.AsTimestamp()
		if err != nil {
			return nil, err
		}
		// Round to microseconds, as PostgreSQL does with text input (pgx
		// would truncate).
		ts.Time = ts.Time.Round(time.Microsecond)
		inf := pgtype.InfinityModifier(ts.Inf)
		if t.Kind == kindTimestamptz {
			return pgtype.Timestamptz{Time: ts.Time, InfinityModifier: inf, Valid: true}, nil
		}
		return pgtype.Timestamp{Time: ts.Time, InfinityModifier: inf, Valid: true}, nil
	case kindDate:
		d, err := v.AsDate()
		if err != nil {
			return nil, err
		}
		return pgtype.Date{Time: d.Time, InfinityModifier: pgtype.InfinityModifier(d.Inf), Valid: true}, nil
	case kindTime:
		d, err := v.AsTimeOfDay()
		if err != nil {
			return nil, err
		}
		return pgtype.Time{Microseconds: d.Round(time.Microsecond).Microseconds(), Valid: true}, nil
	case kindUUID:
		return v.AsUUID()
	case kindJSON, kindJSONB:
		b, err := jsonText(*v)
		if err != nil {
			return nil, err
		}
		if t.Kind == kindJSONB && jsonHasNul(b) {
			return nil, coerceErr("jsonb cannot store \\u0000")
		}
		// b is the record's bytes (a schemaless value's JSON text) or a
		// buffer made for this value and referenced nowhere else: the
		// row may share it, as text columns share the record's bytes
		// (see record.Value.AsTextShared).
		return unsafe.String(unsafe.SliceData(b), len(b)), nil
	case kindBytea:
		return v.AsBytes()
	case kindOther:
		if v.Kind() == record.KindDuration && t.OID == pgtype.IntervalOID {
			d, err := v.AsDuration()
			if err != nil {
				return nil, err
			}
			return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}, nil
		}
		s, err := v.AsText()
		if err != nil {
			return nil, err
		}
		return parseViaPgx(t.OID, s)
	case kindArray:
		var out []any
		err := v.Elems(func(i int, e record.Value) error {
			if e.IsNull() {
				out = append(out, nil)
				return nil
			}
			if e.Kind() == record.KindArray && t.Elem.Kind != kindJSON && t.Elem.Kind != kindJSONB {
				return coerceErr("multidimensional arrays are not supported (element %d)", i)
			}
			x, err := coerceType(t.Elem, -1, &e)
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, x)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return nil, ErrUnsupportedColumn
}

// coerceText converts v for a text, varchar(maxLen), char(maxLen) or
// enum column. The text may share the record's bytes: a row lives only
// until its batch is written (see record.Value.AsTextShared).
func coerceText(maxLen int, v *record.Value) (string, error) {
	s, err := v.AsTextShared()
	if err != nil {
		return "", err
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", coerceErr("text contains a NUL byte (\\u0000), which PostgreSQL text cannot store")
	}
	if maxLen >= 0 && len(s) > maxLen {
		n := utf8.RuneCountInString(strings.TrimRight(s, " "))
		if n > maxLen {
			return "", coerceErr("value of %d characters is too long for the column (max %d)", utf8.RuneCountInString(s), maxLen)
		}
	}
	return s, nil
}

// jsonText is a value's JSON text for a json or jsonb column. A string
// whose schema says it holds JSON (Debezium's io.debezium.data.Json) is
// that JSON, not a JSON string.
func jsonText(v record.Value) ([]byte, error) {
	if s := v.Schema(); s != nil && s.Name == record.DebeziumJSON && v.Kind() == record.KindString {
		text, err := v.AsString()
		if err != nil {
			return nil, err
		}
		if !json.Valid([]byte(text)) {
			return nil, coerceErr("%s value is not valid JSON", record.DebeziumJSON)
		}
		return []byte(text), nil
	}
	return v.JSONText()
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
		return nil, coerceErr("%q: %v", record.Truncate(s, 40), err)
	}
	if _, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil); err != nil {
		return nil, coerceErr("%q: %v", record.Truncate(s, 40), err)
	}
	return v, nil
}
