package record

import "strings"

// Type is a schema's type, as Kafka Connect names them.
type Type uint8

// Schema types (org.apache.kafka.connect.data.Schema.Type).
const (
	TypeUnknown Type = iota
	TypeInt8
	TypeInt16
	TypeInt32
	TypeInt64
	TypeFloat32
	TypeFloat64
	TypeBoolean
	TypeString
	TypeBytes
	TypeArray
	TypeMap
	TypeStruct
)

var typeNames = [...]string{"unknown", "int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes", "array", "map", "struct"}

// String returns the type's Kafka Connect name (int32, struct, …).
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "invalid"
}

// ParseType parses a Kafka Connect type name; ok is false for an unknown
// name.
func ParseType(s string) (Type, bool) {
	for i, n := range typeNames {
		if i > 0 && n == s {
			return Type(i), true
		}
	}
	return TypeUnknown, false
}

// Logical type names: Kafka Connect's, and Debezium's time types, which the
// converters turn into the matching Value kinds.
const (
	LogicalDecimal   = "org.apache.kafka.connect.data.Decimal"
	LogicalDate      = "org.apache.kafka.connect.data.Date"
	LogicalTime      = "org.apache.kafka.connect.data.Time"
	LogicalTimestamp = "org.apache.kafka.connect.data.Timestamp"

	DebeziumDate           = "io.debezium.time.Date"
	DebeziumTime           = "io.debezium.time.Time"
	DebeziumMicroTime      = "io.debezium.time.MicroTime"
	DebeziumNanoTime       = "io.debezium.time.NanoTime"
	DebeziumTimestamp      = "io.debezium.time.Timestamp"
	DebeziumMicroTimestamp = "io.debezium.time.MicroTimestamp"
	DebeziumNanoTimestamp  = "io.debezium.time.NanoTimestamp"
	DebeziumZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	DebeziumUUID           = "io.debezium.data.Uuid"
	DebeziumJSON           = "io.debezium.data.Json"

	// DecimalScaleParam is the Decimal schema parameter holding the scale.
	DecimalScaleParam = "scale"
)

// Schema describes a value, in Kafka Connect's model: a type, optional or
// not, an optional logical name with parameters, and the fields, key and
// element schemas of structs, maps and arrays. Schemas are immutable once
// built: converters cache them by registry id or by their text and share
// them between records and goroutines.
type Schema struct {
	Type     Type
	Optional bool
	// Name is the logical type (LogicalDecimal, …) or a record's full name.
	Name    string
	Version int
	Doc     string
	// Params are the schema parameters (Decimal's "scale", …).
	Params map[string]string
	// Fields of a struct, in order.
	Fields []*Field
	// Key and Elem are a map's key and value schemas; Elem is an array's
	// element schema.
	Key, Elem *Schema

	byName map[string]int
}

// Field is one field of a struct schema.
type Field struct {
	Name   string
	Index  int
	Schema *Schema

	name []byte // Name as bytes, for Value.Range without allocation
}

// NewStruct returns a struct schema with the given fields, indexed by
// name. Field indexes are set to their position.
func NewStruct(name string, optional bool, fields ...*Field) *Schema {
	s := &Schema{Type: TypeStruct, Name: name, Optional: optional, Fields: fields}
	s.index()
	return s
}

// index fills the field indexes and the name lookup of a struct schema.
func (s *Schema) index() {
	s.byName = make(map[string]int, len(s.Fields))
	for i, f := range s.Fields {
		f.Index = i
		f.name = []byte(f.Name)
		if _, dup := s.byName[f.Name]; !dup {
			s.byName[f.Name] = i
		}
	}
}

// Seal finishes a schema built by hand (a struct literal): it indexes the
// fields of every struct inside it. Converters call it once per schema
// before sharing it.
func (s *Schema) Seal() *Schema {
	if s == nil {
		return nil
	}
	if s.Type == TypeStruct {
		s.index()
		for _, f := range s.Fields {
			f.Schema.Seal()
		}
	}
	s.Key.Seal()
	s.Elem.Seal()
	return s
}

// Field returns the struct field called name, or nil.
func (s *Schema) Field(name string) *Field {
	if s == nil {
		return nil
	}
	i, ok := s.byName[name]
	if !ok {
		return nil
	}
	return s.Fields[i]
}

// String renders the schema compactly for error messages and docs:
// int32, optional string, struct{a int64, b optional string}, array<int32>,
// map<string,bytes>, Decimal(scale=2) bytes.
func (s *Schema) String() string {
	if s == nil {
		return "schemaless"
	}
	var b strings.Builder
	s.write(&b, 0)
	return b.String()
}

func (s *Schema) write(b *strings.Builder, depth int) {
	if s.Optional {
		b.WriteString("optional ")
	}
	if s.Name != "" && s.Type != TypeStruct {
		b.WriteString(s.Name)
		if sc, ok := s.Params[DecimalScaleParam]; ok {
			b.WriteString("(scale=" + sc + ")")
		}
		b.WriteByte(' ')
	}
	b.WriteString(s.Type.String())
	if depth > 4 {
		return
	}
	switch s.Type {
	case TypeStruct:
		b.WriteByte('{')
		for i, f := range s.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Name + " ")
			if f.Schema != nil {
				f.Schema.write(b, depth+1)
			}
		}
		b.WriteByte('}')
	case TypeArray:
		if s.Elem != nil {
			b.WriteByte('<')
			s.Elem.write(b, depth+1)
			b.WriteByte('>')
		}
	case TypeMap:
		if s.Key != nil && s.Elem != nil {
			b.WriteByte('<')
			s.Key.write(b, depth+1)
			b.WriteByte(',')
			s.Elem.write(b, depth+1)
			b.WriteByte('>')
		}
	}
}
