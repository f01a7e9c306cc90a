package integration

// Change data capture on the real broker and databases: Debezium change
// events (JSON with schemas, as Kafka Connect's JsonConverter writes
// Debezium's PostgreSQL connector output) applied by txsink; tables
// created and evolved from the record schemas; routing of many topics
// (topics.regex, one created after start) into many tables by
// ${source.table}. Each target table must end equal to what the changes
// imply, row for row. The replication tests with a real Debezium source
// are in replication_test.go.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/dbztest"
)

// cdcSource is a modelled source table: the rows it holds and the change
// events that led there.
type cdcSource struct {
	tbl  *dbztest.Table
	rows map[int]dbztest.Row
	next int
	// moves: updates may move a row to a new key in one event (a single
	// update whose before and after keys differ), which only keeps its
	// order with the old key's events in a one-partition topic.
	moves bool
	// note: rows carry the column "note" (schema v2).
	note bool
}

// lsn is the source position shared by every modelled table.
type lsnClock struct{ n int64 }

func (c *lsnClock) next() int64 { c.n += 8; return c.n }

func cdcTable(server, name string) *dbztest.Table {
	return &dbztest.Table{Server: server, DB: "shop", Schema: "public", Name: name, Key: []string{"id"},
		Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "name", Type: "string"}, {Name: "qty", Type: "int32", Optional: true}}}
}

func newCDCSource(tbl *dbztest.Table) *cdcSource {
	return &cdcSource{tbl: tbl, rows: map[int]dbztest.Row{}, next: 1}
}

// withNote switches the source to schema v2: a new optional column note.
func (s *cdcSource) withNote() {
	s.note = true
	v2 := *s.tbl
	v2.Columns = append(slices.Clone(s.tbl.Columns), dbztest.Column{Name: "note", Type: "string", Optional: true})
	s.tbl = &v2
}

func (s *cdcSource) newRow(rng *rand.Rand, id int) dbztest.Row {
	r := dbztest.Row{"id": id, "name": fmt.Sprintf("n%d-%d", id, rng.IntN(1000))}
	if rng.IntN(4) > 0 {
		r["qty"] = rng.IntN(100)
	} else {
		r["qty"] = nil
	}
	if s.note {
		r["note"] = fmt.Sprintf("note %d", rng.IntN(100))
	}
	return r
}

