package integration

// The records of the format tests: for each of Avro, Protobuf and JSON
// Schema, two versions of one subject (the second adds a field with a
// default), a record per sequence number that covers every type the
// converter maps, encoded by the format's own library (twmb/avro,
// protocompile + dynamicpb + proto.Marshal, encoding/json) and framed with
// franz-go's sr.ConfluentHeader, and what each column must hold for it, as
// typed values (see fval). Everything is a function of the sequence number,
// so the check re-derives what was produced.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Typed values a column is compared as (fval): numbers exactly as
// rationals, instants as UTC instants, times of day and durations as
// durations, JSON as a canonical tree whose numbers are exact rationals.
type (
	fnum   string // big.Rat.RatString of the number
	fbin   string // hex of the bytes
	finst  string // the instant, UTC, RFC 3339 with nanoseconds
	fday   string // YYYY-MM-DD
	ftod   time.Duration
	fdur   time.Duration
	fjson  string // canonical JSON (see canonJSON)
	fuuid  string // canonical lower-case text
	ftext  string
	fbool  bool
	farray string // JSON array of the element texts
)

// fcol is a column of a format test table.
type fcol struct {
	name string
	pg   string // PostgreSQL type
	ch   string // ClickHouse type on 18.16 (no DateTime64, Map, Bool)
	chV2 string // ClickHouse type on servers that have them ("" = ch)
	kind colKind
}

type colKind int

const (
	kNum colKind = iota
	kText
	kBin
	kInst
	kDay
	kTOD
	kDur
	kJSON
	kUUID
	kBool
	kArr
)

// format is one Schema Registry format under test.
type format struct {
	name      string
	converter string
	cols      []fcol
	// register registers the subject's two versions; the returned encoder
	// frames seq's record with the id of its version.
	register func(t testing.TB, reg schemaRegistrar, subject string) func(seq int, id string) []byte
	// want is what each column must hold for seq's record (nil: NULL).
	want func(seq int, id string) map[string]any
}

// schemaRegistrar registers a schema and returns its id.
type schemaRegistrar interface {
	Register(t testing.TB, subject string, schema sr.Schema) int
}

// v2 says which schema version seq's record is written with: two of
// three records use the second version, interleaved with the first.
func v2(seq int) bool { return seq%3 != 0 }

func rngFor(seq int, salt uint64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seq), salt)) }

