package transform_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

// A typical 10-field row, schemaless and with its Connect schema.
const (
	benchRow       = `{"id":12345,"customer_id":678,"status":"shipped","amount":123.45,"currency":"EUR","created_at":"2024-01-02T03:04:05Z","updated_at":1704164645000,"qty":3,"note":"gift wrap","active":true}`
	benchRowSchema = `{"type":"struct","name":"shop.orders.Value","optional":true,"fields":[
		{"field":"id","type":"int64"},{"field":"customer_id","type":"int64"},{"field":"status","type":"string"},
		{"field":"amount","type":"double"},{"field":"currency","type":"string"},{"field":"created_at","type":"string"},
		{"field":"updated_at","type":"int64"},{"field":"qty","type":"int32"},{"field":"note","type":"string","optional":true},
		{"field":"active","type":"boolean"}]}`
)

// benchEnvelope is a Debezium change event of the row, with the JSON
// converter's envelope schema.
var benchEnvelopeSchema = `{"type":"struct","name":"shop.public.orders.Envelope","fields":[
	{"field":"before",` + benchRowSchema[1:] + `,{"field":"after",` + benchRowSchema[1:] + `,
	{"field":"source","type":"struct","fields":[{"field":"ts_ms","type":"int64"},{"field":"db","type":"string"},
		{"field":"schema","type":"string"},{"field":"table","type":"string"},{"field":"lsn","type":"int64","optional":true}]},
	{"field":"op","type":"string"},{"field":"ts_ms","type":"int64","optional":true}]}`

const benchEnvelope = `{"before":null,"after":` + benchRow + `,"source":{"ts_ms":1704164645000,"db":"shop","schema":"public","table":"orders","lsn":987654},"op":"c","ts_ms":1704164645100}`

// BenchmarkTransforms measures what each transform costs per record
// (ns/op is ns per record) on the 10-field row, schemaless (JSON with
// schemas.enable=false) and typed (a Connect schema, as from the JSON
// envelope, Avro, Protobuf or JSON Schema). The input is converted once;
// each iteration runs the chain on a fresh copy of the record.
// BenchmarkTransforms/convert-only is the converter's own cost, for
// scale.
func BenchmarkTransforms(b *testing.B) {
	cases := []struct {
		name     string
		envelope bool
		settings []string
	}{
		{"RegexRouter", false, []string{"type", transform.ClassRegexRouter, "regex", `(.*)`, "replacement", "routed_$1"}},
		{"ReplaceField", false, []string{"type", replaceValue, "exclude", "note", "renames", "qty:quantity,amount:total"}},
		{"ExtractField", false, []string{"type", extractValue, "field", "status"}},
		{"TimestampConverter-unix", false, []string{"type", tsValue, "field", "updated_at", "target.type", "Timestamp"}},
		{"TimestampConverter-string", false, []string{"type", tsValue, "field", "created_at", "target.type", "Timestamp", "format", "yyyy-MM-dd'T'HH:mm:ss'Z'"}},
		{"InsertField", false, []string{"type", insertValue, "topic.field", "kafka_topic", "partition.field", "kafka_partition", "offset.field", "kafka_offset", "timestamp.field", "kafka_ts"}},
		{"Filter-RecordIsTombstone", false, []string{"type", transform.ClassFilter, "predicate", "tomb"}},
		{"ExtractNewRecordState", true, []string{"type", unwrap}},
		{"ExtractNewRecordState-rewrite-add.fields", true, []string{"type", unwrap, "delete.tombstone.handling.mode", "rewrite", "add.fields", "op,table,lsn,source.ts_ms"}},
	}
	for _, tc := range cases {
		for _, form := range []string{"schemaless", "typed"} {
			b.Run(tc.name+"/"+form, func(b *testing.B) {
				kv := []string{"transforms", "x", "predicates", "tomb", "predicates.tomb.type", transform.ClassRecordIsTombstone}
				for i := 0; i+1 < len(tc.settings); i += 2 {
					kv = append(kv, "transforms.x."+tc.settings[i], tc.settings[i+1])
				}
				c := chainOf(b, kv...)
				base := benchRecord(b, form, tc.envelope)
				r := new(record.Record)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					*r = *base
					if _, err := c.Apply(r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	for _, form := range []string{"schemaless", "typed"} {
		b.Run("convert-only/"+form, func(b *testing.B) {
			conv, data := benchConverter(b, form, false)
			var buf convert.Buffer
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := conv.Convert(context.Background(), "shop.orders", nil, data, &buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchConverter returns the converter and the record bytes of a form.
func benchConverter(b *testing.B, form string, envelope bool) (convert.Converter, []byte) {
	row, schema := benchRow, benchRowSchema
	if envelope {
		row, schema = benchEnvelope, benchEnvelopeSchema
	}
	enable := "false"
	data := row
	if form == "typed" {
		enable = "true"
		data = fmt.Sprintf(`{"schema":%s,"payload":%s}`, schema, row)
	}
	c, err := convert.New(convert.JSONClass, map[string]string{"schemas.enable": enable}, false)
	if err != nil {
		b.Fatal(err)
	}
	return c, []byte(data)
}

func benchRecord(b *testing.B, form string, envelope bool) *record.Record {
	c, data := benchConverter(b, form, envelope)
	v, err := c.Convert(context.Background(), "shop.orders", nil, data, &convert.Buffer{})
	if err != nil {
		b.Fatal(err)
	}
	raw := &kgo.Record{Topic: "shop.orders", Partition: 1, Offset: 1000, Timestamp: testTime, Value: data}
	return &record.Record{Topic: raw.Topic, Value: v, Timestamp: raw.Timestamp, Raw: raw}
}
