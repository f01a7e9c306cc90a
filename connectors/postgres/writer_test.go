//go:build dbtest

package postgres

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestWriter runs every database test against one throwaway cluster, each
// in its own database.
func TestWriter(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("coercions", func(t *testing.T) { t.Parallel(); testCoercions(t, newTestDB(t, srv)) })
	t.Run("envelope", func(t *testing.T) { t.Parallel(); testEnvelope(t, newTestDB(t, srv)) })
	t.Run("copy insert", func(t *testing.T) { t.Parallel(); testCopyInsert(t, newTestDB(t, srv)) })
	t.Run("upsert keys and tombstones", func(t *testing.T) { t.Parallel(); testUpsert(t, newTestDB(t, srv)) })
	t.Run("upsert of partial records", func(t *testing.T) { t.Parallel(); testUpsertPartial(t, newTestDB(t, srv)) })
	t.Run("insert mode deletes in order", func(t *testing.T) { t.Parallel(); testInsertDeletes(t, newTestDB(t, srv)) })
	t.Run("kafka pk", func(t *testing.T) { t.Parallel(); testKafkaPK(t, newTestDB(t, srv)) })
	t.Run("tolerance all insert", func(t *testing.T) { t.Parallel(); testPoison(t, newTestDB(t, srv), InsertModeInsert) })
	t.Run("tolerance all upsert", func(t *testing.T) { t.Parallel(); testPoison(t, newTestDB(t, srv), InsertModeUpsert) })
	t.Run("tolerance none", func(t *testing.T) { t.Parallel(); testToleranceNone(t, newTestDB(t, srv)) })
	t.Run("upsert falls back to previous value", func(t *testing.T) { t.Parallel(); testUpsertFallback(t, newTestDB(t, srv)) })
	t.Run("schema errors", func(t *testing.T) { t.Parallel(); testSchemaErrors(t, newTestDB(t, srv)) })
	t.Run("concurrent writers", func(t *testing.T) { t.Parallel(); testConcurrent(t, newTestDB(t, srv)) })
	t.Run("domains", func(t *testing.T) { t.Parallel(); testDomains(t, newTestDB(t, srv)) })
	t.Run("speed", func(t *testing.T) { testSpeed(t, newTestDB(t, srv)) })
}

// testDomains: a column whose type is a domain is coerced as the domain's
// base type is, through any depth of domains over domains (an epoch in
// milliseconds into a timestamptz, a JSON array into an array), and the
// domains' checks are the database's to enforce: a violation is a bad
// record. Before the catalog followed the chain, a domain over a domain
// failed the batch as an unsupported column type.
func testDomains(t *testing.T, d *testDB) {
	d.exec(`CREATE DOMAIN pos AS int4 CHECK (VALUE > 0)`)
	d.exec(`CREATE DOMAIN small_pos AS pos CHECK (VALUE < 100)`)
	d.exec(`CREATE DOMAIN at_ts AS timestamptz`)
	d.exec(`CREATE DOMAIN at_ts2 AS at_ts`)
	d.exec(`CREATE DOMAIN at_ts3 AS at_ts2 NOT NULL`)
	d.exec(`CREATE DOMAIN ints AS int4[]`)
	d.exec(`CREATE DOMAIN ints2 AS ints CHECK (cardinality(VALUE) < 4)`)
	d.exec(`CREATE DOMAIN word AS varchar(5)`)
	d.exec(`CREATE DOMAIN word2 AS word`)
	d.exec(`CREATE TABLE dom (id int8 PRIMARY KEY, p pos, sp small_pos, t1 at_ts, t2 at_ts2, t3 at_ts3, a1 ints, a2 ints2, w2 word2)`)
	d.exec(`CREATE TABLE dom_arr (id int8 PRIMARY KEY, t3 at_ts3, pa pos[])`)
	w := mustWriter(t, WriterConfig{})
	writeCases(t, d, w, "dom", `"t3":0,`, []coercion{
		{"p", `5`, "5"}, {"p", `"7"`, "7"}, {"p", `-1`, "ERR"}, {"p", `1.5`, "ERR"},
		{"sp", `5`, "5"}, {"sp", `"7"`, "7"}, {"sp", `-1`, "ERR"}, {"sp", `100`, "ERR"}, {"sp", `1.0`, "1"}, {"sp", `1.5`, "ERR"},
		{"t1", `1700000000000`, "2023-11-14 22:13:20+00"},
		{"t2", `1700000000000`, "2023-11-14 22:13:20+00"}, {"t2", `"2024-01-02T03:04:05+01:00"`, "2024-01-02 02:04:05+00"},
		{"t3", `1700000000000`, "2023-11-14 22:13:20+00"},
		{"a1", `[1,2,null]`, "{1,2,NULL}"},
		{"a2", `[1,2]`, "{1,2}"}, {"a2", `[1,2,3,4]`, "ERR"}, {"a2", `[1,"x"]`, "ERR"},
		{"w2", `"abcde"`, "abcde"}, {"w2", `"abcdef"`, "ERR"},
	})
	// An array of a domain's elements is not written (pgx has no codec
	// for the array type): the error names the column.
	_, err := d.write(w, []*kgo.Record{rec("dom_arr", 100, nil, js(`{"id":100,"t3":0,"pa":[1,2]}`))})
	if err == nil || !strings.Contains(err.Error(), `field "pa"`) || !strings.Contains(err.Error(), "unsupported column type") {
		t.Errorf("an array of domain elements: %v, want an unsupported column type naming the field", err)
	}
}

