package postgres

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeValue(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		null   bool
		fields map[string]string // field → raw JSON after normalisation
		err    bool
	}{
		{name: "tombstone", in: "\x00nil", null: true},
		{name: "json null", in: "null", null: true},
		{name: "object", in: ` {"a": 1, "b": "x", "c": null} `, fields: map[string]string{"a": "1", "b": `"x"`, "c": "null"}},
		{name: "big number stays exact", in: `{"n": 123456789012345678901234567890.000000000000000001}`,
			fields: map[string]string{"n": "123456789012345678901234567890.000000000000000001"}},
		{name: "invalid json", in: `{"a":`, err: true},
		{name: "not an object", in: `[1,2]`, err: true},
		{name: "string", in: `"x"`, err: true},
		{name: "invalid utf8", in: "{\"a\":\"\xff\"}", err: true},
		{name: "envelope", in: `{"schema":{"type":"struct","fields":[
				{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
				{"field":"neg","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"3"}},
				{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},
				{"field":"at","type":"int32","name":"org.apache.kafka.connect.data.Time"},
				{"field":"ts","type":"int64","name":"org.apache.kafka.connect.data.Timestamp"},
				{"field":"us","type":"int64","name":"io.debezium.time.MicroTimestamp"},
				{"field":"days","type":"array","items":{"type":"int32","name":"org.apache.kafka.connect.data.Date"}},
				{"field":"raw","type":"bytes"},
				{"field":"n","type":"int64"}]},
			"payload":{"price":"MDk=","neg":"/w==","day":19000,"at":45296789,"ts":1700000000000,"us":1700000000000001,
				"days":[0,null,1],"raw":"AAEC","n":7,"extra":true}}`,
			fields: map[string]string{"price": "123.45", "neg": "-0.001", "day": `"2022-01-08"`, "at": `"12:34:56.789"`,
				"ts": `"2023-11-14T22:13:20Z"`, "us": `"2023-11-14T22:13:20.000001Z"`, "days": `["1970-01-01",null,"1970-01-02"]`,
				"raw": `"AAEC"`, "n": "7", "extra": "true"}},
		{name: "envelope null payload", in: `{"schema":{"type":"struct","fields":[]},"payload":null}`, null: true},
		{name: "envelope without schema", in: `{"schema":null,"payload":{"a":1}}`, fields: map[string]string{"a": "1"}},
		{name: "envelope primitive payload", in: `{"schema":{"type":"string"},"payload":"x"}`, err: true},
		{name: "bad decimal", in: `{"schema":{"type":"struct","fields":[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]},"payload":{"p":"%%%"}}`, err: true},
		{name: "not an envelope: schema is not a schema", in: `{"schema":"x","payload":{"a":1}}`,
			fields: map[string]string{"schema": `"x"`, "payload": `{"a":1}`}},
		{name: "not an envelope: three keys", in: `{"schema":{"type":"struct"},"payload":{},"x":1}`,
			fields: map[string]string{"schema": `{"type":"struct"}`, "payload": `{}`, "x": "1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			if c.in == "\x00nil" {
				in = nil
			}
			d, err := decodeValue(in)
			if c.err {
				if err == nil || !errors.Is(err, ErrDecode) {
					t.Fatalf("decodeValue(%s) = %+v, %v; want an ErrDecode", c.in, d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Null != c.null {
				t.Fatalf("Null = %v, want %v", d.Null, c.null)
			}
			if len(d.Fields) != len(c.fields) {
				t.Fatalf("fields = %s, want %v", d.Fields, c.fields)
			}
			for k, want := range c.fields {
				if got := string(d.Fields[k]); got != want {
					t.Errorf("field %s = %s, want %s", k, got, want)
				}
			}
		})
	}
}

func TestDecodeKey(t *testing.T) {
	for in, want := range map[string]string{`42`: `42`, `"k"`: `"k"`, `user-1`: `"user-1"`, ` 7 `: `7`} {
		d, err := decodeKey([]byte(in))
		if err != nil || string(d.Scalar) != want {
			t.Errorf("decodeKey(%q) = %s, %v; want %s", in, d.Scalar, err, want)
		}
	}
	d, err := decodeKey([]byte(`{"schema":{"type":"int64"},"payload":5}`))
	if err != nil || string(d.Scalar) != "5" {
		t.Errorf("envelope key = %s, %v", d.Scalar, err)
	}
	d, err = decodeKey([]byte(`{"id":5}`))
	if err != nil || string(d.Fields["id"]) != "5" {
		t.Errorf("object key = %v, %v", d.Fields, err)
	}
}

func TestDecimalText(t *testing.T) {
	for _, c := range []struct {
		b     []byte
		scale int
		want  string
	}{
		{[]byte{0x30, 0x39}, 2, "123.45"},
		{[]byte{0x30, 0x39}, 0, "12345"},
		{[]byte{0x30, 0x39}, -2, "1234500"},
		{[]byte{0x05}, 3, "0.005"},
		{[]byte{0xff}, 0, "-1"},
		{[]byte{0xff, 0x00}, 1, "-25.6"},
		{[]byte{0x80}, 2, "-1.28"},
		{nil, 2, "0.00"},
	} {
		if got := decimalText(twosComplement(c.b), c.scale); got != c.want {
			t.Errorf("decimalText(%x, %d) = %s, want %s", c.b, c.scale, got, c.want)
		}
	}
}

// FuzzDecodeValue checks the decoder never panics, only fails with
// ErrDecode, returns valid JSON per field, and that every field converts
// (or fails cleanly) to every column kind.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `null`, `{}`, `[]`, `"x"`, `{"a":"\u0000"}`, `{"a":1e999999999}`, `{"a":-0.0e-0}`,
		`{"schema":{"type":"struct","fields":[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]},"payload":{"p":"AQID"}}`,
		`{"schema":{"type":"struct","fields":[{"field":"d","type":"int32","name":"org.apache.kafka.connect.data.Date"}]},"payload":{"d":-719162}}`,
		`{"schema":{"type":"struct","fields":[{"field":"t","type":"int64","name":"io.debezium.time.NanoTime"}]},"payload":{"t":86400000000000}}`,
		`{"schema":{"type":"struct","fields":[{"field":"a","type":"array","items":{"type":"int64","name":"org.apache.kafka.connect.data.Timestamp"}}]},"payload":{"a":[1,2,null]}}`,
		`{"schema":null,"payload":null}`, `{"a":[1,[2,[3]],{"b":null}]}`, "{\"a\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	kinds := []pgType{}
	for k := kindText; k <= kindBytea; k++ {
		kinds = append(kinds, pgType{Kind: k})
	}
	kinds = append(kinds, pgType{Kind: kindArray, Elem: &pgType{Kind: kindInt8}}, pgType{Kind: kindArray, Elem: &pgType{Kind: kindText}})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeValue(b)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error does not wrap ErrDecode: %v", err)
			}
			return
		}
		if d.Null {
			return
		}
		if d.Fields == nil {
			t.Fatal("non-null value without fields")
		}
		for name, raw := range d.Fields {
			if !json.Valid(raw) {
				t.Fatalf("field %q: invalid JSON %q", name, raw)
			}
			for i := range kinds {
				c := &column{Name: name, Type: kinds[i], MaxLen: 10}
				v, err := coerce(c, raw)
				if err != nil && !errors.Is(err, ErrCoerce) {
					t.Fatalf("coerce %s into %s: error does not wrap ErrCoerce: %v", raw, kinds[i].Kind, err)
				}
				if err == nil && c.Type.Kind == kindText {
					if s, ok := v.(string); ok && strings.IndexByte(s, 0) >= 0 {
						t.Fatalf("text with NUL accepted: %q", raw)
					}
				}
			}
		}
		// Normalised fields re-encoded as a schemaless object decode to
		// themselves.
		again, err := json.Marshal(d.Fields)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := decodeValue(again)
		if err != nil {
			t.Fatalf("re-decode %s: %v", again, err)
		}
		if _, _, isEnv := envelope(d.Fields); !isEnv && len(d2.Fields) != len(d.Fields) {
			t.Fatalf("re-decode changed the fields: %s vs %s", d.Fields, d2.Fields)
		}
	})
}
