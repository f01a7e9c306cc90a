package postgres

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

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

// prepareBoth runs prepareOne through the scanner and through the map
// decoder and fails the test when they disagree.
func prepareBoth(t *testing.T, w *Writer, p *plan, value []byte) {
	t.Helper()
	r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Value: value}
	fast, ferr := w.prepareOne(p, r, newScratch(p.t))
	slow := newScratch(p.t)
	slow.mapOnly = true
	want, werr := w.prepareOne(p, r, slow)
	if fmt.Sprint(ferr) != fmt.Sprint(werr) {
		t.Fatalf("value %q: scanner error %v, map decoder error %v", value, ferr, werr)
	}
	if ferr != nil {
		return
	}
	if !reflect.DeepEqual(fast.cols, want.cols) || !reflect.DeepEqual(fast.vals, want.vals) || fast.shape != want.shape || fast.key != want.key {
		t.Fatalf("value %q: scanner gives cols %v vals %v shape %q, map decoder cols %v vals %v shape %q",
			value, fast.cols, fast.vals, fast.shape, want.cols, want.vals, want.shape)
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

func TestPrepareScannerMatchesMapDecoder(t *testing.T) {
	w, err := NewWriter(WriterConfig{Connector: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	p := &plan{t: scanTable()}
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
	p := &plan{t: scanTable()}
	f.Fuzz(func(t *testing.T, value []byte) {
		prepareBoth(t, w, p, value)
	})
}

// BenchmarkPrepare converts a bench-shaped batch through the scanner and
// through the map decoder (the baseline), in the same process.
func BenchmarkPrepare(b *testing.B) {
	w, err := NewWriter(WriterConfig{Connector: "scan"})
	if err != nil {
		b.Fatal(err)
	}
	tbl := scanTable()
	tbl.Columns[2].MaxLen = -1
	p := &plan{t: tbl}
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, `{"id":"k%010d","seq":%d,"body":"%060d"}`, i, i, i)}
	}
	for _, mode := range []string{"scanner", "map"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				sc := newScratch(p.t)
				sc.mapOnly = mode == "map"
				for _, r := range recs {
					if _, err := w.prepareOne(p, r, sc); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
