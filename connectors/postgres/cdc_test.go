//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/dbztest"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestChangeWriter runs the change data capture, auto.create, auto.evolve
// and routing tests against one throwaway cluster, each in its own
// database.
func TestChangeWriter(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("change events", func(t *testing.T) { t.Parallel(); testChangeEvents(t, newTestDB(t, srv)) })
	t.Run("delete handling and change columns", func(t *testing.T) { t.Parallel(); testDeleteHandling(t, newTestDB(t, srv)) })
	t.Run("truncate", func(t *testing.T) { t.Parallel(); testTruncate(t, newTestDB(t, srv)) })
	t.Run("unavailable values", func(t *testing.T) { t.Parallel(); testUnavailable(t, newTestDB(t, srv)) })
	t.Run("auto.create", func(t *testing.T) { t.Parallel(); testAutoCreate(t, newTestDB(t, srv)) })
	t.Run("auto.create avro", func(t *testing.T) { t.Parallel(); testAutoCreateAvro(t, newTestDB(t, srv)) })
	t.Run("auto.evolve", func(t *testing.T) { t.Parallel(); testAutoEvolve(t, newTestDB(t, srv)) })
	t.Run("incompatible changes", func(t *testing.T) { t.Parallel(); testIncompatible(t, newTestDB(t, srv)) })
	t.Run("routing", func(t *testing.T) { t.Parallel(); testRouting(t, newTestDB(t, srv)) })
}

var items = &dbztest.Table{
	Server: "src", DB: "shop", Schema: "public", Name: "items",
	Columns: []dbztest.Column{
		{Name: "id", Type: "int32"},
		{Name: "name", Type: "string"},
		{Name: "qty", Type: "int32", Optional: true},
	},
	Key: []string{"id"},
}

