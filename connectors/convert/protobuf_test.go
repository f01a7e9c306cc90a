package convert

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

const protoCommon = `syntax = "proto3";
package common;
message Money { int64 cents = 1; string currency = 2; }
`

const protoAllTypes = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "confluent/type/decimal.proto";
import "common.proto";
enum Status { NEW = 0; PAID = 1; }
message Order {
  int32 i32 = 1; sint32 s32 = 2; sfixed32 sf32 = 3;
  int64 i64 = 4; sint64 s64 = 5; sfixed64 sf64 = 6;
  uint32 u32 = 7; fixed32 f32 = 8; uint64 u64 = 9; fixed64 f64 = 10;
  float fl = 11; double db = 12; bool b = 13; string s = 14; bytes by = 15;
  Status status = 16;
  Item item = 17;
  repeated string tags = 18;
  repeated Item items = 19;
  map<string, int64> counts = 20;
  map<int32, Item> by_id = 21;
  oneof pay { string card = 22; int64 points = 23; }
  google.protobuf.Timestamp at = 24;
  google.protobuf.Duration took = 25;
  google.protobuf.Int32Value maybe_int = 26;
  google.protobuf.StringValue maybe_str = 27;
  confluent.type.Decimal amount = 28;
  common.Money price = 29;
  optional int32 opt = 30;
  int32 unset = 31;
  Item no_item = 32;
  message Item { string name = 1; }
}
message Other { string x = 1; }
`

// protoMessage compiles schema (with deps) with protocompile and fills the
// message at index path idx from protojson text: the libraries, not
// txsink, encode every test record.
func protoMessage(t testing.TB, schema string, deps map[string]string, idx []int, jsonText string) []byte {
	t.Helper()
	srcs := map[string]string{"main.proto": schema}
	for k, v := range deps {
		srcs[k] = v
	}
	for k, v := range bundledProtos {
		if _, ok := srcs[k]; !ok {
			srcs[k] = v
		}
	}
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)})}
	files, err := comp.Compile(context.Background(), "main.proto")
	if err != nil {
		t.Fatal(err)
	}
	var md protoreflect.MessageDescriptor
	msgs := files[0].Messages()
	for _, i := range idx {
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(jsonText), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProtobufAllTypes(t *testing.T) {
	reg := newTestRegistry(t)
	_, cver := reg.register("common", sr.Schema{Schema: protoCommon, Type: sr.TypeProtobuf})
	// confluent/type/decimal.proto is built into Confluent's registry but
	// not into every registry (AxonOps v0.2.1 has none): registered as a
	// reference, as Confluent's clients register an import, it resolves on
	// any registry, and the converter reads the referenced text.
	_, dver := reg.register("confluent-type-decimal", sr.Schema{Schema: bundledProtos["confluent/type/decimal.proto"], Type: sr.TypeProtobuf})
	id, _ := reg.register("order", sr.Schema{Schema: protoAllTypes, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{reg.ref("common.proto", "common", cver),
			reg.ref("confluent/type/decimal.proto", "confluent-type-decimal", dver)}})
	t.Logf("registry: %s", reg.kind())
	c := newConverter(t, ProtobufClass, reg.settings())
	deps := map[string]string{"common.proto": protoCommon}
	payload := protoMessage(t, protoAllTypes, deps, []int{0}, `{"i32":-5,"s32":-6,"sf32":-7,"i64":"-8","s64":"-9","sf64":"-10",
 "u32":4000000000,"f32":4000000001,"u64":"18446744073709551615","f64":"18446744073709551614",
 "fl":1.5,"db":2.25,"b":true,"s":"héllo","by":"AAH/","status":"PAID","item":{"name":"pen"},
 "tags":["a","b"],"items":[{"name":"x"},{"name":"y"}],"counts":{"b":"2","a":"1"},
 "byId":{"2":{"name":"two"},"1":{"name":"one"}},"points":"99","at":"2024-05-06T07:08:09.123456789Z",
 "took":"-1.5s","maybeInt":0,"amount":{"value":"MDk=","scale":2,"precision":5},
 "price":{"cents":"150","currency":"EUR"}}`)
	v := convertOK(t, c, frame(t, id, []int{0}, payload))
	want := `struct:{"i32":-5,"s32":-6,"sf32":-7,"i64":-8,"s64":-9,"sf64":-10,"u32":4000000000,"f32":4000000001,` +
		`"u64":18446744073709551615,"f64":18446744073709551614,"fl":1.5,"db":2.25,"b":true,"s":"héllo","by":"AAH/",` +
		`"status":"PAID","item":{"name":"pen"},"tags":["a","b"],"items":[{"name":"x"},{"name":"y"}],"counts":{"a":1,"b":2},` +
		`"by_id":[[1,{"name":"one"}],[2,{"name":"two"}]],"pay":{"card":null,"points":99},"at":"2024-05-06T07:08:09.123456789Z",` +
		`"took":"-PT1.5S","maybe_int":0,"maybe_str":null,"amount":123.45,"price":{"cents":150,"currency":"EUR"},` +
		`"opt":null,"unset":0,"no_item":null}`
	if got := v.GoString(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	kinds := map[string]record.Kind{"u64": record.KindUint, "u32": record.KindInt, "at": record.KindTimestamp,
		"took": record.KindDuration, "amount": record.KindDecimal, "by_id": record.KindMap, "pay": record.KindStruct}
	for name, k := range kinds {
		if f, _ := v.Get(name); f.Kind() != k {
			t.Errorf("%s is %s, want %s", name, f.Kind(), k)
		}
	}
	schemas := map[string]string{
		"u32":       "int64",
		"status":    "shop.Status string",
		"pay":       "optional struct{card optional string, points optional int64}",
		"maybe_int": "optional int32",
		"opt":       "optional int32",
		"unset":     "int32",
		"at":        "optional org.apache.kafka.connect.data.Timestamp int64",
		"price":     "optional struct{cents int64, currency string}",
		"by_id":     "map<int32,optional struct{name string}>",
	}
	for name, w := range schemas {
		if got := v.Schema().Field(name).Schema.String(); got != w {
			t.Errorf("schema of %s = %s, want %s", name, got, w)
		}
	}
	if f := v.Schema().Field("pay"); f.Schema.Name != protoUnionName {
		t.Errorf("oneof schema name %q", f.Schema.Name)
	}

	// Message indexes choose the message: a nested one, and the second of
	// the file.
	// Order's nested types are its map entries and Item, in declaration
	// order (Confluent counts map entries too): Item is the third.
	item := protoMessage(t, protoAllTypes, deps, []int{0, 2}, `{"name":"nested"}`)
	if got := convertOK(t, c, frame(t, id, []int{0, 2}, item)).GoString(); got != `struct:{"name":"nested"}` {
		t.Errorf("Order.Item: %s", got)
	}
	other := protoMessage(t, protoAllTypes, deps, []int{1}, `{"x":"other"}`)
	v = convertOK(t, c, frame(t, id, []int{1}, other))
	if got := v.GoString(); got != `struct:{"x":"other"}` || v.Schema().Name != "shop.Other" {
		t.Errorf("Other: %s (%s)", got, v.Schema().Name)
	}
}

func TestProtobufSchemaEvolution(t *testing.T) {
	reg := newTestRegistry(t)
	v1 := `syntax = "proto3"; message User { string name = 1; }`
	v2 := `syntax = "proto3"; message User { string name = 1; int32 age = 2; }`
	id1, _ := reg.register("user", sr.Schema{Schema: v1, Type: sr.TypeProtobuf})
	id2, _ := reg.register("user", sr.Schema{Schema: v2, Type: sr.TypeProtobuf})
	c := newConverter(t, ProtobufClass, reg.settings())
	r1 := frame(t, id1, []int{0}, protoMessage(t, v1, nil, []int{0}, `{"name":"ann"}`))
	r2 := frame(t, id2, []int{0}, protoMessage(t, v2, nil, []int{0}, `{"name":"bob","age":41}`))
	if got := convertOK(t, c, r1).GoString(); got != `struct:{"name":"ann"}` {
		t.Errorf("v1: %s", got)
	}
	if got := convertOK(t, c, r2).GoString(); got != `struct:{"name":"bob","age":41}` {
		t.Errorf("v2: %s", got)
	}
}

func TestProtobufBadRecords(t *testing.T) {
	reg := newTestRegistry(t)
	schema := `syntax = "proto3"; message M { string a = 1; message N { int32 b = 1; } }`
	id, _ := reg.register("m", sr.Schema{Schema: schema, Type: sr.TypeProtobuf})
	recursive := `syntax = "proto3"; message Tree { repeated Tree kids = 1; }`
	rid, _ := reg.register("tree", sr.Schema{Schema: recursive, Type: sr.TypeProtobuf})
	c := newConverter(t, ProtobufClass, reg.settings())
	good := frame(t, id, []int{0}, protoMessage(t, schema, nil, []int{0}, `{"a":"hello"}`))
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"wrong magic", append([]byte{'{'}, good[1:]...), "wrong magic byte 0x7b"},
		{"truncated indexes", frame(t, id, nil, []byte{4, 2}), "truncated Protobuf message indexes"},
		{"negative index count", frame(t, id, nil, []byte{3}), "invalid Protobuf message index count"},
		{"index names no message", frame(t, id, []int{5}, nil), "name no message"},
		{"truncated payload", good[:len(good)-2], "does not parse as M"},
		{"unknown id", frame(t, reg.unknownID(), []int{0}, good[6:]), "unknown schema id"},
		{"recursive schema", frame(t, rid, []int{0}, nil), "recursive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Convert(context.Background(), "t", nil, tc.data, &Buffer{})
			if !errors.Is(err, record.ErrDecode) || errors.Is(err, record.ErrUnavailable) {
				t.Fatalf("err = %v, want a bad record", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestProtoRequiredFields: the check of required fields is skipped only
// for messages that have none anywhere; a proto2 message missing a
// required field (directly or in a nested message) is still refused.
func TestProtoRequiredFields(t *testing.T) {
	const text = `syntax = "proto2";
