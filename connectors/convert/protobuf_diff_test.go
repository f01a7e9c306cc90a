package convert

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

// The differential tests: the decoder of protobuf_decode.go against the
// reference of protobuf_ref_test.go (dynamicpb, then the walk), on
// library-encoded random messages of several schemas, rewritten on the
// wire (fields shuffled, written twice, packed and unpacked, unknown
// fields, wrong wire types, messages merged, map entries reordered or
// incomplete) and corrupted. Both must give the same Values (schemas
// included, by pointer), or both fail, alike: a bad record, outside its
// domain (then with the same message) or not.

// protoP2 is proto2: required fields, defaults, closed enums, groups,
// unpacked repeated scalars, unchecked strings, extension ranges.
const protoP2 = `syntax = "proto2";
package p2;
import "google/protobuf/timestamp.proto";
enum Color { RED = 1; GREEN = 2; BLUE = 3; }
message Rec {
  required int32 id = 1;
  optional string name = 2 [default = "anon"];
  optional Color color = 3;
  repeated int32 plain = 4;
  repeated sint64 packed = 5 [packed = true];
  optional group Grp = 6 { optional int32 a = 7; repeated string b = 8; }
  repeated group Items = 9 { required string key = 10; optional bytes data = 11; }
  map<string, Color> colors = 12;
  map<sint32, Inner> inners = 13;
  optional Inner inner = 14;
  oneof choice { string text = 15; Inner msg = 16; fixed64 num = 17; }
  repeated string names = 18;
  optional bytes blob = 19 [default = "x\001"];
  optional double d = 20 [default = 1.5];
  optional google.protobuf.Timestamp at = 21;
  extensions 100 to 199;
}
message Inner { required string k = 1; optional int64 v = 2; repeated Inner2 more = 3; }
message Inner2 { optional float f = 1; optional bool b = 2; }
`

// protoP3 is proto3 with every kind of list and map key, the well-known
// types in lists, maps and oneofs, and a field number beyond the dense
// table.
const protoP3 = `syntax = "proto3";
package p3;
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "confluent/type/decimal.proto";
enum E { option allow_alias = true; E0 = 0; E1 = 1; ALIAS1 = 1; E_NEG = -1; E_BIG = 1000; }
message Coll {
  repeated bool bs = 1; repeated int32 i32s = 2; repeated int64 i64s = 3; repeated uint32 u32s = 4;
  repeated uint64 u64s = 5; repeated sint32 s32s = 6; repeated sint64 s64s = 7; repeated fixed32 f32s = 8;
  repeated fixed64 f64s = 9; repeated sfixed32 sf32s = 10; repeated sfixed64 sf64s = 11; repeated float fls = 12;
  repeated double dbs = 13; repeated E es = 14; repeated bytes bys = 15; repeated string ss = 16;
  repeated int32 unpacked = 17 [packed = false];
  map<int32, string> m_i32 = 18; map<int64, E> m_i64 = 19; map<uint32, bytes> m_u32 = 20;
  map<uint64, double> m_u64 = 21; map<sint32, Sub> m_s32 = 22; map<sint64, google.protobuf.Timestamp> m_s64 = 23;
  map<fixed32, float> m_f32 = 24; map<fixed64, bool> m_f64 = 25; map<sfixed32, google.protobuf.Int64Value> m_sf32 = 26;
  map<sfixed64, uint32> m_sf64 = 27; map<bool, Sub> m_b = 28; map<string, google.protobuf.Value> m_json = 29;
  repeated Sub subs = 30; repeated google.protobuf.Timestamp ats = 31; repeated google.protobuf.Duration durs = 32;
  repeated google.protobuf.StringValue strs = 33; repeated confluent.type.Decimal decs = 34;
  google.protobuf.Struct st = 35; google.protobuf.Value val = 36; google.protobuf.ListValue lv = 37;
  oneof o { Sub o_sub = 38; google.protobuf.Timestamp o_at = 39; string o_s = 40; E o_e = 41; bytes o_b = 42; }
  optional string opt_s = 43; optional E opt_e = 44; E e = 45; bytes by = 46;
  google.protobuf.BytesValue wb = 47; google.protobuf.BoolValue wbool = 48; google.protobuf.DoubleValue wd = 49;
  google.protobuf.UInt64Value wu64 = 50; google.protobuf.FloatValue wf = 51; google.protobuf.UInt32Value wu32 = 52;
  Sub sub = 53; map<string, string> m_ss = 54; google.protobuf.Duration took = 55;
  int32 far = 536870911;
}
message Sub { string name = 1; repeated int32 xs = 2; Sub2 deep = 3; map<string, Sub2> m = 4; oneof k { int32 a = 5; Sub2 b = 6; } }
message Sub2 { sint64 n = 1; repeated string tags = 2; }
`

