package convert

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txsink/txsink/connectors/record"
)

// The Protobuf decoder reads the wire format straight into Values,
// following tables compiled once per message type with its plan, as
// avro_decode.go does for Avro. Strings and bytes refer to the payload.
//
// Its rules are those of the decoder the converter used before, which
// protobuf_ref_test.go keeps as the reference the tests compare it with:
// google.golang.org/protobuf's reflective Unmarshal into a dynamicpb
// message, then a walk of that message into Values.
//   - A field of a known number with an unexpected wire type is an
//     unknown field; unknown fields are skipped (groups included).
//   - A scalar written twice keeps its last value. A message written
//     twice is merged: the second is decoded into the first.
//   - Writing a oneof member clears the others; a message member written
//     again while it is the oneof's member is merged.
//   - Repeated scalars are read packed or not, whatever the schema says.
//   - A map entry without a key or a value takes the default; an entry
//     whose key is written with a wrong wire type after a good one is
//     refused (the reference's decoder panicked there, and the panic was
//     its error); a key written twice keeps its last value; entries are
//     sorted by key.
//   - A proto3 string must be UTF-8 as it is read; a proto2 string only
//     when it is converted (a later value may replace it).
//   - Required fields (proto2) are checked after the whole payload, if
//     the message has any anywhere.
//   - Groups (proto2 groups, editions' delimited messages) are messages
//     between a start and an end tag.
//   - Extensions are unknown fields: the reference looked them up in the
//     binary's registry of Go types, which never holds a registry's schema.
//
// Decoding takes two passes, as the reference's did: the first reads the
// payload into the state of each message (protoMsg), where the rules
// above apply; the second (finish) converts that state into Values, with
// the checks of the mapping (UTF-8 of proto2 strings, the ranges of
// Timestamp, Duration and Decimal). A failure of the first pass "does not
// parse"; one of the second is a value outside its domain, in its field.
//
// google.protobuf.Struct, Value and ListValue, rendered as JSON text, are
// still decoded by dynamicpb and rendered by protojson, as before: their
// JSON text is protojson's, and they are rare.

// protoWK says how a message type is converted.
type protoWK uint8

const (
	wkNone      protoWK = iota // a struct
	wkTimestamp                // google.protobuf.Timestamp
	wkDuration                 // google.protobuf.Duration
	wkDecimal                  // confluent.type.Decimal
	wkWrapper                  // google.protobuf.Int32Value and the like
	wkJSON                     // google.protobuf.Struct, Value, ListValue
)

// protoMode is how a field is read.
type protoMode uint8

const (
	readScalar protoMode = iota
	readMessage
	readList
	readMap
)

// protoDecoding is the part of a plan that decodes its message type.
type protoDecoding struct {
	wk       protoWK
	fields   []protoField // one per field, oneof members included
	byNum    []int32      // field number → 1 + index in fields (0: unknown)
	far      map[protowire.Number]int32
	defaults []record.Value // each slot's value if no field sets it
	prefill  bool           // more than 64 slots: defaults are copied before decoding
	unseen   uint64         // the bits of the slots (fewer than 65) a message starts with unset
	more     []int32        // slot → 1 + index of its state in protoMsg.more; 0 for a scalar
	nMore    int
	post     []protoPost // the slots finish converts, in slot order
	required []int32     // indexes in fields of the required fields
	// Well-known types: the slots of seconds and nanos, of a Decimal's
	// value and scale, of a wrapper's value; and their field numbers.
	wkA, wkB       int
	wkNumA, wkNumB protowire.Number
}

// protoField reads one field: a singular value, a list's elements, or a
// map's entries.
type protoField struct {
	fd     protoreflect.FieldDescriptor
	num    protowire.Number
	kind   protoreflect.Kind
	wire   protowire.Type // the wire type of one value
	mode   protoMode
	packed bool // a list of scalars, which may come packed
	utf8   bool // a string that must be UTF-8 as it is read (proto3)
	slot   int32
	bit    uint64         // the slot's bit in protoMsg.seen (0 beyond 64 slots)
	member int32          // in a oneof: 1 + the member's index; else 0
	sch    *record.Schema // the schema of each value read (a list's: its elements')
	enum   *protoEnum
	msg    *protoPlan // message values: their plan
	// secNanos: a singular Timestamp or Duration, read into its slot's
	// protoMore without a message of its own.
	secNanos bool
	key      *protoField // a map's entry fields
	val      *protoField
	def      record.Value // a map entry's key or value when the entry has none
}

// protoPost is a slot that finish converts.
type protoPost struct {
	slot  int32
	op    protoMode // readScalar: a string to check; else the slot's mode; oneofs are readMessage with members
	field int32     // index in fields (not for oneofs)
	// members: a oneof's member fields, as indexes in fields.
	members []int32
}