// step makes one random change (insert, update, delete with its
// tombstone, key change as Debezium writes it: delete, tombstone, create;
// or a moving update) and returns its records.
func (s *cdcSource) step(rng *rand.Rand, clk *lsnClock) []*kgo.Record {
	ts := int64(1_700_000_000_000)
	var evs []*dbztest.Event
	tombstone := func(r dbztest.Row) {
		evs = append(evs, nil)
		_ = r
	}
	var ids []int
	for id := range s.rows {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	op := rng.IntN(10)
	switch {
	case len(ids) < 5 || op < 4:
		id := s.next
		s.next++
		r := s.newRow(rng, id)
		s.rows[id] = r
		evs = append(evs, &dbztest.Event{Op: 'c', After: r, LSN: clk.next(), TsMs: ts})
	case op < 7:
		id := ids[rng.IntN(len(ids))]
		before := s.rows[id]
		after := s.newRow(rng, id)
		s.rows[id] = after
		evs = append(evs, &dbztest.Event{Op: 'u', Before: before, After: after, LSN: clk.next(), TsMs: ts})
	case op < 9:
		id := ids[rng.IntN(len(ids))]
		before := s.rows[id]
		delete(s.rows, id)
		evs = append(evs, &dbztest.Event{Op: 'd', Before: before, LSN: clk.next(), TsMs: ts})
		tombstone(before)
	default:
		id := ids[rng.IntN(len(ids))]
		before := s.rows[id]
		nid := s.next
		s.next++
		after := dbztest.Row{}
		for k, v := range before {
			after[k] = v
		}
		after["id"] = nid
		delete(s.rows, id)
		s.rows[nid] = after
		if s.moves {
			evs = append(evs, &dbztest.Event{Op: 'u', Before: before, After: after, LSN: clk.next(), TsMs: ts})
		} else {
			evs = append(evs, &dbztest.Event{Op: 'd', Before: before, LSN: clk.next(), TsMs: ts})
			tombstone(before)
			evs = append(evs, &dbztest.Event{Op: 'c', After: after, LSN: clk.next(), TsMs: ts})
		}
	}
	var out []*kgo.Record
	var lastKey []byte
	for _, e := range evs {
		if e == nil {
			out = append(out, &kgo.Record{Topic: s.tbl.Topic(), Key: lastKey})
			continue
		}
		k, v := s.tbl.JSON(*e)
		lastKey = k
		out = append(out, &kgo.Record{Topic: s.tbl.Topic(), Key: k, Value: v})
	}
	return out
}

// want renders the modelled rows as the table dump does.
func (s *cdcSource) want() []string {
	var out []string
	for _, r := range s.rows {
		out = append(out, dumpRow(r["id"], r["name"], r["qty"], r["note"], s.note))
	}
	sort.Strings(out)
	return out
}

func dumpRow(id, name, qty, note any, withNote bool) string {
	f := func(v any) string {
		if v == nil {
			return "NULL"
		}
		return fmt.Sprint(v)
	}
	s := f(id) + "|" + f(name) + "|" + f(qty)
	if withNote {
		s += "|" + f(note)
	}
	return s
}

// ends tracks one past the last produced offset per topic and partition.
type ends map[string]map[int32]int64

func (e ends) add(rs []*kgo.Record) {
	for _, r := range rs {
		if e[r.Topic] == nil {
			e[r.Topic] = map[int32]int64{}
		}
		e[r.Topic][r.Partition] = max(e[r.Topic][r.Partition], r.Offset+1)
	}
}

// produceCDC produces records with the key-hash partitioner (as Debezium's
// producer does) and records where they went.
func produceCDC(t *testing.T, cl *kgo.Client, e ends, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	e.add(recs)
}

// offsetRows reads a connector's stored next offsets from a sink.
type offsetRows interface {
	stored(ctx context.Context) (ends, error)
}

type pgOffsets struct {
	pool      *pgxpool.Pool
	connector string
}

func (o pgOffsets) stored(ctx context.Context) (ends, error) {
	rows, err := o.pool.Query(ctx, `SELECT topic, partition, coalesce(next_offset, -1) FROM txsink_offsets WHERE connector = $1`, o.connector)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanEnds(rows.Next, rows.Scan, rows.Err)
}

type chOffsetRows struct {
	conn      driver.Conn
	connector string
}

func (o chOffsetRows) stored(ctx context.Context) (ends, error) {
	rows, err := o.conn.Query(ctx, "SELECT topic, `partition`, argMax(next_offset, (fence, next_offset)) FROM txsink_offsets WHERE connector = ? GROUP BY topic, `partition`", o.connector)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanEnds(rows.Next, func(dst ...any) error { return rows.Scan(dst...) }, rows.Err)
}

func scanEnds(next func() bool, scan func(...any) error, rerr func() error) (ends, error) {
	got := ends{}
	for next() {
		var tp string
		var part int32
		var n int64
		if err := scan(&tp, &part, &n); err != nil {
			return nil, err
		}
		if got[tp] == nil {
			got[tp] = map[int32]int64{}
		}
		got[tp][part] = n
	}
	return got, rerr()
}

// waitEnds waits until the connector's stored offsets reach every end,
// failing when txsink exits first.
func waitEnds(t *testing.T, o offsetRows, want ends, d time.Duration, p *proc) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got, _ := o.stored(context.Background())
		done := true
		for tp, ps := range want {
			for part, end := range ps {
				if got[tp][part] < end {
					done = false
				}
			}
		}
		if done {
			return
		}
		if ok, code := p.exited(); ok {
			t.Fatalf("txsink exited with %d before draining; stored %v, want %v\n%s", code, got, want, tail(p.output(), 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained after %v: stored %v, want %v", d, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pgDump reads a table as id|name|qty[|note] lines, sorted.
func pgDump(t *testing.T, pool *pgxpool.Pool, table string, withNote bool) []string {
	t.Helper()
	cols := "id::int8, name, qty::int8"
	if withNote {
		cols += ", note"
	}
	rows, err := pool.Query(context.Background(), "SELECT "+cols+" FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	return dumpRows(t, rows.Next, rows.Scan, rows.Err, withNote)
}

// dumpRows scans rows of (id, name, qty[, note]) into dumpRow lines,
// sorted.
func dumpRows(t *testing.T, next func() bool, scan func(...any) error, rerr func() error, withNote bool) []string {
	t.Helper()
	var out []string
	for next() {
		var id int64
		var name string
		var qty *int64
		var note *string
		dst := []any{&id, &name, &qty}
		if withNote {
			dst = append(dst, &note)
		}
		if err := scan(dst...); err != nil {
			t.Fatal(err)
		}
		var q, n any
		if qty != nil {
			q = *qty
		}
		if note != nil {
			n = *note
		}
		out = append(out, dumpRow(id, name, q, n, withNote))
	}
	if err := rerr(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// sameRows reports the first differences between a table and its model.
func sameRows(got, want []string) string {
	if slices.Equal(got, want) {
		return ""
	}
	g, w := map[string]bool{}, map[string]bool{}
	for _, r := range got {
		g[r] = true
	}
	for _, r := range want {
		w[r] = true
	}
	var diff []string
	for _, r := range want {
		if !g[r] {
			diff = append(diff, "missing "+r)
		}
	}
	for _, r := range got {
		if !w[r] {
			diff = append(diff, "extra "+r)
		}
	}
	return fmt.Sprintf("%d rows, want %d; %s", len(got), len(want), strings.Join(diff[:min(len(diff), 8)], "; "))
}

// cdcConnector is a postgres connector applying Debezium events.
func cdcConnector(name, dbURL string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		"name": name, "connector.class": "postgres", "connection.url": dbURL,
		"cdc.format": "debezium", "table.name.format": "${source.table}", "auto.create": "true", "auto.evolve": "true",
		"batch.max.records": "500", "batch.linger.ms": "20", "session.timeout.ms": "6000", "transaction.timeout.ms": "10000",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// TestCDCPostgresRouting: one exactly_once connector consumes, by
// topics.regex, three Debezium topics (one created after it started)
// and writes three tables renamed by Kafka Connect's RegexRouter
// (copy_<table>), created by auto.create: inserts, updates, deletes with their tombstones, key
// changes (Debezium's delete + create, and single moving updates in a
// one-partition topic). Every table ends equal to its source model.
// Then a truncate event, refused by default, stops the task at its exact
// offset with an error naming it.
func TestCDCPostgresRouting(t *testing.T) {
	k, db := sinkEnv(t)
	sfx := randSuffix(t)
	server := "rt" + sfx
	pool := connectPool(t, db)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	rng := rand.New(rand.NewPCG(15, 3))
	clk := &lsnClock{n: 1 << 20}
	e := ends{}

	a, b, c := newCDCSource(cdcTable(server, "a")), newCDCSource(cdcTable(server, "b")), newCDCSource(cdcTable(server, "c"))
	c.moves = true
	k.CreateTopic(t, a.tbl.Topic(), 2)
	k.CreateTopic(t, b.tbl.Topic(), 2)
	const conn = "cdc-routing"
	// Kafka Connect's RegexRouter renames each topic, and the table is the
	// topic as the transform left it.
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cdcConnector(conn, db, map[string]string{
		"topics.regex": server + `\.public\..*`, "metadata.max.age.ms": "2000",
		"transforms": "route", "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
		"transforms.route.regex": `[^.]+\.public\.(.*)`, "transforms.route.replacement": "copy_$1",
		"table.name.format": "${topic}",
	})), "w1")
	produceRounds := func(srcs ...*cdcSource) {
		for range 4 {
			var recs []*kgo.Record
			for _, s := range srcs {
				for range 40 {
					recs = append(recs, s.step(rng, clk)...)
				}
			}
			produceCDC(t, cl, e, recs)
		}
	}
	produceRounds(a, b)
	waitEnds(t, pgOffsets{pool, conn}, e, 2*time.Minute, p)
	// A topic created after the connector started.
	k.CreateTopic(t, c.tbl.Topic(), 1)
	produceRounds(a, b, c)
	waitEnds(t, pgOffsets{pool, conn}, e, 2*time.Minute, p)
	total := 0
	for _, tp := range e {
		for _, n := range tp {
			total += int(n)
		}
	}
	for _, s := range []*cdcSource{a, b, c} {
		if d := sameRows(pgDump(t, pool, "copy_"+s.tbl.Name, false), s.want()); d != "" {
			t.Errorf("table %s: %s", s.tbl.Name, d)
		}
	}
	t.Logf("%d change records over 5 partitions of 3 topics into 3 tables: %d, %d, %d rows", total, len(a.rows), len(b.rows), len(c.rows))

	// A truncate event is refused: the task stops at its offset.
	k2, v2 := c.tbl.JSON(dbztest.Event{Op: 't', LSN: clk.next(), TsMs: 1_700_000_000_000})
	trunc := &kgo.Record{Topic: c.tbl.Topic(), Key: k2, Value: v2}
	produceCDC(t, cl, e, []*kgo.Record{trunc})
	if !p.wait(90 * time.Second) {
		t.Fatal("txsink still running 90s after a refused truncate event")
	}
	if _, code := p.exited(); code != 4 {
		t.Fatalf("txsink exited with %d, want 4 (a task stopped on a bad record)", code)
	}
	at := fmt.Sprintf("%s[0]@%d", c.tbl.Topic(), trunc.Offset)
	if out := p.output(); !strings.Contains(out, "truncate event refused") || !strings.Contains(out, at) {
		t.Errorf("the error does not name the refused truncate %s:\n%s", at, tail(out, 2000))
	}
	var next int64
	if err := pool.QueryRow(context.Background(), `SELECT next_offset FROM txsink_offsets WHERE connector = $1 AND topic = $2`, conn, c.tbl.Topic()).Scan(&next); err != nil || next != trunc.Offset {
		t.Errorf("stored next_offset %d (%v), want the truncate's offset %d", next, err, trunc.Offset)
	}
	if d := sameRows(pgDump(t, pool, "copy_c", false), c.want()); d != "" {
		t.Errorf("table c after the refused truncate: %s", d)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestCDCPostgresSchemaChange: a new column appears in the source's
// schema mid-stream; auto.evolve adds it (in the batch's transaction,
// the batch alone in its round) and the table stays equal to the source.
// Then a change the table cannot take (a column widened to int64 at the
// source) stops the partition at that exact record with an error that
// says what to do, and nothing after it is written.
func TestCDCPostgresSchemaChange(t *testing.T) {
	k, db := sinkEnv(t)
	server := "sc" + randSuffix(t)
	pool := connectPool(t, db)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	rng := rand.New(rand.NewPCG(16, 4))
	clk := &lsnClock{n: 1 << 20}
	e := ends{}
	s, o := newCDCSource(cdcTable(server, "items")), newCDCSource(cdcTable(server, "other"))
	k.CreateTopic(t, s.tbl.Topic(), 1)
	k.CreateTopic(t, o.tbl.Topic(), 2)
	const conn = "cdc-schema"
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cdcConnector(conn, db, map[string]string{
		"topics": s.tbl.Topic() + "," + o.tbl.Topic(),
	})), "w1")
	step := func(n int) {
		var recs []*kgo.Record
		for range n {
			recs = append(recs, s.step(rng, clk)...)
			recs = append(recs, o.step(rng, clk)...)
		}
		produceCDC(t, cl, e, recs)
	}
	step(150)
	waitEnds(t, pgOffsets{pool, conn}, e, 2*time.Minute, p)
	// The source gains a column, while the other table's rounds go on.
	s.withNote()
	step(150)
	waitEnds(t, pgOffsets{pool, conn}, e, 2*time.Minute, p)
	if d := sameRows(pgDump(t, pool, "items", true), s.want()); d != "" {
		t.Errorf("after the new column: %s", d)
	}
	if d := sameRows(pgDump(t, pool, "other", false), o.want()); d != "" {
		t.Errorf("other table: %s", d)
	}

	// The source widens qty to int64: the table's integer column cannot
	// hold every value, so the partition stops at that record.
	wide := *s.tbl
	wide.Columns = slices.Clone(s.tbl.Columns)
	wide.Columns[2].Type = "int64"
	kw, vw := wide.JSON(dbztest.Event{Op: 'c', After: dbztest.Row{"id": 999999, "name": "wide", "qty": 5, "note": nil}, LSN: clk.next(), TsMs: 1})
	bad := &kgo.Record{Topic: s.tbl.Topic(), Key: kw, Value: vw}
	produceCDC(t, cl, e, []*kgo.Record{bad})
	step(5) // changes after it, in both tables
	if !p.wait(90 * time.Second) {
		t.Fatal("txsink still running 90s after an incompatible schema change")
	}
	if _, code := p.exited(); code != 4 {
		t.Fatalf("txsink exited with %d, want 4", code)
	}
	out := p.output()
	at := fmt.Sprintf("%s[0]@%d", s.tbl.Topic(), bad.Offset)
	for _, want := range []string{at, "incompatible schema change", `field "qty"`, "TYPE bigint"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error lacks %q:\n%s", want, tail(out, 2500))
		}
	}
	var next int64
	if err := pool.QueryRow(context.Background(), `SELECT next_offset FROM txsink_offsets WHERE connector = $1 AND topic = $2`, conn, s.tbl.Topic()).Scan(&next); err != nil || next != bad.Offset {
		t.Errorf("stored next_offset %d (%v), want the incompatible record's offset %d", next, err, bad.Offset)
	}
	var has int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE id = 999999`).Scan(&has); err != nil || has != 0 {
		t.Errorf("the incompatible record was written (%d, %v)", has, err)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
	p.signal(syscall.SIGTERM)
}

// chDump reads a ReplacingMergeTree table as its current rows (FINAL,
// without deletion rows) in the form of dumpRow, sorted.
func chDump(t *testing.T, conn driver.Conn, table string, withNote bool) []string {
	t.Helper()
	cols := "toInt64(id), name, CAST(qty AS Nullable(Int64))"
	if withNote {
		cols += ", note"
	}
	rows, err := conn.Query(context.Background(), "SELECT "+cols+" FROM `"+table+"` FINAL WHERE is_deleted = 0")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	return dumpRows(t, rows.Next, func(dst ...any) error { return rows.Scan(dst...) }, rows.Err, withNote)
}

// TestCDCClickHouse: one exactly_once ClickHouse connector applies
// Debezium events of two tables (topics.regex, ${source.table}) into
// ReplacingMergeTree(version, is_deleted) tables it creates, versioned by
// the source LSN; one source gains a column mid-stream (auto.evolve,
// ADD COLUMN IF NOT EXISTS); each table read with FINAL equals its
// source. Then a change event whose key is not the table's ORDER BY key
// stops the partition at that record.
func TestCDCClickHouse(t *testing.T) {
	k, ch, db, conn := chEnv(t)
	server := "ch" + randSuffix(t)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	rng := rand.New(rand.NewPCG(17, 5))
	clk := &lsnClock{n: 1 << 20}
	e := ends{}
	a, b := newCDCSource(cdcTable(server, "a")), newCDCSource(cdcTable(server, "b"))
	k.CreateTopic(t, a.tbl.Topic(), 2)
	k.CreateTopic(t, b.tbl.Topic(), 2)
	const name = "cdc-ch"
	cfg := chConnector(name, "", ch, db, "exactly_once")
	delete(cfg, "topics")
	delete(cfg, "pk.mode")
	for k, v := range map[string]string{
		"topics.regex": server + `\.public\..*`, "cdc.format": "debezium", "table.name.format": "${source.table}",
		"auto.create": "true", "auto.evolve": "true", "version.column": "ver", "batch.max.records": "500",
	} {
		cfg[k] = v
	}
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w1")
	step := func(n int) {
		var recs []*kgo.Record
		for range n {
			recs = append(recs, a.step(rng, clk)...)
			recs = append(recs, b.step(rng, clk)...)
		}
		produceCDC(t, cl, e, recs)
	}
	step(120)
	waitEnds(t, chOffsetRows{conn, name}, e, 3*time.Minute, p)
	a.withNote()
	step(120)
	waitEnds(t, chOffsetRows{conn, name}, e, 3*time.Minute, p)
	if d := sameRows(chDump(t, conn, "a", true), a.want()); d != "" {
		t.Errorf("table a: %s", d)
	}
	if d := sameRows(chDump(t, conn, "b", false), b.want()); d != "" {
		t.Errorf("table b: %s", d)
	}
	var engine string
	if err := conn.QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = ? AND name = 'a'", db).Scan(&engine); err != nil {
		t.Fatal(err)
	}
	t.Logf("table a: %s; %d and %d rows", engine, len(a.rows), len(b.rows))

	// The source's key changes to (id, name): not the table's ORDER BY.
	rekeyed := *b.tbl
	rekeyed.Key = []string{"id", "name"}
	kr, vr := rekeyed.JSON(dbztest.Event{Op: 'c', After: dbztest.Row{"id": 777777, "name": "k", "qty": 1}, LSN: clk.next(), TsMs: 1})
	bad := &kgo.Record{Topic: b.tbl.Topic(), Key: kr, Value: vr}
	produceCDC(t, cl, e, []*kgo.Record{bad})
	if !p.wait(90 * time.Second) {
		t.Fatal("txsink still running 90s after an incompatible key")
	}
	if _, code := p.exited(); code != 4 {
		t.Fatalf("txsink exited with %d, want 4", code)
	}
	at := fmt.Sprintf("%s[%d]@%d", b.tbl.Topic(), bad.Partition, bad.Offset)
	if out := p.output(); !strings.Contains(out, at) || !strings.Contains(out, "incompatible schema change") || !strings.Contains(out, "is not the ORDER BY key") {
		t.Errorf("the error does not name the record %s and the key:\n%s", at, tail(out, 2500))
	}
	var next int64
	err := conn.QueryRow(context.Background(), "SELECT argMax(next_offset, (fence, next_offset)) FROM txsink_offsets WHERE connector = ? AND topic = ? AND `partition` = ?", name, b.tbl.Topic(), bad.Partition).Scan(&next)
	if err != nil || next != bad.Offset {
		t.Errorf("stored next_offset %d (%v), want the record's offset %d", next, err, bad.Offset)
	}
	if n := chPendingIntents(t, conn, name); n != 0 {
		t.Errorf("%d intents left pending", n)
	}
}
