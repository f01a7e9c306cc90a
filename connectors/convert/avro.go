package convert

import (
	"context"
	"strconv"
	"strings"

	"github.com/twmb/avro"
	"github.com/twmb/avro/atype"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/connectors/record"
)

// AvroClass is Confluent's Avro converter.
const AvroClass = "io.confluent.connect.avro.AvroConverter"

func init() {
	register(Plugin{Class: AvroClass, Aliases: []string{"AvroConverter", "avro"}, Version: "7.9.0", New: newAvroConverter})
}

// Avro is Confluent's AvroConverter: records in Confluent's wire format,
// each decoded with the writer schema its id names (so records of several
// versions of a subject in one topic each decode with their own), into
// Values described by a Connect schema built once per id, following
// Confluent's AvroData mapping. docs/formats.md has the mapping table.
type Avro struct {
	reg   *registry
	progs idCache[*avroProgram]
}

func newAvroConverter(settings map[string]string, _ bool, rp RegistryPolicy) (Converter, error) {
	reg, err := newRegistry(settings, rp)
	if err != nil {
		return nil, err
	}
	return &Avro{reg: reg}, nil
}

// Convert decodes one record. See the type's documentation and Converter.
// The result's strings and bytes refer to data, and its records' fields
// to buf: it is valid until buf's next use.
func (c *Avro) Convert(ctx context.Context, _ string, _ []kgo.RecordHeader, data []byte, buf *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	id, payload, err := wireHeader(data)
	if err != nil {
		return record.Value{}, err
	}
	p, err := compiledSchema(ctx, c.reg, &c.progs, "avro", id, compileAvro)
	if err != nil {
		return record.Value{}, err
	}
	var arena *valueArena
	if buf != nil {
		arena = &buf.arena
		arena.reset()
	}
	return p.decode(payload, arena)
}

// avroProgram decodes the records of one writer schema.
type avroProgram struct {
	id   uint32
	root *avroNode
}

func (p *avroProgram) decode(payload []byte, arena *valueArena) (record.Value, error) {
	r := avroReader{b: payload, arena: arena}
	v, err := p.root.decode(&r)
	if err != nil {
		return record.Value{}, err
	}
	// Like Confluent's deserializer, bytes after the value are ignored.
	return v, nil
}

// compileAvro parses a registry's Avro schema, with its references, and
// builds its decoder and Connect schema.
func compileAvro(s *regSchema) (*avroProgram, error) {
	id := uint32(s.ID)
	if s.Type != sr.TypeAvro {
		return nil, badSchema(id, "is a %s schema, not Avro", s.Type)
	}
	var cache avro.SchemaCache
	for _, ref := range s.Refs {
		if ref.Type != sr.TypeAvro {
			return nil, badSchema(id, "reference %q is a %s schema, not Avro", ref.Name, ref.Type)
		}
		if _, err := cache.Parse(ref.Text); err != nil {
			return nil, badSchema(id, "referenced Avro schema %q: %v", ref.Name, err)
		}
	}
	parsed, err := cache.Parse(s.Text)
	if err != nil {
		return nil, badSchema(id, "Avro schema: %v", err)
	}
	b := avroBuilder{id: id}
	root, err := b.node(parsed.Root().ExpandReferences(), false, 0)
	if err != nil {
		return nil, err
	}
	root.sch.Seal()
	return &avroProgram{id: id, root: root}, nil
}

// avroOp is what a node decodes.
type avroOp uint8

const (
	avroNull avroOp = iota
	avroBoolean
	avroInt
	avroLong
	avroFloat
	avroDouble
	avroString
	avroBytes
	avroFixed
	avroEnum
	avroArray
	avroMap
	avroMapEntries // an array of Connect's MapEntry records: a map with any keys
	avroRecord
	avroOptional // a union of null and one other branch
	avroUnion    // any other union: a struct with one optional field per branch
)

// avroConv turns a decoded primitive into a logical value.
type avroConv uint8

const (
	convNone avroConv = iota
	convDecimal
	convDate
	convTimeMillis
	convTimeMicros
	convTimeNanos
	convTimestampMillis
	convTimestampMicros
	convTimestampNanos
	convLocalMillis
	convLocalMicros
	convLocalNanos
	convUUIDFixed
)

