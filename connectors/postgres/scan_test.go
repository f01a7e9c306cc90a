package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// prepareRecord converts r and maps it to its op in p's table without a
// database (the table is taken as read from the catalog).
func prepareRecord(ctx context.Context, w *Writer, p *mapping, r *kgo.Record) (*op, error) {
	c, err := w.records.Convert(ctx, []*kgo.Record{r})
	if err != nil {
		return nil, err
	}
	var o *op
	err = c.Each(ctx, func(rec *record.Record) error {
		var err error
		o, _, err = w.prepareOne(&catEntry{name: p.t.Name, m: p, sc: newScratch(p.t), fresh: true}, rec, true)
		return err
	})
	return o, err
}

// scanTable is a table for prepareOne without a database.
func scanTable() *table {
	t := &table{Schema: "public", Name: "t", Ident: `"public"."t"`, byName: map[string]*column{}}
	for _, c := range []column{
		{Name: "id", Type: pgType{Kind: kindText}, NotNull: true, MaxLen: -1},
		{Name: "seq", Type: pgType{Kind: kindInt8}, MaxLen: -1},
		{Name: "body", Type: pgType{Kind: kindText}, MaxLen: 10},
		{Name: "doc", Type: pgType{Kind: kindJSONB}, MaxLen: -1},
		{Name: "schema", Type: pgType{Kind: kindText}, MaxLen: -1},
	} {
		c.Index = len(t.Columns)
		t.Columns = append(t.Columns, &c)
		t.byName[c.Name] = &c
	}
	return t
}

// canonical re-encodes a schemaless JSON object through encoding/json
// (members sorted, duplicates resolved, escapes decoded, whitespace gone);
// ok is false when value is not one (or not valid UTF-8, which
// encoding/json replaces and the converter refuses).
func canonical(value []byte) ([]byte, bool) {
	if !utf8.Valid(value) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(value, &m) != nil || m == nil {
		return nil, false
	}
	if len(m) == 2 && m["schema"] != nil && m["payload"] != nil {
		return nil, false // an envelope
	}
	for k, v := range m {
		var x any
		if json.Unmarshal(v, &x) != nil {
			return nil, false
		}
		if _, isObj := x.(map[string]any); isObj {
			m[k] = v // nested text is kept as written
		}
	}
	b, err := json.Marshal(m)
	return b, err == nil
}

// prepareBoth runs prepareOne on value and on its canonical re-encoding
// by encoding/json, and fails the test when the lazy scanner path does
// not decide the same as encoding/json: same verdict, same columns, same
// converted values.
func prepareBoth(t *testing.T, w *Writer, p *mapping, value []byte) {
	t.Helper()
	ctx := context.Background()
	r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Value: value}
	got, gerr := prepareRecord(ctx, w, p, r)
	if gerr != nil && !record.IsCause(gerr) {
		t.Fatalf("value %q: error %v is not a record's fault", value, gerr)
	}
	canon, ok := canonical(value)
	if !ok {
		return
	}
	want, werr := prepareRecord(ctx, w, p, &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Value: canon})
	if (gerr == nil) != (werr == nil) || (gerr != nil && fmt.Sprint(gerr) != fmt.Sprint(werr)) {
		t.Fatalf("value %q: error %v, canonical %s error %v", value, gerr, canon, werr)
	}
	if gerr != nil {
		return
	}
	if !reflect.DeepEqual(got.cols, want.cols) || !reflect.DeepEqual(got.vals, want.vals) || got.shape != want.shape || got.key != want.key {
		t.Fatalf("value %q: cols %v vals %v shape %q; canonical cols %v vals %v shape %q",
			value, got.cols, got.vals, got.shape, want.cols, want.vals, want.shape)
	}
}

var scanSeeds = []string{
	`{"id":"a","seq":1,"body":"x"}`,
	` {"id" : "a" , "seq" : 12 , "doc" : {"k":[1,2,{"z":null}]} } `,
	`{"id":"a","id":"b"}`,
	`{"id":"a","nope":1}`,
	`{"id":"a","\u0073eq":5}`,
	`{"id":"a\u00e9\n","seq":-3}`,
	`{"id":"a","body":"far too long for ten"}`,
	`{"schema":"s","payload":{"id":"a"}}`,
	`{"schema":null,"payload":{"id":"a"}}`,
	`{"schema":{"type":"struct"},"payload":{"id":"a","seq":2}}`,
	`{"schema":"s","id":"a"}`,
	`{"seq":1}`, `{"id":null}`, `{}`, `[]`, `null`, ``, `{"id":"a",}`, `{"id":"a"}x`,
	"{\"id\":\"\xff\"}", `{"id":1.5e3,"seq":"42"}`, `{"id":"a","seq":1.5}`, `{"id":"a","doc":"\u0000"}`,
}

