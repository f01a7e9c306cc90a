package convert

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

// Fuzz tests: every decoder, seeded with library-encoded values. The
// property: no panic, and for every input the library itself decodes, the
// Values equal the library's decoded values, compared through a canonical
// rendering written here (canonValue for txsink's Values, and one per
// library for its own decoded form). A decoder may refuse what the library
// accepts only with errOutOfDomain (invalid UTF-8, a time of day outside
// the day, an instant the sinks cannot store).

// canonValue renders a Value canonically.
func canonValue(v record.Value) any {
	switch v.Kind() {
	case record.KindNull:
		return nil
	case record.KindBool:
		b, _ := v.AsBool()
		return b
	case record.KindInt:
		n, _ := v.AsInt64()
		return "i:" + strconv.FormatInt(n, 10)
	case record.KindUint:
		n, _ := v.AsUint64()
		return "u:" + strconv.FormatUint(n, 10)
	case record.KindFloat:
		f, _ := v.AsFloat(64)
		if v.IsFloat32() {
			return "f32:" + strconv.FormatUint(uint64(math.Float32bits(float32(f))), 16)
		}
		return "f64:" + strconv.FormatUint(math.Float64bits(f), 16)
	case record.KindDecimal, record.KindDate:
		s, _ := v.AsText()
		return v.Kind().String() + ":" + s
	case record.KindString:
		s, _ := v.AsString()
		return "s:" + s
	case record.KindBytes:
		b, _ := v.AsBytes()
		return "b:" + hex.EncodeToString(b)
	case record.KindTime:
		d, _ := v.AsTimeOfDay()
		return "t:" + strconv.FormatInt(int64(d), 10)
	case record.KindTimestamp:
		i, _ := v.AsTimestamp()
		return "ts:" + i.Time.Format(time.RFC3339Nano)
	case record.KindDuration:
		s, n := v.DurationParts()
		return fmt.Sprintf("d:%d:%d", s, n)
	case record.KindStruct:
		m := map[string]any{}
		_ = v.Range(func(name []byte, f record.Value) error {
			m[string(name)] = canonValue(f)
			return nil
		})
		return m
	case record.KindArray:
		out := []any{}
		_ = v.Elems(func(_ int, e record.Value) error {
			out = append(out, canonValue(e))
			return nil
		})
		return out
	case record.KindMap:
		m := map[string]any{}
		_ = v.Entries(func(k, e record.Value) error {
			m[fmt.Sprint(canonValue(k))] = canonValue(e)
			return nil
		})
		return m
	}
	return "?" + v.Kind().String()
}

func canonJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkAgainstLibrary applies the property.
func checkAgainstLibrary(t *testing.T, libErr error, lib func() any, got record.Value, err error) {
	t.Helper()
	if libErr != nil {
		return // the library refuses it too; no panic is the property
	}
	if err != nil {
		if errors.Is(err, errOutOfDomain) && errors.Is(err, record.ErrDecode) {
			return
		}
		t.Fatalf("the library decodes it, txsink fails: %v", err)
	}
	if g, w := canonJSON(t, canonValue(got)), canonJSON(t, lib()); g != w {
		t.Fatalf("values differ:\ntxsink  %s\nlibrary %s", g, w)
	}
}

func FuzzWireHeader(f *testing.F) {
	var h sr.ConfluentHeader
	for _, c := range []struct {
		id  int
		idx []int
	}{{1, nil}, {7, []int{0}}, {1 << 30, []int{1, 2, 3}}, {42, []int{3}}, {0, []int{0, 0}}} {
		b, _ := h.AppendEncode(nil, c.id, c.idx)
		f.Add(append(b, 8, 1))
	}
	f.Add([]byte{1, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		id, rest, err := wireHeader(data)
		lid, lrest, lerr := h.DecodeID(data)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("wireHeader err %v, library err %v", err, lerr)
		}
		if err != nil {
			if !errors.Is(err, record.ErrDecode) {
				t.Fatalf("err %v is not a bad record", err)
			}
			return
		}
		if int(id) != lid || !bytes.Equal(rest, lrest) {
			t.Fatalf("id %d rest %x, library %d %x", id, rest, lid, lrest)
		}
		idx, irest, err := messageIndexes(rest, nil)
		lidx, lirest, lerr := h.DecodeIndex(rest, maxMessageIndexes)
		switch {
		case err == nil && lerr != nil:
			t.Fatalf("indexes %v, library err %v", idx, lerr)
		case err == nil:
			if !reflect.DeepEqual(idx, lidx) || !bytes.Equal(irest, lirest) {
				t.Fatalf("indexes %v rest %x, library %v %x", idx, irest, lidx, lirest)
			}
		case lerr == nil:
			// txsink refuses negative or absurd indexes the library takes.
			ok := false
			for _, i := range lidx {
				if i < 0 || i > 1<<20 {
					ok = true
				}
			}
			if !ok || !errors.Is(err, record.ErrDecode) {
				t.Fatalf("err %v, library indexes %v", err, lidx)
			}
		}
	})
}