func testCoercions(t *testing.T, d *testDB) {
	d.exec(`CREATE TYPE mood AS ENUM ('happy', 'sad')`)
	d.exec(`CREATE TABLE c (
		id int8 PRIMARY KEY, t text, vc varchar(10), ch char(3), i2 int2, i4 int4, i8 int8, n numeric, n52 numeric(5,2),
		f4 float4, f8 float8, b bool, tz timestamptz, ts timestamp, d date, tm time, u uuid, j json, jb jsonb, by bytea,
		ia int4[], ta text[], vca varchar(3)[], e mood, addr inet, iv interval,
		nn text NOT NULL DEFAULT 'dflt', ck int4 CHECK (ck > 0))`)
	w := mustWriter(t, WriterConfig{})
	writeCases(t, d, w, "c", "", []coercion{
		{"t", `"héllo"`, "héllo"}, {"t", `42`, "42"}, {"t", `true`, "true"}, {"t", `"a\u0000b"`, "ERR"}, {"t", `{"x":1}`, "ERR"},
		{"vc", `"0123456789"`, "0123456789"}, {"vc", `"ünïcödé10c"`, "ünïcödé10c"}, {"vc", `"01234567890"`, "ERR"},
		{"ch", `"ab"`, "ab"}, {"ch", `"abc   "`, "abc"}, {"ch", `"abcd"`, "ERR"},
		{"i2", `32767`, "32767"}, {"i2", `"-32768"`, "-32768"}, {"i2", `1.0`, "1"}, {"i2", `1e2`, "100"}, {"i2", `32768`, "ERR"}, {"i2", `true`, "ERR"},
		{"i4", `2147483647`, "2147483647"}, {"i4", `"12x"`, "ERR"}, {"i4", `1.5`, "ERR"}, {"i4", `2147483648`, "ERR"},
		{"i8", `9223372036854775807`, "9223372036854775807"}, {"i8", `"-9223372036854775808"`, "-9223372036854775808"},
		{"i8", `9223372036854775808`, "ERR"}, {"i8", `1e30`, "ERR"},
		{"n", `12345678901234567890.12345678901234567890`, "12345678901234567890.12345678901234567890"},
		{"n", `"1e-3"`, "0.001"}, {"n", `-0.5`, "-0.5"}, {"n", `"NaN"`, "NaN"}, {"n", `1E+2`, "100"}, {"n", `"abc"`, "ERR"}, {"n", `true`, "ERR"},
		{"n52", `123.456`, "123.46"}, {"n52", `12345.6`, "ERR"},
		{"f4", `1.5`, "1.5"}, {"f4", `1e39`, "ERR"}, {"f8", `-0.25`, "-0.25"}, {"f8", `"Infinity"`, "Infinity"}, {"f8", `"1e400"`, "ERR"},
		{"b", `true`, "true"}, {"b", `"yes"`, "true"}, {"b", `0`, "false"}, {"b", `"maybe"`, "ERR"}, {"b", `2`, "ERR"},
		{"tz", `"2024-02-29T12:34:56.123456+02:00"`, "2024-02-29 10:34:56.123456+00"}, {"tz", `1700000000000`, "2023-11-14 22:13:20+00"},
		{"tz", `"2024-01-02 03:04:05"`, "2024-01-02 03:04:05+00"}, {"tz", `"infinity"`, "infinity"},
		{"tz", `"yesterday"`, "ERR"}, {"tz", `1.5`, "ERR"}, {"tz", `9999999999999999999`, "ERR"}, {"tz", `9000000000000000000`, "ERR"},
		{"ts", `"2024-01-02T03:04:05-05:00"`, "2024-01-02 08:04:05"}, {"ts", `true`, "ERR"},
		{"d", `"2024-03-01"`, "2024-03-01"}, {"d", `19000`, "2022-01-08"}, {"d", `"2024-01-02T23:00:00-05:00"`, "2024-01-02"},
		{"d", `"2024-02-30"`, "ERR"}, {"d", `"soon"`, "ERR"},
		{"tm", `"12:34:56.789"`, "12:34:56.789"}, {"tm", `45296789`, "12:34:56.789"}, {"tm", `"24:00:00"`, "24:00:00"}, {"tm", `"07:05"`, "07:05:00"},
		{"tm", `"25:00"`, "ERR"}, {"tm", `"12:60"`, "ERR"}, {"tm", `-1`, "ERR"},
		{"u", `"{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}"`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{"u", `"a0eebc999c0b4ef8bb6d6bb9bd380a11"`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}, {"u", `"nope"`, "ERR"}, {"u", `1`, "ERR"},
		{"j", `[1,"x",{"a":null}]`, `[1,"x",{"a":null}]`}, {"j", `12.50`, "12.50"},
		{"jb", `{"b":1,"a":2}`, `{"a": 2, "b": 1}`}, {"jb", `"x"`, `"x"`}, {"jb", `{"a":"\u0000"}`, "ERR"},
		{"by", `"AAEC"`, `\x000102`}, {"by", `"AAE"`, `\x0001`}, {"by", `"!!"`, "ERR"}, {"by", `5`, "ERR"},
		{"ia", `[1,2,null]`, "{1,2,NULL}"}, {"ia", `[]`, "{}"}, {"ia", `[1,"x"]`, "ERR"}, {"ia", `[[1]]`, "ERR"}, {"ia", `5`, "ERR"},
		{"ta", `["x","y z",null]`, `{x,"y z",NULL}`}, {"ta", `["\u0000"]`, "ERR"},
		{"vca", `["abc"]`, "{abc}"}, {"vca", `["abcd"]`, "ERR"}, // too long: rejected by the database
		{"e", `"happy"`, "happy"}, {"e", `"meh"`, "ERR"}, // not a label: rejected by the database
		{"addr", `"192.168.0.1/24"`, "192.168.0.1/24"}, {"addr", `"999.1.1.1"`, "ERR"},
		{"iv", `"1 day 02:00:00"`, "1 day 02:00:00"},
		{"nn", `null`, "ERR"}, {"ck", `5`, "5"}, {"ck", `-1`, "ERR"}, // check violation: rejected by the database
		{"zzz", `1`, "ERR"}, // no such column
	})
	// A missing field takes the column default.
	if got := d.strings(`SELECT DISTINCT nn FROM c`); len(got) != 1 || got[0] != "dflt" {
		t.Errorf("defaults: %v", got)
	}
}

// coercion is a field's JSON value and what its column stores, as text
// ("ERR": a bad record).
type coercion struct{ col, in, want string }

// writeCases writes each case as a record of its own into table (id the
// case's offset, with the JSON fields extra before the case's) and checks
// the stored text, or a *record.Error at that offset naming the field
// when the sink refused it (not the database).
func writeCases(t *testing.T, d *testDB, w *Writer, table, extra string, cases []coercion) {
	t.Helper()
	for i, c := range cases {
		id := int64(i + 1)
		_, err := d.write(w, []*kgo.Record{rec(table, id, nil, js(`{"id":%d,`+extra+`%q:%s}`, id, c.col, c.in))})
		if c.want == "ERR" {
			var re *record.Error
			if !errors.As(err, &re) || !IsBadRecord(err) || re.Offset != id {
				t.Errorf("%s = %s: got %v, want a *record.Error at offset %d", c.col, c.in, err, id)
				continue
			}
			if pgCode(err) == "" && re.Field != c.col {
				t.Errorf("%s = %s: RecordError.Field = %q (%v)", c.col, c.in, re.Field, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s = %s: %v", c.col, c.in, err)
			continue
		}
		got := d.strings(fmt.Sprintf(`SELECT %s::text FROM %s WHERE id = $1`, c.col, table), id)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s = %s: stored %q, want %q", c.col, c.in, got, c.want)
		}
	}
}

func testEnvelope(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE env (id int4 PRIMARY KEY, price numeric(10,2), day date, at time, ts timestamptz, raw bytea, name text)`)
	w := mustWriter(t, WriterConfig{})
	schema := `{"type":"struct","fields":[{"field":"id","type":"int32"},
		{"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}},
		{"field":"day","type":"int32","name":"org.apache.kafka.connect.data.Date"},
		{"field":"at","type":"int32","name":"org.apache.kafka.connect.data.Time"},
		{"field":"ts","type":"int64","name":"org.apache.kafka.connect.data.Timestamp"},
		{"field":"raw","type":"bytes"},{"field":"name","type":"string","optional":true}]}`
	_, err := d.write(w, []*kgo.Record{
		rec("env", 0, nil, js(`{"schema":%s,"payload":{"id":1,"price":"MDk=","day":19000,"at":45296789,"ts":1700000000000,"raw":"AAEC","name":null}}`, schema)),
		rec("env", 1, nil, js(`{"schema":%s,"payload":{"id":2,"price":"/w==","day":0,"at":0,"ts":0,"raw":"","name":"x"}}`, schema)),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := d.strings(`SELECT env::text FROM env ORDER BY id`)
	want := []string{`(1,123.45,2022-01-08,12:34:56.789,"2023-11-14 22:13:20+00","\\x000102",)`, `(2,-0.01,1970-01-01,00:00:00,"1970-01-01 00:00:00+00","\\x",x)`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func testCopyInsert(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE "Events.v1" (id int8 PRIMARY KEY, body text, at timestamptz DEFAULT now(), extra jsonb)`)
	w := mustWriter(t, WriterConfig{TableNameFormat: "${topic}.v1"})
	var recs []*kgo.Record
	for i := range 1000 {
		v := js(`{"id":%d,"body":"row %d"}`, i, i)
		if i%2 == 1 { // a second column set
			v = js(`{"id":%d,"body":"row %d","extra":{"i":%d}}`, i, i, i)
		}
		recs = append(recs, rec("Events", int64(i), nil, v))
	}
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 1000}) {
		t.Errorf("stats = %+v", stats)
	}
	if n := d.count(`"Events.v1"`); n != 1000 {
		t.Errorf("%d rows", n)
	}
	if got := d.strings(`SELECT count(*)::text FROM "Events.v1" WHERE body = 'row ' || id AND at IS NOT NULL AND (extra IS NULL) = (id % 2 = 0)`); got[0] != "1000" {
		t.Errorf("%s rows as expected", got[0])
	}
}

