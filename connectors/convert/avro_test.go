package convert

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/connectors/record"
)

// avroAllTypes covers every Avro type and logical type the converter maps.
const avroAllTypes = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"qty","type":"int"},
 {"name":"small","type":{"type":"int","connect.type":"int16"}},
 {"name":"price","type":"float"},
 {"name":"ratio","type":"double"},
 {"name":"paid","type":"boolean"},
 {"name":"note","type":"string"},
 {"name":"blob","type":"bytes"},
 {"name":"hash","type":{"type":"fixed","name":"MD5","size":4}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"attrs","type":{"type":"map","values":"long"}},
 {"name":"maybe","type":["null","string"]},
 {"name":"maybe_not","type":["string","null"]},
 {"name":"either","type":["int","string",{"type":"record","name":"Point","fields":[{"name":"x","type":"int"}]}]},
 {"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"city","type":"string"},{"name":"zip","type":["null","int"]}]}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"big","type":{"type":"fixed","name":"Big","size":16,"logicalType":"decimal","precision":38,"scale":4}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"t_ms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"t_us","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"ts_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"ts_us","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"lts_ms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"lts_us","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}}
]}`

func avroAllTypesValue() map[string]any {
	bigUnscaled, _ := new(big.Int).SetString("-123456789012345678901234567890", 10)
	return map[string]any{
		"id": int64(1) << 40, "qty": int32(-7), "small": int32(300), "price": float32(1.5), "ratio": 0.25,
		"paid": true, "note": "héllo \"q\"", "blob": []byte{0, 1, 255}, "hash": []byte("abcd"),
		"status": "PAID", "tags": []any{"a", "b"}, "attrs": map[string]any{"k": int64(1)},
		"maybe": nil, "maybe_not": "x", "either": map[string]any{"shop.Point": map[string]any{"x": int32(3)}},
		"address": map[string]any{"city": "Oslo", "zip": int32(150)},
		"amount":  new(big.Rat).SetFrac64(12345, 100),
		"big":     new(big.Rat).SetFrac(bigUnscaled, big.NewInt(10000)),
		"day":     time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		"t_ms":    13*time.Hour + 14*time.Minute + 15*time.Second + 16*time.Millisecond,
		"t_us":    23*time.Hour + 59*time.Minute + 59*time.Second + 999999*time.Microsecond,
		"ts_ms":   time.Date(2024, 5, 6, 7, 8, 9, 10e6, time.UTC),
		"ts_us":   time.Date(1969, 12, 31, 23, 59, 59, 999999e3, time.UTC),
		"lts_ms":  time.Date(2024, 5, 6, 7, 8, 9, 123e6, time.UTC),
		"lts_us":  time.Date(2024, 5, 6, 7, 8, 9, 123456e3, time.UTC),
		"uid":     "0f8fad5b-d9cb-469f-a165-70867728950e",
	}
}

// avroFrame encodes v with the Avro library and frames it with franz-go's
// Confluent header.
func avroFrame(t testing.TB, schema string, id int, v any) []byte {
	t.Helper()
	s, err := avro.Parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sr.Encode(v, &sr.ConfluentHeader{}, id, nil, func(v any) ([]byte, error) { return s.Encode(v) })
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

func TestAvroAllTypes(t *testing.T) {
	reg := newTestRegistry(t)
	id, _ := reg.register("all", sr.Schema{Schema: avroAllTypes, Type: sr.TypeAvro})
	c := newConverter(t, AvroClass, reg.settings())
	v := convertOK(t, c, avroFrame(t, avroAllTypes, id, avroAllTypesValue()))

	want := map[string]string{
		"id":        "int:1099511627776",
		"qty":       "int:-7",
		"small":     "int:300",
		"price":     "float:1.5",
		"ratio":     "float:0.25",
		"paid":      "boolean:true",
		"note":      `string:"héllo \"q\""`,
		"blob":      `bytes:"AAH/"`,
		"hash":      `bytes:"YWJjZA=="`,
		"status":    `string:"PAID"`,
		"tags":      `array:["a","b"]`,
		"attrs":     `map:{"k":1}`,
		"maybe":     "null:null",
		"maybe_not": `string:"x"`,
		"either":    `struct:{"int":null,"string":null,"Point":{"x":3}}`,
		"address":   `struct:{"city":"Oslo","zip":150}`,
		"amount":    "decimal:123.45",
		"big":       "decimal:-12345678901234567890123456.7890",
		"day":       `date:"2024-02-29"`,
		"t_ms":      `time:"13:14:15.016"`,
		"t_us":      `time:"23:59:59.999999"`,
		"ts_ms":     `timestamp:"2024-05-06T07:08:09.01Z"`,
		"ts_us":     `timestamp:"1969-12-31T23:59:59.999999Z"`,
		"lts_ms":    `timestamp:"2024-05-06T07:08:09.123Z"`,
		"lts_us":    `timestamp:"2024-05-06T07:08:09.123456Z"`,
		"uid":       `string:"0f8fad5b-d9cb-469f-a165-70867728950e"`,
	}
	if v.Kind() != record.KindStruct || v.Len() != len(want) {
		t.Fatalf("got %#v, want a struct of %d fields", v, len(want))
	}
	for name, w := range want {
		f, ok := v.Get(name)
		if !ok {
			t.Errorf("field %s missing", name)
			continue
		}
		if got := f.GoString(); got != w {
			t.Errorf("field %s = %s, want %s", name, got, w)
		}
	}
	for _, name := range []string{"lts_ms", "lts_us"} {
		if f, _ := v.Get(name); !f.IsLocal() {
			t.Errorf("%s is not a local timestamp", name)
		}
	}
	if f, _ := v.Get("ts_ms"); f.IsLocal() {
		t.Error("ts_ms is a local timestamp")
	}
	if f, _ := v.Get("price"); !f.IsFloat32() {
		t.Error("price is not a float32")
	}
	wantSchema := map[string]string{
		"small":     "int16",
		"hash":      "shop.MD5 bytes",
		"status":    "shop.Status string",
		"maybe":     "optional string",
		"maybe_not": "optional string",
		"either":    "struct{int optional int32, string optional string, Point optional struct{x int32}}",
		"address":   "struct{city string, zip optional int32}",
		"amount":    "org.apache.kafka.connect.data.Decimal(scale=2) bytes",
		"day":       "org.apache.kafka.connect.data.Date int32",
		"t_ms":      "org.apache.kafka.connect.data.Time int32",
		"ts_us":     "org.apache.kafka.connect.data.Timestamp int64",
		"lts_ms":    "local-timestamp int64",
		"attrs":     "map<string,int64>",
		"tags":      "array<string>",
	}
	for name, w := range wantSchema {
		f := v.Schema().Field(name)
		if f == nil {
			t.Errorf("schema has no field %s", name)
			continue
		}
		if got := f.Schema.String(); got != w {
			t.Errorf("schema of %s = %s, want %s", name, got, w)
		}
	}
	if v.Schema().Name != "shop.Order" {
		t.Errorf("record schema name %q", v.Schema().Name)
	}
	// The schema is built once per id and shared by every record.
	v2 := convertOK(t, c, avroFrame(t, avroAllTypes, id, avroAllTypesValue()))
	if v2.Schema() != v.Schema() {
		t.Error("a second record of the same id got another schema")
	}
}

// Two versions of a subject in one topic: each record decodes with its
// own writer schema.
func TestAvroSchemaEvolution(t *testing.T) {
	reg := newTestRegistry(t)
	v1 := `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`
	v2 := `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":["null","int"],"default":null}]}`
	id1, ver1 := reg.register("user", sr.Schema{Schema: v1})
	id2, ver2 := reg.register("user", sr.Schema{Schema: v2})
	if id1 == id2 || ver1 == ver2 {
		t.Fatalf("want two versions, got ids %d %d versions %d %d", id1, id2, ver1, ver2)
	}
	c := newConverter(t, AvroClass, reg.settings())
	recs := [][]byte{
		avroFrame(t, v1, id1, map[string]any{"name": "ann"}),
		avroFrame(t, v2, id2, map[string]any{"name": "bob", "age": int32(41)}),
		avroFrame(t, v1, id1, map[string]any{"name": "cy"}),
	}
	want := []string{`struct:{"name":"ann"}`, `struct:{"name":"bob","age":41}`, `struct:{"name":"cy"}`}
	for i, r := range recs {
		if got := convertOK(t, c, r).GoString(); got != want[i] {
			t.Errorf("record %d = %s, want %s", i, got, want[i])
		}
	}
}

