package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/dbztest"
)

var items = &dbztest.Table{
	Server: "src", DB: "shop", Schema: "public", Name: "items",
	Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "name", Type: "string"}, {Name: "qty", Type: "int32", Optional: true}},
	Key:     []string{"id"},
}

func cdcPipeline(t *testing.T, settings map[string]string) *convert.Pipeline {
	t.Helper()
	p, err := convert.PipelineFromSettings(settings)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cdcRecords(evs ...dbztest.Event) []*kgo.Record {
	var out []*kgo.Record
	for i, e := range evs {
		k, v := items.JSON(e)
		out = append(out, &kgo.Record{Topic: items.Topic(), Offset: int64(i), Key: k, Value: v})
	}
	return out
}

// TestMapChangeEvents: change events become rows of a
// ReplacingMergeTree(version, is_deleted): the version is the source
// position (source.lsn), a delete is a deletion row of the key, an update
// that moved its key also writes a deletion row of the old key, the
// change columns are filled; a truncate is a bad record; a table that
// cannot apply change events stops the partition (ErrIncompatible, never
// dead-lettered).
func TestMapChangeEvents(t *testing.T) {
	tb := testTable(t, [2]string{"id", "Int32"}, [2]string{"name", "String"}, [2]string{"qty", "Nullable(Int32)"},
		[2]string{"ver", "UInt64"}, [2]string{"is_deleted", "UInt8"}, [2]string{"__op", "String"}, [2]string{"__lsn", "Nullable(Int64)"}, [2]string{"__deleted", "UInt8"})
	tb.Engine = parseEngine("ReplacingMergeTree", "ReplacingMergeTree(ver, is_deleted) ORDER BY id SETTINGS index_granularity = 8192", Features{})
	m := mapping{VersionColumn: "ver", DeletedColumn: "is_deleted"}
	pipe := cdcPipeline(t, map[string]string{convert.KeyCDCFormat: "debezium"})
	recs := cdcRecords(
		dbztest.Event{Op: 'c', After: dbztest.Row{"id": 1, "name": "a", "qty": 1}, LSN: 100},
		dbztest.Event{Op: 'u', Before: dbztest.Row{"id": 1, "name": "a", "qty": 1}, After: dbztest.Row{"id": 2, "name": "a", "qty": nil}, LSN: 200},
		dbztest.Event{Op: 'd', Before: dbztest.Row{"id": 2, "name": "a", "qty": nil}, LSN: 300},
		dbztest.Event{Op: 't', LSN: 400},
	)
	groups, bad, err := mapRaw(context.Background(), pipe, m, fixedTable(tb), recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || bad[0].Offset != 3 || !errors.Is(bad[0], record.ErrTruncate) {
		t.Errorf("bad records %v, want the truncate at 3", bad)
	}
	var got []string
	for _, g := range groups {
		for _, r := range g.rows {
			got = append(got, fmtRow(r))
		}
	}
	want := []string{
		"1 a 1 100 0 c 100 0",    // create
		"1  <nil> 200 1 u 200 0", // deletion row of the moved key
		"2 a <nil> 200 0 u 200 0",
		"2  <nil> 300 1 d 300 0", // delete
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A table without the version column, and a key that is not the
	// table's ORDER BY, cannot apply change events.
	plain := testTable(t, [2]string{"id", "Int32"}, [2]string{"name", "String"}, [2]string{"qty", "Nullable(Int32)"})
	plain.Engine = parseEngine("MergeTree", "MergeTree ORDER BY id", Features{})
	_, _, err = mapRaw(context.Background(), pipe, m, fixedTable(plain), recs[:1])
	var re *record.Error
	if !errors.As(err, &re) || re.Offset != 0 || !errors.Is(err, record.ErrIncompatible) || !strings.Contains(err.Error(), "version.column") {
		t.Errorf("plain MergeTree: %v", err)
	}
	tb.Engine = parseEngine("ReplacingMergeTree", "ReplacingMergeTree(ver, is_deleted) ORDER BY (name, id)", Features{})
	_, _, err = mapRaw(context.Background(), pipe, m, fixedTable(tb), recs[:1])
	if !errors.As(err, &re) || !errors.Is(err, record.ErrIncompatible) || !strings.Contains(err.Error(), "key (id) is not the ORDER BY key (name, id)") {
		t.Errorf("changed key: %v", err)
	}
}

// TestUnavailableValueRefused: an update carrying Debezium's placeholder
// for an unchanged TOASTed value would replace the row whole without it,
// so it is a bad record naming the field and REPLICA IDENTITY FULL.
func TestUnavailableValueRefused(t *testing.T) {
	tb := testTable(t, [2]string{"id", "Int32"}, [2]string{"name", "String"}, [2]string{"qty", "Nullable(Int32)"},
		[2]string{"ver", "UInt64"}, [2]string{"is_deleted", "UInt8"})
	tb.Engine = parseEngine("ReplacingMergeTree", "ReplacingMergeTree(ver, is_deleted) ORDER BY id", Features{})
	m := mapping{VersionColumn: "ver", DeletedColumn: "is_deleted"}
	pipe := cdcPipeline(t, map[string]string{convert.KeyCDCFormat: "debezium"})
	recs := cdcRecords(
		dbztest.Event{Op: 'c', After: dbztest.Row{"id": 1, "name": convert.DefaultUnavailable, "qty": 1}, LSN: 100}, // an insert's text is a value
		dbztest.Event{Op: 'u', Before: dbztest.Row{"id": 1, "name": "a", "qty": 1}, After: dbztest.Row{"id": 1, "name": convert.DefaultUnavailable, "qty": 2}, LSN: 200},
		dbztest.Event{Op: 'u', Before: dbztest.Row{"id": 1, "name": "a", "qty": 2}, After: dbztest.Row{"id": 1, "name": "b", "qty": 3}, LSN: 300},
	)
	groups, bad, err := mapRaw(context.Background(), pipe, m, fixedTable(tb), recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || bad[0].Offset != 1 || !errors.Is(bad[0], record.ErrCoerce) || bad[0].Field != "name" || !strings.Contains(bad[0].Error(), "REPLICA IDENTITY FULL") {
		t.Errorf("bad records %v, want the update at 1, field name", bad)
	}
	n := 0
	for _, g := range groups {
		n += len(g.rows)
	}
	if n != 2 {
		t.Errorf("%d rows, want the insert and the last update", n)
	}
}

// fmtRow renders a row's values, pointers dereferenced, nil as <nil>.
func fmtRow(r []any) string {
	parts := make([]string, len(r))
	for i, v := range r {
		rv := reflect.ValueOf(v)
		for rv.IsValid() && rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				rv = reflect.Value{}
				break
			}
			rv = rv.Elem()
		}
		if !rv.IsValid() {
			parts[i] = "<nil>"
		} else {
			parts[i] = fmt.Sprint(rv.Interface())
		}
	}
	return strings.Join(parts, " ")
}

// TestCreateTableSQLChange: auto.create of a change event's table: the key
// (not Nullable) as ORDER BY, the version and deletion columns, the
// change columns of cdc.columns, typed from the event's schema.
func TestCreateTableSQLChange(t *testing.T) {
	pipe := cdcPipeline(t, nil)
	var sc convert.Scratch
	rec, err := pipe.Convert(context.Background(), cdcRecords(dbztest.Event{Op: 'c', After: dbztest.Row{"id": 1, "name": "a", "qty": 1}, LSN: 1})[0], &sc, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := createTableSQL("`d`.`items`", rec, true, mapping{VersionColumn: "ver", DeletedColumn: "is_deleted"},
		createOpts{orderBy: []string{"id"}, engine: "ReplacingMergeTree(`ver`, `is_deleted`)", deleted: true, changeCols: []string{"__op", "__lsn"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "CREATE TABLE IF NOT EXISTS `d`.`items` (`id` Int32, `name` String, `qty` Nullable(Int32), `ver` UInt64, `is_deleted` UInt8, `__op` String, `__lsn` Nullable(Int64)) ENGINE = ReplacingMergeTree(`ver`, `is_deleted`) ORDER BY (`id`)"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if typ := evolveType(rec.Value, "name", true); typ != "Nullable(String) DEFAULT NULL" {
		t.Errorf("evolve type %s", typ)
	}
	if typ := evolveType(record.JSON([]byte(`{"tags":["a"]}`)), "tags", true); typ != "Nullable(String) DEFAULT NULL" {
		t.Errorf("evolve type of a schemaless array %s", typ)
	}
}

func TestSortingKey(t *testing.T) {
	for full, want := range map[string]string{
		"ReplacingMergeTree(v) ORDER BY (a, `b c`) SETTINGS index_granularity = 8192": "a,b c",
		"MergeTree ORDER BY id SETTINGS x = 1":                                        "id",
		"MergeTree ORDER BY tuple() SETTINGS x = 1":                                   "",
		"MergeTree ORDER BY (toDate(ts), id)":                                         "",
		"Memory":                                                                      "",
	} {
		tb := &table{Engine: Engine{Full: full}}
		if got := strings.Join(tb.sortingKey(), ","); got != want {
			t.Errorf("%s: %q, want %q", full, got, want)
		}
	}
}

// TestBlocksIgnoreTableIdentity: the blocks of a batch depend on the
// records and the table's columns only, not on which description of the
// table the snapshot holds, so a redo (planned against another snapshot)
// cuts the same blocks.
func TestBlocksIgnoreTableIdentity(t *testing.T) {
	cols := [][2]string{{"id", "String"}, {"seq", "Int64"}, {ColTopic, "String"}, {ColPartition, "Int32"}, {ColOffset, "Int64"}}
	describe := func() *table {
		tb := &table{DB: "d", Name: "t", Ident: "`d`.`t`"}
		for _, col := range cols {
			typ, err := parseType(col[1])
			if err != nil {
				t.Fatal(err)
			}
			tb.add(&column{Name: col[0], Type: typ, Insertable: true})
		}
		return tb
	}
	var recs []*kgo.Record
	for i := range 60 {
		recs = append(recs, &kgo.Record{Topic: "tp", Offset: int64(i), Value: fmt.Appendf(nil, `{"id":"r%d","seq":%d}`, i, i)})
	}
	groups, bad, err := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{}, fixedTable(describe()), recs)
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	again, _, err := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{}, fixedTable(describe()), recs)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := blockText(blocks(groups, 25)), blockText(blocks(again, 25)); a != b {
		t.Errorf("blocks differ between two descriptions of the table:\n%s\n%s", a, b)
	}
	if bs := blocks(groups, 25); len(groups) != 1 || len(bs) != 3 || len(bs[2].Rows) != 10 {
		t.Errorf("%d groups, %d blocks: want 1 group cut into 25+25+10 rows", len(groups), len(bs))
	}
}
