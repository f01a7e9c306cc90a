package clickhouse

import (
	"fmt"
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
