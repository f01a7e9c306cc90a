package transform_test

import (
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

const (
	tsValue = transform.ClassTimestampConverter + "$Value"
	tsKey   = transform.ClassTimestampConverter + "$Key"
)

// The instants of Connect's TimestampConverterTest.
const (
	datePlusTimeMs     = 86_401_234 // 1970-01-02T00:00:01.234Z
	datePlusTimeString = "1970 01 02 00 00 01 234 UTC"
	stringDateFmt      = "yyyy MM dd HH mm ss SSS z"
)

var (
	datePlusTime = record.Timestamp(time.UnixMilli(datePlusTimeMs).UTC())
	dateOnly     = record.Date(1)
	timeOnly     = record.TimeOfDay(1234 * int64(time.Millisecond))
)

// Connect's schemaless conversions, and the same with schemas.
func TestTimestampConverterConversions(t *testing.T) {
	schemaOf := map[string]string{
		"Timestamp": `{"type":"int64","name":"org.apache.kafka.connect.data.Timestamp","version":1}`,
		"Date":      `{"type":"int32","name":"org.apache.kafka.connect.data.Date","version":1}`,
		"Time":      `{"type":"int32","name":"org.apache.kafka.connect.data.Time","version":1}`,
		"unix":      `{"type":"int64"}`,
		"string":    `{"type":"string"}`,
	}
	payloadOf := map[string]string{
		"Timestamp": "86401234", "Date": "1", "Time": "1234", "unix": "86401234", "string": `"` + datePlusTimeString + `"`,
	}
	schemalessOf := map[string]record.Value{
		"Timestamp": datePlusTime, "Date": dateOnly, "Time": timeOnly,
		"unix": record.Int(datePlusTimeMs), "string": record.String(datePlusTimeString),
	}
	for _, tc := range []struct {
		from, to string
		want     string // JSON of the result
		schema   string // its schema
	}{
		{"Timestamp", "Timestamp", `"1970-01-02T00:00:01.234Z"`, "org.apache.kafka.connect.data.Timestamp int64"}, // Identity
		{"Timestamp", "Date", `"1970-01-02"`, "org.apache.kafka.connect.data.Date int32"},
		{"Timestamp", "Time", `"00:00:01.234"`, "org.apache.kafka.connect.data.Time int32"},
		{"Timestamp", "unix", `86401234`, "int64"},
		{"Timestamp", "string", `"` + datePlusTimeString + `"`, "string"},
		{"Date", "Timestamp", `"1970-01-02T00:00:00Z"`, "org.apache.kafka.connect.data.Timestamp int64"},
		{"Time", "Timestamp", `"1970-01-01T00:00:01.234Z"`, "org.apache.kafka.connect.data.Timestamp int64"},
		{"unix", "Timestamp", `"1970-01-02T00:00:01.234Z"`, "org.apache.kafka.connect.data.Timestamp int64"},
		{"string", "Timestamp", `"1970-01-02T00:00:01.234Z"`, "org.apache.kafka.connect.data.Timestamp int64"},
	} {
		settings := []string{"target.type", tc.to}
		if tc.from == "string" || tc.to == "string" {
			settings = append(settings, "format", stringDateFmt)
		}
		c := one(t, tsValue, settings...)
		r := rec(schemalessOf[tc.from])
		apply(t, c, r)
		wantJSON(t, "schemaless "+tc.from+" to "+tc.to, r.Value, tc.want)
		if r.Value.Schema() != nil {
			t.Errorf("schemaless %s to %s got schema %s", tc.from, tc.to, r.Value.Schema())
		}
		r = rec(typed(t, schemaOf[tc.from], payloadOf[tc.from]))
		apply(t, c, r)
		wantJSON(t, "with schema "+tc.from+" to "+tc.to, r.Value, tc.want)
		wantSchema(t, "with schema "+tc.from+" to "+tc.to, r.Value, tc.schema)
	}
}

func TestTimestampConverterNulls(t *testing.T) {
	for _, to := range []string{"string", "unix", "Date", "Time", "Timestamp"} {
		c := one(t, tsValue, "target.type", to, "format", stringDateFmt)
		// testSchemalessNullValueTo…
		r := rec(record.Value{})
		apply(t, c, r)
		if !r.Value.IsNull() || r.Value.Schema() != nil {
			t.Errorf("schemaless null to %s = %s", to, r.Value.GoString())
		}
		// testWithSchemaNullValueTo…: null of the optional target schema.
		s := typed(t, `{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp"}`, "1").Schema()
		r = rec(record.Null(s))
		apply(t, c, r)
		if !r.Value.IsNull() || r.Value.Schema() == nil || !r.Value.Schema().Optional {
			t.Errorf("null with schema to %s = %s of %s, want a null of an optional schema", to, r.Value.GoString(), r.Value.Schema())
		}
		// testWithSchemaNullFieldTo…: the field's schema changes, its
		// value stays null.
		st := `{"type":"struct","fields":[{"field":"ts","type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp"},{"field":"other","type":"string"}]}`
		cf := one(t, tsValue, "target.type", to, "format", stringDateFmt, "field", "ts")
		r = rec(typed(t, st, `{"ts":null,"other":"test"}`))
		apply(t, cf, r)
		wantJSON(t, "null field to "+to, r.Value, `{"ts":null,"other":"test"}`)
		if f := r.Value.Schema().Field("ts"); f == nil || !f.Schema.Optional || f.Schema.Type == record.TypeUnknown {
			t.Errorf("null field to %s: schema %s", to, r.Value.Schema())
		}
	}
}

func TestTimestampConverterField(t *testing.T) {
	// testSchemalessFieldConversion: the other fields stay.
	c := one(t, tsValue, "target.type", "Date", "field", "ts")
	r := rec(schemaless(t, `{"ts":86401234,"other":"test"}`))
	apply(t, c, r)
	wantJSON(t, "value", r.Value, `{"ts":"1970-01-02","other":"test"}`)

	// A missing field becomes null, as Connect's map put does.
	r = rec(schemaless(t, `{"other":"test"}`))
	apply(t, c, r)
	wantJSON(t, "missing field", r.Value, `{"other":"test","ts":null}`)

	// testWithSchemaFieldConversion.
	st := `{"type":"struct","name":"s","fields":[{"field":"ts","type":"int64","name":"org.apache.kafka.connect.data.Timestamp","version":1},{"field":"other","type":"string"}]}`
	r = rec(typed(t, st, `{"ts":86401234,"other":"test"}`))
	apply(t, one(t, tsValue, "target.type", "Date", "field", "ts"), r)
	wantSchema(t, "value", r.Value, "struct{ts org.apache.kafka.connect.data.Date int32, other string}")
	wantJSON(t, "value", r.Value, `{"ts":"1970-01-02","other":"test"}`)
	if r.Value.Schema().Name != "s" {
		t.Error("struct name lost")
	}

	// A typed struct without the field passes unchanged.
	in := typed(t, st, `{"ts":86401234,"other":"test"}`)
	r = rec(in)
	apply(t, one(t, tsValue, "target.type", "Date", "field", "nope"), r)
	if r.Value.Schema() != in.Schema() {
		t.Error("a struct without the field changed schema")
	}
}

// testWithSchemaFieldConversion_Micros/_Nanos/_Seconds and
// testSchemalessStringToUnix_*: precision in and out, losing what is
// below a millisecond as Connect does.
func TestTimestampConverterPrecision(t *testing.T) {
	st := `{"type":"struct","fields":[{"field":"ts","type":"int64"}]}`
	for _, tc := range []struct {
		precision string
		in        string
		want      string
	}{
		{"microseconds", "86401234123", `{"ts":"1970-01-02T00:00:01.234Z"}`},
		{"nanoseconds", "86401234123456", `{"ts":"1970-01-02T00:00:01.234Z"}`},
		{"seconds", "86401", `{"ts":"1970-01-02T00:00:01Z"}`},
	} {
		r := rec(typed(t, st, `{"ts":`+tc.in+`}`))
		apply(t, one(t, tsValue, "target.type", "Timestamp", "field", "ts", "unix.precision", tc.precision), r)
		wantJSON(t, tc.precision, r.Value, tc.want)
	}
	for precision, want := range map[string]string{"microseconds": "86401234000", "nanoseconds": "86401234000000", "seconds": "86401", "milliseconds": "86401234"} {
		r := rec(record.String(datePlusTimeString))
		apply(t, one(t, tsValue, "target.type", "unix", "unix.precision", precision, "format", stringDateFmt), r)
		wantJSON(t, "string to unix "+precision, r.Value, want)
	}
	// Java's TimeUnit truncates toward zero.
	r := rec(record.Timestamp(time.UnixMilli(-1500).UTC()))
	apply(t, one(t, tsValue, "target.type", "unix", "unix.precision", "seconds"), r)
	wantJSON(t, "-1.5 s to seconds", r.Value, "-1")
	// Before the epoch, Date and Time take the UTC calendar day.
	r = rec(record.Timestamp(time.UnixMilli(-1).UTC()))
	apply(t, one(t, tsValue, "target.type", "Date"), r)
	wantJSON(t, "-1 ms to Date", r.Value, `"1969-12-31"`)
	r = rec(record.Timestamp(time.UnixMilli(-1).UTC()))
	apply(t, one(t, tsValue, "target.type", "Time"), r)
	wantJSON(t, "-1 ms to Time", r.Value, `"23:59:59.999"`)
	// Debezium's MicroTimestamp is read as the instant it is.
	dbz := typed(t, `{"type":"int64","name":"io.debezium.time.MicroTimestamp"}`, "86401234567")
	r = rec(dbz)
	apply(t, one(t, tsValue, "target.type", "unix"), r)
	wantJSON(t, "MicroTimestamp to unix ms", r.Value, "86401234")
}

func TestTimestampConverterKey(t *testing.T) {
	c := one(t, tsKey, "target.type", "Timestamp")
	r := keyed(datePlusTime, schemaless(t, `{"v":1}`))
	apply(t, c, r)
	wantJSON(t, "key", r.Key, `"1970-01-02T00:00:01.234Z"`)
	if r.Key.Schema() != nil || !c.NeedsKey() {
		t.Error("key transform: schema or NeedsKey wrong")
	}
}

func TestTimestampConverterBadRecords(t *testing.T) {
	for _, tc := range []struct {
		settings []string
		value    record.Value
		msg      string
	}{
		{[]string{"target.type", "Timestamp", "field", "ts"}, schemaless(t, `{"ts":"2024-01-02"}`), "needs a SimpleDateFormat pattern"},
		{[]string{"target.type", "Timestamp", "field", "ts", "format", "yyyy-MM-dd"}, schemaless(t, `{"ts":"02.01.2024"}`), "does not match pattern"},
		{[]string{"target.type", "Timestamp", "field", "ts"}, schemaless(t, `{"ts":1.5}`), "must be an integer"},
		{[]string{"target.type", "Timestamp", "field", "ts"}, schemaless(t, `{"ts":true}`), "a boolean is not a timestamp"},
		{[]string{"target.type", "Timestamp", "field", "ts"}, typed(t, `{"type":"struct","fields":[{"field":"ts","type":"int32"}]}`, `{"ts":5}`), "int32 does not correspond to a known timestamp type"},
	} {
		err := applyErr(t, one(t, tsValue, tc.settings...), rec(tc.value))
		contains(t, "error", err.Error(), tc.msg, "TimestampConverter$Value")
		if fieldOf(err) != "ts" {
			t.Errorf("error %v names field %q, want ts", err, fieldOf(err))
		}
	}
}

func TestTimestampConverterConfig(t *testing.T) {
	checkConfigErrors(t, tsValue, []configCase{
		{nil, "transforms.x.target.type", "missing required"},                                     // testConfigNoTargetType
		{[]string{"target.type", "invalid"}, "transforms.x.target.type", "must be one of string"}, // testConfigInvalidTargetType
		{[]string{"target.type", "timestamp"}, "transforms.x.target.type", "must be one of"},      // case matters, as in Connect
		{[]string{"target.type", "unix", "unix.precision", "invalid"}, "transforms.x.unix.precision", "must be one of seconds"},
		{[]string{"target.type", "string"}, "transforms.x.format", "needs a SimpleDateFormat pattern"}, // testConfigMissingFormat
		{[]string{"target.type", "string", "format", "bad-format"}, "transforms.x.format", "illegal pattern character 'b'"},
		{[]string{"target.type", "string", "format", "yyyy-ww"}, "transforms.x.format", "not supported by txsink"},
	})
	one(t, tsValue, "target.type", "unix", "unix.precision", "seconds") // testConfigValidUnixPrecision
}