// protoEd is edition 2023: implicit presence, expanded lists, a
// delimited (group-encoded) message, strings not checked as read.
const protoEd = `edition = "2023";
package ed;
message Ed {
  string s = 1;
  int32 implicit = 2 [features.field_presence = IMPLICIT];
  repeated int32 xs = 3 [features.repeated_field_encoding = EXPANDED];
  Inner inner = 4 [features.message_encoding = DELIMITED];
  repeated Inner inners = 5 [features.message_encoding = DELIMITED];
  string loose = 6 [features.utf8_validation = NONE];
  message Inner { int32 a = 1; string b = 2; }
}
`

// protoWide is a message of more than 64 fields, whose slots do not all
// fit the decoder's bit set.
var protoWide = func() string {
	var b strings.Builder
	b.WriteString("syntax = \"proto2\";\npackage wide;\nmessage In { optional int32 a = 1; required string r = 2; }\nmessage W {\n")
	kinds := []string{"optional int32", "optional string", "repeated sint64", "optional In", "optional bytes", "map<string, In>", "optional double", "repeated string"}
	for i := 1; i <= 70; i++ {
		k := kinds[i%len(kinds)]
		if i == 66 || i == 3 {
			k = "required int64"
		}
		if strings.HasPrefix(k, "map") {
			k = strings.TrimPrefix(k, "optional ")
		}
		fmt.Fprintf(&b, "  %s f%d = %d;\n", k, i, i)
	}
	b.WriteString("}\n")
	return b.String()
}()

type diffSchema struct {
	name string
	text string
	refs []regRef
}

var diffSchemas = []diffSchema{
	{"alltypes", protoAllTypes, []regRef{{Name: "common.proto", Type: sr.TypeProtobuf, Text: protoCommon}}},
	{"proto2", protoP2, nil},
	{"proto3", protoP3, nil},
	{"editions", protoEd, nil},
	{"bench", benchProto, nil},
	{"wide", protoWide, nil},
}

// diffRoots compiles a schema and returns the plans of its messages that
// a record may name (every message but map entries).
func diffRoots(t testing.TB, s diffSchema) []*protoPlan {
	t.Helper()
	ps, err := compileProto(&regSchema{ID: 1, Type: sr.TypeProtobuf, Text: s.text, Refs: s.refs})
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	var roots []*protoPlan
	var walk func(msgs protoreflect.MessageDescriptors, idx []int)
	walk = func(msgs protoreflect.MessageDescriptors, idx []int) {
		for i := 0; i < msgs.Len(); i++ {
			md := msgs.Get(i)
			at := append(slices.Clone(idx), i)
			if !md.IsMapEntry() {
				p, err := ps.message(at)
				if err != nil {
					t.Fatalf("%s %v: %v", s.name, at, err)
				}
				roots = append(roots, p)
			}
			walk(md.Messages(), at)
		}
	}
	walk(ps.file.Messages(), nil)
	return roots
}

// protoDiff decodes payload both ways and reports how they differ ("" if
// they do not). arena and sc are reused from call to call, as a Buffer is.
func protoDiff(p *protoPlan, payload []byte, arena *valueArena, sc *protoScratch) string {
	want, wantErr := p.refDecode(payload)
	arena.reset()
	got, err := p.decode(payload, arena, sc)
	switch {
	case (err == nil) != (wantErr == nil):
		return fmt.Sprintf("error %v, reference error %v", err, wantErr)
	case err != nil:
		for _, e := range []error{err, wantErr} {
			if !errors.Is(e, record.ErrDecode) || errors.Is(e, record.ErrUnavailable) {
				return fmt.Sprintf("%v is not a bad record", e)
			}
		}
		if errors.Is(err, errOutOfDomain) != errors.Is(wantErr, errOutOfDomain) {
			return fmt.Sprintf("error %v, reference error %v: not alike", err, wantErr)
		}
		if errors.Is(err, errOutOfDomain) && err.Error() != wantErr.Error() {
			return fmt.Sprintf("error %q, reference error %q", err, wantErr)
		}
		return ""
	}
	return diffValue("", got, want)
}

