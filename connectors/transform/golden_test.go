package transform_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/postgres"
)

// fixture is one file of testdata/configs (see its README.md).
type fixture struct {
	Origin    string            `json:"origin"`
	Rewritten []string          `json:"rewritten"`
	Expect    json.RawMessage   `json:"expect"`
	Why       string            `json:"why"`
	Samples   []sample          `json:"samples"`
	Name      string            `json:"name"`
	Config    map[string]string `json:"config"`
}

// sample is a Kafka record run through the accepted configuration's
// pipeline (converters and transforms), and what must come out.
type sample struct {
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	TimestampMs int64             `json:"timestamp_ms"`
	Key         *string           `json:"key"`
	Value       *string           `json:"value"`
	Headers     map[string]string `json:"headers"`
	Want        struct {
		Dropped bool              `json:"dropped"`
		Topic   string            `json:"topic"`
		Key     string            `json:"key"`
		Value   string            `json:"value"`
		Headers map[string]string `json:"headers"`
	} `json:"want"`
}

// TestGoldenConnectorConfigs validates JDBC sink configurations copied
// from Confluent and Debezium deployments (only connector.class and the
// connection settings rewritten) as txsink's REST API does: those using
// supported transforms are accepted unchanged, the others are refused
// with an error that names the setting. Accepted ones also run their
// sample records through the connector's pipeline.
func TestGoldenConnectorConfigs(t *testing.T) {
	var reg connectors.Registry
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("testdata/configs/*.json")
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v (%d files)", err, len(files))
	}
	accepted, refused, samples := 0, 0, 0
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var f fixture
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if f.Origin == "" || len(f.Rewritten) == 0 {
				t.Fatal("a fixture says where it comes from and what was rewritten")
			}
			raw := map[string]string{config.KeyName: f.Name}
			for k, v := range f.Config {
				raw[k] = v
			}
			_, values, errs := reg.Validate(raw)
			var want struct{ Key, Contains string }
			if string(f.Expect) == `"accepted"` {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				accepted++
				samples += runSamples(t, values, f.Samples)
				return
			}
			if err := json.Unmarshal(f.Expect, &want); err != nil || want.Key == "" {
				t.Fatalf("expect: %s", f.Expect)
			}
			refused++
			// Validation reports every problem at once; the one the
			// fixture expects must be among them.
			found := false
			for _, e := range errs {
				found = found || e.Name == want.Key && strings.Contains(e.Msg, want.Contains)
			}
			if !found {
				t.Fatalf("errors %v, want one naming %s: …%s…", errs, want.Key, want.Contains)
			}
		})
	}
	if accepted < 6 || refused < 4 || samples < 10 {
		t.Errorf("%d accepted and %d refused fixtures, %d samples: the golden set lost cases", accepted, refused, samples)
	}
}

// runSamples runs the samples and returns how many ran.
func runSamples(t *testing.T, v config.Values, samples []sample) int {
	t.Helper()
	p, err := convert.NewPipeline(v)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	for i, s := range samples {
		r := &kgo.Record{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Timestamp: time.UnixMilli(s.TimestampMs)}
		if s.Key != nil {
			r.Key = []byte(*s.Key)
		}
		if s.Value != nil {
			r.Value = []byte(*s.Value)
		}
		for k, hv := range s.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(hv)})
		}
		var sc convert.Scratch
		out, err := p.Convert(context.Background(), r, &sc, true)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if out == nil {
			if !s.Want.Dropped {
				t.Errorf("sample %d dropped", i)
			}
			continue
		}
		if s.Want.Dropped {
			t.Errorf("sample %d kept: %s", i, js(t, out.Value))
			continue
		}
		if out.Topic != s.Want.Topic {
			t.Errorf("sample %d: topic %q, want %q", i, out.Topic, s.Want.Topic)
		}
		wantJSON(t, "sample value", out.Value, s.Want.Value)
		if s.Want.Key != "" {
			wantJSON(t, "sample key", out.Key, s.Want.Key)
		}
		for k, hv := range s.Want.Headers {
			found := false
			for _, h := range out.Headers {
				if h.Key == k && string(h.Value) == hv {
					found = true
				}
			}
			if !found {
				t.Errorf("sample %d: no header %s=%s in %v", i, k, hv, out.Headers)
			}
		}
	}
	return len(samples)
}
