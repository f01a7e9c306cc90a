package convert

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

// ProtobufClass is Confluent's Protobuf converter.
const ProtobufClass = "io.confluent.connect.protobuf.ProtobufConverter"

func init() {
	register(Plugin{Class: ProtobufClass, Aliases: []string{"ProtobufConverter", "protobuf"}, Version: "7.9.0", New: newProtobufConverter})
}

// Protobuf is Confluent's ProtobufConverter: records in Confluent's wire
// format with message indexes, whose schema (the .proto text the registry
// holds, with its imports resolved through the registry's references and
// the well-known types) is compiled with protocompile once per id; the
// payload is decoded with dynamicpb as the message the indexes name, and
// mapped to Values as Confluent's ProtobufData does. docs/formats.md has
// the mapping table.
type Protobuf struct {
	reg   *registry
	files idCache[*protoSchema]
}

func newProtobufConverter(settings map[string]string, _ bool, rp RegistryPolicy) (Converter, error) {
	reg, err := newRegistry(settings, rp)
	if err != nil {
		return nil, err
	}
	return &Protobuf{reg: reg}, nil
}

// Convert decodes one record. See the type's documentation and Converter.
func (c *Protobuf) Convert(ctx context.Context, _ string, _ []kgo.RecordHeader, data []byte, _ *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	id, rest, err := wireHeader(data)
	if err != nil {
		return record.Value{}, err
	}
	var idxBuf [4]int
	idx, payload, err := messageIndexes(rest, idxBuf[:0])
	if err != nil {
		return record.Value{}, err
	}
	ps, err := compiledSchema(ctx, c.reg, &c.files, "protobuf", id, compileProto)
	if err != nil {
		return record.Value{}, err
	}
	plan, err := ps.message(idx)
	if err != nil {
		return record.Value{}, err
	}
	msg := dynamicpb.NewMessage(plan.md)
	if err := unmarshalProto(payload, msg, plan.noRequired); err != nil {
		return record.Value{}, record.Errorf(record.ErrDecode, "Protobuf payload does not parse as %s: %v", plan.md.FullName(), err)
	}
	return plan.value(msg.ProtoReflect())
}

// unmarshalProto is proto.Unmarshal, with a panic of the decoder turned
// into an error: google.golang.org/protobuf v1.36.12 panics on some
// malformed map entries of dynamicpb messages ("cannot convert nil to map
// key", found by FuzzProtobuf), and a hostile record must not stop the
// worker.
//
// noRequired skips the check of required fields when the message has
// none anywhere (proto3 has none): the check walks the whole decoded
// message and cannot fail then (a fifth of the decoding's CPU in
// BenchmarkConvertRows/protobuf).
func unmarshalProto(payload []byte, msg proto.Message, noRequired bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the decoder failed: %v", r)
		}
	}()
	return proto.UnmarshalOptions{AllowPartial: noRequired}.Unmarshal(payload, msg)
}

// hasRequired reports whether md or a message it contains has a required
// (proto2) field.
func hasRequired(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			return true
		}
		if sub := fd.Message(); sub != nil && hasRequired(sub, seen) {
			return true
		}
	}
	return false
}

// protoSchema is one compiled registry schema.
type protoSchema struct {
	id    uint32
	file  protoreflect.FileDescriptor
	mu    sync.Mutex
	plans map[protoreflect.FullName]*protoPlan
	first *protoPlan // the plan of message index [0]
}

// Bundled sources of the imports Confluent's registry provides without a
// reference: its field metadata options and its Decimal type.
var bundledProtos = map[string]string{
	"confluent/meta.proto": `syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta {
  string doc = 1;
  map<string, string> params = 2;
  repeated string tags = 3;
}
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
`,
	"confluent/type/decimal.proto": `syntax = "proto3";
package confluent.type;
message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
`,
}