// protoEnum names the numbers of an enum.
type protoEnum struct {
	dense  []record.Value // numbers 0 … len-1; a null: no name
	sparse map[int32]record.Value
	sch    *record.Schema
}

func newProtoEnum(ed protoreflect.EnumDescriptor, sch *record.Schema) *protoEnum {
	e := &protoEnum{sparse: map[int32]record.Value{}, sch: sch}
	vals := ed.Values()
	for i := 0; i < vals.Len(); i++ {
		n := vals.Get(i).Number()
		if n >= 0 && n < 256 && int(n) >= len(e.dense) {
			e.dense = append(e.dense, make([]record.Value, int(n)+1-len(e.dense))...)
		}
	}
	for i := 0; i < vals.Len(); i++ {
		n := vals.Get(i).Number()
		// ByNumber: of aliases, the first declared.
		v := record.String(string(vals.ByNumber(n).Name())).WithSchema(sch)
		if n >= 0 && int(n) < len(e.dense) {
			e.dense[n] = v
		} else {
			e.sparse[int32(n)] = v
		}
	}
	return e
}

func (e *protoEnum) value(n int32) record.Value {
	if n >= 0 && int(n) < len(e.dense) {
		if v := e.dense[n]; !v.IsNull() {
			return v
		}
	} else if v, ok := e.sparse[n]; ok {
		return v
	}
	// An open enum's value this schema does not name: its number.
	return record.String(strconv.Itoa(int(n))).WithSchema(e.sch)
}

// compileDecoding builds p's decoding tables from its slots.
func (ps *protoSchema) compileDecoding(p *protoPlan, path []protoreflect.FullName) error {
	d := &p.protoDecoding
	d.defaults = make([]record.Value, len(p.slots))
	d.more = make([]int32, len(p.slots))
	addMore := func(i int) {
		d.nMore++
		d.more[i] = int32(d.nMore)
	}
	for i := range p.slots {
		s := &p.slots[i]
		d.defaults[i] = record.Null(s.sch)
		if s.oneof != nil {
			addMore(i)
			post := protoPost{slot: int32(i), op: readMessage}
			for j := range s.members {
				mem := &s.members[j]
				f, err := ps.field(mem.fd, mem.sch, mem.msg, path)
				if err != nil {
					return err
				}
				f.slot, f.member = int32(i), int32(j+1)
				post.members = append(post.members, int32(len(d.fields)))
				d.fields = append(d.fields, f)
			}
			d.post = append(d.post, post)
			continue
		}
		fd := s.fd
		var f protoField
		var err error
		switch {
		case fd.IsMap():
			f = protoField{fd: fd, num: fd.Number(), kind: fd.Kind(), wire: protowire.BytesType, mode: readMap, sch: s.sch}
			k, err := ps.field(fd.MapKey(), s.sch.Key, nil, path)
			if err != nil {
				return err
			}
			v, err := ps.field(fd.MapValue(), s.sch.Elem, s.val, path)
			if err != nil {
				return err
			}
			k.def = protoDefault(fd.MapKey(), &k, false)
			if v.msg == nil {
				v.def = protoDefault(fd.MapValue(), &v, false)
			}
			f.key, f.val = &k, &v
		case fd.IsList():
			if f, err = ps.field(fd, s.sch.Elem, s.msg, path); err != nil {
				return err
			}
			f.mode = readList
			f.packed = f.msg == nil && f.wire != protowire.BytesType
		default:
			if f, err = ps.field(fd, s.sch, s.msg, path); err != nil {
				return err
			}
			if m := f.msg; m != nil && (m.wk == wkTimestamp || m.wk == wkDuration) && len(m.fields) == 2 {
				f.secNanos = true
			}
			if f.mode == readScalar && (!s.presence || p.wk != wkNone) {
				// Unset, it reads as its default (message.Get).
				d.defaults[i] = protoDefault(fd, &f, true)
			}
		}
		f.slot = int32(i)
		if fd.Cardinality() == protoreflect.Required {
			d.required = append(d.required, int32(len(d.fields)))
		}
		switch {
		case f.mode != readScalar:
			addMore(i)
			d.post = append(d.post, protoPost{slot: int32(i), op: f.mode, field: int32(len(d.fields))})
		case f.kind == protoreflect.StringKind && !f.utf8:
			d.post = append(d.post, protoPost{slot: int32(i), op: readScalar, field: int32(len(d.fields))})
		}
		d.fields = append(d.fields, f)
	}
	d.prefill = len(p.slots) > 64
	for i := range d.fields {
		if f := &d.fields[i]; f.slot < 64 {
			f.bit = 1 << f.slot
		}
	}
	if !d.prefill {
		d.unseen = math.MaxUint64 >> (64 - len(p.slots))
	}
	dense := 0
	for _, f := range d.fields {
		if f.num < 1024 && int(f.num) >= dense {
			dense = int(f.num) + 1
		}
	}
	d.byNum = make([]int32, dense)
	for i, f := range d.fields {
		if int(f.num) < dense {
			d.byNum[f.num] = int32(i + 1)
			continue
		}
		if d.far == nil {
			d.far = map[protowire.Number]int32{}
		}
		d.far[f.num] = int32(i + 1)
	}
	return nil
}