func TestPrepareScannerMatchesEncodingJSON(t *testing.T) {
	w, err := NewWriter(WriterConfig{Connector: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	p := &mapping{t: scanTable()}
	for _, v := range scanSeeds {
		prepareBoth(t, w, p, []byte(v))
	}
	prepareBoth(t, w, p, nil)
}

func FuzzPrepareScanner(f *testing.F) {
	for _, v := range scanSeeds {
		f.Add([]byte(v))
	}
	w, err := NewWriter(WriterConfig{Connector: "scan"})
	if err != nil {
		f.Fatal(err)
	}
	p := &mapping{t: scanTable()}
	f.Fuzz(func(t *testing.T, value []byte) {
		prepareBoth(t, w, p, value)
	})
}

// TestPrepareEnvelope checks that a JsonConverter envelope's logical
// types reach the columns as the values they stand for.
func TestPrepareEnvelope(t *testing.T) {
	tbl := &table{Schema: "public", Name: "t", Ident: `"public"."t"`, byName: map[string]*column{}}
	for _, c := range []column{
		{Name: "price", Type: pgType{Kind: kindNumeric}, MaxLen: -1},
		{Name: "day", Type: pgType{Kind: kindText}, MaxLen: -1},
		{Name: "n", Type: pgType{Kind: kindInt4}, MaxLen: -1},
	} {
		c.Index = len(tbl.Columns)
		tbl.Columns = append(tbl.Columns, &c)
		tbl.byName[c.Name] = &c
	}
	w, err := NewWriter(WriterConfig{Connector: "env"})
	if err != nil {
		t.Fatal(err)
	}
	value := `{"schema":{"type":"struct","fields":[
		{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
		{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},
		{"field":"n","type":"int64"}]},
		"payload":{"price":"MDk=","day":19000,"n":7}}`
	o, err := prepareRecord(context.Background(), w, &mapping{t: tbl}, &kgo.Record{Topic: "t", Value: []byte(value)})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{pgtype.Numeric{Int: big.NewInt(12345), Exp: -2, Valid: true}, "2022-01-08", int32(7)}
	if !reflect.DeepEqual(o.vals, want) {
		t.Fatalf("vals = %#v, want %#v", o.vals, want)
	}
	// A primitive value is a bad record naming what it got.
	_, err = prepareRecord(context.Background(), w, &mapping{t: tbl}, &kgo.Record{Topic: "t", Value: []byte(`{"schema":{"type":"string"},"payload":"x"}`)})
	if !errors.Is(err, record.ErrDecode) || !strings.Contains(err.Error(), "got a string") {
		t.Fatalf("primitive value: %v", err)
	}
}

// TestPrepareEnvelopeRequired: a JsonConverter named in the config with
// schemas.enable unset requires envelopes, as Kafka Connect's does; plain
// JSON is then a bad record, not a failed batch.
func TestPrepareEnvelopeRequired(t *testing.T) {
	pipe, err := convert.NewPipeline(map[string]string{"value.converter": "org.apache.kafka.connect.json.JsonConverter"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(WriterConfig{Connector: "u", Pipeline: pipe})
	if err != nil {
		t.Fatal(err)
	}
	p := &mapping{t: scanTable()}
	o, err := prepareRecord(context.Background(), w, p, &kgo.Record{Topic: "t", Value: []byte(`{"id":"a"}`)})
	if o != nil || !record.IsBadRecord(err) || !errors.Is(err, record.ErrDecode) {
		t.Fatalf("op %v err %v", o, err)
	}
}

// BenchmarkPrepare converts a bench-shaped batch of schemaless JSON
// records to column values.
func BenchmarkPrepare(b *testing.B) {
	w, err := NewWriter(WriterConfig{Connector: "scan"})
	if err != nil {
		b.Fatal(err)
	}
	tbl := scanTable()
	tbl.Columns[2].MaxLen = -1
	p := &mapping{t: tbl}
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%060d"}`, i, i, i)}
	}
	ctx := context.Background()
	for b.Loop() {
		e := &catEntry{name: "t", m: p, sc: newScratch(p.t), fresh: true}
		c, err := w.records.Convert(ctx, recs)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Each(ctx, func(rec *record.Record) error {
			_, _, err := w.prepareOne(e, rec, true)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan plans a bench-shaped batch of schemaless JSON records
// against a snapshot holding its table: conversion, mapping and the
// plan's bookkeeping, one pass.
func BenchmarkPlan(b *testing.B) {
	w, err := NewWriter(WriterConfig{Connector: "scan", TableNameFormat: "t"})
	if err != nil {
		b.Fatal(err)
	}
	tbl := scanTable()
	tbl.Columns[2].MaxLen = -1
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Offset: int64(i), Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%060d"}`, i, i, i)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cat := newCatalog("public", nil)
		cat.set(w, "t", tbl, true)
		c, err := w.records.Convert(ctx, recs)
		if err != nil {
			b.Fatal(err)
		}
		p, err := w.plan(ctx, cat, c, true)
		if err != nil || len(p.tables) != 1 || len(p.tables[0].ops) != len(recs) {
			b.Fatal(err)
		}
	}
}
