package clickhouse

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// benchTable is the bench's table (id String, seq Int64, body String)
// without a server.
func benchTable(tb testing.TB) *table {
	t := &table{DB: "d", Name: "t", Ident: "`d`.`t`", byName: map[string]*column{}}
	for _, c := range [][2]string{{"id", "String"}, {"seq", "Int64"}, {"body", "String"}} {
		typ, err := parseType(c[1])
		if err != nil {
			tb.Fatal(err)
		}
		col := &column{Name: c[0], Type: typ, Insertable: true}
		t.Columns = append(t.Columns, col)
		t.byName[col.Name] = col
	}
	return t
}

// BenchmarkMapRecords converts a bench-shaped batch of 1000 records.
func BenchmarkMapRecords(b *testing.B) {
	t := benchTable(b)
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%060d"}`, i, i, i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		groups, bad, err := mapRecords(t, mapping{}, recs)
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

// mapBoth maps one record with the scanner and the slow way and fails
// when they disagree.
func mapBoth(t *testing.T, tb *table, m mapping, r *kgo.Record) {
	t.Helper()
	fast := newSlots(tb)
	slow := newSlots(tb)
	slow.noScan = true
	fc, fv, fs, ferr := mapRecord(tb, m, r, fast)
	sc, sv, ss, serr := mapRecord(tb, m, r, slow)
	if fmt.Sprint(ferr) != fmt.Sprint(serr) {
		t.Fatalf("value %q: scanner error %v, slow error %v", r.Value, ferr, serr)
	}
	if !reflect.DeepEqual(fc, sc) || !reflect.DeepEqual(fv, sv) || fs != ss {
		t.Fatalf("value %q: scanner %v %#v %q, slow %v %#v %q", r.Value, fc, fv, fs, sc, sv, ss)
	}
}

func mapTestTable(tb testing.TB) (*table, mapping) {
	t := &table{DB: "d", Name: "t", Ident: "`d`.`t`", byName: map[string]*column{}}
	for _, c := range []struct {
		name, typ  string
		def, insrt bool
	}{{"id", "String", false, true}, {"n", "Nullable(Int32)", false, true}, {"d", "String", true, true},
		{ColTopic, "String", false, true}, {"v", "UInt64", false, true}, {"m", "String", false, false}} {
		typ, err := parseType(c.typ)
		if err != nil {
			tb.Fatal(err)
		}
		col := &column{Name: c.name, Type: typ, HasDefault: c.def, Insertable: c.insrt}
		t.Columns = append(t.Columns, col)
		t.byName[col.Name] = col
	}
	return t, mapping{VersionColumn: "v"}
}

func TestMapScannerMatchesSlowPath(t *testing.T) {
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