func ratNum(r *big.Rat) fnum { return fnum(r.RatString()) }
func intNum(n int64) fnum    { return fnum(strconv.FormatInt(n, 10)) }
func uintNum(n uint64) fnum  { return fnum(strconv.FormatUint(n, 10)) }
func floatNum(f float64) fnum {
	return fnum(new(big.Rat).SetFloat64(f).RatString())
}
func decNum(unscaled *big.Int, scale int) fnum {
	return ratNum(new(big.Rat).SetFrac(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
}
func instOf(t time.Time) finst { return finst(t.UTC().Format(time.RFC3339Nano)) }

// randUnscaled returns a random integer of at most digits digits, either sign.
func randUnscaled(r *rand.Rand, digits int) *big.Int {
	n := new(big.Int)
	for range digits {
		n.Mul(n, big.NewInt(10))
		n.Add(n, big.NewInt(r.Int64N(10)))
	}
	if r.IntN(2) == 0 {
		n.Neg(n)
	}
	return n
}

func randText(r *rand.Rand, prefix string) string {
	// Quotes, backslashes and non-ASCII text exercise every JSON escape
	// path of the sinks.
	parts := []string{"plain", `q"uote`, `back\slash`, "héllo", "日本", "tab\tnl\n", "emoji 🎉"}
	return prefix + parts[r.IntN(len(parts))] + strconv.Itoa(r.IntN(1000))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randUUID(r *rand.Rand) string {
	b := randBytes(r, 16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Instants between 1900 and 2100 (ClickHouse's DateTime64 range starts in 1900).
const (
	minMillis = -2208988800000
	maxMillis = 4102444800000
)

func mustJSON(v any) fjson {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	c, err := canonJSON(b)
	if err != nil {
		panic(err)
	}
	return c
}

// canonJSON parses JSON text and writes it back with sorted keys and
// every number as its exact rational, so that 1.50, 1.5 and 15e-1 compare
// equal and no number goes through a float.
func canonJSON(b []byte) (fjson, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: %q", err, b)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case json.Number:
			r, ok := new(big.Rat).SetString(string(x))
			if !ok {
				return "bad number " + string(x)
			}
			return map[string]string{"#num": r.RatString()}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	return fjson(out), err
}

func textArray(s []string) farray {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s)
	return farray(b)
}

// ---- Avro ----

const avroEventV1 = `{"type":"record","name":"Event","namespace":"e2e","fields":[
 {"name":"id","type":"string"},
 {"name":"seq","type":"long"},
 {"name":"i32","type":"int"},
 {"name":"f32","type":"float"},
 {"name":"f64","type":"double"},
 {"name":"flag","type":"boolean"},
 {"name":"bin","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"Hash","size":4}},
 {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"attrs","type":{"type":"map","values":"long"}},
 {"name":"opt","type":["null","string"],"default":null},
 {"name":"addr","type":{"type":"record","name":"Address","fields":[{"name":"city","type":"string"},{"name":"zip","type":["null","int"]}]}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":3}},
 {"name":"big","type":{"type":"fixed","name":"Big","size":16,"logicalType":"decimal","precision":38,"scale":6}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsus","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"ltsms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"ltsus","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}}%s
]}`

// avroEventV2 adds a field with a default.
var avroEventV2 = fmt.Sprintf(avroEventV1, `,
 {"name":"note","type":"string","default":"none"}`)

var avroEventV1Text = fmt.Sprintf(avroEventV1, "")

var avroFormat = format{
	name:      "avro",
	converter: "io.confluent.connect.avro.AvroConverter",
	cols: []fcol{
		{"id", "text NOT NULL", "String", "", kText},
		{"seq", "bigint", "Int64", "", kNum},
		{"i32", "integer", "Int32", "", kNum},
		{"f32", "real", "Float32", "", kNum},
		{"f64", "double precision", "Float64", "", kNum},
		{"flag", "boolean", "UInt8", "Bool", kBool},
		{"bin", "bytea", "String", "", kBin},
		{"fx", "bytea", "FixedString(4)", "", kBin},
		{"color", "e2e_color", "Enum8('RED' = 1, 'GREEN' = 2, 'BLUE' = 3)", "", kText},
		{"tags", "text[]", "Array(String)", "", kArr},
		{"attrs", "jsonb", "String", "Map(String, Int64)", kJSON},
		{"opt", "text", "Nullable(String)", "", kText},
		{"addr", "jsonb", "String", "", kJSON},
		{"amount", "numeric(12,3)", "Decimal(12, 3)", "", kNum},
		{"big", "numeric(38,6)", "Decimal(38, 6)", "", kNum},
		{"day", "date", "Date", "", kDay},
		{"tms", "time", "String", "", kTOD},
		{"tus", "time", "String", "", kTOD},
		{"tsms", "timestamptz", "String", "DateTime64(3, 'UTC')", kInst},
		{"tsus", "timestamptz", "String", "DateTime64(6, 'UTC')", kInst},
		{"ltsms", "timestamp", "String", "DateTime64(3, 'UTC')", kInst},
		{"ltsus", "timestamp", "String", "DateTime64(6, 'UTC')", kInst},
		{"uid", "uuid", "UUID", "", kUUID},
		{"note", "text", "Nullable(String)", "", kText},
	},
}

// avroRecord returns seq's record as the Avro library takes it (native)
// and as the columns must hold it (want).
func avroRecord(seq int, id string) (native, want map[string]any) {
	r := rngFor(seq, 1)
	i32 := int32(r.Uint32())
	f32 := float32(r.NormFloat64() * 1e3)
	f64 := r.NormFloat64() * 1e9
	bin := randBytes(r, r.IntN(20))
	fx := randBytes(r, 4)
	color := []string{"RED", "GREEN", "BLUE"}[seq%3]
	var tags []string
	for i := range r.IntN(4) {
		tags = append(tags, randText(r, "t"+strconv.Itoa(i)))
	}
	attrs := map[string]any{}
	attrsWant := map[string]any{}
	for i := range r.IntN(4) {
		v := int64(r.Uint64()) // beyond 2^53: JSON numbers must stay exact
		k := "k" + strconv.Itoa(i)
		attrs[k], attrsWant[k] = v, json.Number(strconv.FormatInt(v, 10))
	}
	var opt any
	if seq%5 != 0 {
		opt = randText(r, "o")
	}
	city := randText(r, "city ")
	var zip any
	if seq%4 != 0 {
		zip = int32(r.IntN(100000))
	}
	amount := randUnscaled(r, 12)
	bigU := randUnscaled(r, 38)
	days := r.IntN(47000) // 1970 … 2098: ClickHouse's Date starts in 1970
	day := time.Unix(0, 0).UTC().AddDate(0, 0, days)
	tms := time.Duration(r.IntN(86400000)) * time.Millisecond
	tus := time.Duration(r.Int64N(86400000000)) * time.Microsecond
	ms := func() time.Time { return time.UnixMilli(minMillis + r.Int64N(maxMillis-minMillis)).UTC() }
	us := func() time.Time { return time.UnixMicro(minMillis*1000 + r.Int64N((maxMillis-minMillis)*1000)).UTC() }
	tsms, tsus, ltsms, ltsus := ms(), us(), ms(), us()
	uid := randUUID(r)
	native = map[string]any{
		"id": id, "seq": int64(seq), "i32": i32, "f32": f32, "f64": f64, "flag": seq%2 == 0,
		"bin": bin, "fx": fx, "color": color, "tags": anySlice(tags), "attrs": attrs, "opt": opt,
		"addr":   map[string]any{"city": city, "zip": zip},
		"amount": new(big.Rat).SetFrac(amount, big.NewInt(1000)),
		"big":    new(big.Rat).SetFrac(bigU, new(big.Int).Exp(big.NewInt(10), big.NewInt(6), nil)),
		"day":    day, "tms": tms, "tus": tus, "tsms": tsms, "tsus": tsus, "ltsms": ltsms, "ltsus": ltsus, "uid": uid,
	}
	want = map[string]any{
		"id": ftext(id), "seq": intNum(int64(seq)), "i32": intNum(int64(i32)), "f32": floatNum(float64(f32)),
		"f64": floatNum(f64), "flag": fbool(seq%2 == 0), "bin": fbin(hex.EncodeToString(bin)), "fx": fbin(hex.EncodeToString(fx)),
		"color": ftext(color), "tags": textArray(tags), "attrs": mustJSON(attrsWant),
		"addr":   mustJSON(map[string]any{"city": city, "zip": zip}),
		"amount": decNum(amount, 3), "big": decNum(bigU, 6), "day": fday(day.Format(time.DateOnly)),
		"tms": ftod(tms), "tus": ftod(tus), "tsms": instOf(tsms), "tsus": instOf(tsus), "ltsms": instOf(ltsms), "ltsus": instOf(ltsus),
		"uid": fuuid(uid), "opt": nil, "note": nil,
	}
	if opt != nil {
		want["opt"] = ftext(opt.(string))
	}
	if v2(seq) {
		note := randText(r, "note ")
		native["note"], want["note"] = note, ftext(note)
	}
	return native, want
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// avroEncoder registers the two versions (v1Text, v2Text) under subject
// and returns the encoder of seq's record with its version's id.
func avroEncoder(t testing.TB, reg schemaRegistrar, subject, v1Text, v2Text string) func(int, string) []byte {
	t.Helper()
	s1, err := avro.Parse(v1Text)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := avro.Parse(v2Text)
	if err != nil {
		t.Fatal(err)
	}
	id1 := reg.Register(t, subject, sr.Schema{Schema: v1Text, Type: sr.TypeAvro})
	id2 := reg.Register(t, subject, sr.Schema{Schema: v2Text, Type: sr.TypeAvro})
	return func(seq int, id string) []byte {
		native, _ := avroRecord(seq, id)
		s, sid := s1, id1
		if v2(seq) {
			s, sid = s2, id2
		}
		b, err := sr.Encode(native, &sr.ConfluentHeader{}, sid, nil, func(v any) ([]byte, error) { return s.Encode(v) })
		if err != nil {
			panic(fmt.Sprintf("avro encode seq %d: %v", seq, err))
		}
		return b
	}
}

func init() {
	avroFormat.register = func(t testing.TB, reg schemaRegistrar, subject string) func(int, string) []byte {
		return avroEncoder(t, reg, subject, avroEventV1Text, avroEventV2)
	}
	avroFormat.want = func(seq int, id string) map[string]any { _, w := avroRecord(seq, id); return w }
}

// ---- Protobuf ----

const protoEvent = `syntax = "proto3";
package e2e;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 2; }
message Event {
  string id = 1; int64 seq = 2;
  int32 i32 = 3; sint32 s32 = 4; sfixed32 sf32 = 5; sint64 s64 = 6; sfixed64 sf64 = 7;
  uint32 u32 = 8; fixed32 f32x = 9; uint64 u64 = 10; fixed64 f64x = 11;
  float fl = 12; double db = 13; bool b = 14; bytes by = 15;
  Color color = 16;
  Item item = 17;
  repeated string tags = 18;
  repeated Item items = 19;
  map<string, int64> counts = 20;
  oneof pay { string card = 21; int64 points = 22; }
  google.protobuf.Timestamp at = 23;
  google.protobuf.Duration took = 24;
  google.protobuf.Int64Value maybe_int = 25;
  google.protobuf.StringValue maybe_str = 26;%s
  message Item { string name = 1; int32 qty = 2; }
}
`

var (
	protoEventV1 = fmt.Sprintf(protoEvent, "")
	// protoEventV2 adds a field (proto3: its default is the empty string).
	protoEventV2 = fmt.Sprintf(protoEvent, "\n  string note = 27;")
)

var protobufFormat = format{
	name:      "protobuf",
	converter: "io.confluent.connect.protobuf.ProtobufConverter",
	cols: []fcol{
		{"id", "text NOT NULL", "String", "", kText},
		{"seq", "bigint", "Int64", "", kNum},
		{"i32", "integer", "Int32", "", kNum},
		{"s32", "integer", "Int32", "", kNum},
		{"sf32", "integer", "Int32", "", kNum},
		{"s64", "bigint", "Int64", "", kNum},
		{"sf64", "bigint", "Int64", "", kNum},
		{"u32", "bigint", "UInt32", "", kNum},
		{"f32x", "bigint", "UInt32", "", kNum},
		{"u64", "numeric(20,0)", "UInt64", "", kNum},
		{"f64x", "numeric(20,0)", "UInt64", "", kNum},
		{"fl", "real", "Float32", "", kNum},
		{"db", "double precision", "Float64", "", kNum},
		{"b", "boolean", "UInt8", "Bool", kBool},
		{"by", "bytea", "String", "", kBin},
		{"color", "text", "Enum8('RED' = 0, 'GREEN' = 1, 'BLUE' = 2)", "", kText},
		{"item", "jsonb", "Nullable(String)", "", kJSON},
		{"tags", "text[]", "Array(String)", "", kArr},
		{"items", "jsonb", "String", "", kJSON},
		{"counts", "jsonb", "String", "Map(String, Int64)", kJSON},
		{"pay", "jsonb", "Nullable(String)", "", kJSON},
		{"at", "timestamptz", "String", "DateTime64(6, 'UTC')", kInst},
		{"took", "interval", "Int64", "", kDur},
		{"maybe_int", "bigint", "Nullable(Int64)", "", kNum},
		{"maybe_str", "text", "Nullable(String)", "", kText},
		{"note", "text", "Nullable(String)", "", kText},
	},
}

// protoRecord returns seq's record as protojson text (which dynamicpb
// reads) and as the columns must hold it.
func protoRecord(seq int, id string) (pj map[string]any, want map[string]any) {
	r := rngFor(seq, 2)
	i32, s32, sf32 := int32(r.Uint32()), int32(r.Uint32()), int32(r.Uint32())
	s64, sf64 := int64(r.Uint64()), int64(r.Uint64())
	u32, f32x := r.Uint32(), r.Uint32()
	u64, f64x := r.Uint64()|1<<63, r.Uint64() // u64 above 2^63-1
	fl, db := float32(r.NormFloat64()*1e6), r.NormFloat64()*1e-3
	b := seq%2 == 1
	by := randBytes(r, 1+r.IntN(16))
	color := []string{"RED", "GREEN", "BLUE"}[seq%3]
	pj = map[string]any{
		"id": id, "seq": strconv.Itoa(seq), "i32": i32, "s32": s32, "sf32": sf32,
		"s64": strconv.FormatInt(s64, 10), "sf64": strconv.FormatInt(sf64, 10), "u32": u32, "f32x": f32x,
		"u64": strconv.FormatUint(u64, 10), "f64x": strconv.FormatUint(f64x, 10), "fl": fl, "db": db, "b": b,
		"by": base64.StdEncoding.EncodeToString(by), "color": color,
	}
	want = map[string]any{
		"id": ftext(id), "seq": intNum(int64(seq)), "i32": intNum(int64(i32)), "s32": intNum(int64(s32)),
		"sf32": intNum(int64(sf32)), "s64": intNum(s64), "sf64": intNum(sf64), "u32": uintNum(uint64(u32)),
		"f32x": uintNum(uint64(f32x)), "u64": uintNum(u64), "f64x": uintNum(f64x), "fl": floatNum(float64(fl)),
		"db": floatNum(db), "b": fbool(b), "by": fbin(hex.EncodeToString(by)), "color": ftext(color),
		"item": nil, "pay": nil, "maybe_int": nil, "maybe_str": nil, "note": nil,
	}
	item := func() (map[string]any, map[string]any) {
		name, qty := randText(r, "item "), int32(r.IntN(1000))
		return map[string]any{"name": name, "qty": qty}, map[string]any{"name": name, "qty": qty}
	}
	if seq%7 != 0 {
		p, w := item()
		pj["item"], want["item"] = p, mustJSON(w)
	}
	var tags []string
	for range r.IntN(4) {
		tags = append(tags, randText(r, "tag "))
	}
	pj["tags"], want["tags"] = tags, textArray(tags)
	items, itemsWant := []any{}, []any{}
	for range r.IntN(3) {
		p, w := item()
		items, itemsWant = append(items, p), append(itemsWant, w)
	}
	pj["items"], want["items"] = items, mustJSON(itemsWant)
	counts, countsWant := map[string]any{}, map[string]any{}
	for i := range r.IntN(4) {
		v := int64(r.Uint64())
		k := "c" + strconv.Itoa(i)
		counts[k], countsWant[k] = strconv.FormatInt(v, 10), json.Number(strconv.FormatInt(v, 10))
	}
	pj["counts"], want["counts"] = counts, mustJSON(countsWant)
	switch seq % 3 {
	case 1:
		card := randText(r, "card ")
		pj["card"], want["pay"] = card, mustJSON(map[string]any{"card": card, "points": nil})
	case 2:
		pts := int64(r.Uint64())
		pj["points"], want["pay"] = strconv.FormatInt(pts, 10), mustJSON(map[string]any{"card": nil, "points": json.Number(strconv.FormatInt(pts, 10))})
	}
	// Microseconds: PostgreSQL keeps no finer instants.
	at := time.UnixMicro(minMillis*1000 + r.Int64N((maxMillis-minMillis)*1000)).UTC()
	pj["at"], want["at"] = at.Format(time.RFC3339Nano), instOf(at)
	// Whole milliseconds: ClickHouse takes a duration as Int64 milliseconds.
	took := time.Duration(r.Int64N(10*86400*1000)-5*86400*1000) * time.Millisecond
	pj["took"], want["took"] = strconv.FormatFloat(took.Seconds(), 'f', -1, 64)+"s", fdur(took)
	if seq%4 != 0 {
		v := int64(r.Uint64())
		pj["maybe_int"], want["maybe_int"] = strconv.FormatInt(v, 10), intNum(v)
	}
	if seq%4 != 1 {
		s := randText(r, "")
		pj["maybe_str"], want["maybe_str"] = s, ftext(s)
	}
	if v2(seq) {
		note := randText(r, "note ")
		pj["note"], want["note"] = note, ftext(note)
	}
	return pj, want
}

// compileProto compiles schema text with the well-known types and returns
// its first message.
func compileProto(t testing.TB, schema string) protoreflect.MessageDescriptor {
	t.Helper()
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"event.proto": schema})})}
	files, err := comp.Compile(context.Background(), "event.proto")
	if err != nil {
		t.Fatal(err)
	}
	return files[0].Messages().Get(0)
}

func init() {
	protobufFormat.register = func(t testing.TB, reg schemaRegistrar, subject string) func(int, string) []byte {
		md1, md2 := compileProto(t, protoEventV1), compileProto(t, protoEventV2)
		id1 := reg.Register(t, subject, sr.Schema{Schema: protoEventV1, Type: sr.TypeProtobuf})
		id2 := reg.Register(t, subject, sr.Schema{Schema: protoEventV2, Type: sr.TypeProtobuf})
		return func(seq int, id string) []byte {
			pj, _ := protoRecord(seq, id)
			md, sid := md1, id1
			if v2(seq) {
				md, sid = md2, id2
			}
			text, err := json.Marshal(pj)
			if err != nil {
				panic(err)
			}
			m := dynamicpb.NewMessage(md)
			if err := protojson.Unmarshal(text, m); err != nil {
				panic(fmt.Sprintf("protojson seq %d: %v: %s", seq, err, text))
			}
			b, err := sr.Encode(m, &sr.ConfluentHeader{}, sid, []int{0}, func(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) })
			if err != nil {
				panic(err)
			}
			return b
		}
	}
	protobufFormat.want = func(seq int, id string) map[string]any { _, w := protoRecord(seq, id); return w }
}