// canonAvro renders what the Avro library decoded (into any, with tagged
// unions) canonically, following the schema.
func canonAvro(n *avro.SchemaNode, v any) any {
	if n.Type == "union" {
		if v == nil {
			return nil
		}
		m := v.(map[string]any)
		var tag string
		var inner any
		for k, x := range m {
			tag, inner = k, x
		}
		var nonNull []*avro.SchemaNode
		for i := range n.Branches {
			if n.Branches[i].Type != "null" {
				nonNull = append(nonNull, &n.Branches[i])
			}
		}
		for _, br := range nonNull {
			if br.Type == tag || fullName(br) == tag {
				if len(n.Branches) == 2 && len(nonNull) == 1 {
					return canonAvro(br, inner)
				}
				out := map[string]any{}
				for _, o := range nonNull {
					name := o.Type
					if o.Name != "" && (o.Type == "record" || o.Type == "enum" || o.Type == "fixed") {
						name = o.Name
					}
					out[name] = nil
				}
				name := br.Type
				if br.Name != "" && (br.Type == "record" || br.Type == "enum" || br.Type == "fixed") {
					name = br.Name
				}
				out[name] = canonAvro(br, inner)
				return out
			}
		}
		return fmt.Sprintf("?union tag %q", tag)
	}
	switch n.LogicalType {
	case "decimal":
		if r, ok := v.(*big.Rat); ok {
			return "decimal:" + r.FloatString(n.Scale)
		}
	case "date":
		return "date:" + v.(time.Time).UTC().Format(time.DateOnly)
	case "time-millis", "time-micros":
		return "t:" + strconv.FormatInt(int64(v.(time.Duration)), 10)
	case "timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros":
		return "ts:" + v.(time.Time).UTC().Format(time.RFC3339Nano)
	}
	switch n.Type {
	case "record":
		m := v.(map[string]any)
		out := map[string]any{}
		for i := range n.Fields {
			out[n.Fields[i].Name] = canonAvro(&n.Fields[i].Type, m[n.Fields[i].Name])
		}
		return out
	case "array":
		out := []any{}
		for _, e := range v.([]any) {
			out = append(out, canonAvro(n.Items, e))
		}
		return out
	case "map":
		out := map[string]any{}
		for k, e := range v.(map[string]any) {
			out["s:"+k] = canonAvro(n.Values, e)
		}
		return out
	case "int":
		return "i:" + strconv.FormatInt(int64(v.(int32)), 10)
	case "long":
		return "i:" + strconv.FormatInt(v.(int64), 10)
	case "float":
		return "f32:" + strconv.FormatUint(uint64(math.Float32bits(v.(float32))), 16)
	case "double":
		return "f64:" + strconv.FormatUint(math.Float64bits(v.(float64)), 16)
	case "boolean":
		return v
	case "string", "enum":
		return "s:" + v.(string)
	case "bytes", "fixed":
		rv := reflect.ValueOf(v)
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return "b:" + hex.EncodeToString(b)
	}
	return fmt.Sprintf("?%s", n.Type)
}

func FuzzAvro(f *testing.F) {
	lib := avro.MustParse(avroAllTypes)
	root := lib.Root().ExpandReferences()
	prog, err := compileAvro(&regSchema{ID: 1, Type: sr.TypeAvro, Text: avroAllTypes})
	if err != nil {
		f.Fatal(err)
	}
	seed, err := lib.Encode(avroAllTypesValue())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	v2 := avroAllTypesValue()
	v2["maybe"], v2["either"], v2["tags"], v2["attrs"] = "set", int32(5), []any{}, map[string]any{"a": int64(1), "b": int64(-2)}
	if s2, err := lib.Encode(v2); err == nil {
		f.Add(s2)
	}
	f.Add(seed[:len(seed)/2])
	f.Fuzz(func(t *testing.T, payload []byte) {
		var out any
		_, libErr := lib.Decode(payload, &out, avro.TaggedUnions())
		got, err := prog.decode(payload, &valueArena{})
		checkAgainstLibrary(t, libErr, func() any { return canonAvro(root, out) }, got, err)
	})
}

