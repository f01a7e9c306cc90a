package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
)

// mainTable is the benchmark's main workload table:
// (id text NOT NULL, seq bigint, body text).
func mainTable() *table {
	t := &table{Schema: "public", Name: "t", Ident: `"public"."t"`, byName: map[string]*column{}}
	for _, c := range []column{
		{Name: "id", Type: pgType{OID: pgtype.TextOID, Kind: kindText}, NotNull: true, MaxLen: -1},
		{Name: "seq", Type: pgType{OID: pgtype.Int8OID, Kind: kindInt8}, MaxLen: -1},
		{Name: "body", Type: pgType{OID: pgtype.TextOID, Kind: kindText}, MaxLen: -1},
	} {
		c.Index = len(t.Columns)
		t.Columns = append(t.Columns, &c)
		t.byName[c.Name] = &c
	}
	return t
}

// mainRecords are n records of the benchmark's main workload shape,
// {"id":…,"seq":…,"body":…} with a 100-byte value, at offsets from
// first.
func mainRecords(first, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		o := first + i
		recs[i] = &kgo.Record{Topic: "t", Offset: int64(o),
			Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%058d"}`, o, o, o)}
	}
	return recs
}

// appendCopyRows appends ops' rows in PostgreSQL's binary COPY format as
// pgx's CopyFrom encodes them (a field count, then each field's length
// and bytes, -1 for NULL), with m.
func appendCopyRows(m *pgtype.Map, buf []byte, cols []*column, ops []*op) ([]byte, error) {
	for _, o := range ops {
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(o.vals)))
		for i, v := range o.vals {
			if v == nil {
				buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
				continue
			}
			at := len(buf)
			buf = append(buf, 0, 0, 0, 0)
			var err error
			if buf, err = m.Encode(cols[i].Type.OID, pgtype.BinaryFormatCode, v, buf); err != nil {
				return nil, err
			}
			binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
		}
	}
	return buf, nil
}