// cdcWriter returns a writer with the change settings (cdc.*) and the
// writer settings of cfg.
func cdcWriter(t *testing.T, cfg WriterConfig, cdc map[string]string) *Writer {
	t.Helper()
	pipe, err := convert.PipelineFromSettings(cdc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pipeline = pipe
	return mustWriter(t, cfg)
}

// events builds the records of Debezium events of tbl (JSON with
// schemas), from offset first; a nil event is the tombstone of the
// previous event's key.
func events(tbl *dbztest.Table, first int64, evs ...*dbztest.Event) []*kgo.Record {
	var out []*kgo.Record
	var lastKey []byte
	for i, e := range evs {
		off := first + int64(i)
		if e == nil {
			out = append(out, &kgo.Record{Topic: tbl.Topic(), Offset: off, Key: lastKey})
			continue
		}
		k, v := tbl.JSON(*e)
		lastKey = k
		out = append(out, &kgo.Record{Topic: tbl.Topic(), Offset: off, Key: k, Value: v})
	}
	return out
}

func row(id int, name string, qty any) dbztest.Row {
	return dbztest.Row{"id": id, "name": name, "qty": qty}
}

func (d *testDB) rows(table string) string {
	d.t.Helper()
	return strings.Join(d.strings(`SELECT t::text AS r FROM `+table+` t ORDER BY t`), " ")
}

// testChangeEvents applies inserts, snapshot reads, updates (one that
// moves its key, and Debezium's delete + create of a key change), deletes
// with their tombstones, in one batch and across batches; the last change
// of a key in a batch wins.
func testChangeEvents(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE items (id int4 PRIMARY KEY, name text NOT NULL, qty int4)`)
	d.exec(`INSERT INTO items VALUES (9, 'stale', 0)`)
	w := cdcWriter(t, WriterConfig{TableNameFormat: "items"}, nil)
	lsn := int64(1000)
	ev := func(op byte, before, after dbztest.Row) *dbztest.Event {
		lsn += 10
		return &dbztest.Event{Op: op, Before: before, After: after, LSN: lsn, TsMs: 1700000000000 + lsn}
	}
	batch1 := events(items, 0,
		ev('r', nil, row(9, "snap", 1)),
		ev('c', nil, row(1, "a", 1)),
		ev('c', nil, row(2, "b", 2)),
		ev('u', row(1, "a", 1), row(1, "a2", 5)),
		ev('d', row(2, "b", 2), nil), nil, // delete and its tombstone
		ev('c', nil, row(3, "c", nil)),
		ev('u', row(3, "c", nil), row(30, "c moved", 3)), // an update that moves the key
		// Debezium's own key change: delete of the old key, tombstone, create of the new.
		ev('c', nil, row(4, "d", 4)),
		ev('d', row(4, "d", 4), nil), nil,
		ev('c', nil, row(40, "d moved", 4)),
	)
	// Delete events need no delete.enabled and no pk.mode; the tombstone
	// after a delete is a plain tombstone with cdc.format=auto: with
	// delete.enabled off it is a bad record (and it has no source for
	// ${source.table}); cdc.format=debezium drops it.
	_, err := d.write(w, batch1)
	if !errors.Is(err, record.ErrTombstone) {
		t.Fatalf("tombstone with cdc.format=auto and delete.enabled=false: %v", err)
	}
	w = cdcWriter(t, WriterConfig{TableNameFormat: "${source.table}"}, map[string]string{convert.KeyCDCFormat: "debezium"})
	stats, err := d.write(w, batch1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "(1,a2,5) (9,snap,1) (30,\"c moved\",3) (40,\"d moved\",4)"; d.rows("items") != want {
		t.Errorf("after batch 1: %s, want %s", d.rows("items"), want)
	}
	if counts(stats) != (statCounts{Written: 4, Deleted: 2, Dropped: 2, Superseded: 4}) {
		t.Errorf("stats %+v", stats)
	}
	// With auto and delete.enabled the tombstone deletes by key too (a no-op).
	wa := cdcWriter(t, WriterConfig{TableNameFormat: "items", PKMode: PKModeRecordKey, DeleteEnabled: true}, nil)
	batch2 := events(items, 100,
		ev('u', row(1, "a2", 5), row(1, "a3", 6)),
		ev('d', row(30, "c moved", 3), nil), nil,
		ev('c', nil, row(5, "e", nil)),
	)
	if _, err := d.write(wa, batch2); err != nil {
		t.Fatal(err)
	}
	if want := "(1,a3,6) (5,e,) (9,snap,1) (40,\"d moved\",4)"; d.rows("items") != want {
		t.Errorf("after batch 2: %s, want %s", d.rows("items"), want)
	}
	// A redo of batch 2 leaves the same table.
	if _, err := d.write(wa, batch2); err != nil {
		t.Fatal(err)
	}
	if want := "(1,a3,6) (5,e,) (9,snap,1) (40,\"d moved\",4)"; d.rows("items") != want {
		t.Errorf("after a redo: %s, want %s", d.rows("items"), want)
	}
	// An update of a keyless source table (null key) is a bad record.
	_, v := items.JSON(*ev('u', row(1, "a", 1), row(1, "b", 1)))
	_, err = d.write(w, []*kgo.Record{{Topic: items.Topic(), Offset: 200, Value: v}})
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 200 || !errors.Is(err, record.ErrMissingKey) {
		t.Errorf("update without a key: %v", err)
	}
}

// testUnavailable: an update's field holding Debezium's placeholder for an
// unchanged TOASTed value (text, bytea with and without a schema) keeps
// the copy's value, also across the records of a key in one batch and
// after a delete and create; an insert's text equal to the placeholder
// is a value.
func testUnavailable(t *testing.T, d *testDB) {
	docs := &dbztest.Table{
		Server: "src", DB: "shop", Schema: "public", Name: "docs",
		Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "title", Type: "string"}, {Name: "body", Type: "string"}, {Name: "blob", Type: "bytes", Optional: true}},
		Key:     []string{"id"},
	}
	d.exec(`CREATE TABLE docs (id int4 PRIMARY KEY, title text NOT NULL, body text NOT NULL, blob bytea)`)
	const ph = convert.DefaultUnavailable
	doc := func(id int, title, body string, blob any) dbztest.Row {
		return dbztest.Row{"id": id, "title": title, "body": body, "blob": blob}
	}
	lsn := int64(0)
	ev := func(op byte, after dbztest.Row) *dbztest.Event {
		lsn += 10
		return &dbztest.Event{Op: op, After: after, LSN: lsn}
	}
	w := cdcWriter(t, WriterConfig{TableNameFormat: "docs"}, map[string]string{convert.KeyCDCFormat: "debezium"})
	if _, err := d.write(w, events(docs, 0,
		ev('c', doc(1, "a", "B1", []byte("X1"))),
		ev('c', doc(2, "b", "B2", []byte("X2"))),
		ev('c', doc(4, "d", ph, nil)), // an insert's text is a value
	)); err != nil {
		t.Fatal(err)
	}
	batch := events(docs, 10,
		ev('u', doc(1, "a2", ph, []byte(ph))),
		ev('u', doc(2, "b2", "B2new", []byte("X2new"))),
		ev('u', doc(2, "b3", ph, []byte(ph))),
		ev('c', doc(3, "c", "B3", []byte("X3"))),
		&dbztest.Event{Op: 'd', Before: doc(3, "c", "B3", []byte("X3")), LSN: 200}, nil,
		ev('c', doc(3, "c2", "B3b", nil)),
		ev('u', doc(3, "c3", ph, []byte(ph))),
	)
	want := `(1,a2,B1,"\\x5831") (2,b3,B2new,"\\x58326e6577") (3,c3,B3b,) (4,d,` + ph + `,)`
	for range 2 { // a redo leaves the same table
		if _, err := d.write(w, batch); err != nil {
			t.Fatal(err)
		}
		if got := d.rows("docs"); got != want {
			t.Errorf("docs: %s\nwant  %s", got, want)
		}
	}
	// Without a schema a bytea is base64 text; an update's placeholder in
	// that form is recognised too.
	k, v := docs.SchemalessJSON(*ev('u', doc(1, "a3", "B1new", []byte(ph))))
	sw := cdcWriter(t, WriterConfig{TableNameFormat: "docs"}, map[string]string{convert.KeyCDCFormat: "debezium", "value.converter.schemas.enable": "false", "key.converter.schemas.enable": "false"})
	if _, err := d.write(sw, []*kgo.Record{{Topic: docs.Topic(), Offset: 300, Key: k, Value: v}}); err != nil {
		t.Fatal(err)
	}
	if got, want := d.strings(`SELECT d::text FROM docs d WHERE id = 1`)[0], `(1,a3,B1new,"\\x5831")`; got != want {
		t.Errorf("schemaless: %s, want %s", got, want)
	}
	// An update of a row the copy does not have cannot keep its value: a
	// NOT NULL column without it is a bad record at its offset, never an
	// empty value.
	_, err := d.write(w, events(docs, 400, ev('u', doc(9, "z", ph, nil))))
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 400 || !strings.Contains(err.Error(), `"body"`) {
		t.Errorf("update of a missing row with an unavailable value: %v", err)
	}
	if n := d.count("docs"); n != 4 {
		t.Errorf("docs has %d rows after the refused update, want 4", n)
	}
}

// testDeleteHandling covers cdc.delete.handling.mode and the change
// columns.
func testDeleteHandling(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE soft (id int4 PRIMARY KEY, name text, qty int4, __op text, __source_ts_ms int8, __lsn int8, __deleted boolean)`)
	d.exec(`CREATE TABLE kept (id int4 PRIMARY KEY, name text, qty int4)`)
	evs := []*dbztest.Event{
		{Op: 'c', After: row(1, "a", 1), LSN: 10, TsMs: 1000},
		{Op: 'c', After: row(2, "b", 2), LSN: 20, TsMs: 2000},
		{Op: 'd', Before: row(2, "b", 2), LSN: 30, TsMs: 3000}, nil,
	}
	rw := cdcWriter(t, WriterConfig{TableNameFormat: "soft"}, map[string]string{convert.KeyCDCDeleteMode: "rewrite", convert.KeyCDCFormat: "debezium"})
	if _, err := d.write(rw, events(items, 0, evs...)); err != nil {
		t.Fatal(err)
	}
	if got, want := d.rows("soft"), `(1,a,1,c,1000,10,f) (2,b,2,d,3000,30,t)`; got != want {
		t.Errorf("rewrite: %s, want %s", got, want)
	}
	drop := cdcWriter(t, WriterConfig{TableNameFormat: "kept"}, map[string]string{convert.KeyCDCDeleteMode: "drop", convert.KeyCDCFormat: "debezium"})
	stats, err := d.write(drop, events(items, 0, evs...))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.rows("kept"), `(1,a,1) (2,b,2)`; got != want || stats.Dropped != 2 {
		t.Errorf("drop: %s (stats %+v), want %s", got, stats, want)
	}
}