// canonProto renders a message decoded by dynamicpb canonically, from its
// descriptors: the mapping of docs/formats.md written a second time.
func canonProto(m protoreflect.Message) any {
	md := m.Descriptor()
	out := map[string]any{}
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			set := m.WhichOneof(od)
			if set == nil {
				out[string(od.Name())] = nil
				continue
			}
			u := map[string]any{}
			for j := 0; j < od.Fields().Len(); j++ {
				u[string(od.Fields().Get(j).Name())] = nil
			}
			u[string(set.Name())] = canonProtoValue(fd, m.Get(set), set)
			out[string(od.Name())] = u
			continue
		}
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			a := []any{}
			for j := 0; j < l.Len(); j++ {
				a = append(a, canonProtoValue(fd, l.Get(j), fd))
			}
			out[string(fd.Name())] = a
		case fd.IsMap():
			mp := map[string]any{}
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				mp[fmt.Sprint(canonProtoValue(fd.MapKey(), k.Value(), fd.MapKey()))] = canonProtoValue(fd.MapValue(), v, fd.MapValue())
				return true
			})
			out[string(fd.Name())] = mp
		case fd.HasPresence() && !m.Has(fd):
			out[string(fd.Name())] = nil
		default:
			out[string(fd.Name())] = canonProtoValue(fd, m.Get(fd), fd)
		}
	}
	return out
}

func canonProtoValue(_ protoreflect.FieldDescriptor, v protoreflect.Value, fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return "i:" + strconv.FormatInt(v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "i:" + strconv.FormatUint(v.Uint(), 10)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "u:" + strconv.FormatUint(v.Uint(), 10)
	case protoreflect.FloatKind:
		return "f32:" + strconv.FormatUint(uint64(math.Float32bits(float32(v.Float()))), 16)
	case protoreflect.DoubleKind:
		return "f64:" + strconv.FormatUint(math.Float64bits(v.Float()), 16)
	case protoreflect.StringKind:
		return "s:" + v.String()
	case protoreflect.BytesKind:
		return "b:" + hex.EncodeToString(v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return "s:" + string(ev.Name())
		}
		return "s:" + strconv.Itoa(int(v.Enum()))
	}
	m := v.Message()
	get := func(name string) protoreflect.Value {
		return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name)))
	}
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		return "ts:" + time.Unix(get("seconds").Int(), get("nanos").Int()).UTC().Format(time.RFC3339Nano)
	case "google.protobuf.Duration":
		return fmt.Sprintf("d:%d:%d", get("seconds").Int(), get("nanos").Int())
	case "confluent.type.Decimal":
		return "decimal:" + record.DecimalText(record.TwosComplement(get("value").Bytes()), int32(get("scale").Int()))
	}
	if wrapperTypes[m.Descriptor().FullName()] {
		inner := m.Descriptor().Fields().ByNumber(1)
		return canonProtoValue(inner, m.Get(inner), inner)
	}
	return canonProto(m)
}

func FuzzProtobuf(f *testing.F) {
	ps, err := compileProto(&regSchema{ID: 1, Type: sr.TypeProtobuf, Text: protoAllTypes,
		Refs: []regRef{{Name: "common.proto", Type: sr.TypeProtobuf, Text: protoCommon}}})
	if err != nil {
		f.Fatal(err)
	}
	plan := ps.first
	deps := map[string]string{"common.proto": protoCommon}
	f.Add(protoMessage(f, protoAllTypes, deps, []int{0}, `{"i32":-5,"u64":"18446744073709551615","s":"x","status":"PAID","item":{"name":"pen"},
 "tags":["a"],"counts":{"b":"2","a":"1"},"byId":{"2":{"name":"two"}},"card":"c","at":"2024-05-06T07:08:09.123Z","took":"1.5s",
 "maybeInt":3,"amount":{"value":"MDk=","scale":2},"price":{"cents":"1"},"opt":0}`))
	f.Add(protoMessage(f, protoAllTypes, deps, []int{0}, `{"points":"9","fl":1.5,"db":-2.5,"by":"AAE=","sf64":"-1"}`))
	f.Add([]byte{})
	var arena valueArena
	var sc protoScratch
	f.Fuzz(func(t *testing.T, payload []byte) {
		lib := dynamicpb.NewMessage(plan.md)
		libErr := unmarshalProto(payload, lib, false) // the library, strict, its panics caught
		arena.reset()
		got, err := plan.decode(payload, &arena, &sc)
		checkAgainstLibrary(t, libErr, func() any { return canonProto(lib.ProtoReflect()) }, got, err)
		// And exactly what the reference decoder (dynamicpb, then the
		// walk) made of it.
		if d := protoDiff(plan, payload, &arena, &sc); d != "" {
			t.Fatal(d)
		}
	})
}

