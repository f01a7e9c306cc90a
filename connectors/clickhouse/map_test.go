package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// benchTable is the bench's table (id String, seq Int64, body String)
// without a server.
func benchTable(tb testing.TB) *table {
	t := &table{DB: "d", Name: "t", Ident: "`d`.`t`"}
	for _, c := range [][2]string{{"id", "String"}, {"seq", "Int64"}, {"body", "String"}} {
		typ, err := parseType(c[1])
		if err != nil {
			tb.Fatal(err)
		}
		t.add(&column{Name: c[0], Type: typ, Insertable: true})
	}
	return t
}

// BenchmarkMapRecords converts a bench-shaped batch of 1000 records.
func BenchmarkMapRecords(b *testing.B) {
	t := benchTable(b)
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "tp", Offset: int64(i), Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%060d"}`, i, i, i)}
	}
	pipe := convert.DefaultPipeline()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		groups, bad, err := mapRaw(ctx, pipe, mapping{}, fixedTable(t), recs)
		if err != nil || len(bad) != 0 || len(groups) != 1 || len(groups[0].rows) != len(recs) {
			b.Fatalf("groups %d bad %v err %v", len(groups), bad, err)
		}
	}
}

var mapSeeds = []string{
	`{"id":"a"}`, `{"id":"b","n":5,"d":"x"}`, `{"id":"c","zz":1}`, `not json`, `null`, ``,
	`{"schema":{"type":"struct"},"payload":{"id":"e"}}`, `{"schema":"s","payload":{"id":"e"}}`, `{"schema":null,"payload":null}`,
	`{"id":"a","id":"b"}`, `{"\u0069d":"a"}`, `{"id":"a\nb","n":"7"}`, `{"n":1e2}`, `{"n":2147483648}`, `{"v":3}`,
	`{"__connect_topic":"x","id":"t"}`, `{"m":"mat"}`, `{"id":null}`, `{}`, "{\"id\":\"\xff\"}", `{"id":[1,{"a":2}]}`,
}

// canonical re-encodes a schemaless JSON object through encoding/json;
// ok is false when v is not one (or not valid UTF-8, which encoding/json
// replaces and the converter refuses), or is an envelope.
func canonical(v []byte) ([]byte, bool) {
	if !utf8.Valid(v) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || m == nil || (len(m) == 2 && m["schema"] != nil && m["payload"] != nil) {
		return nil, false
	}
	b, err := json.Marshal(m)
	return b, err == nil
}

// mapOneRow maps r to its one row of tb (nil when it maps to none).
func mapOneRow(ctx context.Context, pipe *convert.Pipeline, tb *table, m mapping, r *kgo.Record) ([]*column, []any, string, error) {
	c, err := connectors.NewRecordPipeline(pipe, "none", m.DeleteEnabled).Convert(ctx, []*kgo.Record{r})
	if err != nil {
		return nil, nil, "", err
	}
	var rows []row
	err = c.Each(ctx, func(rec *record.Record) error {
		rows, err = mapOne(m, fixedTable(tb), rec, map[*table]*slots{}, &rowPlan{})
		return err
	})
	if err != nil || len(rows) == 0 {
		return nil, nil, "", err
	}
	return rows[0].cols, rows[0].vals, rows[0].shape, nil
}

// mapBoth maps one record and its canonical re-encoding by encoding/json
// and fails when the scanner path decides differently from encoding/json.
func mapBoth(t *testing.T, tb *table, m mapping, r *kgo.Record) {
	t.Helper()
	ctx := context.Background()
	pipe := convert.DefaultPipeline()
	fc, fv, fs, ferr := mapOneRow(ctx, pipe, tb, m, r)
	if ferr != nil && !record.IsCause(ferr) {
		t.Fatalf("value %q: %v is not a record's fault", r.Value, ferr)
	}
	canon, ok := canonical(r.Value)
	if !ok {
		return
	}
	r2 := *r
	r2.Value = canon
	sc, sv, ss, serr := mapOneRow(ctx, pipe, tb, m, &r2)
	if fmt.Sprint(ferr) != fmt.Sprint(serr) {
		t.Fatalf("value %q: error %v, canonical %s error %v", r.Value, ferr, canon, serr)
	}
	if !reflect.DeepEqual(fc, sc) || !reflect.DeepEqual(fv, sv) || fs != ss {
		t.Fatalf("value %q: %v %#v %q, canonical %v %#v %q", r.Value, fc, fv, fs, sc, sv, ss)
	}
}

