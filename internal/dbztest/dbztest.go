// Package dbztest builds Debezium change events as Debezium's PostgreSQL
// connector writes them, for tests: Kafka Connect's JSON with schemas
// (JsonConverter, schemas.enable=true) and the Avro schema and values that
// Confluent's AvroConverter would write for the same events. The shapes
// (the Envelope, the io.debezium.connector.postgresql.Source block, the
// Key struct, tombstones after deletes, truncate events) follow Debezium
// 3.x's documented output; the real connector's output is tested against
// the sinks in the replication tests.
package dbztest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Column is a column of a source table: its Kafka Connect type (int32,
// int64, string, boolean, float64, bytes, …), an optional logical name
// (io.debezium.time.MicroTimestamp, org.apache.kafka.connect.data.Decimal,
// …) with parameters, and whether it is nullable.
type Column struct {
	Name     string
	Type     string
	Logical  string
	Params   map[string]string
	Optional bool
}

// Table is a source table as Debezium names it: topic
// <Server>.<Schema>.<Name>, key struct of the Key columns.
type Table struct {
	Server, DB, Schema, Name string
	Columns                  []Column
	Key                      []string
}

// Topic returns Debezium's topic of the table.
func (t *Table) Topic() string { return t.Server + "." + t.Schema + "." + t.Name }

// Row is one row image: column name to value (numbers, strings, booleans,
// nil), encoded with encoding/json.
type Row map[string]any

// Event is one change: op c, r, u, d or t; Before and After images (nil
// when absent); the source position.
type Event struct {
	Op            byte
	Before, After Row
	LSN           int64
	TsMs          int64
	TxID          int64
}

// obj writes a JSON object with members in the given order.
type obj struct {
	b     bytes.Buffer
	first bool
}

func newObj() *obj { o := &obj{first: true}; o.b.WriteByte('{'); return o }

func (o *obj) raw(k string, v []byte) *obj {
	if !o.first {
		o.b.WriteByte(',')
	}
	o.first = false
	kb, _ := json.Marshal(k)
	o.b.Write(kb)
	o.b.WriteByte(':')
	o.b.Write(v)
	return o
}

func (o *obj) val(k string, v any) *obj {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return o.raw(k, b)
}

func (o *obj) bytes() []byte { o.b.WriteByte('}'); return o.b.Bytes() }

func fieldSchema(c Column) []byte {
	o := newObj().val("type", c.Type).val("optional", c.Optional)
	if c.Logical != "" {
		o.val("name", c.Logical)
		if c.Logical == "io.debezium.time.MicroTimestamp" || c.Logical == "io.debezium.time.Date" {
			o.val("version", 1)
		}
	}
	if len(c.Params) > 0 {
		o.val("parameters", c.Params)
	}
	return o.val("field", c.Name).bytes()
}

func structSchema(name string, optional bool, field string, cols []Column) []byte {
	var fs [][]byte
	for _, c := range cols {
		fs = append(fs, fieldSchema(c))
	}
	o := newObj().val("type", "struct").raw("fields", joinArray(fs)).val("optional", optional).val("name", name)
	if field != "" {
		o.val("field", field)
	}
	return o.bytes()
}

func joinArray(items [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(items, []byte{','})...), ']')
}

var sourceCols = []Column{
	{Name: "version", Type: "string"},
	{Name: "connector", Type: "string"},
	{Name: "name", Type: "string"},
	{Name: "ts_ms", Type: "int64"},
	{Name: "snapshot", Type: "string", Optional: true, Logical: "io.debezium.data.Enum", Params: map[string]string{"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"}},
	{Name: "db", Type: "string"},
	{Name: "sequence", Type: "string", Optional: true},
	{Name: "ts_us", Type: "int64", Optional: true},
	{Name: "ts_ns", Type: "int64", Optional: true},
	{Name: "schema", Type: "string"},
	{Name: "table", Type: "string"},
	{Name: "txId", Type: "int64", Optional: true},
	{Name: "lsn", Type: "int64", Optional: true},
	{Name: "xmin", Type: "int64", Optional: true},
}

var transactionCols = []Column{
	{Name: "id", Type: "string"},
	{Name: "total_order", Type: "int64"},
	{Name: "data_collection_order", Type: "int64"},
}

func (t *Table) keyCols() []Column {
	var out []Column
	for _, k := range t.Key {
		for _, c := range t.Columns {
			if c.Name == k {
				c.Optional = false
				out = append(out, c)
			}
		}
	}
	return out
}

// KeySchemaJSON is the Connect schema of the key.
func (t *Table) KeySchemaJSON() []byte {
	return structSchema(t.Topic()+".Key", false, "", t.keyCols())
}