func testUpsert(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE u (id int4 PRIMARY KEY, v text, n int4 DEFAULT 7)`)
	d.exec(`INSERT INTO u VALUES (4, 'old', 1), (5, 'old', 1), (6, 'keep', 1)`)
	w := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_key", DeleteEnabled: true})
	k := func(id int) []byte { return js(`{"id":%d}`, id) }
	recs := []*kgo.Record{
		rec("u", 0, k(1), js(`{"v":"a"}`)),
		rec("u", 1, k(2), js(`{"v":"b"}`)),
		rec("u", 2, k(1), js(`{"v":"c"}`)),
		rec("u", 3, k(2), nil),                  // value then tombstone: deleted
		rec("u", 4, js(`3`), nil),               // primitive key, no row yet
		rec("u", 5, js(`"3"`), js(`{"v":"d"}`)), // tombstone then value: upserted
		rec("u", 6, k(4), js(`{"v":"e"}`)),
		rec("u", 7, k(4), nil),
		rec("u", 8, k(5), js(`{"v":"f","id":999}`)), // the key wins over the value's id
	}
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 3, Deleted: 2, Superseded: 4}) {
		t.Errorf("stats = %+v", stats)
	}
	got := strings.Join(d.strings(`SELECT u::text FROM u ORDER BY id`), " ")
	if want := "(1,c,7) (3,d,7) (5,f,1) (6,keep,1)"; got != want {
		t.Errorf("table = %s, want %s", got, want)
	}
	// record_value mode with a composite key and DO NOTHING when every column is a key.
	d.exec(`CREATE TABLE pairs (a int4, b text, PRIMARY KEY (a, b))`)
	wv := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_value", TableNameFormat: "pairs"})
	for range 2 {
		if _, err := d.write(wv, []*kgo.Record{rec("x", 0, nil, js(`{"a":1,"b":"x"}`)), rec("x", 1, nil, js(`{"a":1,"b":"y"}`)), rec("x", 2, nil, js(`{"a":1,"b":"x"}`))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.count("pairs"); n != 2 {
		t.Errorf("pairs: %d rows", n)
	}
}

// testUpsertPartial: records of one key that set different columns in one
// batch leave what applying them one by one leaves: the last record's
// columns, the earlier records' values of the others, and after a
// tombstone the defaults again.
func testUpsertPartial(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE p (id int4 PRIMARY KEY, a text, b text DEFAULT 'dflt', c int4)`)
	d.exec(`INSERT INTO p VALUES (1, 'a0', 'b0', 0), (2, 'a0', 'b0', 0)`)
	w := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_key", DeleteEnabled: true})
	k := func(id int) []byte { return js(`{"id":%d}`, id) }
	recs := []*kgo.Record{
		rec("p", 0, k(1), js(`{"a":"a1","b":"b1"}`)),
		rec("p", 1, k(2), js(`{"b":"b2","c":5}`)),
		rec("p", 2, k(3), js(`{"a":"x","c":3}`)),
		rec("p", 3, k(1), js(`{"a":"a2"}`)), // b stays b1
		rec("p", 4, k(2), nil),
		rec("p", 5, k(2), js(`{"a":"a3"}`)), // after the delete: b and c start again
		rec("p", 6, k(3), js(`{"b":"y"}`)),
	}
	for range 2 { // a redo leaves the same table
		stats, err := d.write(w, recs)
		if err != nil {
			t.Fatal(err)
		}
		if counts(stats) != (statCounts{Written: 3, Superseded: 4}) {
			t.Errorf("stats = %+v", stats)
		}
		got := strings.Join(d.strings(`SELECT p::text FROM p ORDER BY id`), " ")
		if want := "(1,a2,b1,0) (2,a3,dflt,) (3,x,y,3)"; got != want {
			t.Errorf("table = %s, want %s", got, want)
		}
	}
}

