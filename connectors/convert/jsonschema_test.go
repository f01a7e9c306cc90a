package convert

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

const jsonSchemaAddress = `{"$id":"address.json","type":"object","properties":{"city":{"type":"string"},"zip":{"type":["integer","null"]}},"required":["city"]}`

const jsonSchemaAllTypes = `{"type":"object","title":"shop.Order","properties":{
 "id":{"type":"integer"},
 "qty":{"type":"integer","connect.type":"int16"},
 "price":{"type":"number"},
 "ratio":{"type":"number","connect.type":"float32"},
 "paid":{"type":"boolean"},
 "note":{"type":"string","format":"date-time"},
 "blob":{"type":"string","connect.type":"bytes"},
 "tags":{"type":"array","items":{"type":"string"}},
 "attrs":{"type":"object","additionalProperties":{"type":"integer"}},
 "pairs":{"type":"array","connect.type":"map","items":{"type":"object","properties":{"key":{"type":"integer"},"value":{"type":"string"}}}},
 "maybe":{"oneOf":[{"type":"null"},{"type":"string"}]},
 "either":{"oneOf":[{"type":"integer"},{"type":"string"}]},
 "address":{"$ref":"address.json"},
 "nested":{"$ref":"#/definitions/Nested"},
 "amount":{"type":"number","title":"org.apache.kafka.connect.data.Decimal","connect.parameters":{"scale":"2"}},
 "day":{"type":"integer","title":"org.apache.kafka.connect.data.Date"},
 "at":{"type":"integer","title":"org.apache.kafka.connect.data.Timestamp"},
 "t":{"type":"integer","connect.name":"org.apache.kafka.connect.data.Time"},
 "free":{},
 "absent":{"type":"string"}
},"required":["id","qty","price","paid"],
"definitions":{"Nested":{"type":"object","properties":{"b":{"type":"integer","connect.index":1},"a":{"type":"integer","connect.index":0}}}}}`