// A schema that references another subject's schema (Avro named types).
func TestAvroReferences(t *testing.T) {
	reg := newTestRegistry(t)
	addr := `{"type":"record","name":"Address","namespace":"geo","fields":[{"name":"city","type":"string"}]}`
	_, addrVer := reg.register("address", sr.Schema{Schema: addr})
	user := `{"type":"record","name":"User","fields":[{"name":"home","type":"geo.Address"},{"name":"work","type":["null","geo.Address"]}]}`
	id, _ := reg.register("user", sr.Schema{Schema: user, References: []sr.SchemaReference{reg.ref("geo.Address", "address", addrVer)}})
	var cache avro.SchemaCache
	if _, err := cache.Parse(addr); err != nil {
		t.Fatal(err)
	}
	us, err := cache.Parse(user)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := us.Encode(map[string]any{"home": map[string]any{"city": "Oslo"}, "work": map[string]any{"city": "Bergen"}})
	if err != nil {
		t.Fatal(err)
	}
	c := newConverter(t, AvroClass, reg.settings())
	got := convertOK(t, c, frame(t, id, nil, payload)).GoString()
	if want := `struct:{"home":{"city":"Oslo"},"work":{"city":"Bergen"}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// Connect's own names (Confluent's AvroData writes them), Debezium's time
// types and Connect's map of non-string keys.
func TestAvroConnectNames(t *testing.T) {
	reg := newTestRegistry(t)
	schema := `{"type":"record","name":"Row","fields":[
 {"name":"d","type":{"type":"bytes","connect.name":"org.apache.kafka.connect.data.Decimal","connect.parameters":{"scale":"3"}}},
 {"name":"dz_ts","type":{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}},
 {"name":"dz_date","type":{"type":"int","connect.name":"io.debezium.time.Date"}},
 {"name":"dz_zoned","type":{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}},
 {"name":"m","type":{"type":"array","items":{"type":"record","name":"MapEntry","namespace":"io.confluent.connect.avro","fields":[{"name":"key","type":"int"},{"name":"value","type":"string"}]}}}
]}`
	id, _ := reg.register("row", sr.Schema{Schema: schema})
	c := newConverter(t, AvroClass, reg.settings())
	v := convertOK(t, c, avroFrame(t, schema, id, map[string]any{
		"d": []byte{0x30, 0x39}, "dz_ts": int64(1_700_000_000_123_456), "dz_date": int32(19000),
		"dz_zoned": "2024-01-02T03:04:05+01:00",
		"m":        []any{map[string]any{"key": int32(2), "value": "two"}, map[string]any{"key": int32(1), "value": "one"}},
	}))
	want := `struct:{"d":12.345,"dz_ts":"2023-11-14T22:13:20.123456Z","dz_date":"2022-01-08","dz_zoned":"2024-01-02T03:04:05+01:00","m":[[2,"two"],[1,"one"]]}`
	if got := v.GoString(); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	if f, _ := v.Get("m"); f.Kind() != record.KindMap {
		t.Errorf("MapEntry array is %s, want a map", f.Kind())
	}
	if f := v.Schema().Field("dz_zoned"); f.Schema.Name != record.DebeziumZonedTimestamp {
		t.Errorf("dz_zoned schema name %q", f.Schema.Name)
	}
}

func TestAvroBadRecords(t *testing.T) {
	reg := newTestRegistry(t)
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"t","type":{"type":"int","logicalType":"time-millis"}}]}`
	id, _ := reg.register("r", sr.Schema{Schema: schema})
	c := newConverter(t, AvroClass, reg.settings())
	good := avroFrame(t, schema, id, map[string]any{"a": "hello", "t": int32(5)})
	unknown := reg.unknownID()
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"wrong magic", append([]byte{1}, good[1:]...), "wrong magic byte 0x01"},
		{"too short", good[:3], "3 bytes are too short"},
		{"truncated payload", good[:len(good)-3], "truncated Avro payload"},
		{"unknown id", frame(t, unknown, nil, good[5:]), "unknown schema id " + itoaTest(unknown)},
		{"invalid utf-8", frame(t, id, nil, []byte{4, 0xff, 0xfe, 0}), "not valid UTF-8"},
		{"time of day out of range", frame(t, id, nil, []byte{2, 'x', 1}), "outside 00:00-24:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Convert(context.Background(), "t", nil, tc.data, &Buffer{})
			if !errors.Is(err, record.ErrDecode) || errors.Is(err, record.ErrUnavailable) {
				t.Fatalf("err = %v, want a bad record (ErrDecode)", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	// A field error names the field.
	_, err := c.Convert(context.Background(), "t", nil, frame(t, id, nil, []byte{4, 0xff, 0xfe, 0}), &Buffer{})
	var fe *record.FieldError
	if !errors.As(err, &fe) || fe.Field != "a" {
		t.Errorf("err = %v, want it tied to field a", err)
	}
	// A Protobuf schema id read by the Avro converter is a bad record.
	pid, _ := reg.register("p", sr.Schema{Schema: `syntax = "proto3"; message M { int32 a = 1; }`, Type: sr.TypeProtobuf})
	if _, err := c.Convert(context.Background(), "t", nil, frame(t, pid, nil, []byte{8, 1}), &Buffer{}); !errors.Is(err, record.ErrDecode) || !strings.Contains(err.Error(), "not Avro") {
		t.Errorf("protobuf id: err = %v", err)
	}
	// Null is a tombstone, not an error.
	if v, err := c.Convert(context.Background(), "t", nil, nil, &Buffer{}); err != nil || !v.IsNull() {
		t.Errorf("nil data: %v, %v", v, err)
	}
}

func itoaTest(n int) string { return big.NewInt(int64(n)).String() }
