package postgres

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/txsink/txsink/connectors/internal/jsonscan"
)

// Record values and keys are JSON, in one of two shapes:
//
//   - schemaless: a JSON object whose fields map to columns by name;
//   - Kafka Connect's JsonConverter envelope {"schema": {…}, "payload": {…}}
//     (schemas.enable=true). The payload is used; the schema converts the
//     types JSON cannot carry: Decimal (base64 big-endian two's-complement
//     unscaled value plus the "scale" parameter), Date (days since the
//     epoch), Time (milliseconds since midnight), Timestamp (milliseconds
//     since the epoch), and Debezium's io.debezium.time.{Date, Time,
//     MicroTime, NanoTime, Timestamp, MicroTimestamp, NanoTimestamp}. An
//     envelope is recognised only when the object has exactly the two keys
//     "schema" and "payload" and the schema is null or an object with a
//     string "type".
//
// Decoding normalises an envelope to the schemaless form (Decimal becomes a
// JSON number with the exact digits, dates and times become ISO 8601
// strings, bytes stay base64 strings), so conversion to column types only
// deals with plain JSON. Field values are kept as raw JSON text, which keeps
// numbers exact (no float64 round trip).

// document is a decoded key or value.
type document struct {
	// Null is true for a tombstone: no bytes, JSON null, or an envelope
	// whose payload is null.
	Null bool
	// Fields holds an object's fields as raw JSON; nil when the document is
	// not an object.
	Fields map[string]json.RawMessage
	// Scalar is the raw JSON of a non-object document (a primitive key).
	Scalar json.RawMessage
}

// connectSchema is the part of a Kafka Connect schema the decoder honours.
type connectSchema struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Parameters map[string]string `json:"parameters"`
	Fields     []*connectSchema  `json:"fields"`
	Items      *connectSchema    `json:"items"`
}

// decodeValue decodes a record value: null, a JSON object, or an envelope
// around one. Anything else is an error wrapping ErrDecode.
func decodeValue(b []byte) (document, error) {
	d, err := decodeDocument(b, false)
	if err != nil {
		return d, err
	}
	if !d.Null && d.Fields == nil {
		return document{}, fmt.Errorf("%w: value must be a JSON object, got %s", ErrDecode, jsonKind(d.Scalar))
	}
	return d, nil
}

// decodeKey decodes a record key: like a value, but primitives are allowed,
// and bytes that are not JSON are taken as a string (a StringConverter key).
func decodeKey(b []byte) (document, error) {
	return decodeDocument(b, true)
}

// objectFields decodes the JSON object b into *fields and reports whether b
// was one: with the scanner, or with encoding/json for what the scanner
// leaves to it (escaped keys, deep nesting), which validates the whole
// text so objects skip a separate pass.
func objectFields(b []byte, fields *map[string]json.RawMessage) bool {
	if f, ok := jsonscan.Fields(b); ok {
		*fields = f
		return true
	}
	return json.Unmarshal(b, fields) == nil
}

func decodeDocument(b []byte, lenientString bool) (document, error) {
	if b == nil {
		return document{Null: true}, nil
	}
	if !utf8.Valid(b) {
		if lenientString {
			return document{}, fmt.Errorf("%w: key is not valid UTF-8", ErrDecode)
		}
		return document{}, fmt.Errorf("%w: value is not valid UTF-8", ErrDecode)
	}
	trimmed := bytes.TrimSpace(b)
	var fields map[string]json.RawMessage
	if len(trimmed) == 0 || trimmed[0] != '{' || !objectFields(trimmed, &fields) {
		if !json.Valid(trimmed) {
			if lenientString {
				s, _ := json.Marshal(string(b))
				return document{Scalar: s}, nil
			}
			return document{}, fmt.Errorf("%w: invalid JSON", ErrDecode)
		}
		if string(trimmed) == "null" {
			return document{Null: true}, nil
		}
		return document{Scalar: json.RawMessage(trimmed)}, nil
	}
	if sch, payload, ok := envelope(fields); ok {
		return decodeEnvelope(sch, payload)
	}
	return document{Fields: fields}, nil
}

// envelope reports whether fields is a JsonConverter envelope.
func envelope(fields map[string]json.RawMessage) (*connectSchema, json.RawMessage, bool) {
	if len(fields) != 2 {
		return nil, nil, false
	}
	rawSchema, ok1 := fields["schema"]
	payload, ok2 := fields["payload"]
	if !ok1 || !ok2 {
		return nil, nil, false
	}
	if string(rawSchema) == "null" {
		return nil, payload, true
	}
	var probe struct {
		Type *string `json:"type"`
	}
	if len(rawSchema) == 0 || rawSchema[0] != '{' || json.Unmarshal(rawSchema, &probe) != nil || probe.Type == nil {
		return nil, nil, false
	}
	var sch connectSchema
	if err := json.Unmarshal(rawSchema, &sch); err != nil {
		return nil, nil, false
	}
	return &sch, payload, true
}