// diffValue compares two Values exactly: kinds, flags, schemas (the same
// pointers), contents, nil or empty bytes.
func diffValue(path string, got, want record.Value) string {
	if got.Kind() != want.Kind() {
		return fmt.Sprintf("%s: kind %s, want %s (%s vs %s)", path, got.Kind(), want.Kind(), got.GoString(), want.GoString())
	}
	if got.Schema() != want.Schema() {
		return fmt.Sprintf("%s: schema %p %s, want %p %s", path, got.Schema(), got.Schema(), want.Schema(), want.Schema())
	}
	if got.IsFloat32() != want.IsFloat32() || got.Schemaless() != want.Schemaless() || got.IsLocal() != want.IsLocal() {
		return fmt.Sprintf("%s: flags differ", path)
	}
	if want.Schemaless() {
		g, err1 := got.AppendJSON(nil)
		w, err2 := want.AppendJSON(nil)
		if !bytes.Equal(g, w) || (err1 == nil) != (err2 == nil) {
			return fmt.Sprintf("%s: JSON %s, want %s", path, g, w)
		}
		return ""
	}
	switch want.Kind() {
	case record.KindNull:
		return ""
	case record.KindFloat:
		g, _ := got.AsFloat(64)
		w, _ := want.AsFloat(64)
		if math.Float64bits(g) != math.Float64bits(w) {
			return fmt.Sprintf("%s: float %x, want %x", path, math.Float64bits(g), math.Float64bits(w))
		}
		return ""
	case record.KindBytes:
		g, _ := got.AsBytes()
		w, _ := want.AsBytes()
		if !bytes.Equal(g, w) || (g == nil) != (w == nil) {
			return fmt.Sprintf("%s: bytes %x (nil %v), want %x (nil %v)", path, g, g == nil, w, w == nil)
		}
		return ""
	case record.KindDuration:
		gs, gn := got.DurationParts()
		ws, wn := want.DurationParts()
		if gs != ws || gn != wn {
			return fmt.Sprintf("%s: duration %d %d, want %d %d", path, gs, gn, ws, wn)
		}
		return ""
	case record.KindStruct:
		var gn, wn []string
		var gv, wv []record.Value
		_ = got.Range(func(n []byte, v record.Value) error { gn, gv = append(gn, string(n)), append(gv, v); return nil })
		_ = want.Range(func(n []byte, v record.Value) error { wn, wv = append(wn, string(n)), append(wv, v); return nil })
		if !slices.Equal(gn, wn) {
			return fmt.Sprintf("%s: fields %v, want %v", path, gn, wn)
		}
		for i := range gv {
			if d := diffValue(path+"."+gn[i], gv[i], wv[i]); d != "" {
				return d
			}
		}
		return ""
	case record.KindArray, record.KindMap:
		var gv, wv []record.Value
		collect := func(v record.Value, out *[]record.Value) {
			if v.Kind() == record.KindArray {
				_ = v.Elems(func(_ int, e record.Value) error { *out = append(*out, e); return nil })
				return
			}
			_ = v.Entries(func(k, e record.Value) error { *out = append(*out, k, e); return nil })
		}
		collect(got, &gv)
		collect(want, &wv)
		if len(gv) != len(wv) {
			return fmt.Sprintf("%s: %d elements, want %d (%s vs %s)", path, len(gv), len(wv), got.GoString(), want.GoString())
		}
		for i := range gv {
			if d := diffValue(fmt.Sprintf("%s[%d]", path, i), gv[i], wv[i]); d != "" {
				return d
			}
		}
		return ""
	}
	g, err1 := got.AsText()
	w, err2 := want.AsText()
	if g != w || (err1 == nil) != (err2 == nil) {
		return fmt.Sprintf("%s: %q, want %q", path, g, w)
	}
	return ""
}

// protoGen makes random messages with dynamicpb and rewrites their
// encodings.
type protoGen struct {
	r *rand.Rand
}