// testTruncate: refused by default (a bad record at its offset); applied
// with cdc.truncate=apply, in the batch's transaction and in order.
func testTruncate(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE items (id int4 PRIMARY KEY, name text NOT NULL, qty int4)`)
	d.exec(`INSERT INTO items VALUES (7, 'old', 0)`)
	evs := events(items, 0,
		&dbztest.Event{Op: 'c', After: row(1, "a", 1), LSN: 10},
		&dbztest.Event{Op: 't', LSN: 20},
		&dbztest.Event{Op: 'c', After: row(2, "b", 2), LSN: 30},
	)
	refuse := cdcWriter(t, WriterConfig{TableNameFormat: "items", ErrorsTolerance: ToleranceAll, DLQTable: "dlq"}, nil)
	stats, err := d.write(refuse, evs)
	if err != nil || stats.DeadLettered != 1 {
		t.Fatalf("refused truncate with errors.tolerance=all: %+v, %v", stats, err)
	}
	if got := d.strings(`SELECT error FROM dlq`); len(got) != 1 || !strings.Contains(got[0], "truncate event") || !strings.Contains(got[0], "@1") {
		t.Errorf("dead letter: %v", got)
	}
	if got, want := d.rows("items"), `(1,a,1) (2,b,2) (7,old,0)`; got != want {
		t.Errorf("refused: %s, want %s", got, want)
	}
	apply := cdcWriter(t, WriterConfig{TableNameFormat: "items"}, map[string]string{convert.KeyCDCTruncate: "apply"})
	// Not alone in its round: nothing written, ErrSchemaChange.
	ctx := context.Background()
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := writeRaw(ctx, apply, tx, evs, false)
		return err
	})
	if !errors.Is(err, ErrSchemaChange) {
		t.Errorf("truncate in a shared round: %v", err)
	}
	stats, err = d.write(apply, evs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.rows("items"), `(2,b,2)`; got != want || stats.Truncated != 1 || stats.Superseded != 1 || stats.Written != 1 {
		t.Errorf("applied: %s (stats %+v), want %s", got, stats, want)
	}
}

// testAutoCreate creates tables from a change event's schemas (JSON with
// schemas) and from schemaless JSON, with the key as primary key and the
// change columns of cdc.columns; a tombstone or delete for a table that
// does not exist is a no-op.
func testAutoCreate(t *testing.T, d *testDB) {
	tbl := &dbztest.Table{Server: "src", DB: "shop", Schema: "inv", Name: "orders", Key: []string{"region", "id"},
		Columns: []dbztest.Column{
			{Name: "region", Type: "string"},
			{Name: "id", Type: "int64"},
			{Name: "small", Type: "int16", Optional: true},
			{Name: "price", Type: "bytes", Logical: record.LogicalDecimal, Params: map[string]string{"scale": "2"}, Optional: true},
			{Name: "ok", Type: "boolean"},
			{Name: "f", Type: "float64", Optional: true},
			{Name: "at", Type: "int64", Logical: record.DebeziumMicroTimestamp, Optional: true},
			{Name: "zat", Type: "string", Logical: record.DebeziumZonedTimestamp, Optional: true},
			{Name: "day", Type: "int32", Logical: record.DebeziumDate, Optional: true},
			{Name: "uid", Type: "string", Logical: record.DebeziumUUID, Optional: true},
			{Name: "doc", Type: "string", Logical: record.DebeziumJSON, Optional: true},
			{Name: "raw", Type: "bytes", Optional: true},
		}}
	w := cdcWriter(t, WriterConfig{TableNameFormat: "${source.schema}_${source.table}", AutoCreate: true, CDCColumns: []string{"__op", "__lsn"}},
		map[string]string{convert.KeyCDCFormat: "debezium"})
	r := dbztest.Row{"region": "eu", "id": 1, "small": 3, "price": "MDk=", "ok": true, "f": 0.5, "at": 1700000000123456,
		"zat": "2024-01-02T03:04:05.5Z", "day": 19000, "uid": "0f8fad5b-d9cb-469f-a165-70867728950e", "doc": `{"a":[1]}`, "raw": "AAE="}
	recs := events(tbl, 0,
		&dbztest.Event{Op: 'd', Before: dbztest.Row{"region": "eu", "id": 0, "ok": false}, LSN: 5}, nil,
		&dbztest.Event{Op: 'c', After: r, LSN: 10},
	)
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	if stats.SchemaChanges != 1 || stats.Written != 1 {
		t.Errorf("stats %+v", stats)
	}
	cols := strings.Join(d.strings(`SELECT column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns WHERE table_name = 'inv_orders' ORDER BY ordinal_position`), ", ")
	want := "region text NO, id bigint NO, small smallint YES, price numeric YES, ok boolean NO, f double precision YES, at timestamp without time zone YES, " +
		"zat timestamp with time zone YES, day date YES, uid uuid YES, doc jsonb YES, raw bytea YES, __op text YES, __lsn bigint YES"
	if cols != want {
		t.Errorf("columns:\n%s\nwant:\n%s", cols, want)
	}
	if pk := d.strings(`SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey::int2[], a.attnum)) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'inv_orders'::regclass AND i.indisprimary`); len(pk) != 1 || pk[0] != "region,id" {
		t.Errorf("primary key %v", pk)
	}
	if got, want := d.rows("inv_orders"), `(eu,1,3,123.45,t,0.5,"2023-11-14 22:13:20.123456","2024-01-02 03:04:05.5+00",2022-01-08,0f8fad5b-d9cb-469f-a165-70867728950e,"{""a"": [1]}","\\x0001",c,10)`; got != want {
		t.Errorf("row:\n%s\nwant:\n%s", got, want)
	}

	// Schemaless JSON with pk.mode=kafka: types inferred from the values.
	wk := mustWriter(t, WriterConfig{PKMode: PKModeKafka, AutoCreate: true})
	if _, err := d.write(wk, []*kgo.Record{rec("plain", 0, nil, js(`{"n":1,"x":1.5,"s":"a","b":true,"o":{"k":1},"z":null}`))}); err != nil {
		t.Fatal(err)
	}
	cols = strings.Join(d.strings(`SELECT column_name || ' ' || data_type FROM information_schema.columns WHERE table_name = 'plain' ORDER BY ordinal_position`), ", ")
	if want := "__connect_topic text, __connect_partition integer, __connect_offset bigint, n bigint, x double precision, s text, b boolean, o jsonb, z text"; cols != want {
		t.Errorf("schemaless columns: %s, want %s", cols, want)
	}
	// Not alone in its round: ErrSchemaChange, and nothing was created.
	ctx := context.Background()
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := writeRaw(ctx, wk, tx, []*kgo.Record{rec("later", 0, nil, js(`{"n":1}`))}, false)
		return err
	})
	if !errors.Is(err, ErrSchemaChange) || d.strings(`SELECT to_regclass('later')::text`)[0] != "NULL" {
		t.Errorf("auto.create in a shared round: %v", err)
	}
	// A rolled back transaction leaves no table.
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wk.Write(ctx, tx, []*kgo.Record{rec("later", 0, nil, js(`{"n":1}`))}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if got := d.strings(`SELECT to_regclass('later')::text`)[0]; got != "NULL" {
		t.Errorf("rolled back auto.create left %s", got)
	}
}

// newHTTPServer serves h on 127.0.0.1 for the test and returns its URL.
func newHTTPServer(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// testAutoCreateAvro creates a table from Avro change events read
// through a Schema Registry (franz-go's srfake).
func testAutoCreateAvro(t *testing.T, d *testDB) {
	hs := newHTTPServer(t, srfake.NewRegistry().Handler())
	cl, err := sr.NewClient(sr.URLs(hs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vs, err := cl.CreateSchema(ctx, items.Topic()+"-value", sr.Schema{Schema: items.AvroValueSchema(), Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := cl.CreateSchema(ctx, items.Topic()+"-key", sr.Schema{Schema: items.AvroKeySchema(), Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	enc := func(schema string, id int, v any) []byte {
		s, err := avro.Parse(schema)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sr.Encode(v, &sr.ConfluentHeader{}, id, nil, func(v any) ([]byte, error) { return s.Encode(v) })
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	w := cdcWriter(t, WriterConfig{TableNameFormat: "avro_${source.table}", AutoCreate: true}, map[string]string{
		"key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": hs,
		"value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": hs,
	})
	var recs []*kgo.Record
	for i, e := range []dbztest.Event{
		{Op: 'c', After: row(1, "a", 1), LSN: 10},
		{Op: 'c', After: row(2, "b", nil), LSN: 20},
		{Op: 'u', Before: row(1, "a", 1), After: row(3, "a moved", 1), LSN: 30},
		{Op: 'd', Before: row(2, "b", nil), LSN: 40},
	} {
		img := e.After
		if img == nil {
			img = e.Before
		}
		recs = append(recs, &kgo.Record{Topic: items.Topic(), Offset: int64(i),
			Key: enc(items.AvroKeySchema(), ks.ID, items.AvroKey(img)), Value: enc(items.AvroValueSchema(), vs.ID, items.AvroValue(e))})
	}
	if _, err := d.write(w, recs); err != nil {
		t.Fatal(err)
	}
	if got, want := d.rows("avro_items"), `(3,"a moved",1)`; got != want {
		t.Errorf("avro: %s, want %s", got, want)
	}
	cols := strings.Join(d.strings(`SELECT column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns WHERE table_name = 'avro_items' ORDER BY ordinal_position`), ", ")
	if want := "id integer NO, name text NO, qty integer YES"; cols != want {
		t.Errorf("avro columns: %s, want %s", cols, want)
	}
}

// testAutoEvolve: a field that appears mid-batch gets a nullable column
// in the batch's transaction; rows before it have NULL there.
func testAutoEvolve(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE items (id int4 PRIMARY KEY, name text NOT NULL, qty int4)`)
	v2 := &dbztest.Table{Server: items.Server, DB: items.DB, Schema: items.Schema, Name: items.Name, Key: items.Key,
		Columns: append(append([]dbztest.Column{}, items.Columns...), dbztest.Column{Name: "color", Type: "string", Optional: true}, dbztest.Column{Name: "weight", Type: "float64", Optional: true})}
	recs := append(events(items, 0, &dbztest.Event{Op: 'c', After: row(1, "a", 1), LSN: 10}),
		events(v2, 1,
			&dbztest.Event{Op: 'c', After: dbztest.Row{"id": 2, "name": "b", "qty": 2, "color": "red", "weight": 1.5}, LSN: 20},
			&dbztest.Event{Op: 'u', Before: row(1, "a", 1), After: dbztest.Row{"id": 1, "name": "a", "qty": 1, "color": "blue"}, LSN: 30})...)
	recs = append(recs, events(items, 3, &dbztest.Event{Op: 'c', After: row(3, "c", 3), LSN: 40})...)
	off := mustWriter(t, WriterConfig{TableNameFormat: "items"})
	_, err := d.write(off, recs)
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 1 || !errors.Is(err, record.ErrUnknownField) || re.Field != "color" {
		t.Fatalf("auto.evolve off: %v", err)
	}
	w := mustWriter(t, WriterConfig{TableNameFormat: "items", AutoEvolve: true})
	// A prepared transaction sharing its round refuses.
	ctx := context.Background()
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := writeRaw(ctx, w, tx, recs, false)
		return err
	})
	if !errors.Is(err, ErrSchemaChange) {
		t.Errorf("auto.evolve in a shared round: %v", err)
	}
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	if stats.SchemaChanges != 2 || stats.Written != 3 {
		t.Errorf("stats %+v", stats)
	}
	if got, want := d.rows("items"), `(1,a,1,blue,) (2,b,2,red,1.5) (3,c,3,,)`; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	cols := strings.Join(d.strings(`SELECT column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns WHERE table_name = 'items' ORDER BY ordinal_position`), ", ")
	if want := "id integer NO, name text NO, qty integer YES, color text YES, weight double precision YES"; cols != want {
		t.Errorf("columns %s, want %s", cols, want)
	}
	// Schemaless JSON: the type comes from the value; a redo changes nothing.
	wj := mustWriter(t, WriterConfig{TableNameFormat: "items", AutoEvolve: true, InsertMode: InsertModeUpsert, PKMode: PKModeRecordValue})
	batch := []*kgo.Record{rec("x", 0, nil, js(`{"id":4,"name":"d","tags":["x"],"n":7}`))}
	for range 2 {
		if _, err := d.write(wj, batch); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.strings(`SELECT data_type FROM information_schema.columns WHERE table_name = 'items' AND column_name IN ('n', 'tags') ORDER BY column_name`); strings.Join(got, ",") != "bigint,jsonb" {
		t.Errorf("inferred types %v", got)
	}
}