func mapTestTable(tb testing.TB) (*table, mapping) {
	t := &table{DB: "d", Name: "t", Ident: "`d`.`t`"}
	for _, c := range []struct {
		name, typ  string
		def, insrt bool
	}{{"id", "String", false, true}, {"n", "Nullable(Int32)", false, true}, {"d", "String", true, true},
		{ColTopic, "String", false, true}, {"v", "UInt64", false, true}, {"m", "String", false, false}} {
		typ, err := parseType(c.typ)
		if err != nil {
			tb.Fatal(err)
		}
		t.add(&column{Name: c.name, Type: typ, HasDefault: c.def, Insertable: c.insrt})
	}
	return t, mapping{VersionColumn: "v"}
}

func TestMapScannerMatchesEncodingJSON(t *testing.T) {
	tb, m := mapTestTable(t)
	for _, v := range mapSeeds {
		mapBoth(t, tb, m, &kgo.Record{Topic: "tp", Partition: 1, Offset: 9, Value: []byte(v)})
	}
	mapBoth(t, tb, m, &kgo.Record{Topic: "tp", Partition: 1, Offset: 9})
}

func FuzzMapScanner(f *testing.F) {
	for _, v := range mapSeeds {
		f.Add([]byte(v))
	}
	tb, m := mapTestTable(f)
	f.Fuzz(func(t *testing.T, v []byte) {
		mapBoth(t, tb, m, &kgo.Record{Topic: "tp", Partition: 1, Offset: 9, Value: v})
	})
}

// mapRaw converts recs through pipe as the runtime does with
// errors.tolerance=all, then maps them: bad are the conversion's dead
// letters and the mapping's refusals, in offset order.
func mapRaw(ctx context.Context, pipe *convert.Pipeline, m mapping, snap *snapshot, recs []*kgo.Record) ([]*rowGroup, []*record.Error, error) {
	c, err := connectors.NewRecordPipeline(pipe, "all", m.DeleteEnabled).Convert(ctx, recs)
	if err != nil {
		return nil, nil, err
	}
	p, err := mapRecords(ctx, m, snap, c)
	if err != nil {
		return nil, nil, err
	}
	groups, bad := p.groups, p.bad
	for _, l := range c.DeadLetters() {
		bad = append(bad, l.Err)
	}
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].Offset < bad[j].Offset })
	return groups, bad, nil
}

// TestRowsKeepTheirValues: rows are built in reused scratch and carved
// from shared chunks; every row must still hold its own record's values
// after the whole batch is mapped, rows with the same columns share one
// column slice, and a row whose columns differ (a field that sets a
// DEFAULT column) starts a group of its own and does not disturb the
// others.
func TestRowsKeepTheirValues(t *testing.T) {
	tb := benchTable(t)
	typ, err := parseType("String")
	if err != nil {
		t.Fatal(err)
	}
	tb.add(&column{Name: "note", Type: typ, Insertable: true, HasDefault: true})
	tb.add(&column{Name: ColTopic, Type: typ, Insertable: true})
	var recs []*kgo.Record
	for i := range 5000 {
		v := fmt.Sprintf(`{"id":"k%d","seq":%d,"body":"b%d"}`, i, i*7, i)
		if i%1000 == 999 {
			v = fmt.Sprintf(`{"id":"k%d","seq":%d,"body":"b%d","note":"n%d"}`, i, i*7, i, i)
		}
		recs = append(recs, &kgo.Record{Topic: "tp", Partition: 3, Offset: int64(i), Value: []byte(v)})
	}
	groups, bad, err := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{}, fixedTable(tb), recs)
	if err != nil || len(bad) != 0 {
		t.Fatalf("bad %v err %v", bad, err)
	}
	if len(groups) != 2 || len(groups[0].rows) != 4995 || len(groups[1].rows) != 5 {
		t.Fatalf("%d groups, want 2: the rows without note and the 5 with it", len(groups))
	}
	for _, g := range groups {
		for j, vals := range g.rows {
			off := g.offs[j]
			want := []any{fmt.Sprintf("k%d", off), off * 7, fmt.Sprintf("b%d", off)}
			if fmt.Sprint(vals[:3]) != fmt.Sprint(want) || vals[len(vals)-1] != "tp" {
				t.Fatalf("row of offset %d holds %v, want %v … tp", off, vals, want)
			}
			if len(g.shape) > 0 && vals[3] != fmt.Sprintf("n%d", off) {
				t.Fatalf("row of offset %d: note %v", off, vals[3])
			}
		}
	}
}