func decodeEnvelope(sch *connectSchema, payload json.RawMessage) (document, error) {
	if string(payload) == "null" {
		return document{Null: true}, nil
	}
	if len(payload) == 0 || payload[0] != '{' {
		if sch != nil && sch.Type != "struct" && sch.Type != "map" {
			v, err := normalize(payload, sch, "")
			if err != nil {
				return document{}, err
			}
			return document{Scalar: v}, nil
		}
		if sch == nil {
			return document{Scalar: payload}, nil
		}
		return document{}, fmt.Errorf("%w: envelope payload must be a JSON object for schema type %q, got %s", ErrDecode, sch.Type, jsonKind(payload))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(payload, &fields); err != nil {
		return document{}, fmt.Errorf("%w: envelope payload: %v", ErrDecode, err)
	}
	if sch == nil || sch.Type != "struct" {
		return document{Fields: fields}, nil
	}
	for _, f := range sch.Fields {
		if f == nil {
			continue
		}
		raw, ok := fields[f.Field]
		if !ok {
			continue
		}
		v, err := normalize(raw, f, f.Field)
		if err != nil {
			return document{}, err
		}
		fields[f.Field] = v
	}
	return document{Fields: fields}, nil
}

const (
	logicalDecimal        = "org.apache.kafka.connect.data.Decimal"
	logicalDate           = "org.apache.kafka.connect.data.Date"
	logicalTime           = "org.apache.kafka.connect.data.Time"
	logicalTimestamp      = "org.apache.kafka.connect.data.Timestamp"
	debeziumDate          = "io.debezium.time.Date"
	debeziumTime          = "io.debezium.time.Time"
	debeziumMicroTime     = "io.debezium.time.MicroTime"
	debeziumNanoTime      = "io.debezium.time.NanoTime"
	debeziumTimestamp     = "io.debezium.time.Timestamp"
	debeziumMicroTimestmp = "io.debezium.time.MicroTimestamp"
	debeziumNanoTimestamp = "io.debezium.time.NanoTimestamp"
)

// normalize rewrites one payload value according to its schema into the
// schemaless JSON the coercions understand. Values without a logical type
// are returned unchanged.
func normalize(raw json.RawMessage, sch *connectSchema, field string) (json.RawMessage, error) {
	if sch == nil || string(raw) == "null" {
		return raw, nil
	}
	bad := func(format string, args ...any) error {
		return errField(field, ErrDecode, "schema %s: "+format, append([]any{sch.Name}, args...)...)
	}
	switch sch.Name {
	case logicalDecimal:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			// Some producers emit the decimal as a JSON number already.
			if isJSONNumber(raw) {
				return raw, nil
			}
			return nil, bad("want a base64 string, got %s", jsonKind(raw))
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, bad("invalid base64: %v", err)
		}
		scale, err := strconv.Atoi(sch.Parameters["scale"])
		if err != nil && sch.Parameters["scale"] != "" {
			return nil, bad("invalid scale parameter %q", sch.Parameters["scale"])
		}
		if scale < -1000 || scale > 1000 {
			return nil, bad("scale %d out of range", scale)
		}
		return json.RawMessage(decimalText(twosComplement(b), scale)), nil
	case logicalDate, debeziumDate:
		n, err := intOf(raw)
		if err != nil || n < -100_000_000 || n > 100_000_000 {
			return nil, bad("want days since the epoch, got %s", raw)
		}
		return quote(time.Unix(0, 0).UTC().AddDate(0, 0, int(n)).Format(time.DateOnly)), nil
	case logicalTime, debeziumTime, debeziumMicroTime, debeziumNanoTime:
		n, err := intOf(raw)
		unit := map[string]time.Duration{logicalTime: time.Millisecond, debeziumTime: time.Millisecond,
			debeziumMicroTime: time.Microsecond, debeziumNanoTime: time.Nanosecond}[sch.Name]
		if err != nil || n < 0 || time.Duration(n) > 24*time.Hour/unit {
			return nil, bad("want time since midnight, got %s", raw)
		}
		return quote(formatTimeOfDay(time.Duration(n) * unit)), nil
	case logicalTimestamp, debeziumTimestamp, debeziumMicroTimestmp, debeziumNanoTimestamp:
		n, err := intOf(raw)
		if err != nil {
			return nil, bad("want an integer timestamp, got %s", raw)
		}
		var t time.Time
		switch sch.Name {
		case debeziumMicroTimestmp:
			t = time.UnixMicro(n)
		case debeziumNanoTimestamp:
			t = time.Unix(0, n)
		default:
			t = time.UnixMilli(n)
		}
		return quote(t.UTC().Format(time.RFC3339Nano)), nil
	}
	if sch.Type == "array" && sch.Items != nil && sch.Items.Name != "" && len(raw) > 0 && raw[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, bad("%v", err)
		}
		for i, e := range elems {
			v, err := normalize(e, sch.Items, field)
			if err != nil {
				return nil, err
			}
			elems[i] = v
		}
		return json.Marshal(elems)
	}
	return raw, nil
}

func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func formatTimeOfDay(d time.Duration) string {
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := d / time.Second
	d -= s * time.Second
	out := fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	if d > 0 {
		out += "." + fmt.Sprintf("%09d", int64(d))[:9]
		for out[len(out)-1] == '0' {
			out = out[:len(out)-1]
		}
	}
	return out
}

// twosComplement reads a big-endian two's-complement integer.
func twosComplement(b []byte) *big.Int {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return n
}

// decimalText formats unscaled × 10^-scale exactly.
func decimalText(unscaled *big.Int, scale int) string {
	s := unscaled.String()
	neg := false
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	switch {
	case scale < 0:
		if s != "0" {
			s += zeros(-scale)
		}
	case scale > 0:
		if len(s) <= scale {
			s = zeros(scale-len(s)+1) + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

// intOf parses a JSON integer (or a string holding one).
func intOf(raw json.RawMessage) (int64, error) {
	s := string(raw)
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func isJSONNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
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
