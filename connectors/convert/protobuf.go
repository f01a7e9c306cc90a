package convert

import (
	"context"
	"fmt"
	"sync"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"

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
// payload is decoded as the message the indexes name straight into Values,
// mapped as Confluent's ProtobufData maps them, by a decoder compiled once
// per message type (protobuf_decode.go). docs/formats.md has the mapping
// table.
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
// The result's strings and bytes refer to data, and its records' fields
// to buf: it is valid until buf's next use.
func (c *Protobuf) Convert(ctx context.Context, _ string, _ []kgo.RecordHeader, data []byte, buf *Buffer) (record.Value, error) {
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
	var arena *valueArena
	var sc *protoScratch
	if buf != nil {
		arena, sc = &buf.arena, &buf.proto
		arena.reset()
	}
	return plan.decode(payload, arena, sc)
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
	wks   map[protoreflect.FullName]*protoPlan // decoders of well-known types
	first *protoPlan                           // the plan of message index [0]
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
	ps := &protoSchema{id: id, file: files[0], plans: map[protoreflect.FullName]*protoPlan{}, wks: map[protoreflect.FullName]*protoPlan{}}
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
			return nil, record.Errorf(record.ErrDecode, "Protobuf message indexes %v name no message of schema id %d", append([]int(nil), idx...), ps.id)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md.IsMapEntry() {
		return nil, record.Errorf(record.ErrDecode, "Protobuf message indexes %v name a map entry of schema id %d", append([]int(nil), idx...), ps.id)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.plan(md, nil)
}

// protoPlan maps one message type to a struct schema, and decodes it.
type protoPlan struct {
	md    protoreflect.MessageDescriptor
	sch   *record.Schema
	slots []protoSlot
	// noRequired: no required field in md or the messages it contains.
	noRequired bool
	protoDecoding
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
	if err := ps.compileDecoding(p, path); err != nil {
		return nil, err
	}
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