// ValueSchemaJSON is the Connect schema of the envelope.
func (t *Table) ValueSchemaJSON() []byte {
	value := t.Topic() + ".Value"
	fields := [][]byte{
		structSchema(value, true, "before", t.Columns),
		structSchema(value, true, "after", t.Columns),
		structSchema("io.debezium.connector.postgresql.Source", false, "source", sourceCols),
		structSchema("event.block", true, "transaction", transactionCols),
		fieldSchema(Column{Name: "op", Type: "string"}),
		fieldSchema(Column{Name: "ts_ms", Type: "int64", Optional: true}),
		fieldSchema(Column{Name: "ts_us", Type: "int64", Optional: true}),
		fieldSchema(Column{Name: "ts_ns", Type: "int64", Optional: true}),
	}
	return newObj().val("type", "struct").raw("fields", joinArray(fields)).val("optional", false).
		val("name", t.Topic()+".Envelope").val("version", 2).bytes()
}

func (t *Table) rowJSON(r Row, cols []Column) []byte {
	if r == nil {
		return []byte("null")
	}
	o := newObj()
	for _, c := range cols {
		o.val(c.Name, r[c.Name])
	}
	return o.bytes()
}

// KeyRow returns the key columns of r.
func (t *Table) KeyRow(r Row) Row {
	k := Row{}
	for _, n := range t.Key {
		k[n] = r[n]
	}
	return k
}

func (t *Table) sourceJSON(e Event) []byte {
	snap := "false"
	if e.Op == 'r' {
		snap = "true"
	}
	return newObj().val("version", "3.4.0.Final").val("connector", "postgresql").val("name", t.Server).
		val("ts_ms", e.TsMs).val("snapshot", snap).val("db", t.DB).
		val("sequence", fmt.Sprintf(`["%d","%d"]`, e.LSN-8, e.LSN)).
		val("ts_us", e.TsMs*1000).val("ts_ns", e.TsMs*1000000).val("schema", t.Schema).val("table", t.Name).
		val("txId", e.TxID).val("lsn", e.LSN).val("xmin", nil).bytes()
}

func (t *Table) payloadJSON(e Event) []byte {
	return newObj().raw("before", t.rowJSON(e.Before, t.Columns)).raw("after", t.rowJSON(e.After, t.Columns)).
		raw("source", t.sourceJSON(e)).val("transaction", nil).val("op", string(e.Op)).
		val("ts_ms", e.TsMs+3).val("ts_us", (e.TsMs+3)*1000).val("ts_ns", (e.TsMs+3)*1000000).bytes()
}

// JSON returns the record key and value of e as Kafka Connect's
// JsonConverter writes them with schemas.enable=true: {"schema": …,
// "payload": …}. A truncate event has a null key.
func (t *Table) JSON(e Event) (key, value []byte) {
	value = newObj().raw("schema", t.ValueSchemaJSON()).raw("payload", t.payloadJSON(e)).bytes()
	if e.Op == 't' {
		return nil, value
	}
	img := e.After
	if img == nil {
		img = e.Before
	}
	return t.KeyJSON(img), value
}

// KeyJSON returns the key of row r with its schema.
func (t *Table) KeyJSON(r Row) []byte {
	return newObj().raw("schema", t.KeySchemaJSON()).raw("payload", t.rowJSON(t.KeyRow(r), t.keyCols())).bytes()
}

// SchemalessJSON returns e's key and value as JsonConverter writes them
// with schemas.enable=false.
func (t *Table) SchemalessJSON(e Event) (key, value []byte) {
	value = t.payloadJSON(e)
	if e.Op == 't' {
		return nil, value
	}
	img := e.After
	if img == nil {
		img = e.Before
	}
	return t.rowJSON(t.KeyRow(img), t.keyCols()), value
}

// avroType is the Avro type of a column as Confluent's AvroConverter
// writes a Connect schema.
func avroType(c Column) any {
	var base any
	switch c.Type {
	case "int8", "int16", "int32":
		base = map[string]any{"type": "int", "connect.type": c.Type}
		if c.Type == "int32" {
			base = "int"
		}
	case "int64":
		base = "long"
	case "float32":
		base = "float"
	case "float64":
		base = "double"
	case "boolean":
		base = "boolean"
	case "bytes":
		base = "bytes"
	default:
		base = "string"
	}
	if c.Logical != "" {
		m := map[string]any{"type": base, "connect.name": c.Logical}
		if s, ok := base.(map[string]any); ok {
			m["type"] = s["type"]
			m["connect.type"] = s["connect.type"]
		}
		if len(c.Params) > 0 {
			m["connect.parameters"] = c.Params
		}
		base = m
	}
	if c.Optional {
		return []any{"null", base}
	}
	return base
}