// FuzzProtobufSchemas holds the decoder to the reference decoder on the
// messages of the differential test's schemas (proto2, proto3 lists and
// maps of every kind, editions, the benchmark's row): root picks the
// message, seeded with random messages rewritten on the wire.
func FuzzProtobufSchemas(f *testing.F) {
	var roots []*protoPlan
	for _, s := range diffSchemas {
		roots = append(roots, diffRoots(f, s)...)
	}
	g := &protoGen{r: rand.New(rand.NewPCG(14, 29))}
	for i := range 4 * len(roots) {
		p := roots[i%len(roots)]
		payload := g.marshal(g.message(p.md, 0))
		if i%2 == 1 {
			payload = g.rewrite(p.md, payload, 0)
		}
		f.Add(uint16(i%len(roots)), payload)
	}
	var arena valueArena
	var sc protoScratch
	f.Fuzz(func(t *testing.T, root uint16, payload []byte) {
		p := roots[int(root)%len(roots)]
		if d := protoDiff(p, payload, &arena, &sc); d != "" {
			t.Fatalf("%s: %s", p.md.FullName(), d)
		}
	})
}

const fuzzJSONSchema = `{"type":"object","properties":{"i":{"type":"integer"},"n":{"type":"number"},"s":{"type":"string"},
 "b":{"type":"boolean"},"a":{"type":"array","items":{"type":"integer"}},"m":{"type":"object","additionalProperties":{"type":"string"}},
 "o":{"type":"object","properties":{"x":{"type":["string","null"]}}}},"required":["i"]}`

// canonJSONPayload renders a payload decoded by encoding/json as the
// schema above types it; ok is false for values outside what the types
// hold (integers beyond int64, numbers beyond float64).
func canonJSONPayload(v map[string]any) (any, bool) {
	out := map[string]any{"i": nil, "n": nil, "s": nil, "b": nil, "a": nil, "m": nil, "o": nil}
	integer := func(x any) (any, bool) {
		d, err := record.ParseDecimal(string(x.(json.Number)))
		if err != nil {
			return nil, false
		}
		i, err := record.ParseInteger(d.Text())
		return "i:" + strconv.FormatInt(i, 10), err == nil
	}
	for k, x := range v {
		if x == nil {
			continue
		}
		var ok = true
		switch k {
		case "i":
			out[k], ok = integer(x)
		case "n":
			f, err := strconv.ParseFloat(string(x.(json.Number)), 64)
			out[k], ok = "f64:"+strconv.FormatUint(math.Float64bits(f), 16), err == nil
		case "s":
			out[k] = "s:" + x.(string)
		case "b":
			out[k] = x
		case "a":
			a := []any{}
			for _, e := range x.([]any) {
				c, eok := integer(e)
				ok = ok && eok
				a = append(a, c)
			}
			out[k] = a
		case "m":
			m := map[string]any{}
			for mk, e := range x.(map[string]any) {
				m["s:"+mk] = "s:" + e.(string)
			}
			out[k] = m
		case "o":
			o := map[string]any{"x": nil}
			if s, isStr := x.(map[string]any)["x"].(string); isStr {
				o["x"] = "s:" + s
			}
			out[k] = o
		}
		if !ok {
			return nil, false
		}
	}
	return out, true
}

func FuzzJSONSchema(f *testing.F) {
	prog, err := compileJSONSchema(&regSchema{ID: 1, Type: sr.TypeJSON, Text: fuzzJSONSchema}, false)
	if err != nil {
		f.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(fuzzJSONSchema)))
	_ = c.AddResource("txsink://fuzz/schema.json", doc)
	validator := c.MustCompile("txsink://fuzz/schema.json")
	for _, v := range []any{
		map[string]any{"i": 1, "n": 1.5, "s": "x", "b": true, "a": []int{1, 2}, "m": map[string]string{"k": "v"}, "o": map[string]any{"x": nil}},
		map[string]any{"i": -9007199254740993, "extra": []any{1, "x"}},
	} {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte(`{"i":1e2,"n":-0.0,"s":"\u00e9\ud83d\ude00","m":{"a":"1","a":"2"}}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := prog.convert(payload)
		inst, perr := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		if perr != nil || validator.Validate(inst) != nil || !json.Valid(payload) {
			return // not a value the schema admits; no panic is the property
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		var v map[string]any
		if dec.Decode(&v) != nil {
			return
		}
		want, ok := canonJSONPayload(v)
		if !ok {
			if err == nil || !errors.Is(err, record.ErrDecode) {
				t.Fatalf("a value beyond the types converted: %v %#v", err, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid payload %q fails: %v", payload, err)
		}
		if g, w := canonJSON(t, canonValue(got)), canonJSON(t, want); g != w {
			t.Fatalf("values differ for %q:\ntxsink  %s\nlibrary %s", payload, g, w)
		}
	})
}