func jsonFrame(t testing.TB, id int, v any) []byte {
	t.Helper()
	b, err := sr.Encode(v, &sr.ConfluentHeader{}, id, nil, json.Marshal)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJSONSchemaAllTypes(t *testing.T) {
	reg := newTestRegistry(t)
	_, aver := reg.register("address", sr.Schema{Schema: jsonSchemaAddress, Type: sr.TypeJSON})
	id, _ := reg.register("order", sr.Schema{Schema: jsonSchemaAllTypes, Type: sr.TypeJSON,
		References: []sr.SchemaReference{reg.ref("address.json", "address", aver)}})
	payload := map[string]any{
		"id": 1 << 40, "qty": 300, "price": 1.25, "ratio": 0.5, "paid": true, "note": "2024-05-06T07:08:09Z",
		"blob": "AAH/", "tags": []string{"a", "b"}, "attrs": json.RawMessage(`{"z":1,"a":2}`),
		"pairs": []map[string]any{{"key": 2, "value": "two"}, {"key": 1, "value": "one"}},
		"maybe": nil, "either": "x", "address": map[string]any{"city": "Oslo"},
		"nested": map[string]any{"a": 1, "b": 2}, "amount": json.Number("123.45"), "day": 19000,
		"at": 1700000000123, "t": 3600000, "free": map[string]any{"any": []int{1}}, "extra": "dropped",
	}
	for _, validate := range []string{"false", "true"} {
		t.Run("validate="+validate, func(t *testing.T) {
			c := newConverter(t, JSONSchemaClass, reg.settings(SettingJSONSchemaValidate, validate))
			v := convertOK(t, c, jsonFrame(t, id, payload))
			want := `struct:{"id":1099511627776,"qty":300,"price":1.25,"ratio":0.5,"paid":true,"note":"2024-05-06T07:08:09Z",` +
				`"blob":"AAH/","tags":["a","b"],"attrs":{"z":1,"a":2},"pairs":[[2,"two"],[1,"one"]],"maybe":null,"either":"x",` +
				`"address":{"city":"Oslo","zip":null},"nested":{"a":1,"b":2},"amount":123.45,"day":"2022-01-08",` +
				`"at":"2023-11-14T22:13:20.123Z","t":"01:00:00","free":{"any":[1]},"absent":null}`
			if got := v.GoString(); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			kinds := map[string]record.Kind{"id": record.KindInt, "price": record.KindFloat, "amount": record.KindDecimal,
				"day": record.KindDate, "at": record.KindTimestamp, "t": record.KindTime, "blob": record.KindBytes,
				"pairs": record.KindMap, "attrs": record.KindMap, "note": record.KindString}
			for name, k := range kinds {
				if f, _ := v.Get(name); f.Kind() != k {
					t.Errorf("%s is %s, want %s", name, f.Kind(), k)
				}
			}
			if f, _ := v.Get("free"); !f.Schemaless() {
				t.Error("free is not schemaless JSON")
			}
			schemas := map[string]string{"id": "int64", "qty": "int16", "maybe": "optional string", "ratio": "optional float32",
				"address": "optional struct{city string, zip optional int64}", "amount": "optional org.apache.kafka.connect.data.Decimal(scale=2) bytes"}
			for name, w := range schemas {
				if got := v.Schema().Field(name).Schema.String(); got != w {
					t.Errorf("schema of %s = %s, want %s", name, got, w)
				}
			}
			if v.Schema().Name != "shop.Order" {
				t.Errorf("schema name %q", v.Schema().Name)
			}
		})
	}
}

func TestJSONSchemaValidation(t *testing.T) {
	reg := newTestRegistry(t)
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":3},"items":{"type":"array","items":{"type":"integer","minimum":0}}}}`
	id, _ := reg.register("v", sr.Schema{Schema: schema, Type: sr.TypeJSON})
	strict := newConverter(t, JSONSchemaClass, reg.settings(SettingJSONSchemaValidate, "true"))
	lax := newConverter(t, JSONSchemaClass, reg.settings())
	data := jsonFrame(t, id, map[string]any{"name": "ann", "items": []int{1, -2}})
	_, err := strict.Convert(context.Background(), "t", nil, data, &Buffer{})
	var fe *record.FieldError
	if !errors.Is(err, record.ErrDecode) || !errors.As(err, &fe) || fe.Field != "items.1" || !strings.Contains(err.Error(), "/items/1") {
		t.Fatalf("err = %v, want a bad record at items.1", err)
	}
	// Without validation (Confluent's default) the constraint is not
	// checked; the types still are.
	if got := convertOK(t, lax, data).GoString(); got != `struct:{"name":"ann","items":[1,-2]}` {
		t.Errorf("lax: %s", got)
	}
	_, err = lax.Convert(context.Background(), "t", nil, jsonFrame(t, id, map[string]any{"name": 5}), &Buffer{})
	if !errors.Is(err, record.ErrDecode) || !errors.As(err, &fe) || fe.Field != "name" {
		t.Errorf("wrong type: err = %v", err)
	}
	if _, err := New(JSONSchemaClass, reg.settings(SettingJSONSchemaValidate, "maybe"), false); !errors.As(err, new(config.FieldError)) {
		t.Errorf("bad setting: err = %v", err)
	}
}

func TestJSONSchemaEvolutionAndBadRecords(t *testing.T) {
	reg := newTestRegistry(t)
	v1 := `{"type":"object","properties":{"name":{"type":"string"}}}`
	v2 := `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","connect.type":"int8"}}}`
	id1, _ := reg.register("user", sr.Schema{Schema: v1, Type: sr.TypeJSON})
	// v1 is an open content model (any "age" may be in its data), so adding
	// "age" as an integer is not BACKWARD-compatible and a real registry,
	// whose default level is BACKWARD, refuses v2 (srfake checks nothing).
	// A user who means this evolution sets the subject's level first, as
	// the test does; what it checks is that each id reads with its own
	// schema.
	reg.setCompatibility("user", sr.CompatNone)
	id2, _ := reg.register("user", sr.Schema{Schema: v2, Type: sr.TypeJSON})
	t.Logf("registry: %s", reg.kind())
	c := newConverter(t, JSONSchemaClass, reg.settings())
	if got := convertOK(t, c, jsonFrame(t, id1, map[string]any{"name": "ann", "age": 3})).GoString(); got != `struct:{"name":"ann"}` {
		t.Errorf("v1: %s", got)
	}
	if got := convertOK(t, c, jsonFrame(t, id2, map[string]any{"name": "bob", "age": 41})).GoString(); got != `struct:{"name":"bob","age":41}` {
		t.Errorf("v2: %s", got)
	}
	good := jsonFrame(t, id2, map[string]any{"name": "bob"})
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"out of range":  {jsonFrame(t, id2, map[string]any{"age": 300}), "out of range for int8"},
		"invalid json":  {good[:len(good)-2], "invalid JSON"},
		"wrong magic":   {append([]byte{'{'}, good[1:]...), "wrong magic byte"},
		"unknown id":    {frame(t, reg.unknownID(), nil, []byte(`{}`)), "unknown schema id"},
		"not an object": {frame(t, id2, nil, []byte(`[1]`)), "want an object"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Convert(context.Background(), "t", nil, tc.data, &Buffer{})
			if !errors.Is(err, record.ErrDecode) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a bad record saying %q", err, tc.want)
			}
		})
	}
}