func testInsertDeletes(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE idl (id int4 PRIMARY KEY, v text)`)
	d.exec(`INSERT INTO idl VALUES (1, 'old'), (2, 'old')`)
	w := mustWriter(t, WriterConfig{PKMode: "record_key", DeleteEnabled: true})
	stats, err := d.write(w, []*kgo.Record{
		rec("idl", 0, js(`1`), nil),
		rec("idl", 1, js(`1`), js(`{"v":"new"}`)), // after its delete: no conflict
		rec("idl", 2, js(`3`), js(`{"v":"x"}`)),
		rec("idl", 3, js(`2`), nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 2, Deleted: 2}) {
		t.Errorf("stats = %+v", stats)
	}
	if got := strings.Join(d.strings(`SELECT idl::text FROM idl ORDER BY id`), " "); got != "(1,new) (3,x)" {
		t.Errorf("table = %s", got)
	}
}

func testKafkaPK(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE kpk (__connect_topic text, __connect_partition int4, __connect_offset int8, v text,
		PRIMARY KEY (__connect_topic, __connect_partition, __connect_offset))`)
	w := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "kafka", TableNameFormat: "kpk"})
	recs := []*kgo.Record{rec("orders", 10, nil, js(`{"v":"a"}`)), rec("orders", 11, nil, js(`{"v":"b"}`))}
	recs[1].Partition, recs[0].Partition = 3, 3
	for range 2 { // a redo upserts the same rows
		if _, err := d.write(w, recs); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(d.strings(`SELECT kpk::text FROM kpk ORDER BY __connect_offset`), " "); got != "(orders,3,10,a) (orders,3,11,b)" {
		t.Errorf("table = %s", got)
	}
}

