package transform_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// conformanceCase is one case of testdata/connect/cases.json: a record
// (JSON key and value, Connect JSON envelopes when schemas is set) and a
// transform chain.
type conformanceCase struct {
	Name      string            `json:"name"`
	Config    map[string]string `json:"config"`
	Schemas   bool              `json:"schemas"`
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp int64             `json:"timestamp"`
	Key       json.RawMessage   `json:"key"`
	Value     json.RawMessage   `json:"value"`
	Headers   map[string]string `json:"headers"`
}

// conformanceResult is what Kafka Connect's own classes made of a case
// (testdata/connect/expected.json, written by Harness.java).
type conformanceResult struct {
	Name        string             `json:"name"`
	Error       string             `json:"error"`
	Dropped     bool               `json:"dropped"`
	Topic       string             `json:"topic"`
	KeySchema   any                `json:"key_schema"`
	Key         any                `json:"key"`
	ValueSchema any                `json:"value_schema"`
	Value       any                `json:"value"`
	Headers     map[string]*string `json:"headers"`
}

// TestConformanceWithConnect runs the cases through txsink's pipeline
// (JsonConverter, then the transforms) and compares the outcome with
// what Kafka Connect 4.1's transforms and Debezium 3.4's
// ExtractNewRecordState made of the same records after Connect's
// JsonConverter: the same records dropped, the same errors, and the same
// topic, key, value, schemas and headers otherwise.
func TestConformanceWithConnect(t *testing.T) {
	var cases []conformanceCase
	var want []conformanceResult
	readJSON(t, "testdata/connect/cases.json", &cases)
	readJSON(t, "testdata/connect/expected.json", &want)
	if len(cases) != len(want) || len(cases) < 80 {
		t.Fatalf("%d cases, %d results: regenerate expected.json (testdata/connect/regen.sh)", len(cases), len(want))
	}
	for i, c := range cases {
		exp := want[i]
		if exp.Name != c.Name {
			t.Fatalf("case %d is %q in cases.json, %q in expected.json", i, c.Name, exp.Name)
		}
		t.Run(c.Name, func(t *testing.T) {
			got := runConformanceCase(t, c)
			switch {
			case exp.Error != "":
				if got.Error == "" {
					t.Fatalf("Connect fails (%s); txsink gives %+v", exp.Error, got)
				}
				t.Logf("both fail: Connect %q; txsink %q", exp.Error, got.Error)
				return
			case got.Error != "":
				t.Fatalf("txsink fails (%s); Connect does not", got.Error)
			}
			if got.Dropped != exp.Dropped {
				t.Fatalf("dropped: txsink %v, Connect %v", got.Dropped, exp.Dropped)
			}
			if exp.Dropped {
				return
			}
			if got.Topic != exp.Topic {
				t.Errorf("topic: txsink %q, Connect %q", got.Topic, exp.Topic)
			}
			for _, p := range []struct {
				what      string
				got, want any
			}{{"key schema", got.KeySchema, exp.KeySchema}, {"key", got.Key, exp.Key},
				{"value schema", got.ValueSchema, exp.ValueSchema}, {"value", got.Value, exp.Value}, {"headers", got.Headers, exp.Headers}} {
				if !sameJSON(t, p.got, p.want) {
					g, _ := json.Marshal(p.got)
					w, _ := json.Marshal(p.want)
					t.Errorf("%s:\ntxsink  %s\nConnect %s", p.what, g, w)
				}
			}
		})
	}
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// sameJSON compares two values by their JSON form.
func sameJSON(t *testing.T, a, b any) bool {
	var x, y any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &x}, {b, &y}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			t.Fatal(err)
		}
	}
	return reflect.DeepEqual(x, y)
}