func compileProto(s *regSchema) (*protoSchema, error) {
	id := uint32(s.ID)
	if s.Type != sr.TypeProtobuf {
		return nil, badSchema(id, "is a %s schema, not Protobuf", s.Type)
	}
	srcs := map[string]string{}
	for k, v := range bundledProtos {
		srcs[k] = v
	}
	for _, ref := range s.Refs {
		if ref.Type != sr.TypeProtobuf {
			return nil, badSchema(id, "reference %q is a %s schema, not Protobuf", ref.Name, ref.Type)
		}
		srcs[ref.Name] = ref.Text
	}
	main := fmt.Sprintf("txsink/registry/schema-%d.proto", id)
	srcs[main] = s.Text
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(srcs),
	})}
	files, err := comp.Compile(context.Background(), main)
	if err != nil {
		return nil, badSchema(id, "Protobuf schema does not compile: %v", err)
	}
	ps := &protoSchema{id: id, file: files[0], plans: map[protoreflect.FullName]*protoPlan{}}
	if ps.file.Messages().Len() == 0 {
		return nil, badSchema(id, "Protobuf schema declares no message")
	}
	if ps.first, err = ps.plan(ps.file.Messages().Get(0), nil); err != nil {
		return nil, err
	}
	return ps, nil
}

// message returns the plan of the message the indexes name.
func (ps *protoSchema) message(idx []int) (*protoPlan, error) {
	if len(idx) == 1 && idx[0] == 0 {
		return ps.first, nil
	}
	msgs := ps.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range idx {
		if i >= msgs.Len() {
			return nil, record.Errorf(record.ErrDecode, "Protobuf message indexes %v name no message of schema id %d", idx, ps.id)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md.IsMapEntry() {
		return nil, record.Errorf(record.ErrDecode, "Protobuf message indexes %v name a map entry of schema id %d", idx, ps.id)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.plan(md, nil)
}

// protoPlan maps one message type to a struct schema.
type protoPlan struct {
	md    protoreflect.MessageDescriptor
	sch   *record.Schema
	slots []protoSlot
	// noRequired: no required field in md or the messages it contains.
	noRequired bool
}

// protoSlot is one field of the struct: a message field, or a oneof.
type protoSlot struct {
	fd      protoreflect.FieldDescriptor
	sch     *record.Schema
	msg     *protoPlan // a message-typed field (or its elements)
	val     *protoPlan // a map's message values
	oneof   protoreflect.OneofDescriptor
	members []protoSlot
	// presence: a field absent on the wire is null (explicit presence,
	// message fields); otherwise it takes its proto3 default.
	presence bool
}

// Names of Confluent's ProtobufData.
const (
	protoUnionName = "io.confluent.connect.protobuf.Union"
	protoTypeParam = "protobuf.type"
	// DurationName names the schema of Protobuf Duration values.
	DurationName = "google.protobuf.Duration"
)

var wrapperTypes = map[protoreflect.FullName]bool{
	"google.protobuf.DoubleValue": true, "google.protobuf.FloatValue": true, "google.protobuf.Int64Value": true,
	"google.protobuf.UInt64Value": true, "google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true,
	"google.protobuf.BoolValue": true, "google.protobuf.StringValue": true, "google.protobuf.BytesValue": true,
}

// wellKnown reports the schema of a message type that maps to a scalar.
func wellKnown(md protoreflect.MessageDescriptor) (*record.Schema, bool) {
	switch n := md.FullName(); {
	case n == "google.protobuf.Timestamp":
		return &record.Schema{Type: record.TypeInt64, Name: record.LogicalTimestamp, Optional: true}, true
	case n == "google.protobuf.Duration":
		return &record.Schema{Type: record.TypeInt64, Name: DurationName, Optional: true}, true
	case n == "confluent.type.Decimal":
		return &record.Schema{Type: record.TypeBytes, Name: record.LogicalDecimal, Optional: true}, true
	case n == "google.protobuf.Struct" || n == "google.protobuf.Value" || n == "google.protobuf.ListValue":
		// JSON in a message; recursive, so it has no Connect schema: it
		// becomes schemaless JSON.
		return nil, true
	case wrapperTypes[n]:
		s := scalarSchema(md.Fields().ByNumber(1))
		s.Optional = true
		return s, true
	}
	return nil, false
}

// plan builds (once) the plan of a message type; path holds the types
// being built, to refuse recursion, which a Connect schema cannot express.
// Callers hold ps.mu or are alone (compile).
func (ps *protoSchema) plan(md protoreflect.MessageDescriptor, path []protoreflect.FullName) (*protoPlan, error) {
	if p, ok := ps.plans[md.FullName()]; ok {
		return p, nil
	}
	for _, n := range path {
		if n == md.FullName() {
			return nil, badSchema(ps.id, "Protobuf message %s is recursive: Kafka Connect schemas cannot express it", md.FullName())
		}
	}
	if len(path) > 100 {
		return nil, badSchema(ps.id, "Protobuf messages nest deeper than 100 levels")
	}
	path = append(path, md.FullName())
	p := &protoPlan{md: md, noRequired: !hasRequired(md, map[protoreflect.FullName]bool{})}
	var fields []*record.Field
	done := map[protoreflect.OneofDescriptor]bool{}
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if done[od] {
				continue
			}
			done[od] = true
			slot := protoSlot{oneof: od, presence: true}
			var mfields []*record.Field
			for j := 0; j < od.Fields().Len(); j++ {
				m, err := ps.slot(od.Fields().Get(j), path)
				if err != nil {
					return nil, err
				}
				m.presence = true
				m.sch.Optional = true
				slot.members = append(slot.members, m)
				mfields = append(mfields, &record.Field{Name: string(m.fd.Name()), Schema: m.sch})
			}
			slot.sch = record.NewStruct(protoUnionName, true, mfields...)
			p.slots = append(p.slots, slot)
			fields = append(fields, &record.Field{Name: string(od.Name()), Schema: slot.sch})
			continue
		}
		slot, err := ps.slot(fd, path)
		if err != nil {
			return nil, err
		}
		p.slots = append(p.slots, slot)
		fields = append(fields, &record.Field{Name: string(fd.Name()), Schema: slot.sch})
	}
	p.sch = record.NewStruct(string(md.FullName()), true, fields...)
	ps.plans[md.FullName()] = p
	return p, nil
}

// slot builds the schema of one field.
func (ps *protoSchema) slot(fd protoreflect.FieldDescriptor, path []protoreflect.FullName) (protoSlot, error) {
	s := protoSlot{fd: fd}
	elem := func(fd protoreflect.FieldDescriptor) (*record.Schema, *protoPlan, error) {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return scalarSchema(fd), nil, nil
		}
		if sch, ok := wellKnown(fd.Message()); ok {
			return orSchemaless(sch), nil, nil
		}
		p, err := ps.plan(fd.Message(), path)
		if err != nil {
			return nil, nil, err
		}
		return p.sch, p, nil
	}
	switch {
	case fd.IsMap():
		ks, _, _ := elem(fd.MapKey())
		vs, vp, err := elem(fd.MapValue())
		if err != nil {
			return s, err
		}
		s.val = vp
		s.sch = &record.Schema{Type: record.TypeMap, Key: ks, Elem: vs}
	case fd.IsList():
		es, ep, err := elem(fd)
		if err != nil {
			return s, err
		}
		s.msg = ep
		s.sch = &record.Schema{Type: record.TypeArray, Elem: es}
	default:
		es, ep, err := elem(fd)
		if err != nil {
			return s, err
		}
		s.msg = ep
		// A shared schema must not be changed: copy it to set Optional.
		cp := *es
		s.presence = fd.HasPresence()
		cp.Optional = s.presence
		s.sch = &cp
	}
	return s, nil
}

