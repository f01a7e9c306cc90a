package convert

import (
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

// The reference decoder: the converter's previous path, kept for the
// tests only. The payload is unmarshalled into a dynamicpb message by
// google.golang.org/protobuf, and the message is walked into Values as
// Confluent's ProtobufData maps it. The production decoder
// (protobuf_decode.go) must give the same Values and fail on the same
// payloads; protobuf_diff_test.go and FuzzProtobuf hold it to that.

// refDecode is what Convert did with a payload: unmarshal, then walk.
func (p *protoPlan) refDecode(payload []byte) (record.Value, error) {
	msg := dynamicpb.NewMessage(p.md)
	if err := unmarshalProto(payload, msg, p.noRequired); err != nil {
		return record.Value{}, record.Errorf(record.ErrDecode, "Protobuf payload does not parse as %s: %v", p.md.FullName(), err)
	}
	return p.value(msg.ProtoReflect())
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