func (g *protoGen) pick(n int) int { return g.r.IntN(n) }

func (g *protoGen) chance(p float64) bool { return g.r.Float64() < p }

func (g *protoGen) int64() int64 {
	switch g.pick(8) {
	case 0:
		return 0
	case 1:
		return -1
	case 2:
		return math.MaxInt64
	case 3:
		return math.MinInt64
	case 4:
		return int64(g.r.Int32()) - math.MaxInt32/2
	case 5:
		return math.MaxInt32 + 1
	}
	return g.r.Int64() - g.r.Int64()
}

func (g *protoGen) text(checked bool) string {
	s := []string{"", "a", "héllo", "user-000042", strings.Repeat("x", 200), "日本", "\x00", "z"}[g.pick(8)]
	if !checked && g.chance(0.15) {
		s += "\xff\xfe"
	}
	return s
}

func (g *protoGen) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(g.chance(0.5))
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if g.chance(0.15) {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(g.int64()))
		}
		return protoreflect.ValueOfEnum(vals.Get(g.pick(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(g.int64()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(g.int64())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(g.int64()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(g.int64()))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, 1.5, -2.25, float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1)), math.MaxFloat32, g.r.Float32()}[g.pick(8)])
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, 1.5, -2.25, math.Inf(-1), math.NaN(), math.Copysign(0, -1), math.SmallestNonzeroFloat64, g.r.NormFloat64()}[g.pick(8)])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(g.text(enforceUTF8(fd)))
	case protoreflect.BytesKind:
		b := make([]byte, g.pick(12))
		for i := range b {
			b[i] = byte(g.r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic(fd.Kind())
}

var randomJSON = []string{`{}`, `{"a":1,"b":[true,null,"x"],"c":{"d":-2.5}}`, `[1,"two",{"three":[]}]`, `"text"`, `3.25`, `null`, `false`,
	`{"nested":{"deep":{"deeper":[{"k":"v"}]}}}`}

func (g *protoGen) message(md protoreflect.MessageDescriptor, depth int) *dynamicpb.Message {
	m := dynamicpb.NewMessage(md)
	switch md.FullName() {
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		for range 10 {
			if protojson.Unmarshal([]byte(randomJSON[g.pick(len(randomJSON))]), m) == nil {
				break
			}
		}
		return m
	case "google.protobuf.Timestamp", "google.protobuf.Duration":
		sec := []int64{0, 1_700_000_000, -62135596800, 253402300799, -1, 10, g.int64()}[g.pick(7)]
		nanos := []int32{0, 123456789, 999_999_999, -5, 1_000_000_000, 7}[g.pick(6)]
		if md.FullName() == "google.protobuf.Duration" && sec < 0 && g.chance(0.7) {
			nanos = -nanos
		}
		m.Set(md.Fields().ByName("seconds"), protoreflect.ValueOfInt64(sec))
		m.Set(md.Fields().ByName("nanos"), protoreflect.ValueOfInt32(nanos))
		return m
	}
	fds := md.Fields()
	done := map[protoreflect.FullName]bool{}
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if done[od.FullName()] {
				continue
			}
			done[od.FullName()] = true
			fd = od.Fields().Get(g.pick(od.Fields().Len()))
		}
		if g.chance(0.3) || (fd.Message() != nil && !fd.IsMap() && depth > 3) {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range g.pick(4) {
				k := g.scalar(fd.MapKey()).MapKey()
				v := g.value(fd.MapValue(), depth)
				mp.Set(k, v)
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range g.pick(5) {
				l.Append(g.value(fd, depth))
			}
		default:
			m.Set(fd, g.value(fd, depth))
		}
	}
	return m
}

func (g *protoGen) value(fd protoreflect.FieldDescriptor, depth int) protoreflect.Value {
	if fd.Message() != nil {
		return protoreflect.ValueOfMessage(g.message(fd.Message(), depth+1))
	}
	return g.scalar(fd)
}

func (g *protoGen) marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{AllowPartial: true, Deterministic: g.chance(0.5)}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

type wireField struct {
	num protowire.Number
	typ protowire.Type
	val []byte // the value's encoding, after the tag
}