// ---- JSON Schema ----

// jsonSchemaEvent is a closed content model (additionalProperties false):
// adding an optional property to it is BACKWARD-compatible, which a real
// registry checks (to an open model it is not: any value of that name may
// be in the old data).
const jsonSchemaEvent = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","title":"e2e.Event","additionalProperties":false,"properties":{
 "id":{"type":"string"},
 "seq":{"type":"integer"},
 "n32":{"type":"integer","connect.type":"int32"},
 "num":{"type":"number"},
 "flag":{"type":"boolean"},
 "dec":{"type":"number","title":"org.apache.kafka.connect.data.Decimal","connect.parameters":{"scale":"2"}},
 "day":{"type":"integer","title":"org.apache.kafka.connect.data.Date"},
 "tod":{"type":"integer","title":"org.apache.kafka.connect.data.Time"},
 "ts":{"type":"integer","title":"org.apache.kafka.connect.data.Timestamp"},
 "sdate":{"type":"string","format":"date"},
 "sts":{"type":"string","format":"date-time"},
 "tags":{"type":"array","items":{"type":"string"}},
 "obj":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]},
 "attrs":{"type":"object","additionalProperties":{"type":"integer"}},
 "opt":{"oneOf":[{"type":"null"},{"type":"string"}]},
 "bin":{"type":"string","connect.type":"bytes"}%s
},"required":["id","seq","n32","num","flag","dec","day","tod","ts","sdate","sts","tags","obj","attrs","bin"]}`

var (
	jsonSchemaV1 = fmt.Sprintf(jsonSchemaEvent, "")
	// jsonSchemaV2 adds a property with a default.
	jsonSchemaV2 = fmt.Sprintf(jsonSchemaEvent, `,
 "note":{"type":"string","default":"none"}`)
)

var jsonSchemaFormat = format{
	name:      "jsonschema",
	converter: "io.confluent.connect.json.JsonSchemaConverter",
	cols: []fcol{
		{"id", "text NOT NULL", "String", "", kText},
		{"seq", "bigint", "Int64", "", kNum},
		{"n32", "integer", "Int32", "", kNum},
		{"num", "double precision", "Float64", "", kNum},
		{"flag", "boolean", "UInt8", "Bool", kBool},
		{"dec", "numeric(14,2)", "Decimal(14, 2)", "", kNum},
		{"day", "date", "Date", "", kDay},
		{"tod", "time", "String", "", kTOD},
		{"ts", "timestamptz", "String", "DateTime64(3, 'UTC')", kInst},
		{"sdate", "date", "Date", "", kDay},
		{"sts", "timestamptz", "String", "DateTime64(3, 'UTC')", kInst},
		{"tags", "text[]", "Array(String)", "", kArr},
		{"obj", "jsonb", "String", "", kJSON},
		{"attrs", "jsonb", "String", "Map(String, Int64)", kJSON},
		{"opt", "text", "Nullable(String)", "", kText},
		{"bin", "bytea", "String", "", kBin},
		{"note", "text", "Nullable(String)", "", kText},
	},
}

// jsonSchemaRecord returns seq's record as JSON text and as the columns
// must hold it.
func jsonSchemaRecord(seq int, id string) ([]byte, map[string]any) {
	r := rngFor(seq, 3)
	n32 := int32(r.Uint32())
	num := r.NormFloat64() * 1e5
	dec := randUnscaled(r, 14)
	days := r.IntN(47000)
	day := time.Unix(0, 0).UTC().AddDate(0, 0, days)
	tod := time.Duration(r.IntN(86400000)) * time.Millisecond
	ts := time.UnixMilli(minMillis + r.Int64N(maxMillis-minMillis)).UTC()
	sday := time.Unix(0, 0).UTC().AddDate(0, 0, r.IntN(47000))
	zone := time.FixedZone("", (r.IntN(27)-12)*3600)
	sts := time.UnixMilli(r.Int64N(maxMillis)).In(zone)
	var tags []string
	for range r.IntN(4) {
		tags = append(tags, randText(r, "tag "))
	}
	obj := map[string]any{"a": randText(r, "a ")}
	objWant := map[string]any{"a": obj["a"], "b": nil}
	if seq%6 != 0 {
		bv := int64(r.Uint64())
		obj["b"], objWant["b"] = json.Number(strconv.FormatInt(bv, 10)), json.Number(strconv.FormatInt(bv, 10))
	}
	attrs := map[string]any{}
	for i := range r.IntN(4) {
		attrs["a"+strconv.Itoa(i)] = json.Number(strconv.FormatInt(int64(r.Uint64()), 10))
	}
	bin := randBytes(r, r.IntN(12))
	doc := map[string]any{
		"id": id, "seq": seq, "n32": n32, "num": num, "flag": seq%2 == 0,
		"dec": json.Number(decText(dec, 2)),
		"day": days, "tod": tod.Milliseconds(), "ts": ts.UnixMilli(),
		"sdate": sday.Format(time.DateOnly), "sts": sts.Format(time.RFC3339Nano),
		"tags": textOrEmpty(tags), "obj": obj, "attrs": attrs,
		"bin": base64.StdEncoding.EncodeToString(bin),
	}
	want := map[string]any{
		"id": ftext(id), "seq": intNum(int64(seq)), "n32": intNum(int64(n32)), "num": floatNum(num),
		"flag": fbool(seq%2 == 0), "dec": decNum(dec, 2), "day": fday(day.Format(time.DateOnly)), "tod": ftod(tod),
		"ts": instOf(ts), "sdate": fday(sday.Format(time.DateOnly)), "sts": instOf(sts), "tags": textArray(tags),
		"obj": mustJSON(objWant), "attrs": mustJSON(attrs), "bin": fbin(hex.EncodeToString(bin)),
		"opt": nil, "note": nil,
	}
	switch seq % 5 {
	case 0: // absent
	case 1:
		doc["opt"] = nil
	default:
		s := randText(r, "opt ")
		doc["opt"], want["opt"] = s, ftext(s)
	}
	if v2(seq) {
		note := randText(r, "note ")
		doc["note"], want["note"] = note, ftext(note)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b, want
}

func textOrEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// decText is unscaled × 10^-scale as decimal text.
func decText(unscaled *big.Int, scale int) string {
	s := new(big.Int).Abs(unscaled).String()
	for len(s) <= scale {
		s = "0" + s
	}
	out := s[:len(s)-scale] + "." + s[len(s)-scale:]
	if unscaled.Sign() < 0 {
		out = "-" + out
	}
	return out
}

func init() {
	jsonSchemaFormat.register = func(t testing.TB, reg schemaRegistrar, subject string) func(int, string) []byte {
		id1 := reg.Register(t, subject, sr.Schema{Schema: jsonSchemaV1, Type: sr.TypeJSON})
		id2 := reg.Register(t, subject, sr.Schema{Schema: jsonSchemaV2, Type: sr.TypeJSON})
		return func(seq int, id string) []byte {
			doc, _ := jsonSchemaRecord(seq, id)
			sid := id1
			if v2(seq) {
				sid = id2
			}
			var h sr.ConfluentHeader
			b, err := h.AppendEncode(nil, sid, nil)
			if err != nil {
				panic(err)
			}
			return append(b, doc...)
		}
	}
	jsonSchemaFormat.want = func(seq int, id string) map[string]any { _, w := jsonSchemaRecord(seq, id); return w }
}

// ---- typed values read back ----

// fval turns what a database driver returned for a column of kind k
// (pgx's or clickhouse-go's Go value) into the typed value it is compared
// as.
func fval(k colKind, v any) (any, error) {
	v = deref(v)
	if v == nil {
		return nil, nil
	}
	switch k {
	case kText:
		return ftext(fmt.Sprint(v)), nil
	case kNum:
		r, err := ratOf(v)
		if err != nil {
			return nil, err
		}
		return ratNum(r), nil
	case kBool:
		switch x := v.(type) {
		case bool:
			return fbool(x), nil
		case uint8:
			return fbool(x != 0), nil
		}
	case kBin:
		switch x := v.(type) {
		case []byte:
			return fbin(hex.EncodeToString(x)), nil
		case string:
			return fbin(hex.EncodeToString([]byte(x))), nil
		}
	case kInst:
		switch x := v.(type) {
		case time.Time:
			return instOf(x), nil
		case string:
			t, err := time.Parse(time.RFC3339Nano, x)
			if err != nil {
				return nil, err
			}
			return instOf(t), nil
		}
	case kDay:
		if x, ok := v.(time.Time); ok {
			return fday(x.Format(time.DateOnly)), nil
		}
	case kTOD:
		switch x := v.(type) {
		case string:
			t, err := time.Parse("15:04:05.999999999", x)
			if err != nil {
				return nil, err
			}
			return ftod(t.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))), nil
		default:
			if us, ok := pgMicros(v); ok {
				return ftod(time.Duration(us) * time.Microsecond), nil
			}
		}
	case kDur:
		switch x := v.(type) {
		case int64:
			return fdur(time.Duration(x) * time.Millisecond), nil
		default:
			if d, ok := pgInterval(v); ok {
				return fdur(d), nil
			}
		}
	case kJSON:
		switch x := v.(type) {
		case string:
			return canonJSON([]byte(x))
		case []byte:
			return canonJSON(x)
		default:
			b, err := json.Marshal(x)
			if err != nil {
				return nil, err
			}
			return canonJSON(b)
		}
	case kUUID:
		switch x := v.(type) {
		case [16]byte:
			h := hex.EncodeToString(x[:])
			return fuuid(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]), nil
		case fmt.Stringer:
			return fuuid(strings.ToLower(x.String())), nil
		case string:
			return fuuid(strings.ToLower(x)), nil
		}
	case kArr:
		switch x := v.(type) {
		case []string:
			return textArray(x), nil
		case []any:
			s := make([]string, len(x))
			for i, e := range x {
				s[i] = fmt.Sprint(e)
			}
			return textArray(s), nil
		}
	}
	return nil, fmt.Errorf("cannot read %T (%v) as kind %d", v, v, k)
}

func ratOf(v any) (*big.Rat, error) {
	switch x := v.(type) {
	case int8:
		return new(big.Rat).SetInt64(int64(x)), nil
	case int16:
		return new(big.Rat).SetInt64(int64(x)), nil
	case int32:
		return new(big.Rat).SetInt64(int64(x)), nil
	case int64:
		return new(big.Rat).SetInt64(x), nil
	case uint8:
		return new(big.Rat).SetUint64(uint64(x)), nil
	case uint16:
		return new(big.Rat).SetUint64(uint64(x)), nil
	case uint32:
		return new(big.Rat).SetUint64(uint64(x)), nil
	case uint64:
		return new(big.Rat).SetUint64(x), nil
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("not finite: %v", x)
		}
		return new(big.Rat).SetFloat64(float64(x)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("not finite: %v", x)
		}
		return new(big.Rat).SetFloat64(x), nil
	}
	if r, ok := pgNumeric(v); ok {
		return r, nil
	}
	s := fmt.Sprint(v) // clickhouse-go's decimal.Decimal prints exactly
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%T %q is not a number", v, s)
	}
	return r, nil
}