// avroNode decodes one Avro schema node into Values of schema sch.
type avroNode struct {
	op       avroOp
	conv     avroConv
	sch      *record.Schema
	fields   []avroField // record
	elem     *avroNode   // array items, map values, optional's branch
	branches []*avroNode // union (nil for the null branch)
	nullIdx  int         // optional: the null branch's index
	symbols  []record.Value
	size     int   // fixed
	scale    int32 // decimal
	minBytes int   // the fewest bytes one value takes on the wire
}

type avroField struct {
	name string
	node *avroNode
}

type avroBuilder struct{ id uint32 }

var avroPrimitiveTypes = map[string]record.Type{
	atype.Boolean: record.TypeBoolean, atype.Int: record.TypeInt32, atype.Long: record.TypeInt64,
	atype.Float: record.TypeFloat32, atype.Double: record.TypeFloat64, atype.String: record.TypeString,
	atype.Bytes: record.TypeBytes,
}

// Schema names and parameters of Confluent's AvroData.
const (
	avroUnionName       = "io.confluent.connect.avro.Union"
	avroMapEntryName    = "io.confluent.connect.avro.MapEntry"
	avroFixedSizeParam  = "connect.avro.fixed.size"
	decimalPrecisionKey = "connect.decimal.precision"
	// LocalTimestampName names the schema of Avro's local-timestamp
	// values (a wall time without a zone), for which Kafka Connect has no
	// logical type.
	LocalTimestampName = "local-timestamp"
)

func (b *avroBuilder) node(n *avro.SchemaNode, optional bool, depth int) (*avroNode, error) {
	if depth > 200 {
		return nil, badSchema(b.id, "Avro schema nested deeper than 200 levels")
	}
	connectName, _ := n.Props["connect.name"].(string)
	sch := &record.Schema{Optional: optional, Doc: n.Doc}
	out := &avroNode{sch: sch}
	switch n.Type {
	case atype.Null:
		out.op = avroNull
		sch.Type, sch.Optional = record.TypeString, true
		return out, nil
	case atype.Boolean, atype.Int, atype.Long, atype.Float, atype.Double, atype.String, atype.Bytes:
		sch.Type = avroPrimitiveTypes[n.Type]
		out.op = map[string]avroOp{atype.Boolean: avroBoolean, atype.Int: avroInt, atype.Long: avroLong,
			atype.Float: avroFloat, atype.Double: avroDouble, atype.String: avroString, atype.Bytes: avroBytes}[n.Type]
		out.minBytes = map[avroOp]int{avroFloat: 4, avroDouble: 8}[out.op]
		if out.minBytes == 0 {
			out.minBytes = 1
		}
		if ct, _ := n.Props["connect.type"].(string); n.Type == atype.Int && (ct == "int8" || ct == "int16") {
			sch.Type, _ = record.ParseType(ct)
		}
		if err := b.logical(n, out, connectName); err != nil {
			return nil, err
		}
		return out, nil
	case atype.Fixed:
		out.op, out.size, out.minBytes = avroFixed, n.Size, n.Size
		sch.Type, sch.Name = record.TypeBytes, fullName(n)
		sch.Params = map[string]string{avroFixedSizeParam: strconv.Itoa(n.Size)}
		if err := b.logical(n, out, connectName); err != nil {
			return nil, err
		}
		return out, nil
	case atype.Enum:
		out.op, out.minBytes = avroEnum, 1
		sch.Type, sch.Name = record.TypeString, fullName(n)
		out.symbols = make([]record.Value, len(n.Symbols))
		for i, s := range n.Symbols {
			out.symbols[i] = record.String(s).WithSchema(sch)
		}
		return out, nil
	case atype.Array:
		if n.Items == nil {
			return nil, badSchema(b.id, "Avro array without items")
		}
		if it := n.Items; it.Type == atype.Record && fullName(it) == avroMapEntryName && len(it.Fields) == 2 &&
			it.Fields[0].Name == "key" && it.Fields[1].Name == "value" {
			k, err := b.node(&it.Fields[0].Type, false, depth+1)
			if err != nil {
				return nil, err
			}
			v, err := b.node(&it.Fields[1].Type, false, depth+1)
			if err != nil {
				return nil, err
			}
			out.op, out.minBytes = avroMapEntries, 1
			out.fields = []avroField{{"key", k}, {"value", v}}
			sch.Type, sch.Key, sch.Elem = record.TypeMap, k.sch, v.sch
			return out, nil
		}
		e, err := b.node(n.Items, false, depth+1)
		if err != nil {
			return nil, err
		}
		out.op, out.elem, out.minBytes = avroArray, e, 1
		sch.Type, sch.Elem = record.TypeArray, e.sch
		return out, nil
	case atype.Map:
		if n.Values == nil {
			return nil, badSchema(b.id, "Avro map without values")
		}
		e, err := b.node(n.Values, false, depth+1)
		if err != nil {
			return nil, err
		}
		out.op, out.elem, out.minBytes = avroMap, e, 1
		sch.Type, sch.Key, sch.Elem = record.TypeMap, &record.Schema{Type: record.TypeString}, e.sch
		return out, nil
	case atype.Record, atype.Error:
		out.op = avroRecord
		sch.Type, sch.Name = record.TypeStruct, fullName(n)
		for i := range n.Fields {
			f := &n.Fields[i]
			fn, err := b.node(&f.Type, false, depth+1)
			if err != nil {
				return nil, err
			}
			if f.Doc != "" && fn.sch.Doc == "" {
				fn.sch.Doc = f.Doc
			}
			out.fields = append(out.fields, avroField{f.Name, fn})
			sch.Fields = append(sch.Fields, &record.Field{Name: f.Name, Schema: fn.sch})
			out.minBytes += fn.minBytes
		}
		return out, nil
	case atype.Union:
		return b.union(n, depth)
	}
	return nil, badSchema(b.id, "Avro type %q is recursive or unknown: recursive schemas have no Kafka Connect schema", n.Type)
}