// field builds the reader of one value of fd, of schema sch; plan is the
// plan of a message value (nil for a well-known type, found here).
func (ps *protoSchema) field(fd protoreflect.FieldDescriptor, sch *record.Schema, plan *protoPlan, path []protoreflect.FullName) (protoField, error) {
	f := protoField{fd: fd, num: fd.Number(), kind: fd.Kind(), sch: sch}
	switch fd.Kind() {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		f.wire = protowire.VarintType
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind:
		f.wire = protowire.Fixed32Type
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		f.wire = protowire.Fixed64Type
	case protoreflect.StringKind:
		f.wire, f.utf8 = protowire.BytesType, enforceUTF8(fd)
	case protoreflect.BytesKind:
		f.wire = protowire.BytesType
	case protoreflect.MessageKind, protoreflect.GroupKind:
		f.wire, f.mode = protowire.BytesType, readMessage
		if fd.Kind() == protoreflect.GroupKind {
			f.wire = protowire.StartGroupType
		}
		if plan == nil {
			var err error
			if plan, err = ps.wkPlan(fd.Message(), path); err != nil {
				return f, err
			}
		}
		f.msg = plan
	}
	if fd.Kind() == protoreflect.EnumKind {
		f.enum = newProtoEnum(fd.Enum(), sch)
	}
	return f, nil
}