// testPoison writes 5000 records with ~1% poison and checks every good row
// lands and every poison record is dead-lettered exactly once.
func testPoison(t *testing.T, d *testDB, mode string) {
	d.exec(`CREATE TABLE p (id int8 PRIMARY KEY, name varchar(10), qty int4 CHECK (qty >= 0), tags varchar(5)[], price numeric(5,2), data jsonb)`)
	cfg := WriterConfig{ErrorsTolerance: "all", DLQTable: "ops.dlq", InsertMode: mode}
	if mode == InsertModeUpsert {
		cfg.PKMode = PKModeRecordValue
	}
	d.exec(`CREATE SCHEMA ops`)
	w := mustWriter(t, cfg)
	const n = 5000
	var recs []*kgo.Record
	poison := map[int64]string{}
	for i := int64(0); i < n; i++ {
		v := js(`{"id":%d,"name":"n%d","qty":%d,"tags":["a"],"price":1.5,"data":{"i":%d}}`, i, i%1000, i, i)
		if i%100 == 37 {
			switch kind := (i / 100) % 8; kind {
			case 0:
				v, poison[i] = js(`{"id":%d,"name":`, i), "invalid JSON"
			case 1:
				v, poison[i] = js(`{"id":%d,"qty":"many"}`, i), "wrong type"
			case 2:
				v, poison[i] = js(`{"id":%d,"name":"a\u0000b"}`, i), "NUL byte"
			case 3:
				v, poison[i] = js(`{"id":%d,"name":"%s"}`, i, strings.Repeat("x", 2<<20)), "2 MB string"
			case 4:
				v, poison[i] = js(`{"id":%d,"qty":-1}`, i), "check violation"
			case 5:
				v, poison[i] = js(`{"id":%d,"tags":["toolong"]}`, i), "too long for the database"
			case 6:
				v, poison[i] = js(`{"id":%d,"price":1000}`, i), "numeric overflow"
			case 7:
				v, poison[i] = js(`{"id":%d,"surprise":1}`, i), "unknown field"
			}
		}
		r := rec("p", i, js(`"k%d"`, i), v)
		r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}
		recs = append(recs, r)
	}
	start := time.Now()
	stats, err := d.write(w, recs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d records, %d poison: %v", mode, n, len(poison), time.Since(start))
	if stats.Written != n-len(poison) || stats.DeadLettered != len(poison) {
		t.Errorf("stats = %+v, want %d written and %d dead-lettered", stats, n-len(poison), len(poison))
	}
	if got := d.count("p"); got != n-len(poison) {
		t.Errorf("%d rows, want %d", got, n-len(poison))
	}
	if got := d.strings(`SELECT count(*)::text FROM p WHERE id % 100 = 37`); got[0] != "0" {
		t.Errorf("%s poison rows written", got[0])
	}
	check := func() {
		t.Helper()
		rows, err := d.pool.Query(context.Background(), `SELECT connector, topic, "partition", kafka_offset, key, value, headers::text, error, failed_at FROM ops.dlq ORDER BY kafka_offset`)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for rows.Next() {
			var (
				connector, topic, headers, msg string
				part                           int32
				off                            int64
				key, value                     []byte
				at                             time.Time
			)
			if err := rows.Scan(&connector, &topic, &part, &off, &key, &value, &headers, &msg, &at); err != nil {
				t.Fatal(err)
			}
			seen++
			why, ok := poison[off]
			if !ok {
				t.Errorf("offset %d dead-lettered but is good: %s", off, msg)
				continue
			}
			if connector != "test" || topic != "p" || part != 0 || !bytes.Equal(key, recs[off].Key) || !bytes.Equal(value, recs[off].Value) ||
				headers != `[{"key": "h", "value": "v"}]` || at.IsZero() || !strings.Contains(msg, fmt.Sprintf("p[0]@%d", off)) {
				t.Errorf("offset %d (%s): dead letter %s %s %d %q %q %s", off, why, connector, topic, part, key, headers, msg)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if seen != len(poison) {
			t.Errorf("%d dead letters, want %d", seen, len(poison))
		}
	}
	check()
	// A redo of the poison records cannot duplicate a dead letter.
	var again []*kgo.Record
	for off := range poison {
		again = append(again, recs[off])
	}
	if _, err := d.write(w, sortByOffset(again)); err != nil {
		t.Fatal(err)
	}
	check()
}

func sortByOffset(recs []*kgo.Record) []*kgo.Record {
	for i := 1; i < len(recs); i++ {
		for j := i; j > 0 && recs[j].Offset < recs[j-1].Offset; j-- {
			recs[j], recs[j-1] = recs[j-1], recs[j]
		}
	}
	return recs
}

func testToleranceNone(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE tn (id int8 PRIMARY KEY, qty int4 CHECK (qty >= 0))`)
	for _, mode := range []string{InsertModeInsert, InsertModeUpsert} {
		cfg := WriterConfig{InsertMode: mode, TableNameFormat: "tn"}
		if mode == InsertModeUpsert {
			cfg.PKMode = PKModeRecordValue
		}
		w := mustWriter(t, cfg)
		batch := func(dbBad, decodeBad, convBad int64) []*kgo.Record {
			var recs []*kgo.Record
			for i := int64(0); i < 100; i++ {
				v := js(`{"id":%d,"qty":1}`, i)
				switch i {
				case dbBad:
					v = js(`{"id":%d,"qty":-1}`, i)
				case decodeBad:
					v = js(`{"id":%d,"qty":"x"}`, i)
				case convBad:
					v = js(`{"id":%d,`, i) // the pipeline cannot convert it
				}
				recs = append(recs, rec(mode, 1000+i, nil, v))
			}
			return recs
		}
		// A record the pipeline cannot convert stops the pass, but a
		// record before it that the database rejects comes first.
		for _, c := range []struct{ dbBad, decodeBad, convBad, want int64 }{
			{10, 20, -1, 1010}, {30, 5, -1, 1005}, {99, -1, -1, 1099},
			{10, -1, 20, 1010}, {30, -1, 5, 1005}, {-1, 40, 30, 1030},
		} {
			_, err := d.write(w, batch(c.dbBad, c.decodeBad, c.convBad))
			var re *record.Error
			if !errors.As(err, &re) || re.Offset != c.want || !IsBadRecord(err) {
				t.Errorf("%s: db-bad %d, decode-bad %d, conv-bad %d: got %v, want a RecordError at %d", mode, c.dbBad, c.decodeBad, c.convBad, err, c.want)
			}
			if c.want == 1000+c.dbBad && !errors.Is(err, ErrRejected) {
				t.Errorf("%s: %v does not wrap ErrRejected", mode, err)
			}
		}
		if n := d.count("tn"); n != 0 {
			t.Errorf("%s: %d rows written", mode, n)
		}
	}
}

func testUpsertFallback(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE fb (id int4 PRIMARY KEY, n int4 CHECK (n > 0))`)
	w := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_value", ErrorsTolerance: "all", DLQTable: "dlq"})
	stats, err := d.write(w, []*kgo.Record{
		rec("fb", 0, nil, js(`{"id":7,"n":1}`)),
		rec("fb", 1, nil, js(`{"id":7,"n":2}`)),
		rec("fb", 2, nil, js(`{"id":7,"n":-1}`)), // the key's last value is rejected: the one before stands
		rec("fb", 3, nil, js(`{"id":8,"n":-1}`)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 1, DeadLettered: 2, Superseded: 1}) {
		t.Errorf("stats = %+v", stats)
	}
	if got := strings.Join(d.strings(`SELECT fb::text FROM fb`), " "); got != "(7,2)" {
		t.Errorf("table = %s", got)
	}
	if got := strings.Join(d.strings(`SELECT kafka_offset::text FROM dlq ORDER BY 1`), " "); got != "2 3" {
		t.Errorf("dead letters at %s", got)
	}
}

func testSchemaErrors(t *testing.T, d *testDB) {
	w := mustWriter(t, WriterConfig{ErrorsTolerance: "all", DLQTable: "dlq"})
	_, err := d.write(w, []*kgo.Record{rec("missing", 0, nil, js(`{"a":1}`))})
	if !errors.Is(err, ErrTableNotFound) || IsBadRecord(err) || !strings.Contains(err.Error(), `"public"."missing"`) {
		t.Errorf("missing table: %v", err)
	}
	d.exec(`CREATE TABLE nopk (a int4)`)
	wu := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_value", TableNameFormat: "nopk"})
	if _, err := d.write(wu, []*kgo.Record{rec("x", 0, nil, js(`{"a":1}`))}); err == nil || IsBadRecord(err) || !strings.HasPrefix(err.Error(), "pk.fields:") {
		t.Errorf("no primary key: %v", err)
	}
	wu2 := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_value", PKFields: []string{"a"}, TableNameFormat: "nopk"})
	if _, err := d.write(wu2, []*kgo.Record{rec("x", 0, nil, js(`{"a":1}`))}); !errors.Is(err, ErrNoConflictTarget) {
		t.Errorf("no unique index: %v", err)
	}
	// A column added after the table was cached is found.
	d.exec(`CREATE TABLE grows (a int4)`)
	if _, err := d.write(w, []*kgo.Record{rec("grows", 0, nil, js(`{"a":1}`))}); err != nil {
		t.Fatal(err)
	}
	d.exec(`ALTER TABLE grows ADD COLUMN b text`)
	if stats, err := d.write(w, []*kgo.Record{rec("grows", 1, nil, js(`{"a":2,"b":"x"}`))}); err != nil || stats.Written != 1 {
		t.Errorf("after ALTER TABLE: %+v, %v", stats, err)
	}
	// A tombstone without delete.enabled is a bad record, as in Kafka Connect.
	wn := mustWriter(t, WriterConfig{TableNameFormat: "grows"})
	if _, err := d.write(wn, []*kgo.Record{rec("x", 5, nil, nil)}); !errors.Is(err, record.ErrTombstone) {
		t.Errorf("tombstone: %v", err)
	}
	// A cancelled context is not a bad record.
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := d.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	cancel()
	if _, err := w.Write(ctx, tx, []*kgo.Record{rec("grows", 2, nil, js(`{"a":3}`))}); err == nil || IsBadRecord(err) {
		t.Errorf("cancelled: %v", err)
	}
}

// testConcurrent writes different partitions through one Writer in
// concurrent transactions, racing to create the dead-letter table.
func testConcurrent(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE cc (part int4, off int8, v int4 CHECK (v >= 0), PRIMARY KEY (part, off))`)
	w := mustWriter(t, WriterConfig{ErrorsTolerance: "all", DLQTable: "cc_dlq"})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for p := int32(0); p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var recs []*kgo.Record
			for i := int64(0); i < 200; i++ {
				v := 1
				if i == 100 {
					v = -1
				}
				r := rec("cc", i, nil, js(`{"part":%d,"off":%d,"v":%d}`, p, i, v))
				r.Partition = p
				recs = append(recs, r)
			}
			_, err := d.write(w, recs)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n, dl := d.count("cc"), d.count("cc_dlq"); n != 8*199 || dl != 8 {
		t.Errorf("%d rows and %d dead letters", n, dl)
	}
}

func testSpeed(t *testing.T, d *testDB) {
	d.exec(`CREATE TABLE speed (id int8 PRIMARY KEY, name text, qty int4, price numeric(12,2), at timestamptz, data jsonb)`)
	mk := func(base int) []*kgo.Record {
		recs := make([]*kgo.Record, 10000)
		for i := range recs {
			recs[i] = rec("speed", int64(base+i), nil, js(`{"id":%d,"name":"item %d","qty":%d,"price":"%d.25","at":"2024-05-01T10:00:00Z","data":{"k":"%s"}}`,
				i, i, i%1000, i, base64.StdEncoding.EncodeToString([]byte{byte(i)})))
		}
		return recs
	}
	wi := mustWriter(t, WriterConfig{})
	wu := mustWriter(t, WriterConfig{InsertMode: "upsert", PKMode: "record_value"})
	recs := mk(0)
	start := time.Now()
	if _, err := d.write(wi, recs); err != nil {
		t.Fatal(err)
	}
	ins := time.Since(start)
	start = time.Now()
	if _, err := d.write(wu, mk(10000)); err != nil {
		t.Fatal(err)
	}
	ups := time.Since(start)
	t.Logf("Write of 10k rows: insert (COPY) %v, upsert (all conflicting) %v", ins, ups)
}

// BenchmarkWrite measures Write of 10k-record batches.
func BenchmarkWrite(b *testing.B) {
	srv := pgtest.Start(b)
	d := newTestDB(b, srv)
	d.exec(`CREATE TABLE bench (id int8 PRIMARY KEY, name text, qty int4, price numeric(12,2), at timestamptz)`)
	for _, mode := range []string{InsertModeInsert, InsertModeUpsert} {
		b.Run(mode, func(b *testing.B) {
			cfg := WriterConfig{InsertMode: mode, TableNameFormat: "bench"}
			if mode == InsertModeUpsert {
				cfg.PKMode = PKModeRecordValue
			}
			w := mustWriter(b, cfg)
			for n := 0; b.Loop(); n++ {
				recs := make([]*kgo.Record, 10000)
				for i := range recs {
					id := n*10000 + i
					recs[i] = rec("x", int64(id), nil, js(`{"id":%d,"name":"item %d","qty":%d,"price":"%d.25","at":1700000000000}`, id, id, i, i))
				}
				ctx := context.Background()
				err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
					if mode == InsertModeInsert {
						if _, err := tx.Exec(ctx, "TRUNCATE bench"); err != nil {
							return err
						}
					}
					_, err := w.Write(ctx, tx, recs)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// statCounts are WriteStats's counts, comparable.
type statCounts struct {
	Written, Deleted, Truncated, DeadLettered, Superseded, Dropped, SchemaChanges int
}

// counts returns stats's counts.
func counts(s WriteStats) statCounts {
	return statCounts{Written: s.Written, Deleted: s.Deleted, Truncated: s.Truncated, DeadLettered: s.DeadLettered,
		Superseded: s.Superseded, Dropped: s.Dropped, SchemaChanges: s.SchemaChanges}
}