// schemalessJSON is the schema slot of a field holding schemaless JSON
// (google.protobuf.Struct and Value): a string schema named as Debezium
// names JSON text.
var schemalessJSON = &record.Schema{Type: record.TypeString, Name: record.DebeziumJSON, Optional: true}

func orSchemaless(s *record.Schema) *record.Schema {
	if s == nil {
		return schemalessJSON
	}
	return s
}

// scalarSchema maps a scalar field's kind as ProtobufData does.
func scalarSchema(fd protoreflect.FieldDescriptor) *record.Schema {
	s := &record.Schema{}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		s.Type = record.TypeBoolean
	case protoreflect.Int32Kind:
		s.Type = record.TypeInt32
	case protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		s.Type, s.Params = record.TypeInt32, map[string]string{protoTypeParam: fd.Kind().String()}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		s.Type, s.Params = record.TypeInt64, map[string]string{protoTypeParam: fd.Kind().String()}
	case protoreflect.Int64Kind:
		s.Type = record.TypeInt64
	case protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		s.Type, s.Params = record.TypeInt64, map[string]string{protoTypeParam: fd.Kind().String()}
	case protoreflect.FloatKind:
		s.Type = record.TypeFloat32
	case protoreflect.DoubleKind:
		s.Type = record.TypeFloat64
	case protoreflect.StringKind:
		s.Type = record.TypeString
	case protoreflect.BytesKind:
		s.Type = record.TypeBytes
	case protoreflect.EnumKind:
		s.Type, s.Name = record.TypeString, string(fd.Enum().FullName())
	}
	return s
}

