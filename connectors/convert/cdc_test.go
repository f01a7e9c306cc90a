package convert

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/dbztest"
)

var customers = &dbztest.Table{
	Server: "pg1", DB: "shop", Schema: "public", Name: "customers",
	Columns: []dbztest.Column{
		{Name: "id", Type: "int32"},
		{Name: "name", Type: "string"},
		{Name: "email", Type: "string", Optional: true},
		{Name: "balance", Type: "bytes", Logical: record.LogicalDecimal, Params: map[string]string{"scale": "2"}, Optional: true},
	},
	Key: []string{"id"},
}

// change is what a converted change event should look like.
type change struct {
	op     record.Op
	value  string // the Value as JSON ("null" for none)
	key    string
	oldKey string // "" when none
	evOp   byte
	lsn    int64
}

func checkChange(t *testing.T, name string, rec *record.Record, want change) {
	t.Helper()
	if rec == nil {
		t.Fatalf("%s: dropped", name)
	}
	js := func(v record.Value) string {
		b, err := v.AppendJSON(nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return string(b)
	}
	if rec.Op != want.op {
		t.Errorf("%s: op %s, want %s", name, rec.Op, want.op)
	}
	if got := js(rec.Value); got != want.value {
		t.Errorf("%s: value %s, want %s", name, got, want.value)
	}
	if got := js(rec.Key); got != want.key {
		t.Errorf("%s: key %s, want %s", name, got, want.key)
	}
	gotOld := ""
	if !rec.OldKey.IsNull() {
		gotOld = js(rec.OldKey)
	}
	if gotOld != want.oldKey {
		t.Errorf("%s: old key %q, want %q", name, gotOld, want.oldKey)
	}
	if rec.Change == nil {
		t.Fatalf("%s: no Change", name)
	}
	if rec.Change.Op != want.evOp || !rec.Change.HasLSN || rec.Change.LSN != want.lsn || rec.Position() != uint64(want.lsn) {
		t.Errorf("%s: change %+v, want op %c lsn %d", name, *rec.Change, want.evOp, want.lsn)
	}
	if rec.Change.DB != "shop" || rec.Change.Schema != "public" || rec.Change.Table != "customers" || !rec.Change.HasTsMs || rec.Change.TsMs != 1700000000000 {
		t.Errorf("%s: source %+v", name, *rec.Change)
	}
	if tn, err := rec.TableName("${source.db}_${source.schema}_${source.table}_${topic}"); err != nil || tn != "shop_public_customers_pg1.public.customers" {
		t.Errorf("%s: table name %q, %v", name, tn, err)
	}
}

func pipeline(t *testing.T, settings map[string]string) *Pipeline {
	t.Helper()
	p, err := PipelineFromSettings(settings)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func kafkaRec(offset int64, key, value []byte) *kgo.Record {
	return &kgo.Record{Topic: customers.Topic(), Offset: offset, Key: key, Value: value}
}

// TestChangeEvents converts Debezium's events, as the JsonConverter writes
// them with schemas (and, for the schemaless case, without), through the
// pipeline: every op, every delete handling mode, tombstones, truncates,
// an update that changes the key, and the formats' strictness.
func TestChangeEvents(t *testing.T) {
	const ts = 1700000000000
	anne := dbztest.Row{"id": 1, "name": "Anne", "email": "anne@example.com", "balance": "MDk="} // 123.45
	anne2 := dbztest.Row{"id": 1, "name": "Anne K", "email": nil, "balance": nil}
	moved := dbztest.Row{"id": 7, "name": "Anne K", "email": nil, "balance": nil}
	evs := map[string]dbztest.Event{
		"read":   {Op: 'r', After: anne, LSN: 100, TsMs: ts},
		"create": {Op: 'c', After: anne, LSN: 200, TsMs: ts},
		"update": {Op: 'u', Before: anne, After: anne2, LSN: 300, TsMs: ts},
		"move":   {Op: 'u', Before: anne2, After: moved, LSN: 400, TsMs: ts},
		"delete": {Op: 'd', Before: anne2, LSN: 500, TsMs: ts},
		"trunc":  {Op: 't', LSN: 600, TsMs: ts},
	}
	annaJSON := `{"id":1,"name":"Anne","email":"anne@example.com","balance":123.45}`
	anne2JSON := `{"id":1,"name":"Anne K","email":null,"balance":null}`
	for _, schemas := range []bool{true, false} {
		enc := customers.JSON
		name := "with schemas"
		if !schemas {
			enc, name = customers.SchemalessJSON, "schemaless"
			annaJSON = `{"id":1,"name":"Anne","email":"anne@example.com","balance":"MDk="}`
		}
		t.Run(name, func(t *testing.T) {
			p := pipeline(t, nil)
			conv := func(ev string, p *Pipeline) (*record.Record, error) {
				k, v := enc(evs[ev])
				var sc Scratch
				return p.Convert(context.Background(), kafkaRec(9, k, v), &sc, false)
			}
			must := func(ev string, p *Pipeline) *record.Record {
				rec, err := conv(ev, p)
				if err != nil {
					t.Fatalf("%s: %v", ev, err)
				}
				return rec
			}
			checkChange(t, "read", must("read", p), change{op: record.OpUpsert, value: annaJSON, key: `{"id":1}`, evOp: 'r', lsn: 100})
			checkChange(t, "create", must("create", p), change{op: record.OpUpsert, value: annaJSON, key: `{"id":1}`, evOp: 'c', lsn: 200})
			checkChange(t, "update", must("update", p), change{op: record.OpUpsert, value: anne2JSON, key: `{"id":1}`, evOp: 'u', lsn: 300})
			checkChange(t, "update moving the key", must("move", p),
				change{op: record.OpUpsert, value: `{"id":7,"name":"Anne K","email":null,"balance":null}`, key: `{"id":7}`, oldKey: `{"id":1}`, evOp: 'u', lsn: 400})
			checkChange(t, "delete", must("delete", p), change{op: record.OpDelete, value: "null", key: `{"id":1}`, evOp: 'd', lsn: 500})

			rw := must("delete", pipeline(t, map[string]string{KeyCDCDeleteMode: CDCDeleteRewrite}))
			checkChange(t, "delete rewritten", rw, change{op: record.OpUpsert, value: anne2JSON, key: `{"id":1}`, evOp: 'd', lsn: 500})
			if !rw.Change.Deleted {
				t.Error("rewritten delete: Change.Deleted not set")
			}
			if rec := must("delete", pipeline(t, map[string]string{KeyCDCDeleteMode: CDCDeleteDrop})); rec != nil {
				t.Errorf("delete with drop: %+v, want dropped", rec)
			}

			// Truncate: refused by default, as a bad record naming the table.
			_, err := conv("trunc", p)
			var re *record.Error
			if !errors.As(err, &re) || !errors.Is(err, record.ErrTruncate) || re.Offset != 9 {
				t.Errorf("truncate: %v, want a bad record wrapping ErrTruncate at offset 9", err)
			}
			tr := must("trunc", pipeline(t, map[string]string{KeyCDCTruncate: CDCTruncateApply}))
			if tr.Op != record.OpTruncate || !tr.Value.IsNull() || tr.Change.Table != "customers" {
				t.Errorf("truncate applied: %+v", tr)
			}

			// The tombstone after a delete: a plain tombstone with auto,
			// dropped with debezium.
			k, _ := enc(evs["delete"])
			var sc Scratch
			rec, err := p.Convert(context.Background(), kafkaRec(10, k, nil), &sc, true)
			if err != nil || rec == nil || rec.Change != nil || rec.Op != record.OpUpsert || !rec.Tombstone() {
				t.Errorf("tombstone with auto: %+v, %v", rec, err)
			}
			strict := pipeline(t, map[string]string{KeyCDCFormat: CDCFormatDebezium})
			if rec, err := strict.Convert(context.Background(), kafkaRec(10, k, nil), &sc, true); rec != nil || err != nil {
				t.Errorf("tombstone with debezium: %+v, %v; want dropped", rec, err)
			}
			checkChange(t, "create, debezium", must("create", strict), change{op: record.OpUpsert, value: annaJSON, key: `{"id":1}`, evOp: 'c', lsn: 200})

			// none: the envelope is a plain struct.
			plain := must("create", pipeline(t, map[string]string{KeyCDCFormat: CDCFormatNone}))
			if plain.Change != nil || plain.Op != record.OpUpsert {
				t.Errorf("cdc.format=none: %+v", plain)
			}
			if _, ok := plain.Value.Get("source"); !ok {
				t.Error("cdc.format=none: the envelope lost its source")
			}
		})
	}

	// Plain records pass auto untouched and are bad records with debezium.
	plainRec := kafkaRec(3, []byte(`{"id":1}`), []byte(`{"id":1,"op":"x"}`))
	var sc Scratch
	rec, err := pipeline(t, nil).Convert(context.Background(), plainRec, &sc, false)
	if err != nil || rec == nil || rec.Change != nil {
		t.Errorf("plain record with auto: %+v, %v", rec, err)
	}
	if _, err := rec.TableName("${source.table}"); !errors.Is(err, record.ErrNotChange) {
		t.Errorf("${source.table} of a plain record: %v", err)
	}
	_, err = pipeline(t, map[string]string{KeyCDCFormat: CDCFormatDebezium}).Convert(context.Background(), plainRec, &sc, false)
	var re *record.Error
	if !errors.As(err, &re) || !errors.Is(err, record.ErrDecode) || re.Offset != 3 {
		t.Errorf("plain record with debezium: %v", err)
	}
	// A struct named like an envelope but with an unknown op.
	k, v := customers.JSON(dbztest.Event{Op: 'x', After: dbztest.Row{"id": 1, "name": "x"}, LSN: 1, TsMs: ts})
	_, err = pipeline(t, nil).Convert(context.Background(), kafkaRec(4, k, v), &sc, false)
	if !errors.As(err, &re) || re.Field != "op" {
		t.Errorf("unknown op: %v", err)
	}
}

// TestChangeEventsAvro converts the same events written by Confluent's
// AvroConverter (key and value through the registry).
func TestChangeEventsAvro(t *testing.T) {
	tr := newTestRegistry(t)
	valueID, _ := tr.register("customers-value", sr.Schema{Schema: customers.AvroValueSchema(), Type: sr.TypeAvro})
	keyID, _ := tr.register("customers-key", sr.Schema{Schema: customers.AvroKeySchema(), Type: sr.TypeAvro})
	settings := map[string]string{
		KeyKeyConverter: "io.confluent.connect.avro.AvroConverter", KeyKeyConverter + "." + SettingRegistryURL: tr.URL,
		KeyValueConverter: "io.confluent.connect.avro.AvroConverter", KeyValueConverter + "." + SettingRegistryURL: tr.URL,
	}
	p, err := PipelineFromSettings(settings)
	if err != nil {
		t.Fatal(err)
	}
	before := dbztest.Row{"id": 1, "name": "Anne", "email": "a@x", "balance": nil}
	after := dbztest.Row{"id": 2, "name": "Anne", "email": nil, "balance": nil}
	ev := dbztest.Event{Op: 'u', Before: before, After: after, LSN: 4242, TsMs: 1700000000000}
	key := avroFrame(t, customers.AvroKeySchema(), keyID, customers.AvroKey(after))
	val := avroFrame(t, customers.AvroValueSchema(), valueID, customers.AvroValue(ev))
	var sc Scratch
	rec, err := p.Convert(context.Background(), kafkaRec(1, key, val), &sc, false)
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "avro update moving the key", rec, change{op: record.OpUpsert,
		value: `{"id":2,"name":"Anne","email":null,"balance":null}`, key: `{"id":2}`, oldKey: `{"id":1}`, evOp: 'u', lsn: 4242})
	if s := rec.Value.Schema(); s == nil || s.Field("name") == nil || s.Field("email") == nil || !s.Field("email").Schema.Optional {
		t.Errorf("avro after schema: %v", s)
	}
	del := dbztest.Event{Op: 'd', Before: after, LSN: 4243, TsMs: 1700000000000}
	val = avroFrame(t, customers.AvroValueSchema(), valueID, customers.AvroValue(del))
	rec, err = p.Convert(context.Background(), kafkaRec(2, key, val), &sc, false)
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "avro delete", rec, change{op: record.OpDelete, value: "null", key: `{"id":2}`, evOp: 'd', lsn: 4243})
}

