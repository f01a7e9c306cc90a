package convert

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/txsink/txsink/connectors/record"
)

// fields renders a struct value's fields as JSON text per field.
func fields(t *testing.T, v record.Value) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := v.Range(func(name []byte, fv record.Value) error {
		b, err := fv.AppendJSON(nil)
		out[string(name)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestJSONConverter(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		mode   string // "" default, "true", "false": schemas.enable
		null   bool
		kind   record.Kind
		fields map[string]string // field → JSON text
		err    bool
	}{
		{name: "tombstone", in: "\x00nil", null: true},
		{name: "json null", in: "null", null: true},
		{name: "object", in: ` {"a": 1, "b": "x", "c": null} `, fields: map[string]string{"a": "1", "b": `"x"`, "c": "null"}},
		{name: "big number stays exact", in: `{"n": 123456789012345678901234567890.000000000000000001}`,
			fields: map[string]string{"n": "123456789012345678901234567890.000000000000000001"}},
		{name: "invalid json", in: `{"a":`, err: true},
		{name: "array", in: `[1,2]`, kind: record.KindArray},
		{name: "string", in: `"x"`, kind: record.KindString},
		{name: "invalid utf8", in: "{\"a\":\"\xff\"}", err: true},
		{name: "envelope", in: `{"schema":{"type":"struct","fields":[
				{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
				{"field":"neg","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"3"}},
				{"field":"num","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
				{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},
				{"field":"at","type":"int32","name":"org.apache.kafka.connect.data.Time"},
				{"field":"ts","type":"int64","name":"org.apache.kafka.connect.data.Timestamp"},
				{"field":"us","type":"int64","name":"io.debezium.time.MicroTimestamp"},
				{"field":"days","type":"array","items":{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date"}},
				{"field":"raw","type":"bytes"},
				{"field":"opt","type":"string","optional":true},
				{"field":"m","type":"map","keys":{"type":"int32"},"values":{"type":"string"}},
				{"field":"n","type":"int64"}]},
			"payload":{"price":"MDk=","neg":"/w==","num":1.5,"day":19000,"at":45296789,"ts":1700000000000,"us":1700000000000001,
				"days":[0,null,1],"raw":"AAEC","m":[[1,"one"]],"n":7,"extra":true}}`,
			fields: map[string]string{"price": "123.45", "neg": "-0.001", "num": "1.50", "day": `"2022-01-08"`, "at": `"12:34:56.789"`,
				"ts": `"2023-11-14T22:13:20Z"`, "us": `"2023-11-14T22:13:20.000001Z"`, "days": `["1970-01-01",null,"1970-01-02"]`,
				"raw": `"AAEC"`, "opt": "null", "m": `[[1,"one"]]`, "n": "7"}},
		{name: "envelope null payload", in: `{"schema":{"type":"struct","fields":[]},"payload":null}`, null: true},
		{name: "envelope without schema", in: `{"schema":null,"payload":{"a":1}}`, fields: map[string]string{"a": "1"}},
		{name: "envelope primitive payload", in: `{"schema":{"type":"string"},"payload":"x"}`, kind: record.KindString},
		{name: "bad decimal", in: `{"schema":{"type":"struct","fields":[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]},"payload":{"p":"%%%"}}`, err: true},
		{name: "required field null", in: `{"schema":{"type":"struct","fields":[{"field":"p","type":"int32"}]},"payload":{}}`, err: true},
		{name: "int32 out of range", in: `{"schema":{"type":"struct","fields":[{"field":"p","type":"int32"}]},"payload":{"p":2147483648}}`, err: true},
		{name: "unknown schema type", in: `{"schema":{"type":"int128"},"payload":1}`, err: true},
		{name: "not an envelope: schema is not a schema", in: `{"schema":"x","payload":{"a":1}}`,
			fields: map[string]string{"schema": `"x"`, "payload": `{"a":1}`}},
		{name: "not an envelope: three keys", in: `{"schema":{"type":"struct"},"payload":{},"x":1}`,
			fields: map[string]string{"schema": `{"type":"struct"}`, "payload": `{}`, "x": "1"}},
		{name: "schemas.enable=false reads an envelope as plain JSON", mode: "false", in: `{"schema":null,"payload":{"a":1}}`,
			fields: map[string]string{"schema": "null", "payload": `{"a":1}`}},
		{name: "schemas.enable=true refuses plain JSON", mode: "true", in: `{"a":1}`, err: true},
		{name: "schemas.enable=true takes an envelope", mode: "true", in: `{"schema":{"type":"struct","fields":[{"field":"a","type":"int8"}]},"payload":{"a":1}}`,
			fields: map[string]string{"a": "1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conv := Converter(NewDefaultJSON(false))
			if c.mode != "" {
				var err error
				if conv, err = New(JSONClass, map[string]string{"schemas.enable": c.mode}, false); err != nil {
					t.Fatal(err)
				}
			}
			in := []byte(c.in)
			if c.in == "\x00nil" {
				in = nil
			}
			v, err := conv.Convert(context.Background(), "t", nil, in, &Buffer{})
			if c.err {
				if err == nil || !errors.Is(err, record.ErrDecode) {
					t.Fatalf("Convert(%s) = %v, %v; want an ErrDecode", c.in, v.GoString(), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.IsNull() != c.null {
				t.Fatalf("null = %v, want %v", v.IsNull(), c.null)
			}
			if c.fields == nil {
				if !c.null && v.Kind() != c.kind {
					t.Fatalf("kind %s, want %s", v.Kind(), c.kind)
				}
				return
			}
			got := fields(t, v)
			if len(got) != len(c.fields) {
				t.Fatalf("fields = %v, want %v", got, c.fields)
			}
			for k, want := range c.fields {
				if got[k] != want {
					t.Errorf("field %s = %s, want %s", k, got[k], want)
				}
			}
		})
	}
}

func TestJSONKey(t *testing.T) {
	conv := NewDefaultJSON(true)
	for in, want := range map[string]string{`42`: `42`, `"k"`: `"k"`, `user-1`: `"user-1"`, ` 7 `: `7`, `{"schema":{"type":"int64"},"payload":5}`: `5`, `{"id":5}`: `{"id":5}`} {
		v, err := conv.Convert(context.Background(), "t", nil, []byte(in), &Buffer{})
		if err != nil {
			t.Fatalf("key %q: %v", in, err)
		}
		if got, _ := v.AppendJSON(nil); string(got) != want {
			t.Errorf("key %q = %s, want %s", in, got, want)
		}
	}
}

func TestPipelineSettings(t *testing.T) {
	if _, err := NewPipeline(map[string]string{"value.converter": "com.example.Nope"}); err == nil || !strings.Contains(err.Error(), "unknown converter class") {
		t.Errorf("unknown class: %v", err)
	}
	_, err := NewPipeline(map[string]string{"key.converter": JSONClass, "key.converter.schemas.enable": "maybe"})
	if err == nil || !strings.HasPrefix(err.Error(), "key.converter.schemas.enable:") {
		t.Errorf("bad setting: %v", err)
	}
	p, err := NewPipeline(map[string]string{"value.converter": StringClass, "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"})
	if err != nil {
		t.Fatal(err)
	}
	_ = p
}

// FuzzJSONConverter: the converter never panics, fails only with
// ErrDecode, and a schemaless object it accepts renders back to JSON that
// encoding/json decodes to the same members.
func FuzzJSONConverter(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `null`, `{}`, `[]`, `"x"`, `{"a":"\u0000"}`, `{"a":1e999999999}`, `{"a":-0.0e-0}`,
		`{"schema":{"type":"struct","fields":[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]},"payload":{"p":"AQID"}}`,
		`{"schema":{"type":"struct","fields":[{"field":"d","type":"int32","name":"org.apache.kafka.connect.data.Date"}]},"payload":{"d":-719162}}`,
		`{"schema":{"type":"struct","fields":[{"field":"t","type":"int64","name":"io.debezium.time.NanoTime"}]},"payload":{"t":86400000000000}}`,
		`{"schema":{"type":"struct","fields":[{"field":"a","type":"array","items":{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp"}}]},"payload":{"a":[1,2,null]}}`,
		`{"schema":null,"payload":null}`, `{"a":[1,[2,[3]],{"b":null}]}`, "{\"a\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	conv := NewDefaultJSON(false)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := conv.Convert(context.Background(), "t", nil, b, &Buffer{})
		if err != nil {
			if !errors.Is(err, record.ErrDecode) {
				t.Fatalf("error does not wrap ErrDecode: %v", err)
			}
			return
		}
		out, err := v.AppendJSON(nil)
		if err != nil {
			t.Fatalf("render %q: %v", b, err)
		}
		if !json.Valid(out) {
			t.Fatalf("render %q: invalid JSON %q", b, out)
		}
		if v.Schemaless() && v.Kind() == record.KindStruct {
			var a, c map[string]json.RawMessage
			if json.Unmarshal(b, &a) != nil || json.Unmarshal(out, &c) != nil || len(a) != len(c) {
				t.Fatalf("schemaless object %q rendered as %q", b, out)
			}
		}
	})
}

// The JsonConverter writes FLOAT32 and FLOAT64 as "float" and "double"
// (Debezium's JSON events too); Connect's own names are read as well.
func TestConnectSchemaFloatNames(t *testing.T) {
	for name, want := range map[string]record.Type{"float": record.TypeFloat32, "double": record.TypeFloat64, "float32": record.TypeFloat32, "float64": record.TypeFloat64} {
		s, err := ParseConnectSchema([]byte(`{"type":"struct","fields":[{"field":"x","type":"` + name + `"}]}`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := s.Field("x").Schema.Type; got != want {
			t.Errorf("%s read as %s, want %s", name, got, want)
		}
	}
	v, err := NewDefaultJSON(false).Convert(context.Background(), "t", nil,
		[]byte(`{"schema":{"type":"struct","fields":[{"field":"price","type":"double"},{"field":"ratio","type":"float","optional":true}]},"payload":{"price":12.5,"ratio":0.25}}`), &Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fields(t, v); got["price"] != "12.5" || got["ratio"] != "0.25" {
		t.Errorf("fields %v", got)
	}
	if _, err := ParseConnectSchema([]byte(`{"type":"real"}`)); err == nil {
		t.Error("an unknown type name was accepted")
	}
}