// enforceUTF8 is google.golang.org/protobuf's rule for checking strings
// as they are read (internal/strs.EnforceUTF8, without legacy support).
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// protoDefault is the Value of fd's default; viaGet: as a message's Get
// returns it for an unset field (bytes copied, so nil when empty).
func protoDefault(fd protoreflect.FieldDescriptor, f *protoField, viaGet bool) record.Value {
	v := fd.Default()
	var out record.Value
	switch fd.Kind() {
	case protoreflect.BoolKind:
		out = record.Bool(v.Bool())
	case protoreflect.EnumKind:
		return f.enum.value(int32(v.Enum()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		out = record.Int(v.Int())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		out = record.Int(int64(v.Uint()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		out = record.Uint(v.Uint())
	case protoreflect.FloatKind:
		out = record.Float32(float32(v.Float()))
	case protoreflect.DoubleKind:
		out = record.Float64(v.Float())
	case protoreflect.StringKind:
		out = record.String(v.String())
	case protoreflect.BytesKind:
		b := v.Bytes()
		if viaGet {
			b = append([]byte(nil), b...)
		}
		out = record.Bytes(b)
	default:
		return record.Null(f.sch)
	}
	return out.WithSchema(f.sch)
}

// wkPlan builds (once) the decoder of a well-known type wellKnown maps.
// Callers hold ps.mu or are alone (compile).
func (ps *protoSchema) wkPlan(md protoreflect.MessageDescriptor, path []protoreflect.FullName) (*protoPlan, error) {
	if p, ok := ps.wks[md.FullName()]; ok {
		return p, nil
	}
	p := &protoPlan{md: md, noRequired: true}
	type want struct {
		name protoreflect.Name
		kind protoreflect.Kind
	}
	var a, b want
	switch n := md.FullName(); {
	case n == "google.protobuf.Timestamp":
		p.wk, a, b = wkTimestamp, want{"seconds", protoreflect.Int64Kind}, want{"nanos", protoreflect.Int32Kind}
	case n == "google.protobuf.Duration":
		p.wk, a, b = wkDuration, want{"seconds", protoreflect.Int64Kind}, want{"nanos", protoreflect.Int32Kind}
	case n == "confluent.type.Decimal":
		p.wk, a, b = wkDecimal, want{"value", protoreflect.BytesKind}, want{"scale", protoreflect.Int32Kind}
	case n == "google.protobuf.Struct" || n == "google.protobuf.Value" || n == "google.protobuf.ListValue":
		p.wk = wkJSON
	case wrapperTypes[n]:
		p.wk = wkWrapper
		a.name = "value"
		if fd := md.Fields().ByNumber(1); fd != nil {
			a.kind = fd.Kind()
		}
	default:
		return nil, badSchema(ps.id, "Protobuf type %s has no mapping", n)
	}
	if p.wk != wkJSON {
		fds := md.Fields()
		for i := 0; i < fds.Len(); i++ {
			fd := fds.Get(i)
			if fd.Message() != nil || fd.IsList() || fd.IsMap() || fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() {
				return nil, badSchema(ps.id, "Protobuf type %s is not the well-known type of that name", md.FullName())
			}
			p.slots = append(p.slots, protoSlot{fd: fd, sch: scalarSchema(fd)})
		}
		slotOf := func(w want) int {
			if fd := fds.ByName(w.name); fd != nil && fd.Kind() == w.kind {
				return fd.Index()
			}
			return -1
		}
		if p.wkA = slotOf(a); p.wkA < 0 || b.name != "" && slotOf(b) < 0 {
			return nil, badSchema(ps.id, "Protobuf type %s is not the well-known type of that name", md.FullName())
		}
		p.wkNumA = fds.Get(p.wkA).Number()
		if b.name != "" {
			p.wkB = slotOf(b)
			p.wkNumB = fds.Get(p.wkB).Number()
		}
		if err := ps.compileDecoding(p, path); err != nil {
			return nil, err
		}
	}
	ps.wks[md.FullName()] = p
	return p, nil
}

func (d *protoDecoding) field(num protowire.Number) *protoField {
	if uint64(num) < uint64(len(d.byNum)) {
		if i := d.byNum[num]; i > 0 {
			return &d.fields[i-1]
		}
		return nil
	}
	if i, ok := d.far[num]; ok {
		return &d.fields[i-1]
	}
	return nil
}

// protoMsg is the state of one message being decoded.
type protoMsg struct {
	plan *protoPlan
	vals []record.Value // one per slot; a struct's fields once finished
	seen uint64         // the slots (of the first 64) set
	more []protoMore    // the state of the slots that are not plain scalars
	dyn  *dynamicpb.Message
}

// protoMore is the state of a message, list, map or oneof slot.
type protoMore struct {
	member  int32          // a oneof's member written last: 1 + its index; 0: none
	set     bool           // sec and nanos hold a Timestamp or Duration (secNanos)
	sec     int64          // its seconds
	nanos   int64          // its nanoseconds
	kid     *protoMsg      // a message; a oneof's message member
	elems   []record.Value // a list's scalars; a map's keys and scalar values, interleaved
	kids    []*protoMsg    // a list's messages; a map's message values, one per entry
	settled bool           // a map's entries sorted, their keys unique
}

// protoScratch holds the state of the messages of one record, reused
// record after record (see Buffer). The zero value is ready.
type protoScratch struct {
	msgs slab[protoMsg]
	more slab[protoMore]
}

// slab hands out zeroed slices of T from chunks reused after reset.
type slab[T any] struct {
	chunks [][]T
	cur    int
	used   int
}

const (
	slabChunk = 64
	slabKeep  = 64 // chunks kept from one record to the next
)

// reset makes every chunk reusable, and lets go of those beyond slabKeep
// that a record with very many messages made.
func (s *slab[T]) reset() {
	if len(s.chunks) > slabKeep {
		clear(s.chunks[slabKeep:])
		s.chunks = s.chunks[:slabKeep]
	}
	s.cur, s.used = 0, 0
}

func (s *slab[T]) alloc(n int) []T {
	if n > slabChunk/4 {
		return make([]T, n)
	}
	for {
		if s.cur == len(s.chunks) {
			s.chunks = append(s.chunks, make([]T, slabChunk))
		}
		if s.used+n <= slabChunk {
			out := s.chunks[s.cur][s.used : s.used+n : s.used+n]
			s.used += n
			clear(out)
			return out
		}
		s.cur, s.used = s.cur+1, 0
	}
}

type protoDecoder struct {
	arena *valueArena
	sc    *protoScratch
}

// decode decodes a payload of p's message type; arena and sc may be nil.
func (p *protoPlan) decode(payload []byte, arena *valueArena, sc *protoScratch) (record.Value, error) {
	if sc == nil {
		sc = new(protoScratch)
	}
	sc.msgs.reset()
	sc.more.reset()
	d := protoDecoder{arena: arena, sc: sc}
	m := d.newMsg(p)
	err := d.message(m, payload, protowire.DefaultRecursionLimit)
	if err == nil && !p.noRequired {
		err = d.initialized(m)
	}
	if err != nil {
		return record.Value{}, record.Errorf(record.ErrDecode, "Protobuf payload does not parse as %s: %v", p.md.FullName(), err)
	}
	return d.finish(m, nil)
}

func (d *protoDecoder) newMsg(p *protoPlan) *protoMsg {
	m := &d.sc.msgs.alloc(1)[0]
	m.plan = p
	if p.wk == wkJSON {
		m.dyn = dynamicpb.NewMessage(p.md)
		return m
	}
	m.vals = d.arena.alloc(len(p.defaults))
	if p.prefill {
		copy(m.vals, p.defaults)
	}
	if p.nMore > 0 {
		m.more = d.sc.more.alloc(p.nMore)
	}
	return m
}

func (m *protoMsg) state(f *protoField) *protoMore { return &m.more[m.plan.more[f.slot]-1] }

// message decodes b into m (merging). limit is the reference's recursion
// limit as m's decoding starts: the plans nest at most 100 levels, so
// only the messages left to dynamicpb use it.
func (d *protoDecoder) message(m *protoMsg, b []byte, limit int) error {
	if m.dyn != nil {
		return mergeDynamic(b, m.dyn, limit)
	}
	p := m.plan
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: field tag: %w", p.md.FullName(), protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%s: field number %d out of range", p.md.FullName(), num)
		}
		b = b[n:]
		n = -1
		if f := p.field(num); f != nil {
			var err error
			switch {
			case f.mode != readScalar || f.member != 0:
				n, err = d.field(m, f, wt, b, limit-1)
			case wt == f.wire:
				n, err = f.read(b, &m.vals[f.slot])
				m.seen |= f.bit
			}
			if err != nil {
				return err
			}
		}
		if n < 0 { // unknown
			if n = protowire.ConsumeFieldValue(num, wt, b); n < 0 {
				return fmt.Errorf("%s: field %d: %w", p.md.FullName(), num, protowire.ParseError(n))
			}
		}
		b = b[n:]
	}
	return nil
}

// field reads one occurrence of f, of wire type wt, at b; it returns the
// bytes read, or -1 for a wire type that makes it an unknown field.
func (d *protoDecoder) field(m *protoMsg, f *protoField, wt protowire.Type, b []byte, limit int) (int, error) {
	switch f.mode {
	case readScalar:
		if wt != f.wire {
			return -1, nil
		}
		n, err := f.read(b, &m.vals[f.slot])
		if err != nil {
			return 0, err
		}
		m.seen |= f.bit
		if f.member != 0 {
			st := m.state(f)
			st.member, st.kid = f.member, nil
		}
		return n, nil
	case readMessage:
		if wt != f.wire {
			return -1, nil
		}
		body, n, err := f.body(b)
		if err != nil {
			return 0, err
		}
		st := m.state(f)
		if f.secNanos {
			st.set = true
			return n, f.msg.readSecNanos(body, st)
		}
		if f.member != 0 && st.member != f.member {
			st.member, st.kid = f.member, nil
		}
		if st.kid == nil {
			st.kid = d.newMsg(f.msg)
		}
		return n, d.message(st.kid, body, limit)
	case readList:
		st := m.state(f)
		if f.msg != nil {
			if wt != f.wire {
				return -1, nil
			}
			body, n, err := f.body(b)
			if err != nil {
				return 0, err
			}
			kid := d.newMsg(f.msg)
			if err := d.message(kid, body, limit); err != nil {
				return 0, err
			}
			st.kids = append(st.kids, kid)
			return n, nil
		}
		if f.packed && wt == protowire.BytesType {
			body, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, f.wireErr(n)
			}
			for len(body) > 0 {
				st.elems = append(st.elems, record.Value{})
				k, err := f.read(body, &st.elems[len(st.elems)-1])
				if err != nil {
					return 0, err
				}
				body = body[k:]
			}
			return n, nil
		}
		if wt != f.wire {
			return -1, nil
		}
		st.elems = append(st.elems, record.Value{})
		n, err := f.read(b, &st.elems[len(st.elems)-1])
		if err != nil {
			return 0, err
		}
		return n, nil
	}
	if wt != protowire.BytesType {
		return -1, nil
	}
	return d.mapEntry(m, f, b, limit-1)
}