func TestCDCSettings(t *testing.T) {
	if _, errs := CDCDefs.Validate(map[string]string{KeyCDCColumns: "__op,__nope"}); len(errs.For(KeyCDCColumns)) == 0 {
		t.Error("unknown change column accepted")
	}
	if _, errs := CDCDefs.Validate(map[string]string{KeyCDCFormat: "maxwell"}); len(errs.For(KeyCDCFormat)) == 0 {
		t.Error("unknown cdc.format accepted")
	}
	for _, f := range []string{"${topic}", "x_${source.schema}_${source.table}", "${source.db}.t", "plain"} {
		if err := record.CheckTableNameFormat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range []string{"${table}", "${topic", "${source.name}"} {
		if err := record.CheckTableNameFormat(f); err == nil {
			t.Errorf("%s accepted", f)
		}
	}
}

// SourceTxn reads Debezium's transaction metadata from change events and
// from the transaction topic, with and without schemas, and names a
// PostgreSQL transaction by its txId (record.TxnID).
func TestSourceTxn(t *testing.T) {
	p := DefaultPipeline()
	withSchema, err := PipelineFromSettings(map[string]string{"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(topic, v string) *kgo.Record { return &kgo.Record{Topic: topic, Value: []byte(v)} }
	for _, c := range []struct {
		name string
		p    *Pipeline
		r    *kgo.Record
		want record.TxnMark
	}{
		{"event", p, rec("s.public.a", `{"op":"u","source":{"table":"a"},"after":{"id":1},"transaction":{"id":"571:53195832","total_order":1,"data_collection_order":1}}`),
			record.TxnMark{Kind: record.TxnEvent, ID: "571"}},
		{"snapshot row", p, rec("s.public.a", `{"op":"r","source":{"table":"a"},"after":{"id":1},"transaction":null}`), record.TxnMark{}},
		{"tombstone", p, &kgo.Record{Topic: "s.public.a"}, record.TxnMark{}},
		{"not JSON", p, rec("s.public.a", `{`), record.TxnMark{}},
		{"begin", p, rec("s.transaction", `{"status":"BEGIN","id":"571:53195600","event_count":null}`), record.TxnMark{Kind: record.TxnBegin, ID: "571"}},
		{"end", p, rec("s.transaction", `{"status":"END","id":"571:53195900","event_count":3,"data_collections":[{"data_collection":"public.a","event_count":3}]}`),
			record.TxnMark{Kind: record.TxnEnd, ID: "571", Count: 3}},
		{"other id form", p, rec("s.transaction", `{"status":"END","id":"file.000001:1234:7","event_count":2}`), record.TxnMark{Kind: record.TxnEnd, ID: "file.000001:1234:7", Count: 2}},
		{"end with schema", withSchema, rec("s.transaction", `{"schema":{"type":"struct","fields":[{"field":"status","type":"string"},{"field":"id","type":"string"},{"field":"event_count","type":"int64","optional":true}],"name":"io.debezium.connector.common.TransactionMetadataValue"},"payload":{"status":"END","id":"9:1","event_count":2}}`),
			record.TxnMark{Kind: record.TxnEnd, ID: "9", Count: 2}},
	} {
		got, err := c.p.SourceTxn(context.Background(), c.r, "s.transaction", new(Scratch))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