func splitWire(b []byte) ([]wireField, bool) {
	var out []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, false
		}
		out = append(out, wireField{num, typ, b[n : n+m]})
		b = b[n+m:]
	}
	return out, true
}

func (f wireField) append(b []byte) []byte {
	return append(protowire.AppendTag(b, f.num, f.typ), f.val...)
}

func bytesField(num protowire.Number, body []byte) wireField {
	return wireField{num, protowire.BytesType, protowire.AppendBytes(nil, body)}
}

// junk is a valid value of wire type typ for field num.
func (g *protoGen) junk(num protowire.Number, typ protowire.Type) wireField {
	switch typ {
	case protowire.VarintType:
		return wireField{num, typ, protowire.AppendVarint(nil, uint64(g.int64()))}
	case protowire.Fixed32Type:
		return wireField{num, typ, protowire.AppendFixed32(nil, g.r.Uint32())}
	case protowire.Fixed64Type:
		return wireField{num, typ, protowire.AppendFixed64(nil, g.r.Uint64())}
	case protowire.StartGroupType:
		inner := g.junk(protowire.Number(1+g.pick(5)), protowire.Type([]protowire.Type{0, 1, 2, 5}[g.pick(4)])).append(nil)
		return wireField{num, typ, protowire.AppendTag(inner, num, protowire.EndGroupType)}
	}
	return bytesField(num, []byte("junk")[:g.pick(5)])
}

var wireTypes = []protowire.Type{protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType, protowire.StartGroupType}