// value converts a decoded message.
func (p *protoPlan) value(m protoreflect.Message) (record.Value, error) {
	fields := make([]record.Value, len(p.slots))
	for i := range p.slots {
		s := &p.slots[i]
		if s.oneof != nil {
			set := m.WhichOneof(s.oneof)
			if set == nil {
				fields[i] = record.Null(s.sch)
				continue
			}
			ms := make([]record.Value, len(s.members))
			for j := range s.members {
				mem := &s.members[j]
				if mem.fd != set {
					ms[j] = record.Null(mem.sch)
					continue
				}
				v, err := mem.single(m.Get(mem.fd), mem.fd)
				if err != nil {
					return record.Value{}, inPath(string(s.oneof.Name())+"."+string(mem.fd.Name()), err)
				}
				ms[j] = v
			}
			fields[i] = record.Struct(s.sch, ms)
			continue
		}
		v, err := s.field(m)
		if err != nil {
			return record.Value{}, inPath(string(s.fd.Name()), err)
		}
		fields[i] = v
	}
	return record.Struct(p.sch, fields), nil
}

func (s *protoSlot) field(m protoreflect.Message) (record.Value, error) {
	fd := s.fd
	switch {
	case fd.IsList():
		l := m.Get(fd).List()
		elems := make([]record.Value, l.Len())
		for i := range elems {
			v, err := s.scalarOrMessage(l.Get(i), fd, s.msg, s.sch.Elem)
			if err != nil {
				return record.Value{}, inPath("["+strconv.Itoa(i)+"]", err)
			}
			elems[i] = v
		}
		return record.Array(s.sch, elems), nil
	case fd.IsMap():
		mp := m.Get(fd).Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		sortMapKeys(keys, fd.MapKey().Kind())
		kv := make([]record.Value, 0, 2*len(keys))
		for _, k := range keys {
			kval, err := s.scalarOrMessage(k.Value(), fd.MapKey(), nil, s.sch.Key)
			if err != nil {
				return record.Value{}, err
			}
			vval, err := s.scalarOrMessage(mp.Get(k), fd.MapValue(), s.val, s.sch.Elem)
			if err != nil {
				return record.Value{}, inPath(k.String(), err)
			}
			kv = append(kv, kval, vval)
		}
		return record.Map(s.sch, kv), nil
	}
	if s.presence && !m.Has(fd) {
		return record.Null(s.sch), nil
	}
	return s.single(m.Get(fd), fd)
}

func (s *protoSlot) single(v protoreflect.Value, fd protoreflect.FieldDescriptor) (record.Value, error) {
	return s.scalarOrMessage(v, fd, s.msg, s.sch)
}

