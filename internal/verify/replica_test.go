package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/pgtest"
)

// TestNormalizeValue: values that the sinks write differently from how the
// source prints them compare equal; different values do not.
func TestNormalizeValue(t *testing.T) {
	for _, c := range []struct {
		kind   valueKind
		digits int
		a, b   string
		equal  bool
	}{
		{kindInt, 6, "42", "42", true},
		{kindInt, 6, "042", "42", true},
		{kindInt, 6, "42", "43", false},
		{kindDecimal, 6, "12.50", "12.5", true},
		{kindDecimal, 6, "-0012.3400", "-12.34", true},
		{kindDecimal, 6, "0.00", "-0", true},
		{kindDecimal, 6, "1E+3", "1000", true},
		{kindDecimal, 6, "12.50", "12.51", false},
		// Debezium's VariableScaleDecimal (numeric without scale) in a JSON column: 1234 = 0x04D2.
		{kindDecimal, 6, "12.34", `{"scale": 2, "value": "BNI="}`, true},
		{kindDecimal, 6, "-12.34", `{"scale":2,"value":"+y4="}`, true}, // -1234 = 0xFB2E
		{kindFloat64, 6, "1.1", "1.1000000000000001", true},            // both parse to the same double
		{kindFloat64, 6, "Infinity", "inf", true},
		{kindFloat64, 6, "NaN", "nan", true},
		{kindFloat64, 6, "1e+20", "100000000000000000000", true},
		{kindFloat64, 6, "1.5", "1.25", false},
		{kindFloat32, 6, "3.14", "3.1400001", true}, // one float32
		{kindBool, 6, "t", "true", true},
		{kindBool, 6, "true", "1", true},
		{kindBool, 6, "f", "0", true},
		{kindBool, 6, "t", "0", false},
		{kindUUID, 6, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", true},
		{kindJSON, 6, `{"b": 1, "a": [1, 2.50]}`, `{"a":[1,2.50],"b":1}`, true},
		{kindJSON, 6, `{"a": "<x>"}`, `{"a":"<x>"}`, true},
		{kindJSON, 6, `{"a": 1}`, `{"a": 2}`, false},
		{kindBytes, 6, `\xDEADbeef`, "DEADBEEF", true},
		{kindBytes, 6, `\xdead`, "DEAE", false},
		{kindDate, 6, "2024-02-29", "2024-02-29", true},
		{kindDate, 6, "2024-02-29", "2024-02-29 00:00:00", true},
		{kindTimestamp, 6, "2024-01-02 03:04:05.123456", "2024-01-02T03:04:05.123456", true},
		{kindTimestamp, 6, "2024-01-02 03:04:05.1", "2024-01-02 03:04:05.100000", true},
		{kindTimestamp, 0, "2024-01-02 03:04:05", "2024-01-02 03:04:05", true},
		{kindTimestamp, 3, "2024-01-02 03:04:05.1235", "2024-01-02 03:04:05.124", true}, // rounded to the coarser side
		{kindTimestamp, 6, "2024-01-02 03:04:05.123456", "2024-01-02 03:04:05.123457", false},
		{kindTimestampTZ, 6, "2024-01-02 03:04:05.5+00", "2024-01-02T03:04:05.5Z", true},
		{kindTimestampTZ, 6, "2024-01-02 05:04:05+02", "2024-01-02T03:04:05Z", true},
		{kindTimestampTZ, 6, "2024-01-02 03:04:05+00", "2024-01-02 03:04:05", true}, // a DateTime64 read in UTC
		{kindTimestampTZ, 6, "2024-01-02 03:04:05+00", "2024-01-02T03:04:06Z", false},
		{kindTime, 6, "10:11:12.5", "10:11:12.500000", true},
		{kindTime, 0, "10:11:12", "10:11:12", true},
		{kindText, 6, "a ", "a", false}, // text as written
		{kindOther, 6, "{1,2}", "{1,2}", true},
	} {
		na, nb := normalizeValue(c.kind, c.digits, c.a), normalizeValue(c.kind, c.digits, c.b)
		if (na == nb) != c.equal {
			t.Errorf("%v(%d) %q → %q, %q → %q: equal = %v, want %v", c.kind, c.digits, c.a, na, c.b, nb, na == nb, c.equal)
		}
	}
}

func TestFracDigits(t *testing.T) {
	for typ, want := range map[string]int{
		"DateTime": 0, "Nullable(DateTime)": 0, "DateTime('UTC')": 0, "DateTime64(3)": 3,
		"Nullable(DateTime64(6, 'UTC'))": 6, "String": 6, "LowCardinality(Nullable(String))": 6,
	} {
		if got := chFracDigits(typ); got != want {
			t.Errorf("chFracDigits(%q) = %d, want %d", typ, got, want)
		}
	}
	if pgFracDigits(-1) != 6 || pgFracDigits(0) != 0 || pgFracDigits(3) != 3 {
		t.Error("pgFracDigits")
	}
}

func TestReplacingColumns(t *testing.T) {
	for full, want := range map[string][2]string{
		"ReplacingMergeTree(ver, is_deleted) ORDER BY id SETTINGS index_granularity = 8192":             {"ver", "is_deleted"},
		"ReplacingMergeTree(ver) ORDER BY (a, b)":                                                       {"ver", ""},
		"ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t', '{replica}', ver) ORDER BY id": {"ver", ""},
		"ReplicatedReplacingMergeTree('/p,(x)', '{replica}', `v`, `d`) ORDER BY id":                     {"v", "d"},
		"ReplacingMergeTree ORDER BY id":                                                                {"", ""},
		"MergeTree ORDER BY id":                                                                         {"", ""},
		"ReplacingMergeTree() ORDER BY x":                                                               {"", ""},
	} {
		v, d := replacingColumns(full)
		if v != want[0] || d != want[1] {
			t.Errorf("replacingColumns(%q) = %q, %q; want %q, %q", full, v, d, want[0], want[1])
		}
	}
}

func TestLSN(t *testing.T) {
	n, err := parseLSN("16/B374D848")
	if err != nil || n != 0x16B374D848 {
		t.Fatalf("parseLSN = %x, %v", n, err)
	}
	if s := formatLSN(int64(n)); s != "16/B374D848" {
		t.Fatalf("formatLSN = %s", s)
	}
	if _, err := parseLSN("nope"); err == nil {
		t.Fatal("bad LSN accepted")
	}
}

func sp(s string) *string { return &s }

// TestTableCompare: missing, extra (including a repeated key) and
// different rows are counted exactly, NULL differs from the empty
// string, normalised equal values are equal, and the examples carry the
// differing columns with both sides' text.
func TestTableCompare(t *testing.T) {
	cols := []column{
		{Name: "id", kind: kindInt},
		{Name: "amount", kind: kindDecimal},
		{Name: "note", kind: kindText},
	}
	c := newTableCompare(cols, []int{0}, 2)
	src := [][]*string{
		{sp("1"), sp("1.50"), sp("a")},
		{sp("2"), sp("2.00"), nil},
		{sp("3"), sp("3"), sp("")},
		{sp("4"), sp("4"), sp("x")},
		{sp("5"), sp("5"), sp("y")},
		{sp("6"), sp("6"), sp("z")},
	}
	for _, r := range src {
		c.addSource(r)
	}
	for _, r := range [][]*string{
		{sp("1"), sp("1.5"), sp("a")},    // equal once normalised
		{sp("2"), sp("2"), sp("")},       // NULL vs empty: different
		{sp("3"), sp("3.0"), nil},        // different
		{sp("4"), sp("4.1"), sp("x")},    // different (a third: over the examples' bound)
		{sp("4"), sp("4"), sp("x")},      // the key again: extra
		{sp("07"), sp("7"), sp("extra")}, // extra
	} {
		c.addTarget(r)
	}
	need := c.finish()
	if c.SourceRows != 6 || c.TargetRows != 6 || c.Equal != 1 || c.Different != 3 || c.Missing != 2 || c.Extra != 2 {
		t.Fatalf("counts: source %d target %d equal %d different %d missing %d extra %d",
			c.SourceRows, c.TargetRows, c.Equal, c.Different, c.Missing, c.Extra)
	}
	if len(need) != 4 { // 2 different + 2 missing examples
		t.Fatalf("need %d source rows for examples, want 4", len(need))
	}
	for _, r := range src {
		c.addSourceExample(r)
	}
	ex := c.diffs()
	byKind := map[string][]RowDiff{}
	for _, d := range ex {
		byKind[d.Kind] = append(byKind[d.Kind], d)
	}
	if len(byKind[RowDifferent]) != 2 || len(byKind[RowExtra]) != 2 || len(byKind[RowMissing]) != 2 {
		t.Fatalf("examples: %+v", ex)
	}
	d := byKind[RowDifferent][0]
	if d.Key != "id=2" || len(d.Columns) != 1 || d.Columns[0].Column != "note" || d.Columns[0].Source != nil || *d.Columns[0].Target != "" {
		t.Fatalf("different example: %+v", d)
	}
	d = byKind[RowDifferent][1]
	if d.Key != "id=3" || len(d.Columns) != 1 || d.Columns[0].Column != "note" {
		t.Fatalf("different example (3.0 = 3, \"\" ≠ NULL): %+v", d)
	}
	m := byKind[RowMissing][0]
	if m.Key != "id=5" || len(m.Columns) != 3 || *m.Columns[2].Source != "y" {
		t.Fatalf("missing example: %+v", m)
	}
	if e := byKind[RowExtra]; e[0].Key != "id=4" || e[1].Key != "id=07" {
		t.Fatalf("extra examples: %+v", e)
	}
}

// TestTableCompareCompositeKey: the key is compared in the key's order,
// whatever the columns' order.
func TestTableCompareCompositeKey(t *testing.T) {
	cols := []column{{Name: "line", kind: kindInt}, {Name: "v", kind: kindText}, {Name: "order_id", kind: kindInt}}
	c := newTableCompare(cols, []int{2, 0}, 5)
	c.addSource([]*string{sp("1"), sp("a"), sp("10")})
	c.addSource([]*string{sp("10"), sp("b"), sp("1")})
	c.addTarget([]*string{sp("10"), sp("b"), sp("1")})
	c.addTarget([]*string{sp("1"), sp("a"), sp("10")})
	c.finish()
	if c.Equal != 2 || c.Missing+c.Extra+c.Different != 0 {
		t.Fatalf("equal %d, missing %d, extra %d, different %d", c.Equal, c.Missing, c.Extra, c.Different)
	}
	if k := c.describeKey([]*string{sp("1"), sp("a"), sp("10")}); k != "order_id=10, line=1" {
		t.Fatalf("key %q", k)
	}
}

func TestReplicaConfigValidate(t *testing.T) {
	ok := ReplicaConfig{SourceURL: "postgres://h/db", Target: SinkOptions{URL: "postgres://h/db2", Table: "${source.table}"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ReplicaConfig){
		"source-url": func(c *ReplicaConfig) { c.SourceURL = "" },
		"must be":    func(c *ReplicaConfig) { c.SourceURL = "clickhouse://h:9000/db" },
		"sink-url":   func(c *ReplicaConfig) { c.Target.URL = "" },
		"-topic-prefix": func(c *ReplicaConfig) {
			c.Target.Table = "${topic}"
		},
	} {
		c := ok
		mod(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrReplicaConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := expandTableFormat("copy_${source.schema}_${source.table}", "shop", "public", "orders", ""); got != "copy_public_orders" {
		t.Fatal(got)
	}
	if got := expandTableFormat("${topic}", "shop", "public", "orders", "pg1"); got != "pg1.public.orders" {
		t.Fatal(got)
	}
}

// TestCheckReplicaPostgres: a real source and target database (local
// PostgreSQL): a copy with every supported type equal once normalised
// (the target columns typed as auto.create types them), then a missing,
// an extra and a different row, a row soft-deleted with __deleted, a
// column the target lacks; the comparison is read-only and holds a
// snapshot while a writer changes the source.
// TestPgColumnsDomains: a source column of a domain is compared as its
// base type is, through domains over domains, with the type modifier of
// the outermost domain that has one (a timestamp(3) under two domains
// keeps 3 digits).
func TestPgColumnsDomains(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range []string{
		`CREATE DOMAIN pos AS int4 CHECK (VALUE > 0)`,
		`CREATE DOMAIN small_pos AS pos CHECK (VALUE < 100)`,
		`CREATE DOMAIN at3 AS timestamp(3)`,
		`CREATE DOMAIN at3b AS at3`,
		`CREATE DOMAIN at3c AS at3b NOT NULL`,
		`CREATE TABLE dom (id int8 PRIMARY KEY, p pos, sp small_pos, a at3, c at3c, plain timestamp(2))`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	cols, err := pgColumns(ctx, tx, "public.dom")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cols {
		got = append(got, fmt.Sprintf("%s %s %s %d", c.name, c.typname, c.category, c.typmod))
	}
	want := []string{"id int8 N -1", "p int4 N -1", "sp int4 N -1", "a timestamp D 3", "c timestamp D 3", "plain timestamp D 2"}
	if !slices.Equal(got, want) {
		t.Errorf("columns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckReplicaPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	srcURL, tgtURL := srv.NewDatabase(t), srv.NewDatabase(t)
	ctx := context.Background()
	exec := func(u string, sqls ...string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, s := range sqls {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	exec(srcURL,
		`CREATE TABLE items (order_id int, line smallint, sku uuid, qty int NOT NULL, price numeric(10,2), weight real, score double precision,
			ok boolean, tags jsonb, blob bytea, day date, at timestamp(3), atz timestamptz, tod time, note varchar(20), PRIMARY KEY (order_id, line))`,
		`INSERT INTO items SELECT i / 3, i % 3, md5(i::text)::uuid, i, i * 1.25, i / 7.0, i / 3.0, i % 2 = 0,
			jsonb_build_object('i', i, 'z', 'x'), decode(lpad(to_hex(i), 4, '0'), 'hex'), date '2024-01-01' + i,
			timestamp '2024-01-01 00:00:00.123' + i * interval '1 minute', timestamptz '2024-01-01 00:00:00.5+02' + i * interval '1 hour',
			time '10:00:00.25' + i * interval '1 second', CASE WHEN i % 5 = 0 THEN NULL ELSE 'n' || i END
		FROM generate_series(0, 299) i`,
		`CREATE TABLE plain (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO plain SELECT i, 'v' || i FROM generate_series(1, 50) i`,
	)
	// The copy, typed as auto.create types Debezium's schemas (numeric,
	// timestamp(6), text), with the change columns and a soft delete.
	exec(tgtURL,
		`CREATE TABLE items (order_id integer NOT NULL, line smallint NOT NULL, sku uuid, qty integer NOT NULL, price numeric, weight real,
			score double precision, ok boolean, tags jsonb, blob bytea, day date, at timestamp, atz timestamptz, tod time, note text,
			__op text, __lsn bigint, __deleted boolean, PRIMARY KEY (order_id, line))`,
		`CREATE TABLE plain (id bigint PRIMARY KEY, v text)`,
	)
	srcConn, err := pgx.Connect(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer srcConn.Close(ctx)
	copyRows(t, srcConn, tgtURL, "items", "plain")
	exec(tgtURL, `UPDATE items SET __op = 'c', __lsn = 1000 + order_id * 3 + line, __deleted = false`)

	cfg := ReplicaConfig{SourceURL: srcURL, Tables: []string{"items", "public.plain"}, Target: SinkOptions{URL: tgtURL}, MaxExamples: 3}
	r, err := CheckReplica(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("equal copy:\n%s", text.String())
	if !r.OK() || r.SourceRows != 350 || r.TargetRows != 350 || r.Equal != 350 {
		t.Fatalf("equal copy reported: %+v", r)
	}
	if !strings.Contains(text.String(), "result: EQUAL — 2 tables, 350 rows") {
		t.Fatalf("text:\n%s", text.String())
	}
	if r.Lag.TargetLSN != formatLSN(1000+99*3+2) || r.Lag.SourceLSN == "" || r.Lag.TargetBehind == nil {
		t.Fatalf("lag %+v", r.Lag)
	}

	// Differences: a missing row, an extra row, a different value, a
	// soft-deleted row (extra in the source's eyes: missing), and a column
	// added at the source that the target does not have yet.
	exec(tgtURL,
		`DELETE FROM items WHERE order_id = 10 AND line = 1`,
		`INSERT INTO plain VALUES (999, 'ghost')`,
		`UPDATE items SET price = price + 0.01 WHERE order_id = 20 AND line = 2`,
		`UPDATE items SET __deleted = true WHERE order_id = 30 AND line = 0`,
	)
	exec(srcURL, `ALTER TABLE plain ADD COLUMN extra int`, `UPDATE plain SET extra = 1 WHERE id = 7`)
	r, err = CheckReplica(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	_ = r.WriteText(&text)
	t.Logf("with differences:\n%s", text.String())
	if r.OK() || r.Missing != 2 || r.Extra != 1 || r.Different != 2 {
		t.Fatalf("missing %d extra %d different %d, want 2, 1, 2", r.Missing, r.Extra, r.Different)
	}
	items, plain := r.Tables[0], r.Tables[1]
	if items.Missing != 2 || items.Different != 1 || plain.Extra != 1 || plain.Different != 1 || len(plain.TargetLacks) != 1 {
		t.Fatalf("per table: %+v / %+v", items, plain)
	}
	for _, want := range []string{
		"missing   public.items order_id=10, line=1: only in the source (",
		"different public.items order_id=20, line=2: price: source 77.50, target 77.51",
		"extra     public.plain id=999: only in the target (id=999, v=ghost, extra=NULL)",
		"different public.plain id=7: extra: source 1, target NULL",
		"target public.plain lacks column(s) extra of public.plain (compared as NULL)",
		"result: DIFFERENT — missing 2, extra 1, different 2",
		"the connector's Kafka lag is unknown",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q", want)
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back ReplicaReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Different != 2 || len(back.Tables[0].Examples) == 0 {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}

	// Live: writers change both sides after the comparison took its
	// snapshots; it still compares the state of its snapshots (the
	// differences above, nothing of the later writes) and writes nothing.
	cfg.afterSnapshots = func() {
		exec(srcURL, `DELETE FROM items`, `INSERT INTO plain (id, v) VALUES (1000, 'late')`)
		exec(tgtURL, `DELETE FROM plain`)
	}
	live, err := CheckReplica(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if live.SourceRows != 350 || live.TargetRows != 349 || live.Missing != 2 || live.Extra != 1 || live.Different != 2 {
		t.Fatalf("the comparison saw writes made after its snapshots: source %d target %d missing %d extra %d different %d",
			live.SourceRows, live.TargetRows, live.Missing, live.Extra, live.Different)
	}
	cfg.afterSnapshots = nil
	after, err := CheckReplica(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if after.SourceRows != 51 || after.TargetRows != 298 {
		t.Fatalf("after the writes: source %d, target %d rows", after.SourceRows, after.TargetRows)
	}
}

// TestReplicaKafkaLag: with the connector and Kafka, the lag is the
// records between the connector's stored offsets and each partition's
// last stable offset.
func TestReplicaKafkaLag(t *testing.T) {
	srv := pgtest.Shared(t)
	srcURL, tgtURL := srv.NewDatabase(t), srv.NewDatabase(t)
	ctx := context.Background()
	for _, u := range []string{srcURL, tgtURL} {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		if u == tgtURL {
			if _, err := conn.Exec(ctx, `CREATE TABLE txsink_offsets (connector text, topic text, partition int, next_offset bigint, fence bigint);
				INSERT INTO txsink_offsets VALUES ('c', 'pg1.public.t', 0, 3, 1), ('c', 'pg1.public.t', 1, NULL, 1), ('other', 'pg1.public.t', 0, 0, 1)`); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close(ctx)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "pg1.public.t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "pg1.public.t", Partition: int32(i % 2), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := CheckReplica(ctx, ReplicaConfig{SourceURL: srcURL, Tables: []string{"t"}, Bootstrap: c.ListenAddrs(),
		Target: SinkOptions{URL: tgtURL, Connector: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	// Partition 0: 5 records, next 3; partition 1: 5 records, none applied.
	if r.Lag.KafkaRecords != 7 || len(r.Lag.Kafka) != 1 || r.Lag.Kafka[0].Partitions != 2 || r.Lag.KafkaError != "" {
		t.Fatalf("lag %+v", r.Lag)
	}
	if !r.OK() || len(r.Notes) != 0 {
		t.Fatalf("two empty tables: %+v", r)
	}
}

// copyRows copies tables from the source connection into the target
// database, value by value as text.
func copyRows(t *testing.T, src *pgx.Conn, tgtURL string, tables ...string) {
	t.Helper()
	ctx := context.Background()
	dst, err := pgx.Connect(ctx, tgtURL)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close(ctx)
	for _, table := range tables {
		rows, err := src.Query(ctx, fmt.Sprintf(`SELECT * FROM %s`, pgx.Identifier{table}.Sanitize()))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range rows.FieldDescriptions() {
			names = append(names, pgx.Identifier{f.Name}.Sanitize())
		}
		var all [][]any
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, v)
		}
		rows.Close()
		ph := make([]string, len(names))
		for i := range ph {
			ph[i] = fmt.Sprintf("$%d", i+1)
		}
		for _, v := range all {
			if _, err := dst.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, pgx.Identifier{table}.Sanitize(), strings.Join(names, ", "), strings.Join(ph, ", ")), v...); err != nil {
				t.Fatal(err)
			}
		}
	}
}