// TestRowsOutliveConverterBuffers: the rows of a batch are read only
// after every record of the batch has been converted into the same
// reused buffers, as the COPY reads them; each must still hold its own
// record's values. A converter that handed out bytes it reuses, or a
// row that aliased them, would show the last record's values here.
func TestRowsOutliveConverterBuffers(t *testing.T) {
	w, err := NewWriter(WriterConfig{Connector: "rows", TableNameFormat: "t"})
	if err != nil {
		t.Fatal(err)
	}
	recs := mainRecords(0, 3000)
	// Escaped strings (decoded into new memory) and numbers given as
	// strings, between the plain ones.
	recs[7].Value = []byte(`{"id":"k\u0030000000007","seq":"7","body":"b\"7"}`)
	recs[8].Value = []byte(`{"body":"x","seq":8,"id":"k0000000008"}`)
	ctx := context.Background()
	cat := newCatalog("public", nil)
	cat.set(w, "t", mainTable(), true)
	c, err := w.records.Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.plan(ctx, cat, c, true)
	if err != nil || len(p.tables) != 1 || len(p.bad) != 0 {
		t.Fatalf("plan: %v, %d tables, bad %v", err, len(p.tables), p.bad)
	}
	ops := p.tables[0].ops
	if len(ops) != len(recs) {
		t.Fatalf("%d ops for %d records", len(ops), len(recs))
	}
	for i, o := range ops {
		want := []any{fmt.Sprintf("k%010d", i), int64(i), fmt.Sprintf("%058d", i)}
		switch i {
		case 7:
			want[2] = `b"7`
		case 8:
			want[2] = "x"
		}
		if o.rec != recs[i] || len(o.vals) != 3 || o.vals[0] != want[0] || o.vals[1] != want[1] || o.vals[2] != want[2] {
			t.Fatalf("op %d: %#v, want %#v", i, o.vals, want)
		}
	}
	m := pgtype.NewMap()
	if _, err := appendCopyRows(m, nil, ops[0].cols, ops); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCopyRows turns the main workload's JSON records into COPY
// rows: the pipeline's conversion, the plan (record → row) and the
// binary encoding of every row as pgx's CopyFrom does it, without a
// server. Per op: 1,000 records.
//
//	go test -run '^$' -bench BenchmarkCopyRows -benchmem -count 10 ./connectors/postgres/
func BenchmarkCopyRows(b *testing.B) {
	w, err := NewWriter(WriterConfig{Connector: "rows", TableNameFormat: "t"})
	if err != nil {
		b.Fatal(err)
	}
	tbl := mainTable()
	recs := mainRecords(0, 1000)
	m := pgtype.NewMap()
	var buf []byte
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
		ops := p.tables[0].ops
		if buf, err = appendCopyRows(m, buf[:0], ops[0].cols, ops); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// TestShapeAndOrderReuse: planning reuses the last record's shape and
// field order; each op must get the shape and values a fresh scratch
// gives it, whatever the mix of column sets, field orders, unknown-free
// reorderings and keyed (upsert) writes.
func TestShapeAndOrderReuse(t *testing.T) {
	values := []string{
		`{"id":"a","seq":1,"body":"x"}`,
		`{"id":"b","seq":2,"body":"y"}`,
		`{"id":"c","seq":3}`,
		`{"seq":4,"id":"d"}`,
		`{"body":"z","id":"e","seq":5}`,
		`{"id":"f","body":null,"seq":6}`,
		`{"id":"g","seq":7,"body":"w","seq":8}`,
		`{"id":"h"}`,
		`{"id":"i","seq":9,"body":"v"}`,
		`{"id":"j","seq":10,"body":"u","id":"k"}`,
	}
	for _, mode := range []string{InsertModeInsert, InsertModeUpsert} {
		cfg := WriterConfig{Connector: "rows", TableNameFormat: "t", InsertMode: mode}
		if mode == InsertModeUpsert {
			cfg.PKMode, cfg.PKFields = PKModeRecordValue, []string{"id"}
		}
		w, err := NewWriter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tbl := mainTable()
		tbl.PrimaryKey, tbl.Unique = []string{"id"}, [][]string{{"id"}}
		m := w.newMapping(tbl)
		shared := &catEntry{name: "t", m: m, sc: newScratch(tbl), fresh: true}
		var recs []*kgo.Record
		for i := range 3 {
			for j, v := range values {
				recs = append(recs, &kgo.Record{Topic: "t", Offset: int64(i*len(values) + j), Value: []byte(v)})
			}
		}
		ctx := context.Background()
		c, err := w.records.Convert(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Each(ctx, func(rec *record.Record) error {
			got, _, err := w.prepareOne(shared, rec, true)
			if err != nil {
				return err
			}
			want, _, err := w.prepareOne(&catEntry{name: "t", m: m, sc: newScratch(tbl), fresh: true}, rec, true)
			if err != nil {
				return err
			}
			if got.shape != want.shape || !slices.Equal(got.cols, want.cols) || !reflect.DeepEqual(got.vals, want.vals) || got.key != want.key {
				t.Errorf("%s, record %s: shape %q cols %v vals %v key %q; want %q %v %v %q", mode, rec.Raw.Value,
					got.shape, got.cols, got.vals, got.key, want.shape, want.cols, want.vals, want.key)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestJSONColumnsOutliveConverterBuffers: json and jsonb columns share
// the record's bytes (or a buffer made for the value); read after the
// whole batch was converted, each row still holds its own record's text.
func TestJSONColumnsOutliveConverterBuffers(t *testing.T) {
	tbl := &table{Schema: "public", Name: "t", Ident: `"public"."t"`, byName: map[string]*column{}}
	for _, c := range []column{
		{Name: "id", Type: pgType{OID: pgtype.TextOID, Kind: kindText}, MaxLen: -1},
		{Name: "doc", Type: pgType{OID: pgtype.JSONBOID, Kind: kindJSONB}, MaxLen: -1},
		{Name: "raw", Type: pgType{OID: pgtype.JSONOID, Kind: kindJSON}, MaxLen: -1},
	} {
		c.Index = len(tbl.Columns)
		tbl.Columns = append(tbl.Columns, &c)
		tbl.byName[c.Name] = &c
	}
	w, err := NewWriter(WriterConfig{Connector: "rows", TableNameFormat: "t"})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, 2000)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Offset: int64(i), Value: fmt.Appendf(nil, `{"id":"k%d","doc":{"n":%d,"s":"x%d"},"raw":[%d,"y"]}`, i, i, i, i)}
	}
	ctx := context.Background()
	cat := newCatalog("public", nil)
	cat.set(w, "t", tbl, true)
	c, err := w.records.Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.plan(ctx, cat, c, true)
	if err != nil || len(p.tables) != 1 || len(p.bad) != 0 || len(p.tables[0].ops) != len(recs) {
		t.Fatalf("plan: %v, bad %v", err, p.bad)
	}
	for i, o := range p.tables[0].ops {
		want := []any{fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d,"s":"x%d"}`, i, i), fmt.Sprintf(`[%d,"y"]`, i)}
		if !reflect.DeepEqual(o.vals, want) {
			t.Fatalf("op %d: %#v, want %#v", i, o.vals, want)
		}
	}
}
