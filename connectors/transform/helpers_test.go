package transform_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

// chainOf builds a chain from settings given as key, value pairs.
func chainOf(t testing.TB, kv ...string) *transform.Chain {
	t.Helper()
	c, err := transform.NewChain(values(kv...))
	if err != nil {
		t.Fatalf("NewChain: %v", err)
	}
	return c
}

// one builds a chain of the single transform class, called "x", with
// its settings given as key, value pairs (without the prefix).
func one(t testing.TB, class string, kv ...string) *transform.Chain {
	t.Helper()
	return chainOf(t, oneSettings(class, kv...)...)
}

func oneSettings(class string, kv ...string) []string {
	out := []string{"transforms", "x", "transforms.x.type", class}
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, "transforms.x."+kv[i], kv[i+1])
	}
	return out
}

// configErr returns NewChain's error for the single transform class.
func configErr(t testing.TB, class string, kv ...string) config.FieldError {
	t.Helper()
	_, err := transform.NewChain(values(oneSettings(class, kv...)...))
	var fe config.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("NewChain(%s %v) = %v, want a config.FieldError", class, kv, err)
	}
	return fe
}

// configCase is a configuration of one transform (kv: its settings
// without the prefix) and the setting its error must name, with a part
// of the message.
type configCase struct {
	kv        []string
	name, msg string
}

// checkConfigErrors checks that each configuration of class is refused
// with an error naming the setting.
func checkConfigErrors(t *testing.T, class string, cases []configCase) {
	t.Helper()
	for _, tc := range cases {
		fe := configErr(t, class, tc.kv...)
		if fe.Name != tc.name || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%v: error %s: %s, want %s: …%s…", tc.kv, fe.Name, fe.Msg, tc.name, tc.msg)
		}
	}
}

func values(kv ...string) config.Values {
	v := config.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v[kv[i]] = kv[i+1]
	}
	return v
}

// schemaless converts JSON as a schemaless value (txsink's default JSON
// converter with schemas.enable=false).
func schemaless(t testing.TB, js string) record.Value {
	t.Helper()
	c, err := convert.New(convert.JSONClass, map[string]string{"schemas.enable": "false"}, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Convert(context.Background(), "test", nil, []byte(js), &convert.Buffer{})
	if err != nil {
		t.Fatalf("convert %s: %v", js, err)
	}
	return v
}

// typed converts a Connect JSON payload with its schema (the JSON form
// of a JsonConverter envelope's "schema").
func typed(t testing.TB, schema, payload string) record.Value {
	t.Helper()
	s, err := convert.ParseConnectSchema([]byte(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	v, err := convert.FromConnectJSON([]byte(payload), s, "")
	if err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	return v
}

var testTime = time.UnixMilli(1_700_000_000_123).UTC()

// rec returns a record of topic "test", partition 3, offset 42, with the
// given value.
func rec(value record.Value) *record.Record {
	raw := &kgo.Record{Topic: "test", Partition: 3, Offset: 42, Timestamp: testTime}
	return &record.Record{Topic: raw.Topic, Value: value, Timestamp: raw.Timestamp, Raw: raw}
}

func keyed(key, value record.Value) *record.Record {
	r := rec(value)
	r.Key = key
	return r
}

// apply runs c on r and fails the test on an error.
func apply(t testing.TB, c *transform.Chain, r *record.Record) bool {
	t.Helper()
	keep, err := c.Apply(r)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return keep
}

// applyErr runs c on r and returns its error, which must be a
// transform error.
func applyErr(t testing.TB, c *transform.Chain, r *record.Record) error {
	t.Helper()
	_, err := c.Apply(r)
	if !errors.Is(err, record.ErrTransform) {
		t.Fatalf("Apply = %v, want an error wrapping record.ErrTransform", err)
	}
	return err
}

// fieldOf returns the field a transform error names.
func fieldOf(err error) string {
	var fe *record.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// js renders a value as JSON.
func js(t testing.TB, v record.Value) string {
	t.Helper()
	b, err := v.AppendJSON(nil)
	if err != nil {
		t.Fatalf("AppendJSON: %v", err)
	}
	return string(b)
}

// wantJSON checks a value's JSON text.
func wantJSON(t testing.TB, what string, v record.Value, want string) {
	t.Helper()
	if got := js(t, v); got != want {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

// wantSchema checks a value's schema, rendered by Schema.String.
func wantSchema(t testing.TB, what string, v record.Value, want string) {
	t.Helper()
	if got := v.Schema().String(); got != want {
		t.Errorf("%s schema = %s, want %s", what, got, want)
	}
}

func contains(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s = %q, want it to contain %q", what, s, sub)
		}
	}
}