// testIncompatible: a field whose schema a column cannot hold, and a key
// that is not the table's, stop at the record, even with
// errors.tolerance=all (never dead-lettered).
func testIncompatible(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE items (id int4 PRIMARY KEY, name text NOT NULL, qty int4)`)
	w := cdcWriter(t, WriterConfig{TableNameFormat: "items", AutoEvolve: true, ErrorsTolerance: ToleranceAll, DLQTable: "dlq"}, nil)
	wide := &dbztest.Table{Server: items.Server, DB: items.DB, Schema: items.Schema, Name: items.Name, Key: items.Key,
		Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "name", Type: "string"}, {Name: "qty", Type: "int64", Optional: true}}}
	recs := append(events(items, 0, &dbztest.Event{Op: 'c', After: row(1, "a", 1), LSN: 10}),
		events(wide, 1, &dbztest.Event{Op: 'c', After: row(2, "b", 2), LSN: 20})...)
	_, err := d.write(w, recs)
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 1 || re.Field != "qty" || !errors.Is(err, record.ErrIncompatible) ||
		!strings.Contains(err.Error(), `ALTER COLUMN "qty" TYPE bigint`) {
		t.Errorf("narrowing: %v", err)
	}
	if n := d.count("items"); n != 0 {
		t.Errorf("%d rows written", n)
	}
	if got := d.strings(`SELECT to_regclass('dlq')::text`)[0]; got != "NULL" {
		t.Error("an incompatible record was dead-lettered")
	}
	// The first record alone goes in (the runtime cuts the batch before
	// the bad record).
	if _, err := d.write(w, recs[:1]); err != nil || d.rows("items") != "(1,a,1)" {
		t.Errorf("before the incompatible record: %v, %s", err, d.rows("items"))
	}
	// A key that changed: (id, name) instead of (id).
	rekeyed := &dbztest.Table{Server: items.Server, DB: items.DB, Schema: items.Schema, Name: items.Name, Key: []string{"id", "name"}, Columns: items.Columns}
	_, err = d.write(w, events(rekeyed, 5, &dbztest.Event{Op: 'c', After: row(3, "c", 3), LSN: 30}))
	if !errors.As(err, &re) || re.Offset != 5 || !errors.Is(err, record.ErrIncompatible) || !strings.Contains(err.Error(), "(id, name) is not the primary key") {
		t.Errorf("changed key: %v", err)
	}
}

// testRouting: one batch of one partition writes three tables, by
// ${source.table}, in one transaction; ${topic} routing of plain records.
func testRouting(t *testing.T, d *testDB) {
	w := cdcWriter(t, WriterConfig{TableNameFormat: "r_${source.table}", AutoCreate: true}, map[string]string{convert.KeyCDCFormat: "debezium"})
	var recs []*kgo.Record
	for i, name := range []string{"a", "b", "c", "a", "b", "c"} {
		tbl := &dbztest.Table{Server: "src", DB: "db", Schema: "public", Name: name, Key: items.Key, Columns: items.Columns}
		recs = append(recs, events(tbl, int64(i), &dbztest.Event{Op: 'c', After: row(i, name, i), LSN: int64(10 * i)})...)
	}
	recs = append(recs, events(&dbztest.Table{Server: "src", DB: "db", Schema: "public", Name: "b", Key: items.Key, Columns: items.Columns}, 6,
		&dbztest.Event{Op: 'd', Before: row(1, "b", 1), LSN: 70})...)
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	for tbl, want := range map[string]string{"r_a": "(0,a,0) (3,a,3)", "r_b": "(4,b,4)", "r_c": "(2,c,2) (5,c,5)"} {
		if got := d.rows(tbl); got != want {
			t.Errorf("%s: %s, want %s", tbl, got, want)
		}
	}
	if counts(stats) != (statCounts{SchemaChanges: 3, Written: 5, Deleted: 1, Superseded: 1}) {
		t.Errorf("stats %+v", stats)
	}
	// A plain record cannot use ${source.table}: a bad record.
	wa := cdcWriter(t, WriterConfig{TableNameFormat: "r_${source.table}"}, nil)
	_, err = d.write(wa, []*kgo.Record{rec("plain", 9, nil, js(`{"id":1}`))})
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 9 || !errors.Is(err, record.ErrNotChange) {
		t.Errorf("plain record with ${source.table}: %v", err)
	}
}