// readSecNanos decodes a Timestamp or Duration into st (merging), as
// message would decode it into a protoMsg of its own.
func (p *protoPlan) readSecNanos(b []byte, st *protoMore) error {
	sec, nanos := p.wkNumA, p.wkNumB
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: field tag: %w", p.md.FullName(), protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%s: field number %d out of range", p.md.FullName(), num)
		}
		b = b[n:]
		if wt == protowire.VarintType && (num == sec || num == nanos) {
			u, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return p.field(num).wireErr(n)
			}
			if num == sec {
				st.sec = int64(u)
			} else {
				st.nanos = int64(int32(u))
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, wt, b); n < 0 {
			return fmt.Errorf("%s: field %d: %w", p.md.FullName(), num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// mapEntry reads one entry of map f.
func (d *protoDecoder) mapEntry(m *protoMsg, f *protoField, b []byte, limit int) (int, error) {
	entry, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return 0, f.wireErr(n)
	}
	kf, vf := f.key, f.val
	key, val := kf.def, vf.def
	var kid *protoMsg
	if vf.msg != nil {
		kid = d.newMsg(vf.msg)
	}
	haveKey, badKey := false, false
	for len(entry) > 0 {
		num, wt, t := protowire.ConsumeTag(entry)
		if t < 0 {
			return 0, f.wireErr(t)
		}
		if num > protowire.MaxValidNumber {
			return 0, fmt.Errorf("field %s: entry field number %d out of range", f.fd.FullName(), num)
		}
		entry = entry[t:]
		c := -1
		var err error
		switch {
		case num == 1 && wt == kf.wire:
			c, err = kf.read(entry, &key)
			haveKey, badKey = true, false
		case num == 1:
			// The reference loses the key read so far.
			badKey = true
		case num == 2 && wt == vf.wire && kid != nil:
			var body []byte
			if body, c, err = vf.body(entry); err == nil {
				err = d.message(kid, body, limit)
			}
		case num == 2 && wt == vf.wire:
			c, err = vf.read(entry, &val)
		}
		if err != nil {
			return 0, err
		}
		if c < 0 {
			if c = protowire.ConsumeFieldValue(num, wt, entry); c < 0 {
				return 0, f.wireErr(c)
			}
		}
		entry = entry[c:]
	}
	if haveKey && badKey {
		return 0, fmt.Errorf("field %s: map entry's key has the wrong wire type", f.fd.FullName())
	}
	st := m.state(f)
	st.elems = append(st.elems, key, val)
	if kid != nil {
		st.kids = append(st.kids, kid)
	}
	return n, nil
}

func (f *protoField) wireErr(n int) error {
	return fmt.Errorf("field %s: %w", f.fd.FullName(), protowire.ParseError(n))
}

// body reads the encoding of a message value.
func (f *protoField) body(b []byte) ([]byte, int, error) {
	var v []byte
	var n int
	if f.wire == protowire.StartGroupType {
		v, n = protowire.ConsumeGroup(f.num, b)
	} else {
		v, n = protowire.ConsumeBytes(b)
	}
	if n < 0 {
		return nil, 0, f.wireErr(n)
	}
	return v, n, nil
}

// read reads one scalar of f's wire type into dst, which it leaves
// unchanged on failure.
func (f *protoField) read(b []byte, dst *record.Value) (int, error) {
	switch f.wire {
	case protowire.VarintType:
		u, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return 0, f.wireErr(n)
		}
		switch f.kind {
		case protoreflect.BoolKind:
			*dst = record.Bool(u != 0).WithSchema(f.sch)
		case protoreflect.EnumKind:
			*dst = f.enum.value(int32(u))
		case protoreflect.Int32Kind:
			*dst = record.Int(int64(int32(u))).WithSchema(f.sch)
		case protoreflect.Sint32Kind:
			*dst = record.Int(int64(int32(protowire.DecodeZigZag(u & math.MaxUint32)))).WithSchema(f.sch)
		case protoreflect.Uint32Kind:
			*dst = record.Int(int64(uint32(u))).WithSchema(f.sch)
		case protoreflect.Int64Kind:
			*dst = record.Int(int64(u)).WithSchema(f.sch)
		case protoreflect.Sint64Kind:
			*dst = record.Int(protowire.DecodeZigZag(u)).WithSchema(f.sch)
		default: // uint64
			*dst = record.Uint(u).WithSchema(f.sch)
		}
		return n, nil
	case protowire.Fixed32Type:
		u, n := protowire.ConsumeFixed32(b)
		if n < 0 {
			return 0, f.wireErr(n)
		}
		switch f.kind {
		case protoreflect.Sfixed32Kind:
			*dst = record.Int(int64(int32(u))).WithSchema(f.sch)
		case protoreflect.Fixed32Kind:
			*dst = record.Int(int64(u)).WithSchema(f.sch)
		default: // float
			*dst = record.Float32(math.Float32frombits(u)).WithSchema(f.sch)
		}
		return n, nil
	case protowire.Fixed64Type:
		u, n := protowire.ConsumeFixed64(b)
		if n < 0 {
			return 0, f.wireErr(n)
		}
		switch f.kind {
		case protoreflect.Sfixed64Kind:
			*dst = record.Int(int64(u)).WithSchema(f.sch)
		case protoreflect.Fixed64Kind:
			*dst = record.Uint(u).WithSchema(f.sch)
		default: // double
			*dst = record.Float64(math.Float64frombits(u)).WithSchema(f.sch)
		}
		return n, nil
	}
	s, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return 0, f.wireErr(n)
	}
	s = s[:len(s):len(s)]
	if f.kind == protoreflect.BytesKind {
		*dst = record.Bytes(s).WithSchema(f.sch)
		return n, nil
	}
	if f.utf8 && !utf8.Valid(s) {
		return 0, fmt.Errorf("field %s contains invalid UTF-8", f.fd.FullName())
	}
	*dst = record.StringBytes(s).WithSchema(f.sch)
	return n, nil
}