// union maps a union as Confluent's AvroData does: null and one other
// branch is that branch, optional; anything else a struct named
// io.confluent.connect.avro.Union with one optional field per non-null
// branch (named by the branch's type, or a named type's short name), of
// which the record sets one; a null branch makes the struct optional.
func (b *avroBuilder) union(n *avro.SchemaNode, depth int) (*avroNode, error) {
	nulls := 0
	for _, br := range n.Branches {
		if br.Type == atype.Null {
			nulls++
		}
	}
	if len(n.Branches) == 2 && nulls == 1 {
		out := &avroNode{op: avroOptional, minBytes: 1}
		for i := range n.Branches {
			if n.Branches[i].Type == atype.Null {
				out.nullIdx = i
				continue
			}
			e, err := b.node(&n.Branches[i], true, depth+1)
			if err != nil {
				return nil, err
			}
			out.elem, out.sch = e, e.sch
		}
		return out, nil
	}
	sch := &record.Schema{Type: record.TypeStruct, Name: avroUnionName, Optional: nulls > 0}
	out := &avroNode{op: avroUnion, sch: sch, minBytes: 1}
	seen := map[string]bool{}
	for i := range n.Branches {
		br := &n.Branches[i]
		if br.Type == atype.Null {
			out.branches = append(out.branches, nil)
			continue
		}
		e, err := b.node(br, true, depth+1)
		if err != nil {
			return nil, err
		}
		name := br.Type
		if br.Type == atype.Record || br.Type == atype.Error || br.Type == atype.Enum || br.Type == atype.Fixed {
			name = br.Name
			if i := strings.LastIndexByte(name, '.'); i >= 0 {
				name = name[i+1:]
			}
		}
		if seen[name] {
			return nil, badSchema(b.id, "Avro union has two branches named %q", name)
		}
		seen[name] = true
		out.branches = append(out.branches, e)
		sch.Fields = append(sch.Fields, &record.Field{Name: name, Schema: e.sch})
	}
	return out, nil
}