// sortMapKeys orders map keys: Protobuf maps have no order on the wire
// that dynamicpb keeps, and the values must not depend on Go's map order.
func sortMapKeys(keys []protoreflect.MapKey, kind protoreflect.Kind) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch kind {
		case protoreflect.StringKind:
			return a.String() < b.String()
		case protoreflect.BoolKind:
			return !a.Bool() && b.Bool()
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			return a.Uint() < b.Uint()
		}
		return a.Int() < b.Int()
	})
}

func (s *protoSlot) scalarOrMessage(v protoreflect.Value, fd protoreflect.FieldDescriptor, plan *protoPlan, sch *record.Schema) (record.Value, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return record.Bool(v.Bool()).WithSchema(sch), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return record.Int(v.Int()).WithSchema(sch), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return record.Int(int64(v.Uint())).WithSchema(sch), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return record.Uint(v.Uint()).WithSchema(sch), nil
	case protoreflect.FloatKind:
		return record.Float32(float32(v.Float())).WithSchema(sch), nil
	case protoreflect.DoubleKind:
		return record.Float64(v.Float()).WithSchema(sch), nil
	case protoreflect.StringKind:
		str := v.String()
		if !utf8.ValidString(str) {
			// proto2 strings are not checked by the decoder.
			return record.Value{}, outOfDomain("Protobuf string is not valid UTF-8")
		}
		return record.String(str).WithSchema(sch), nil
	case protoreflect.BytesKind:
		return record.Bytes(v.Bytes()).WithSchema(sch), nil
	case protoreflect.EnumKind:
		n := v.Enum()
		if ev := fd.Enum().Values().ByNumber(n); ev != nil {
			return record.String(string(ev.Name())).WithSchema(sch), nil
		}
		// An open enum's value this schema does not name: its number.
		return record.String(strconv.Itoa(int(n))).WithSchema(sch), nil
	}
	// A message.
	m := v.Message()
	if plan != nil {
		return plan.value(m)
	}
	return wellKnownValue(m, sch)
}

// wellKnownValue converts the well-known types wellKnown maps.
func wellKnownValue(m protoreflect.Message, sch *record.Schema) (record.Value, error) {
	md := m.Descriptor()
	get := func(name protoreflect.Name) protoreflect.Value { return m.Get(md.Fields().ByName(name)) }
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		sec, nanos := get("seconds").Int(), get("nanos").Int()
		if nanos < 0 || nanos > 999_999_999 {
			return record.Value{}, outOfDomain("Timestamp nanos %d out of range", nanos)
		}
		t := time.Unix(sec, nanos).UTC()
		if t.Before(record.MinTime) || t.After(record.MaxTime) {
			return record.Value{}, outOfDomain("Timestamp of %d seconds is out of range", sec)
		}
		return record.Timestamp(t).WithSchema(sch), nil
	case "google.protobuf.Duration":
		sec, nanos := get("seconds").Int(), get("nanos").Int()
		if nanos <= -1e9 || nanos >= 1e9 || (sec > 0 && nanos < 0) || (sec < 0 && nanos > 0) {
			return record.Value{}, outOfDomain("Duration of %d s and %d ns is not normalised", sec, nanos)
		}
		return record.Duration(sec, int32(nanos)).WithSchema(sch), nil
	case "confluent.type.Decimal":
		scale := get("scale").Int()
		if scale < -1000 || scale > 1000 {
			return record.Value{}, outOfDomain("Decimal scale %d out of range", scale)
		}
		return record.Decimal(record.TwosComplement(get("value").Bytes()), int32(scale)).WithSchema(sch), nil
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		b, err := protojson.Marshal(m.Interface())
		if err != nil {
			return record.Value{}, record.Errorf(record.ErrDecode, "%s: %v", md.FullName(), err)
		}
		return record.JSON(b), nil
	}
	if wrapperTypes[md.FullName()] {
		fd := md.Fields().ByNumber(1)
		s := protoSlot{fd: fd, sch: sch}
		return s.single(m.Get(fd), fd)
	}
	return record.Value{}, record.Errorf(record.ErrDecode, "unsupported Protobuf type %s", md.FullName())
}
