package integration

// Debezium's change events in Avro. No Confluent-compatible Avro converter
// for Kafka Connect can run here (../shared/TESTENV.md: io.confluent is not
// served), so the replication test re-encodes the events Debezium wrote
// with Connect's JsonConverter (schema and payload) into Avro, the way
// Confluent's AvroConverter (AvroData) writes a Connect schema and value:
// records named after the Connect schemas, optional fields as
// ["null", T] with default null, int8/int16 marked with connect.type,
// Decimal as bytes with the decimal logical type, Debezium's logical
// names in connect.name; schemas registered under <topic>-key and
// <topic>-value in the test's registry, values framed with Confluent's
// header. Each record goes to the partition of the same number in its
// Avro topic, in order, so each Avro topic is its JSON topic, re-encoded.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/integration/harness"
)

// avroReencoder copies JSON topics into Avro topics, re-encoded.
type avroReencoder struct {
	reg *harness.SchemaRegistryService
	dst func(string) string

	mu      sync.Mutex
	schemas map[string]*encodedSchema // by subject and Avro text
	err     error

	// events counts the change events copied (tombstones apart),
	// tombstones the tombstones, per source topic.
	events, tombstones sync.Map // topic → *atomic.Int64
	done               chan struct{}
}

type encodedSchema struct {
	id     int
	schema *avro.Schema
}