// logical applies an Avro logical type (or, without one, a Kafka Connect
// or Debezium logical name in "connect.name") to a primitive or fixed
// node. A logical type on a base type it does not apply to is ignored, as
// the Avro specification says.
func (b *avroBuilder) logical(n *avro.SchemaNode, out *avroNode, connectName string) error {
	sch := out.sch
	set := func(conv avroConv, name string) {
		out.conv = conv
		if name != "" {
			sch.Name = name
		}
	}
	intish := out.op == avroInt
	longish := out.op == avroLong
	switch n.LogicalType {
	case atype.Decimal:
		if out.op != avroBytes && out.op != avroFixed {
			return nil
		}
		out.conv, out.scale = convDecimal, int32(n.Scale)
		sch.Name = record.LogicalDecimal
		sch.Params = map[string]string{record.DecimalScaleParam: strconv.Itoa(n.Scale)}
		if n.Precision > 0 {
			sch.Params[decimalPrecisionKey] = strconv.Itoa(n.Precision)
		}
		return nil
	case atype.Date:
		if intish {
			set(convDate, record.LogicalDate)
		}
		return nil
	case atype.TimeMillis:
		if intish {
			set(convTimeMillis, record.LogicalTime)
		}
		return nil
	case atype.TimeMicros:
		if longish {
			set(convTimeMicros, record.LogicalTime)
		}
		return nil
	case atype.TimestampMillis, atype.TimestampMicros, atype.TimestampNanos:
		if longish {
			set(map[string]avroConv{atype.TimestampMillis: convTimestampMillis, atype.TimestampMicros: convTimestampMicros, atype.TimestampNanos: convTimestampNanos}[n.LogicalType], record.LogicalTimestamp)
		}
		return nil
	case atype.LocalTimestampMillis, atype.LocalTimestampMicros, atype.LocalTimestampNanos:
		if longish {
			set(map[string]avroConv{atype.LocalTimestampMillis: convLocalMillis, atype.LocalTimestampMicros: convLocalMicros, atype.LocalTimestampNanos: convLocalNanos}[n.LogicalType], LocalTimestampName)
		}
		return nil
	case atype.UUID:
		if out.op == avroFixed && n.Size == 16 {
			out.conv = convUUIDFixed
			sch.Type, sch.Params = record.TypeString, nil
		}
		return nil
	}
	// Kafka Connect's and Debezium's logical names, for schemas written
	// without an Avro logical type.
	switch connectName {
	case record.LogicalDecimal:
		if out.op == avroBytes || out.op == avroFixed {
			params, _ := n.Props["connect.parameters"].(map[string]any)
			scale := 0
			if s, ok := params[record.DecimalScaleParam].(string); ok {
				v, err := strconv.Atoi(s)
				if err != nil || v < -1000 || v > 1000 {
					return badSchema(b.id, "Decimal with an invalid scale %q", s)
				}
				scale = v
			}
			out.conv, out.scale = convDecimal, int32(scale)
			sch.Name, sch.Params = record.LogicalDecimal, map[string]string{record.DecimalScaleParam: strconv.Itoa(scale)}
		}
	default:
		if l, ok := connectIntLogical[connectName]; ok {
			if (l.long && longish) || (!l.long && intish) {
				set(l.conv, connectName)
			}
			return nil
		}
		if connectName != "" && sch.Name == "" {
			sch.Name = connectName
		}
	}
	return nil
}

// connectIntLogical maps Kafka Connect's and Debezium's logical names on
// an int (long false) or a long to their conversions.
var connectIntLogical = map[string]struct {
	conv avroConv
	long bool
}{
	record.LogicalDate: {convDate, false}, record.DebeziumDate: {convDate, false},
	record.LogicalTime: {convTimeMillis, false}, record.DebeziumTime: {convTimeMillis, false},
	record.DebeziumMicroTime: {convTimeMicros, true}, record.DebeziumNanoTime: {convTimeNanos, true},
	record.LogicalTimestamp: {convTimestampMillis, true}, record.DebeziumTimestamp: {convTimestampMillis, true},
	record.DebeziumMicroTimestamp: {convTimestampMicros, true}, record.DebeziumNanoTimestamp: {convTimestampNanos, true},
}

func fullName(n *avro.SchemaNode) string {
	if n.Namespace == "" || strings.Contains(n.Name, ".") {
		return n.Name
	}
	return n.Namespace + "." + n.Name
}