// rewrite rewrites the encoding b of a message of type md: the same
// message, merged with another, or one the library would not write but
// must read.
func (g *protoGen) rewrite(md protoreflect.MessageDescriptor, b []byte, depth int) []byte {
	fields, ok := splitWire(b)
	if !ok {
		return b
	}
	var out []wireField
	for _, f := range fields {
		fd := md.Fields().ByNumber(f.num)
		switch {
		case fd == nil || depth > 6:
		case fd.IsMap() && f.typ == protowire.BytesType && g.chance(0.4):
			body, _ := protowire.ConsumeBytes(f.val)
			f = bytesField(f.num, g.rewriteEntry(fd, body))
		case fd.Message() != nil && !fd.IsMap() && f.typ == protowire.BytesType && g.chance(0.4):
			body, _ := protowire.ConsumeBytes(f.val)
			f = bytesField(f.num, g.rewrite(fd.Message(), body, depth+1))
		case fd.IsPacked() && f.typ == protowire.BytesType && g.chance(0.5):
			// Unpacked, or packed in two runs.
			body, _ := protowire.ConsumeBytes(f.val)
			var elems []wireField
			typ := map[protoreflect.Kind]protowire.Type{protoreflect.FloatKind: protowire.Fixed32Type, protoreflect.Fixed32Kind: protowire.Fixed32Type,
				protoreflect.Sfixed32Kind: protowire.Fixed32Type, protoreflect.DoubleKind: protowire.Fixed64Type, protoreflect.Fixed64Kind: protowire.Fixed64Type,
				protoreflect.Sfixed64Kind: protowire.Fixed64Type}[fd.Kind()]
			for len(body) > 0 {
				n := protowire.ConsumeFieldValue(f.num, typ, body)
				if n < 0 {
					break
				}
				elems = append(elems, wireField{f.num, typ, body[:n]})
				body = body[n:]
			}
			if g.chance(0.5) || len(elems) < 2 {
				out = append(out, elems...)
				continue
			}
			half := len(elems) / 2
			for _, run := range [][]wireField{elems[:half], elems[half:]} {
				var packed []byte
				for _, e := range run {
					packed = append(packed, e.val...)
				}
				out = append(out, bytesField(f.num, packed))
			}
			continue
		}
		out = append(out, f)
	}
	if len(out) > 1 && g.chance(0.3) {
		g.r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	for range g.pick(3) {
		if len(out) > 0 && g.chance(0.5) { // a field written twice
			out = append(out, out[g.pick(len(out))])
		}
	}
	if g.chance(0.3) { // an unknown field
		num := protowire.Number([]int{999, 150, 100, 4000, 2}[g.pick(5)])
		if md.Fields().ByNumber(num) == nil {
			out = slices.Insert(out, g.pick(len(out)+1), g.junk(num, wireTypes[g.pick(len(wireTypes))]))
		}
	}
	if md.Fields().Len() > 0 && g.chance(0.3) { // a known number, any wire type
		fd := md.Fields().Get(g.pick(md.Fields().Len()))
		out = slices.Insert(out, g.pick(len(out)+1), g.junk(fd.Number(), wireTypes[g.pick(len(wireTypes))]))
	}
	var enc []byte
	for _, f := range out {
		enc = f.append(enc)
	}
	if g.chance(0.15) && depth < 3 { // merged with another message
		enc = append(enc, g.marshal(g.message(md, depth+2))...)
	}
	return enc
}

// rewriteEntry rewrites a map entry: reordered, incomplete, repeated
// fields, unknown fields, wrong wire types.
func (g *protoGen) rewriteEntry(fd protoreflect.FieldDescriptor, body []byte) []byte {
	fields, ok := splitWire(body)
	if !ok {
		return body
	}
	switch g.pick(6) {
	case 0:
		slices.Reverse(fields)
	case 1:
		if len(fields) > 0 {
			fields = fields[1:]
		}
	case 2:
		fields = append(fields, fields...)
	case 3:
		fields = append(fields, g.junk(3, wireTypes[g.pick(len(wireTypes))]))
	case 4:
		fields = slices.Insert(fields, g.pick(len(fields)+1), g.junk(protowire.Number(1+g.pick(2)), wireTypes[g.pick(len(wireTypes))]))
	case 5:
		fields = nil
	}
	var enc []byte
	for _, f := range fields {
		enc = f.append(enc)
	}
	return enc
}

// corrupt damages b.
func (g *protoGen) corrupt(b []byte) []byte {
	b = slices.Clone(b)
	switch {
	case len(b) == 0:
		return []byte{byte(g.r.Uint32())}
	case g.chance(0.4):
		return b[:g.pick(len(b))]
	case g.chance(0.5):
		b[g.pick(len(b))] ^= byte(1 << g.pick(8))
		return b
	}
	return slices.Insert(b, g.pick(len(b)+1), byte(g.r.Uint32()))
}

func TestProtobufMatchesReference(t *testing.T) {
	g := &protoGen{r: rand.New(rand.NewPCG(29, 1))}
	n := 1500 * *protoDiffScale
	if testing.Short() {
		n = 200
	}
	var arena valueArena
	var sc protoScratch
	for _, s := range diffSchemas {
		roots := diffRoots(t, s)
		var ok, bad, domain int
		for i := range n {
			p := roots[i%len(roots)]
			payload := g.marshal(g.message(p.md, 0))
			if i%3 != 0 {
				payload = g.rewrite(p.md, payload, 0)
			}
			if i%5 == 4 {
				payload = g.corrupt(payload)
			}
			if d := protoDiff(p, payload, &arena, &sc); d != "" {
				t.Fatalf("%s, %s, payload %x:\n%s", s.name, p.md.FullName(), payload, d)
			}
			switch _, err := p.refDecode(payload); {
			case err == nil:
				ok++
			case errors.Is(err, errOutOfDomain):
				domain++
			default:
				bad++
			}
		}
		t.Logf("%s: %d decoded, %d refused as malformed, %d outside their domain", s.name, ok, bad, domain)
	}
}

// TestProtobufWireRules: the rules the decoder shares with the reference,
// one payload each, built on the wire.
func TestProtobufWireRules(t *testing.T) {
	roots := diffRoots(t, diffSchemas[2]) // proto3: Coll, Sub, Sub2
	coll, sub := roots[0], roots[1]
	p2 := diffRoots(t, diffSchemas[1])[0] // proto2: Rec
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	msg := func(b []byte, num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), body)
	}
	entry := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name    string
		plan    *protoPlan
		payload []byte
		want    string // a part of the Value's GoString; "error" for an error
	}{
		{"a scalar written twice keeps the last", sub, varint(varint(nil, 5, 1), 5, 2), `"k":{"a":2,"b":null}`},
		{"a message written twice merges", coll, msg(msg(nil, 53, str(varint(nil, 2, 7), 1, "x")), 53, varint(nil, 2, 8)), `"sub":{"name":"x","xs":[7,8]`},
		{"a oneof keeps the member written last", sub, varint(msg(nil, 6, varint(nil, 1, 2)), 5, 9), `"k":{"a":9,"b":null}`},
		{"a oneof's message member merges", sub, msg(msg(nil, 6, varint(nil, 1, 2)), 6, str(nil, 2, "t")), `"b":{"n":1,"tags":["t"]}`},
		{"a oneof's message member after another member starts afresh", sub,
			msg(varint(msg(nil, 6, str(nil, 2, "t")), 5, 1), 6, varint(nil, 1, 4)), `"b":{"n":2,"tags":[]}`},
		{"packed and unpacked mix", coll, varint(msg(nil, 2, []byte{1, 2}), 2, 3), `"i32s":[1,2,3]`},
		{"a wrong wire type is an unknown field", coll, varint(str(nil, 45, "x"), 45, 1), `"e":"E1"`},
		{"a map key written twice keeps the last value, sorted", coll,
			msg(msg(msg(nil, 18, entry(varint(nil, 1, 5), str(nil, 2, "a"))), 18, entry(varint(nil, 1, 1), str(nil, 2, "b"))), 18, entry(varint(nil, 1, 5), str(nil, 2, "c"))),
			`"m_i32":[[1,"b"],[5,"c"]]`},
		{"a map entry without key and value", coll, msg(nil, 18, nil), `"m_i32":[[0,""]]`},
		{"a map entry's key of a wrong wire type after a good one", coll,
			msg(nil, 18, entry(varint(nil, 1, 5), str(nil, 1, "x"), str(nil, 2, "a"))), "error"},
		{"a map entry's key of a wrong wire type alone", coll, msg(nil, 18, entry(str(nil, 1, "x"), str(nil, 2, "a"))), `"m_i32":[[0,"a"]]`},
		{"an unknown group", sub, append(tag(varint(tag(nil, 9, protowire.StartGroupType), 1, 1), 9, protowire.EndGroupType), varint(nil, 5, 3)...), `"a":3`},
		{"a mismatched end of group", sub, tag(varint(tag(nil, 9, protowire.StartGroupType), 1, 1), 8, protowire.EndGroupType), "error"},
		{"a stray end of group", sub, tag(nil, 9, protowire.EndGroupType), "error"},
		{"field number 0", sub, []byte{0, 1}, "error"},
		{"a varint of 11 bytes", sub, append(tag(nil, 5, protowire.VarintType), bytes.Repeat([]byte{0xff}, 10)...), "error"},
		{"proto3 string not UTF-8", sub, str(nil, 1, "\xff"), "error"},
		{"proto2 string not UTF-8, replaced", p2, str(str(varint(nil, 1, 1), 2, "\xff"), 2, "ok"), `"name":"ok"`},
		{"proto2 string not UTF-8", p2, str(varint(nil, 1, 1), 2, "\xff"), "error"},
		{"proto2 required field missing", p2, str(nil, 2, "x"), "error"},
		{"proto2 required field missing in a list", p2, varint(append(tag(nil, 9, protowire.StartGroupType), tag(nil, 9, protowire.EndGroupType)...), 1, 1), "error"},
		{"proto2 group", p2, varint(append(varint(tag(nil, 6, protowire.StartGroupType), 7, 3), tag(nil, 6, protowire.EndGroupType)...), 1, 1), `"grp":{"a":3,"b":[]}`},
	}
	var arena valueArena
	var sc protoScratch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := protoDiff(c.plan, c.payload, &arena, &sc); d != "" {
				t.Fatalf("payload %x: %s", c.payload, d)
			}
			v, err := c.plan.decode(c.payload, nil, nil)
			switch {
			case c.want == "error" && err == nil:
				t.Fatalf("decoded %s, want an error", v.GoString())
			case c.want == "error":
				t.Logf("error: %v", err)
			case err != nil:
				t.Fatal(err)
			case !strings.Contains(v.GoString(), c.want):
				t.Fatalf("got %s, want it to contain %s", v.GoString(), c.want)
			}
		})
	}
}

// protoDiffScale multiplies the differential test's cases:
//
//	go test -run TestProtobufMatchesReference ./connectors/convert/ -args -protodiff.scale 50
var protoDiffScale = flag.Int("protodiff.scale", 1, "multiplies the cases of TestProtobufMatchesReference")