func avroRecord(name string, cols []Column) map[string]any {
	var fields []any
	for _, c := range cols {
		f := map[string]any{"name": c.Name, "type": avroType(c)}
		if c.Optional {
			f["default"] = nil
		}
		fields = append(fields, f)
	}
	return map[string]any{"type": "record", "name": name, "fields": fields}
}

// AvroValueSchema returns the Avro schema of the envelope.
func (t *Table) AvroValueSchema() string {
	ns := t.Topic()
	value := avroRecord("Value", t.Columns)
	value["namespace"] = ns
	src := avroRecord("Source", sourceCols)
	src["namespace"] = "io.debezium.connector.postgresql"
	env := map[string]any{
		"type": "record", "name": "Envelope", "namespace": ns, "connect.name": ns + ".Envelope", "connect.version": 2,
		"fields": []any{
			map[string]any{"name": "before", "type": []any{"null", value}, "default": nil},
			map[string]any{"name": "after", "type": []any{"null", ns + ".Value"}, "default": nil},
			map[string]any{"name": "source", "type": src},
			map[string]any{"name": "transaction", "type": []any{"null", map[string]any{"type": "record", "name": "block", "namespace": "event", "fields": []any{
				map[string]any{"name": "id", "type": "string"}, map[string]any{"name": "total_order", "type": "long"}, map[string]any{"name": "data_collection_order", "type": "long"}}}}, "default": nil},
			map[string]any{"name": "op", "type": "string"},
			map[string]any{"name": "ts_ms", "type": []any{"null", "long"}, "default": nil},
			map[string]any{"name": "ts_us", "type": []any{"null", "long"}, "default": nil},
			map[string]any{"name": "ts_ns", "type": []any{"null", "long"}, "default": nil},
		},
	}
	b, _ := json.Marshal(env)
	return string(b)
}

// AvroKeySchema returns the Avro schema of the key.
func (t *Table) AvroKeySchema() string {
	k := avroRecord("Key", t.keyCols())
	k["namespace"] = t.Topic()
	b, _ := json.Marshal(k)
	return string(b)
}

// AvroValue returns e as the generic value an Avro encoder takes for
// AvroValueSchema (unions of a named record as {"<full name>": …}).
func (t *Table) AvroValue(e Event) map[string]any {
	row := func(r Row) any {
		if r == nil {
			return nil
		}
		m := map[string]any{}
		for _, c := range t.Columns {
			v := avroScalar(c, r[c.Name])
			if c.Optional && v != nil {
				v = map[string]any{avroBranch(c): v}
			}
			m[c.Name] = v
		}
		return map[string]any{t.Topic() + ".Value": m}
	}
	snap := "false"
	if e.Op == 'r' {
		snap = "true"
	}
	opt := func(branch string, v any) any { return map[string]any{branch: v} }
	src := map[string]any{
		"version": "3.4.0.Final", "connector": "postgresql", "name": t.Server, "ts_ms": e.TsMs,
		"snapshot": opt("string", snap), "db": t.DB, "sequence": opt("string", fmt.Sprintf(`["%d","%d"]`, e.LSN-8, e.LSN)),
		"ts_us": opt("long", e.TsMs*1000), "ts_ns": opt("long", e.TsMs*1000000), "schema": t.Schema, "table": t.Name,
		"txId": opt("long", e.TxID), "lsn": opt("long", e.LSN), "xmin": nil,
	}
	return map[string]any{
		"before": row(e.Before), "after": row(e.After), "source": src, "transaction": nil, "op": string(e.Op),
		"ts_ms": opt("long", e.TsMs+3), "ts_us": opt("long", (e.TsMs+3)*1000), "ts_ns": opt("long", (e.TsMs+3)*1000000),
	}
}

// AvroKey returns the key of row r as an Avro generic value.
func (t *Table) AvroKey(r Row) map[string]any {
	m := map[string]any{}
	for _, c := range t.keyCols() {
		m[c.Name] = avroScalar(c, r[c.Name])
	}
	return m
}

func avroBranch(c Column) string {
	switch c.Type {
	case "int8", "int16", "int32":
		return "int"
	case "int64":
		return "long"
	case "float32":
		return "float"
	case "float64":
		return "double"
	case "boolean", "bytes":
		return c.Type
	}
	return "string"
}

func avroScalar(c Column, v any) any {
	if v == nil {
		return nil
	}
	switch c.Type {
	case "int8", "int16", "int32":
		return int32(toInt(v))
	case "int64":
		return toInt(v)
	case "float64":
		f, _ := v.(float64)
		return f
	}
	return v
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case float64:
		return int64(x)
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