// mergeDynamic unmarshals b into m, merging, as the reference decoded a
// message of m's type; a panic of the decoder is an error (see the
// reference's unmarshalProto).
func mergeDynamic(b []byte, m *dynamicpb.Message, limit int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the decoder failed: %v", r)
		}
	}()
	return proto.UnmarshalOptions{Merge: true, AllowPartial: true, RecursionLimit: limit}.Unmarshal(b, m)
}

// initialized checks the required fields of m and of the messages it
// holds.
func (d *protoDecoder) initialized(m *protoMsg) error {
	p := m.plan
	if p.wk != wkNone {
		return nil
	}
	for _, i := range p.required {
		f := &p.fields[i]
		set := m.seen&f.bit != 0 || f.bit == 0 && !m.vals[f.slot].IsNull()
		if f.mode == readMessage {
			st := m.state(f)
			set = st.kid != nil || st.set
		}
		if !set {
			return fmt.Errorf("required field %s not set", f.fd.FullName())
		}
	}
	for i := range p.post {
		po := &p.post[i]
		if po.op == readScalar {
			continue
		}
		st := &m.more[p.more[po.slot]-1]
		if po.op == readMap {
			st.settle(&p.fields[po.field])
		}
		if st.kid != nil {
			if err := d.initialized(st.kid); err != nil {
				return err
			}
		}
		for _, kid := range st.kids {
			if err := d.initialized(kid); err != nil {
				return err
			}
		}
	}
	return nil
}