message Outer { optional string b = 2; optional Inner in = 3; }
message Inner { required int32 a = 1; }
message Plain { optional string b = 2; }`
	ps, err := compileProto(&regSchema{ID: 7, Type: sr.TypeProtobuf, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		idx        []int
		payload    []byte
		noRequired bool
		wantErr    bool
	}{
		{[]int{0}, []byte{0x12, 1, 'x'}, false, false},         // Outer without Inner: nothing required is missing
		{[]int{0}, []byte{0x12, 1, 'x', 0x1a, 0}, false, true}, // Outer with an empty Inner: Inner.a missing
		{[]int{1}, []byte{}, false, true},                      // Inner without a
		{[]int{2}, []byte{0x12, 1, 'x'}, true, false},          // Plain: no required field anywhere
	} {
		plan, err := ps.message(c.idx)
		if err != nil {
			t.Fatal(err)
		}
		if plan.noRequired != c.noRequired {
			t.Errorf("%s: noRequired %v, want %v", plan.md.FullName(), plan.noRequired, c.noRequired)
		}
		err = unmarshalProto(c.payload, dynamicpb.NewMessage(plan.md), plan.noRequired)
		if (err != nil) != c.wantErr {
			t.Errorf("%s % x: reference error %v, want an error %v", plan.md.FullName(), c.payload, err, c.wantErr)
		}
		if _, err = plan.decode(c.payload, nil, nil); (err != nil) != c.wantErr {
			t.Errorf("%s % x: error %v, want an error %v", plan.md.FullName(), c.payload, err, c.wantErr)
		}
	}
}
