package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/twophase"
)

func TestParseType(t *testing.T) {
	cases := []struct {
		in   string
		kind kind
		ok   bool // supported
	}{
		{"Int8", kindInt, true}, {"UInt64", kindUint, true}, {"Float32", kindFloat32, true},
		{"Decimal(18, 4)", kindDecimal, true}, {"Decimal64(3)", kindDecimal, true},
		{"String", kindString, true}, {"FixedString(16)", kindFixedString, true}, {"UUID", kindUUID, true},
		{"Date", kindDate, true}, {"DateTime", kindDateTime, true}, {"DateTime('UTC')", kindDateTime, true},
		{"DateTime64(3, 'Europe/Berlin')", kindDateTime64, true},
		{"Nullable(Int32)", kindNullable, true}, {"LowCardinality(Nullable(String))", kindLowCardinality, true},
		{"Array(Array(Nullable(UInt8)))", kindArray, true}, {"Map(String, Array(Int64))", kindMap, true},
		{"Map(UInt8, String)", kindMap, false}, {"Enum8('a' = 1, 'b,(' = 2)", kindEnum, true},
		{"AggregateFunction(uniq, UInt64)", kindUnsupported, false}, {"Array(IPv4)", kindArray, false},
	}
	for _, c := range cases {
		ty, err := parseType(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if ty.Kind != c.kind || ty.supported() != c.ok {
			t.Errorf("%s: kind %d supported %t, want %d %t", c.in, ty.Kind, ty.supported(), c.kind, c.ok)
		}
	}
	ty, _ := parseType("Decimal(18, 4)")
	if ty.Prec != 18 || ty.Scale != 4 {
		t.Errorf("Decimal(18, 4): prec %d scale %d", ty.Prec, ty.Scale)
	}
	ty, _ = parseType("DateTime64(3, 'UTC')")
	if ty.Scale != 3 || ty.Loc != "UTC" {
		t.Errorf("DateTime64: %+v", ty)
	}
	for _, bad := range []string{"", "Nullable(", "Decimal(x, 2)", "Int32)"} {
		if _, err := parseType(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func mustType(t *testing.T, s string) *chType {
	t.Helper()
	ty, err := parseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}

func TestCoerce(t *testing.T) {
	ok := []struct {
		typ, in string
		want    any
	}{
		{"Int8", `-128`, int8(-128)}, {"Int32", `"42"`, int32(42)}, {"Int64", `1e3`, int64(1000)}, {"UInt8", `true`, uint8(1)},
		{"UInt64", `18446744073709551615`, uint64(math.MaxUint64)}, {"Float32", `1.5`, float32(1.5)}, {"Float64", `"2.25"`, 2.25},
		{"Decimal(10, 2)", `12.3`, "12.30"}, {"Decimal(10, 2)", `"-0.01"`, "-0.01"},
		{"String", `"x"`, "x"}, {"String", `{"a":[1,2]}`, `{"a":[1,2]}`}, {"String", `12`, "12"},
		{"FixedString(3)", `"abc"`, "abc"}, {"UUID", `"{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}"`, "6ba7b810-9dad-11d1-80b4-00c04fd430c8"},
		{"Date", `"2024-02-29"`, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)}, {"Date", `1`, time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"DateTime", `"2024-01-02T03:04:05+01:00"`, time.Date(2024, 1, 2, 2, 4, 5, 0, time.UTC)},
		{"DateTime64(3)", `1700000000123`, time.UnixMilli(1700000000123).UTC()},
		{"DateTime64(3)", `"2024-01-02T03:04:05.1236Z"`, time.Date(2024, 1, 2, 3, 4, 5, 124000000, time.UTC)},
		{"DateTime64(6)", `"2024-01-02 03:04:05.123456"`, time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{"Nullable(Int16)", `null`, nil}, {"LowCardinality(String)", `"v"`, "v"}, {"Bool", `false`, false},
		// Integer bounds (plain decimal text takes a fast path) and escapes.
		{"Int8", `127`, int8(127)}, {"UInt8", `255`, uint8(255)}, {"UInt32", `4294967295`, uint32(math.MaxUint32)},
		{"Int64", `-9223372036854775808`, int64(math.MinInt64)}, {"Int16", `"-32768"`, int16(-32768)}, {"UInt16", `1.0`, uint16(1)},
		{"String", `"a\nb\u00e9"`, "a\nb\u00e9"}, {"String", `"plain é"`, "plain é"},
	}
	for _, c := range ok {
		got, err := coerceJSON(mustType(t, c.typ), c.in)
		if err != nil {
			t.Errorf("%s %s: %v", c.typ, c.in, err)
			continue
		}
		if gt, isT := got.(time.Time); isT {
			if !gt.Equal(c.want.(time.Time)) {
				t.Errorf("%s %s: %v, want %v", c.typ, c.in, gt, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s %s: %#v, want %#v", c.typ, c.in, got, c.want)
		}
	}
	bad := []struct{ typ, in string }{
		{"Int8", `128`}, {"UInt8", `-1`}, {"Int8", `-129`}, {"UInt8", `256`}, {"Int16", `32768`}, {"UInt32", `4294967296`},
		{"Int64", `9223372036854775808`}, {"UInt64", `18446744073709551616`}, {"Int32", `1.5`}, {"Int32", `"x"`}, {"Int64", `{}`},
		{"Decimal(4, 2)", `123.45`}, {"Decimal(10, 2)", `1.234`}, {"FixedString(2)", `"abc"`}, {"UUID", `"nope"`},
		{"DateTime", `"yesterday"`}, {"DateTime", `-1`}, {"DateTime", `"2024-01-02T03:04:05.9Z"`}, {"String", `null`}, {"Array(Int8)", `[1, 300]`}, {"Map(String, Int8)", `[1]`},
	}
	for _, c := range bad {
		if _, err := coerceJSON(mustType(t, c.typ), c.in); !errors.Is(err, record.ErrCoerce) {
			t.Errorf("%s %s: error %v, want ErrCoerce", c.typ, c.in, err)
		}
	}
}

// TestCoerceMapDeterministic: Map values are written in key order whatever
// the JSON order, so a redo's block is byte-identical.
func TestCoerceMapDeterministic(t *testing.T) {
	ty := mustType(t, "Map(String, Array(Int32))")
	a, err := coerceJSON(ty, `{"b":[2],"a":[1],"c":[]}`)
	if err != nil {
		t.Fatal(err)
	}
	m := a.(*orderedMap)
	var keys []string
	for it := m.Iterator(); it.Next(); {
		keys = append(keys, it.Key().(string))
	}
	if strings.Join(keys, ",") != "a,b,c" {
		t.Fatalf("keys in order %v", keys)
	}
}

func TestToken(t *testing.T) {
	id := twophase.BatchID{Connector: "c", Topic: "t", Partition: 1, First: 10, Last: 20}
	if Token(id) != Token(id) {
		t.Fatal("token not deterministic")
	}
	seen := map[string]bool{Token(id): true}
	for _, other := range []twophase.BatchID{
		{Connector: "c2", Topic: "t", Partition: 1, First: 10, Last: 20}, {Connector: "c", Topic: "t2", Partition: 1, First: 10, Last: 20},
		{Connector: "c", Topic: "t", Partition: 2, First: 10, Last: 20}, {Connector: "c", Topic: "t", Partition: 1, First: 11, Last: 20},
		{Connector: "c", Topic: "t", Partition: 1, First: 10, Last: 21}, {Connector: "c", Topic: "t1", Partition: 11, First: 10, Last: 20},
	} {
		tok := Token(other)
		if seen[tok] {
			t.Errorf("%v: token collides", other)
		}
		seen[tok] = true
	}
	if !strings.HasPrefix(Token(id), "txsink1-") || len(Token(id)) != 8+32 {
		t.Errorf("token %q", Token(id))
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"18.16.1": {18, 16, 1}, "24.8.4.13": {24, 8, 4}, "25.3.2.39-lts": {25, 3, 2}, "22.2": {22, 2, 0}} {
		got, err := parseVersion(in)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if _, err := parseVersion("x.y"); err == nil {
		t.Error("x.y parsed")
	}
	if !(Version{22, 2, 0}).AtLeast(22, 2) || (Version{21, 12, 0}).AtLeast(22, 2) {
		t.Error("AtLeast")
	}
}

// TestMechanism covers feature detection's decision table: 18.16 (no
// tokens) de-duplicates only replicated tables; current servers use tokens
// where the table has a window.
func TestMechanism(t *testing.T) {
	var old, cur Features
	old.Version = Version{18, 16, 1}
	old.applySettings(map[string]string{"insert_deduplicate": "1"}, map[string]string{"replicated_deduplication_window": "100"})
	cur.Version = Version{25, 8, 0}
	cur.applySettings(map[string]string{"insert_deduplicate": "1", "insert_deduplication_token": ""},
		map[string]string{"replicated_deduplication_window": "1000", "non_replicated_deduplication_window": "0"})
	if old.DedupToken || old.NonReplicatedWindow != -1 || !cur.DedupToken || cur.NonReplicatedWindow != 0 {
		t.Fatalf("settings: old %+v cur %+v", old, cur)
	}
	var v26 Features
	v26.applySettings(map[string]string{"insert_deduplicate": "1", "deduplicate_insert": "enable", "insert_deduplication_token": ""}, nil)
	if old.DeduplicateInsert || cur.DeduplicateInsert || !v26.DeduplicateInsert || !v26.InsertDeduplicate {
		t.Fatalf("deduplicate_insert (26.x) detected wrongly: old %v, 25.8 %v, 26 %v", old.DeduplicateInsert, cur.DeduplicateInsert, v26.DeduplicateInsert)
	}
	cases := []struct {
		f            Features
		engine, full string
		want         Mechanism
		why          string
	}{
		{old, "ReplicatedMergeTree", "ReplicatedMergeTree('/p', '{replica}') ORDER BY a SETTINGS index_granularity = 8192", MechBlocks, ""},
		{old, "MergeTree", "MergeTree ORDER BY a", MechNone, "Replicated"},
		{old, "ReplicatedMergeTree", "ReplicatedMergeTree('/p', 'r') ORDER BY a SETTINGS replicated_deduplication_window = 0", MechNone, "replicated_deduplication_window = 0"},
		{old, "Log", "Log", MechNone, "does not de-duplicate"},
		{cur, "MergeTree", "MergeTree ORDER BY a", MechNone, "non_replicated_deduplication_window"},
		{cur, "MergeTree", "MergeTree ORDER BY a SETTINGS non_replicated_deduplication_window = 100, index_granularity = 8192", MechToken, ""},
		{cur, "ReplicatedReplacingMergeTree", "ReplicatedReplacingMergeTree('/p', 'r', v) ORDER BY a", MechToken, ""},
	}
	for _, c := range cases {
		e := parseEngine(c.engine, c.full, c.f)
		m, why := c.f.mechanism(e)
		if m != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s on %s: %s %q, want %s %q", c.full, c.f.Version, m, why, c.want, c.why)
		}
	}
	if e := parseEngine("ReplicatedMergeTree", "ReplicatedMergeTree('/p','r') ORDER BY a SETTINGS replicated_deduplication_window = 5", old); e.Window != 5 {
		t.Errorf("window %d, want 5", e.Window)
	}
}

func testTable(t *testing.T, cols ...[2]string) *table {
	tb := &table{DB: "d", Name: "t", Ident: "`d`.`t`"}
	for _, c := range cols {
		typ := strings.TrimPrefix(c[1], "DEFAULT ")
		tb.add(&column{Name: c[0], Type: mustType(t, typ), HasDefault: strings.HasPrefix(c[1], "DEFAULT "), Insertable: true})
	}
	return tb
}

// TestMapRecords: columns by name in table order, coordinates and version
// filled, omitted columns get their type's default, DEFAULT columns split
// rows into groups by column set, bad records are located, blocks are cut
// deterministically and INSERTs name their columns.
func TestMapRecords(t *testing.T) {
	tb := testTable(t, [2]string{"id", "String"}, [2]string{"n", "Nullable(Int32)"}, [2]string{"d", "DEFAULT String"},
		[2]string{ColTopic, "String"}, [2]string{ColPartition, "Int32"}, [2]string{ColOffset, "UInt64"}, [2]string{"v", "UInt64"})
	rec := func(off int64, v string) *kgo.Record {
		return &kgo.Record{Topic: "tp", Partition: 2, Offset: off, Value: []byte(v)}
	}
	recs := []*kgo.Record{
		rec(10, `{"id":"a"}`), rec(11, `{"id":"b","n":5,"d":"x"}`), rec(12, `{"id":"c","zz":1}`), rec(13, `not json`),
		rec(14, `{"schema":{"type":"struct","fields":[{"field":"id","type":"string"}]},"payload":{"id":"e"}}`), rec(15, `null`),
	}
	groups, bad, err := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{VersionColumn: "v"}, fixedTable(tb), recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 3 || bad[0].Offset != 12 || !errors.Is(bad[0], record.ErrUnknownField) || bad[0].Field != "zz" ||
		bad[1].Offset != 13 || !errors.Is(bad[1], record.ErrDecode) || bad[2].Offset != 15 || !errors.Is(bad[2], record.ErrTombstone) {
		t.Fatalf("bad records: %v", bad)
	}
	if topic, p, off := bad[0].RecordCoordinates(); topic != "tp" || p != 2 || off != 12 {
		t.Errorf("coordinates %s %d %d", topic, p, off)
	}
	if len(groups) != 2 || len(groups[0].rows) != 2 || len(groups[1].rows) != 1 {
		t.Fatalf("groups: %d", len(groups))
	}
	g := groups[0]
	if got := insertSQL(tb.Ident, g.cols); got != "INSERT INTO `d`.`t` (`id`, `n`, `__connect_topic`, `__connect_partition`, `__connect_offset`, `v`)" {
		t.Errorf("insert: %s", got)
	}
	if r := g.rows[0]; r[0] != "a" || r[1] != nil || r[2] != "tp" || r[3] != int32(2) || r[4] != uint64(10) || r[5] != uint64(10) {
		t.Errorf("row 0: %#v", r)
	}
	if g.offs[1] != 14 || g.rows[1][0] != "e" {
		t.Errorf("envelope row: %#v", g.rows[1])
	}
	if len(groups[1].cols) != 7 || groups[1].rows[0][2] != "x" {
		t.Errorf("DEFAULT group: %#v", groups[1].rows[0])
	}
	bs := blocks(groups, 1)
	if len(bs) != 3 || bs[0].Offsets[0] != 10 || bs[1].Offsets[0] != 14 || bs[2].Offsets[0] != 11 {
		t.Errorf("blocks: %d", len(bs))
	}
	// Same input, same blocks.
	groups2, _, _ := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{VersionColumn: "v"}, fixedTable(tb), recs)
	if len(groups2) != len(groups) || groups2[0].shape != groups[0].shape {
		t.Error("mapping not deterministic")
	}
}

func TestMapTombstone(t *testing.T) {
	tb := testTable(t, [2]string{"k", "Int64"}, [2]string{"val", "String"}, [2]string{"v", "UInt64"}, [2]string{"is_deleted", "UInt8"})
	m := mapping{VersionColumn: "v", DeletedColumn: "is_deleted", DeleteEnabled: true, KeyFields: []string{"k"}}
	groups, bad, err := mapRaw(context.Background(), convert.DefaultPipeline(), m, fixedTable(tb), []*kgo.Record{{Topic: "t", Offset: 7, Key: []byte(`{"k":3}`)}, {Topic: "t", Offset: 8, Key: []byte(`4`), Value: []byte(`{"k":4,"val":"x"}`)}})
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	r := groups[0].rows
	if r[0][0] != int64(3) || r[0][1] != "" || r[0][2] != uint64(7) || r[0][3] != uint8(1) || r[1][3] != uint8(0) {
		t.Errorf("rows %#v", r)
	}
}

func TestCreateTableSQL(t *testing.T) {
	first := record.JSON([]byte(`{"name":"x","n":1,"f":1.5,"ok":true,"o":{"a":1},"z":null}`))
	got, err := createTableSQL("`d`.`t`", &record.Record{Value: first}, false, mapping{VersionColumn: "ver"},
		createOpts{coords: true, orderBy: []string{ColTopic, ColPartition, ColOffset}, engine: "ReplacingMergeTree(`ver`)", settings: "non_replicated_deduplication_window = 1000"})
	if err != nil {
		t.Fatal(err)
	}
	want := "CREATE TABLE IF NOT EXISTS `d`.`t` (`__connect_topic` String, `__connect_partition` Int32, `__connect_offset` Int64, `f` Float64, `n` Int64, `name` String, `o` String, `ok` UInt8, `z` Nullable(String), `ver` UInt64) ENGINE = ReplacingMergeTree(`ver`) ORDER BY (`__connect_topic`, `__connect_partition`, `__connect_offset`) SETTINGS non_replicated_deduplication_window = 1000"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestParseURL(t *testing.T) {
	for _, ok := range []string{"clickhouse://127.0.0.1:9000/db", "tcp://h:9000", "h1:9000,h2:9000", "clickhouse://u:p@h:9000/db?dial_timeout=3s&secure=true"} {
		if _, err := ParseURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://h:8123", "clickhouse://h/db", "clickhouse://h:9000/db?sslkey=/etc/x", "clickhouse://:9000", "u:Zq#7xy@h:9000", "clickhouse://u:Zq%zz@h:9000", "clickhouse://u:Zq7xy@h:99999x"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		} else if strings.Contains(err.Error(), "Zq") {
			t.Errorf("%s: the error quotes the password: %v", bad, err)
		}
	}
	// A password with '@' is the password up to the last '@', as ParseURL
	// and RedactURL both read it.
	u, err := ParseURL("u:p@ss@h:9000/db")
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); pw != "p@ss" || u.Host != "h:9000" {
		t.Errorf("password %q host %q", pw, u.Host)
	}
}

func FuzzParseType(f *testing.F) {
	for _, s := range []string{"Int8", "Nullable(Array(Map(String, Decimal(10, 2))))", "Enum8('a' = 1)", "DateTime64(3, 'UTC')"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ty, err := parseType(s)
		if err == nil {
			_ = ty.supported()
			_ = zero(ty)
		}
	})
}

// TestMapEnvelopeDecimal: a Kafka Connect Decimal in a JsonConverter
// envelope reaches a Decimal column as its value, as in PostgreSQL
// (postgres.TestPrepareEnvelope decodes the same record).
func TestMapEnvelopeDecimal(t *testing.T) {
	tb := testTable(t, [2]string{"price", "Decimal(10, 2)"}, [2]string{"day", "Date"}, [2]string{"n", "Int32"})
	value := `{"schema":{"type":"struct","fields":[
		{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
		{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},
		{"field":"n","type":"int64"}]},
		"payload":{"price":"MDk=","day":19000,"n":7}}`
	groups, bad, err := mapRaw(context.Background(), convert.DefaultPipeline(), mapping{}, fixedTable(tb), []*kgo.Record{{Topic: "t", Value: []byte(value)}})
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	row := groups[0].rows[0]
	if row[0] != "123.45" || !row[1].(time.Time).Equal(time.Date(2022, 1, 8, 0, 0, 0, 0, time.UTC)) || row[2] != int32(7) {
		t.Fatalf("row %#v", row)
	}
}

func coerceJSON(t *chType, in string) (any, error) {
	v := record.JSON([]byte(in))
	return coerce(t, &v)
}

// TestExpiredWhere: the cleanup's condition names the connector, the cut
// and excludes every latest batch, all as bound arguments.
func TestExpiredWhere(t *testing.T) {
	cut := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	where, args := expiredWhere("c1", cut, []batchKey{{"t", 0, 10, 19}, {"t", 1, 5, 9}})
	want := "connector = ? AND prepared_at < ? AND NOT (topic = ? AND `partition` = ? AND first = ? AND last = ?) AND NOT (topic = ? AND `partition` = ? AND first = ? AND last = ?)"
	if where != want {
		t.Fatalf("where:\n%s\nwant\n%s", where, want)
	}
	wantArgs := []any{"c1", cut, "t", int32(0), int64(10), int64(19), "t", int32(1), int64(5), int64(9)}
	if fmt.Sprint(args) != fmt.Sprint(wantArgs) || strings.Count(where, "?") != len(args) {
		t.Fatalf("args %v, want %v", args, wantArgs)
	}
	for _, c := range []struct{ r, want time.Duration }{{0, time.Second}, {time.Second, time.Second}, {10 * time.Second, 5 * time.Second}, {7 * 24 * time.Hour, time.Hour}} {
		if got := cleanupPeriod(c.r); got != c.want {
			t.Errorf("cleanupPeriod(%v) = %v, want %v", c.r, got, c.want)
		}
	}
}

// TestCoerceJSON: a JSON column takes an object as its text, unchanged
// (so a redo sends the same bytes); anything else is a bad value.
func TestCoerceJSON(t *testing.T) {
	for _, in := range []string{`{"a":{"b":[1,2]},"c":"x"}`, `{ "spaced" : true }`} {
		got, err := coerceJSON(mustType(t, "JSON"), in)
		if err != nil || got != in {
			t.Errorf("JSON %s: %#v, %v", in, got, err)
		}
	}
	if got, err := coerceJSON(mustType(t, "Nullable(JSON)"), `null`); err != nil || got != nil {
		t.Errorf("Nullable(JSON) null: %#v, %v", got, err)
	}
	if ty := mustType(t, "JSON(max_dynamic_paths = 16)"); ty.Kind != kindJSON || !ty.supported() || zero(ty) != "{}" {
		t.Errorf("JSON(max_dynamic_paths = 16): kind %v, supported %v, zero %#v", ty.Kind, ty.supported(), zero(ty))
	}
	for _, in := range []string{`[1]`, `"x"`, `3`, `null`} {
		if _, err := coerceJSON(mustType(t, "JSON"), in); !errors.Is(err, record.ErrCoerce) {
			t.Errorf("JSON %s: error %v, want ErrCoerce", in, err)
		}
	}
}