func runConformanceCase(t *testing.T, c conformanceCase) conformanceResult {
	v := config.Values{}
	for k, val := range c.Config {
		v[k] = val
	}
	enable := strconv.FormatBool(c.Schemas)
	v["key.converter"], v["value.converter"] = convert.JSONClass, convert.JSONClass
	v["key.converter.schemas.enable"], v["value.converter.schemas.enable"] = enable, enable
	p, err := convert.NewPipeline(v)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	r := &kgo.Record{Topic: c.Topic, Partition: c.Partition, Offset: c.Offset, Timestamp: time.UnixMilli(c.Timestamp)}
	if len(c.Key) > 0 && string(c.Key) != "null" {
		r.Key = c.Key
	}
	if len(c.Value) > 0 && string(c.Value) != "null" {
		r.Value = c.Value
	}
	for k, hv := range c.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(hv)})
	}
	var sc convert.Scratch
	out, err := p.Convert(context.Background(), r, &sc, true)
	if err != nil {
		return conformanceResult{Error: err.Error()}
	}
	if out == nil {
		return conformanceResult{Dropped: true}
	}
	res := conformanceResult{Topic: out.Topic, KeySchema: renderSchema(out.Key.Schema()), Key: renderValue(t, out.Key),
		ValueSchema: renderSchema(out.Value.Schema()), Value: renderValue(t, out.Value), Headers: map[string]*string{}}
	for _, h := range out.Headers {
		if h.Value == nil {
			res.Headers[h.Key] = nil
			continue
		}
		s := string(h.Value)
		res.Headers[h.Key] = &s
	}
	return res
}

// renderSchema renders a schema as Harness.java does.
func renderSchema(s *record.Schema) any {
	if s == nil {
		return nil
	}
	m := map[string]any{"type": s.Type.String(), "optional": s.Optional}
	if s.Name != "" {
		m["name"] = s.Name
	}
	if s.Version != 0 {
		m["version"] = s.Version
	}
	if len(s.Params) > 0 {
		m["parameters"] = s.Params
	}
	switch s.Type {
	case record.TypeStruct:
		fields := []any{}
		for _, f := range s.Fields {
			fields = append(fields, map[string]any{"name": f.Name, "schema": renderSchema(f.Schema)})
		}
		m["fields"] = fields
	case record.TypeArray:
		m["items"] = renderSchema(s.Elem)
	case record.TypeMap:
		m["keys"], m["values"] = renderSchema(s.Key), renderSchema(s.Elem)
	}
	return m
}

// renderValue renders a value as Harness.java renders Connect's: structs
// with a schema as ordered [name, value] pairs, objects without one with
// their keys sorted, dates, times and timestamps as epoch milliseconds.
func renderValue(t *testing.T, v record.Value) any {
	t.Helper()
	text := func() json.RawMessage {
		b, err := v.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	switch v.Kind() {
	case record.KindNull:
		return nil
	case record.KindTimestamp, record.KindDate, record.KindTime:
		var ms int64
		if v.Kind() == record.KindTime {
			d, _ := v.AsTimeOfDay()
			ms = d.Milliseconds()
		} else {
			in, _ := v.AsTimestamp()
			ms = in.Time.UnixMilli()
		}
		return map[string]any{"$instant": ms}
	case record.KindDecimal:
		d, _ := v.AsDecimal()
		return map[string]any{"$decimal": d.Text()}
	case record.KindBytes:
		b, _ := v.AsBytes()
		return base64.StdEncoding.EncodeToString(b)
	case record.KindStruct:
		if v.Schema() != nil {
			pairs := []any{}
			_ = v.Range(func(name []byte, fv record.Value) error {
				pairs = append(pairs, []any{string(name), renderValue(t, fv)})
				return nil
			})
			return map[string]any{"$struct": pairs}
		}
		m := map[string]any{}
		_ = v.Range(func(name []byte, fv record.Value) error {
			m[string(name)] = renderValue(t, fv)
			return nil
		})
		return m
	case record.KindMap:
		m := map[string]any{}
		_ = v.Entries(func(k, e record.Value) error {
			ks, _ := k.AsText()
			m[ks] = renderValue(t, e)
			return nil
		})
		return m
	case record.KindArray:
		out := []any{}
		_ = v.Elems(func(_ int, e record.Value) error {
			out = append(out, renderValue(t, e))
			return nil
		})
		return out
	}
	return text()
}