// startReencoder starts copying topics (from their start) until the test
// ends; dst names each topic's Avro copy.
func startReencoder(t *testing.T, k *harness.KafkaService, reg *harness.SchemaRegistryService, topics []string, dst func(string) string) *avroReencoder {
	t.Helper()
	re := &avroReencoder{reg: reg, dst: dst, schemas: map[string]*encodedSchema{}, done: make(chan struct{})}
	for _, tp := range topics {
		re.events.Store(tp, new(atomic.Int64))
		re.tombstones.Store(tp, new(atomic.Int64))
	}
	in := k.Client(t, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	out := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(2*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(re.done)
		for ctx.Err() == nil {
			fs := in.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if err := fs.Err0(); err != nil {
				re.fail(fmt.Errorf("consuming %v: %w", topics, err))
				return
			}
			var recs []*kgo.Record
			var srcs []string
			var convErr error
			fs.EachRecord(func(r *kgo.Record) {
				if convErr != nil {
					return
				}
				var nr *kgo.Record
				nr, convErr = re.convert(ctx, r)
				recs, srcs = append(recs, nr), append(srcs, r.Topic)
			})
			if convErr != nil {
				re.fail(convErr)
				return
			}
			if err := out.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				if ctx.Err() == nil {
					re.fail(fmt.Errorf("producing the Avro records: %w", err))
				}
				return
			}
			for i, r := range recs {
				m := &re.events
				if r.Value == nil {
					m = &re.tombstones
				}
				if c, ok := m.Load(srcs[i]); ok {
					c.(*atomic.Int64).Add(1)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-re.done })
	return re
}

func (re *avroReencoder) fail(err error) {
	re.mu.Lock()
	defer re.mu.Unlock()
	if re.err == nil {
		re.err = err
	}
}

// check returns the copier's first error.
func (re *avroReencoder) check() error {
	re.mu.Lock()
	defer re.mu.Unlock()
	return re.err
}

// counts returns the change events and tombstones copied from a topic.
func (re *avroReencoder) counts(topic string) (events, tombstones int64) {
	if c, ok := re.events.Load(topic); ok {
		events = c.(*atomic.Int64).Load()
	}
	if c, ok := re.tombstones.Load(topic); ok {
		tombstones = c.(*atomic.Int64).Load()
	}
	return events, tombstones
}

// convert re-encodes one record.
func (re *avroReencoder) convert(ctx context.Context, r *kgo.Record) (*kgo.Record, error) {
	topic := re.dst(r.Topic)
	out := &kgo.Record{Topic: topic, Partition: r.Partition}
	var err error
	if out.Key, err = re.encode(ctx, topic+"-key", r.Key); err != nil {
		return nil, fmt.Errorf("%s[%d]@%d key: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if out.Value, err = re.encode(ctx, topic+"-value", r.Value); err != nil {
		return nil, fmt.Errorf("%s[%d]@%d value: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return out, nil
}

// encode turns one JsonConverter value ({"schema": …, "payload": …}) into
// Confluent's Avro wire format; nil stays nil (a tombstone).
func (re *avroReencoder) encode(ctx context.Context, subject string, b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var env struct {
		Schema  map[string]any `json:"schema"`
		Payload any            `json:"payload"`
	}
	if err := d.Decode(&env); err != nil {
		return nil, err
	}
	if env.Schema == nil {
		return nil, errors.New("no schema: Connect's JsonConverter must run with schemas.enable=true")
	}
	es, err := re.schema(ctx, subject, env.Schema)
	if err != nil {
		return nil, err
	}
	native, err := avroNative(env.Schema, env.Payload)
	if err != nil {
		return nil, err
	}
	return sr.Encode(native, &sr.ConfluentHeader{}, es.id, nil, func(v any) ([]byte, error) { return es.schema.Encode(v) })
}

// schema returns the registered Avro schema of a Connect schema.
func (re *avroReencoder) schema(ctx context.Context, subject string, cs map[string]any) (*encodedSchema, error) {
	as, err := avroSchemaOf(cs, map[string]bool{})
	if err != nil {
		return nil, err
	}
	text, err := json.Marshal(as)
	if err != nil {
		return nil, err
	}
	key := subject + "\x00" + string(text)
	re.mu.Lock()
	es := re.schemas[key]
	re.mu.Unlock()
	if es != nil {
		return es, nil
	}
	parsed, err := avro.Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", text, err)
	}
	ss, err := re.reg.Client.CreateSchema(ctx, subject, sr.Schema{Schema: string(text), Type: sr.TypeAvro})
	if err != nil {
		return nil, fmt.Errorf("registering %s: %w", subject, err)
	}
	es = &encodedSchema{id: ss.ID, schema: parsed}
	re.mu.Lock()
	re.schemas[key] = es
	re.mu.Unlock()
	return es, nil
}

// Kafka Connect's Decimal, which Avro writes with the decimal logical
// type.
const connectDecimalName = "org.apache.kafka.connect.data.Decimal"

// avroSchemaOf maps a Connect schema (as JsonConverter writes it) to an
// Avro schema as Confluent's AvroData does; defined holds the full names
// of records already written (a repeat is a reference by name).
func avroSchemaOf(s map[string]any, defined map[string]bool) (any, error) {
	typ, _ := s["type"].(string)
	name, _ := s["name"].(string)
	var out any
	switch typ {
	case "struct":
		if name == "" {
			name = "ConnectDefault"
		}
		if defined[name] {
			out = name
			break
		}
		defined[name] = true
		short, ns := name, ""
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			ns, short = name[:i], name[i+1:]
		}
		rec := map[string]any{"type": "record", "name": short}
		if ns != "" {
			rec["namespace"] = ns
		}
		var fields []any
		fs, _ := s["fields"].([]any)
		for _, f := range fs {
			fm, _ := f.(map[string]any)
			ft, err := avroSchemaOf(fm, defined)
			if err != nil {
				return nil, err
			}
			field := map[string]any{"name": fm["field"], "type": ft}
			if opt, _ := fm["optional"].(bool); opt {
				field["default"] = nil
			}
			fields = append(fields, field)
		}
		rec["fields"] = fields
		if v, ok := s["version"]; ok {
			rec["connect.version"] = v
		}
		out = rec
	case "int8", "int16":
		out = map[string]any{"type": "int", "connect.type": typ}
	case "int32", "int64", "float", "double", "boolean", "string", "bytes":
		at := map[string]string{"int32": "int", "int64": "long", "float": "float", "double": "double",
			"boolean": "boolean", "string": "string", "bytes": "bytes"}[typ]
		if name == "" {
			out = at
			break
		}
		m := map[string]any{"type": at, "connect.name": name}
		if v, ok := s["version"]; ok {
			m["connect.version"] = v
		}
		if p, ok := s["parameters"].(map[string]any); ok {
			m["connect.parameters"] = p
		}
		if name == connectDecimalName {
			p, _ := s["parameters"].(map[string]any)
			scale, precision := json.Number("0"), json.Number("64")
			if v, ok := p["scale"].(string); ok {
				scale = json.Number(v)
			}
			if v, ok := p["connect.decimal.precision"].(string); ok {
				precision = json.Number(v)
			}
			m["logicalType"], m["scale"], m["precision"] = "decimal", scale, precision
		}
		out = m
	default:
		return nil, fmt.Errorf("connect type %q is not in Debezium's PostgreSQL events of this test", typ)
	}
	if opt, _ := s["optional"].(bool); opt {
		return []any{"null", out}, nil
	}
	return out, nil
}

// avroNative converts a JsonConverter payload into what the Avro library
// encodes for the schema of avroSchemaOf.
func avroNative(s map[string]any, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	typ, _ := s["type"].(string)
	name, _ := s["name"].(string)
	num := func() (json.Number, error) {
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("%v is not a number (%s)", v, typ)
		}
		return n, nil
	}
	switch typ {
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%v is not an object", v)
		}
		out := map[string]any{}
		fs, _ := s["fields"].([]any)
		for _, f := range fs {
			fm, _ := f.(map[string]any)
			fname, _ := fm["field"].(string)
			fv, err := avroNative(fm, m[fname])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", fname, err)
			}
			out[fname] = fv
		}
		return out, nil
	case "int8", "int16", "int32":
		n, err := num()
		if err != nil {
			return nil, err
		}
		i, err := n.Int64()
		return int32(i), err
	case "int64":
		n, err := num()
		if err != nil {
			return nil, err
		}
		return n.Int64()
	case "float", "double":
		n, err := num()
		if err != nil {
			return nil, err
		}
		f, err := n.Float64()
		if typ == "float" {
			return float32(f), err
		}
		return f, err
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%v is not a boolean", v)
		}
		return b, nil
	case "string":
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a string", v)
		}
		return str, nil
	case "bytes":
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not base64 text", v)
		}
		b, err := base64.StdEncoding.DecodeString(str)
		if err != nil {
			return nil, err
		}
		if name != connectDecimalName {
			return b, nil
		}
		p, _ := s["parameters"].(map[string]any)
		scale := 0
		if sc, ok := p["scale"].(string); ok {
			fmt.Sscan(sc, &scale)
		}
		unscaled := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			unscaled.Sub(unscaled, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
		}
		return new(big.Rat).SetFrac(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)), nil
	}
	return nil, fmt.Errorf("connect type %q", typ)
}