// settle sorts a map's entries by key, keeping the last of equal keys.
func (st *protoMore) settle(f *protoField) {
	if st.settled {
		return
	}
	st.settled = true
	n := len(st.elems) / 2
	if n < 2 {
		return
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	kind := f.key.kind
	less := func(a, b int) bool { return protoKeyLess(kind, st.elems[2*a], st.elems[2*b]) }
	sort.SliceStable(order, func(i, j int) bool { return less(order[i], order[j]) })
	kv := make([]record.Value, 0, 2*n)
	var kids []*protoMsg
	for i, e := range order {
		if i+1 < n && !less(e, order[i+1]) {
			continue // a later entry has the same key
		}
		kv = append(kv, st.elems[2*e], st.elems[2*e+1])
		if st.kids != nil {
			kids = append(kids, st.kids[e])
		}
	}
	st.elems, st.kids = kv, kids
}

// protoKeyLess orders map keys as the reference did.
func protoKeyLess(kind protoreflect.Kind, a, b record.Value) bool {
	switch kind {
	case protoreflect.StringKind:
		x, _ := a.AsTextShared()
		y, _ := b.AsTextShared()
		return x < y
	case protoreflect.BoolKind:
		x, _ := a.AsBool()
		y, _ := b.AsBool()
		return !x && y
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		x, _ := a.AsUint64()
		y, _ := b.AsUint64()
		return x < y
	}
	x, _ := a.AsInt64() // uint32 keys too: they are non-negative int64s
	y, _ := b.AsInt64()
	return x < y
}

var errProtoUTF8 = outOfDomain("Protobuf string is not valid UTF-8")

// checkString refuses a string that is not UTF-8 (proto2 strings are not
// checked as they are read).
func checkString(v record.Value) error {
	if v.Kind() != record.KindString {
		return nil
	}
	if s, _ := v.AsTextShared(); !utf8.ValidString(s) {
		return errProtoUTF8
	}
	return nil
}

// finish converts m; sch is the schema of a well-known type's value.
func (d *protoDecoder) finish(m *protoMsg, sch *record.Schema) (record.Value, error) {
	p := m.plan
	for u := p.unseen &^ m.seen; u != 0; u &= u - 1 {
		i := bits.TrailingZeros64(u)
		m.vals[i] = p.defaults[i]
	}
	switch p.wk {
	case wkNone:
	case wkJSON:
		b, err := protojson.Marshal(m.dyn)
		if err != nil {
			return record.Value{}, record.Errorf(record.ErrDecode, "%s: %v", p.md.FullName(), err)
		}
		return record.JSON(b), nil
	default:
		return p.wellKnown(m.vals, sch)
	}
	for i := range p.post {
		if err := d.finishSlot(m, &p.post[i]); err != nil {
			return record.Value{}, err
		}
	}
	return record.Struct(p.sch, m.vals), nil
}

func (d *protoDecoder) finishSlot(m *protoMsg, po *protoPost) error {
	p := m.plan
	s := &p.slots[po.slot]
	v := &m.vals[po.slot]
	if po.op == readScalar {
		if err := checkString(*v); err != nil {
			return inPath(string(s.fd.Name()), err)
		}
		return nil
	}
	st := &m.more[p.more[po.slot]-1]
	switch {
	case s.oneof != nil:
		if st.member == 0 {
			return nil
		}
		mem := &s.members[st.member-1]
		x := *v
		var err error
		if st.kid != nil {
			x, err = d.finish(st.kid, mem.sch)
		} else if f := &p.fields[po.members[st.member-1]]; !f.utf8 {
			err = checkString(x)
		}
		if err != nil {
			return inPath(string(s.oneof.Name())+"."+string(mem.fd.Name()), err)
		}
		ms := d.arena.alloc(len(s.members))
		for j := range s.members {
			ms[j] = record.Null(s.members[j].sch)
		}
		ms[st.member-1] = x
		*v = record.Struct(s.sch, ms)
	case po.op == readMessage:
		var x record.Value
		var err error
		switch {
		case st.set:
			x, err = secNanosValue(p.fields[po.field].msg.wk, st.sec, st.nanos, s.sch)
		case st.kid != nil:
			x, err = d.finish(st.kid, s.sch)
		default:
			return nil
		}
		if err != nil {
			return inPath(string(s.fd.Name()), err)
		}
		*v = x
	case po.op == readList:
		f := &p.fields[po.field]
		elems := st.elems
		if f.msg != nil {
			elems = make([]record.Value, len(st.kids))
			for j, kid := range st.kids {
				x, err := d.finish(kid, s.sch.Elem)
				if err != nil {
					return inPath(string(s.fd.Name()), inPath("["+strconv.Itoa(j)+"]", err))
				}
				elems[j] = x
			}
		} else if f.kind == protoreflect.StringKind && !f.utf8 {
			for j, e := range elems {
				if err := checkString(e); err != nil {
					return inPath(string(s.fd.Name()), inPath("["+strconv.Itoa(j)+"]", err))
				}
			}
		}
		if elems == nil {
			elems = []record.Value{}
		}
		*v = record.Array(s.sch, elems)
	default: // a map
		f := &p.fields[po.field]
		st.settle(f)
		kv := st.elems
		for j := 0; j < len(kv); j += 2 {
			if !f.key.utf8 {
				if err := checkString(kv[j]); err != nil {
					return inPath(string(s.fd.Name()), err)
				}
			}
			var err error
			if f.val.msg != nil {
				kv[j+1], err = d.finish(st.kids[j/2], s.sch.Elem)
			} else if !f.val.utf8 {
				err = checkString(kv[j+1])
			}
			if err != nil {
				k, _ := kv[j].AsText()
				return inPath(string(s.fd.Name()), inPath(k, err))
			}
		}
		if kv == nil {
			kv = []record.Value{}
		}
		*v = record.Map(s.sch, kv)
	}
	return nil
}

// wellKnown converts the fields of a well-known type.
func (p *protoPlan) wellKnown(vals []record.Value, sch *record.Schema) (record.Value, error) {
	switch p.wk {
	case wkTimestamp, wkDuration:
		sec, _ := vals[p.wkA].AsInt64()
		nanos, _ := vals[p.wkB].AsInt64()
		return secNanosValue(p.wk, sec, nanos, sch)
	case wkDecimal:
		scale, _ := vals[p.wkB].AsInt64()
		if scale < -1000 || scale > 1000 {
			return record.Value{}, outOfDomain("Decimal scale %d out of range", scale)
		}
		b, _ := vals[p.wkA].AsBytes()
		return record.Decimal(record.TwosComplement(b), int32(scale)).WithSchema(sch), nil
	}
	// A wrapper: its value.
	return vals[p.wkA].WithSchema(sch), nil
}

// secNanosValue converts a Timestamp or a Duration.
func secNanosValue(wk protoWK, sec, nanos int64, sch *record.Schema) (record.Value, error) {
	if wk == wkDuration {
		if nanos <= -1e9 || nanos >= 1e9 || (sec > 0 && nanos < 0) || (sec < 0 && nanos > 0) {
			return record.Value{}, outOfDomain("Duration of %d s and %d ns is not normalised", sec, nanos)
		}
		return record.Duration(sec, int32(nanos)).WithSchema(sch), nil
	}
	if nanos < 0 || nanos > 999_999_999 {
		return record.Value{}, outOfDomain("Timestamp nanos %d out of range", nanos)
	}
	t := time.Unix(sec, nanos).UTC()
	if t.Before(record.MinTime) || t.After(record.MaxTime) {
		return record.Value{}, outOfDomain("Timestamp of %d seconds is out of range", sec)
	}
	return record.Timestamp(t).WithSchema(sch), nil
}
