package integration

// End-to-end tests of the Schema Registry formats (Avro, Protobuf, JSON
// Schema) on a real broker, real PostgreSQL and ClickHouse, and the
// registry of harness.SchemaRegistry (franz-go's srfake over HTTP, or a
// real one): every committed record once, no aborted one, every value
// equal to what was produced.

import (
	"context"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/integration/harness"
)

// allFormats returns the formats under test (after init filled them in).
func allFormats() []format { return []format{avroFormat, protobufFormat, jsonSchemaFormat} }

// formatRecords is how many committed records each format's topic gets
// (issue 14's acceptance: at least 50,000). TXSINK_TEST_FORMAT_RECORDS
// lowers it for a quick local run.
func formatRecords(t *testing.T) int { return envCount(t, "TXSINK_TEST_FORMAT_RECORDS", 50_000, 1) }

// converterSettings returns the connector settings that read values with
// f's converter from reg.
func converterSettings(cfg map[string]string, f format, reg *harness.SchemaRegistryService) map[string]string {
	cfg["value.converter"] = f.converter
	cfg["value.converter.schema.registry.url"] = reg.URL
	if f.name == "jsonschema" {
		cfg["value.converter.json.fail.invalid.schema"] = "true"
	}
	return cfg
}

// pgFormatTable creates f's table in PostgreSQL with the Kafka coordinate
// columns and rn (insertion order; no key, so duplicates stay visible).
func pgFormatTable(t testing.TB, pool *pgxpool.Pool, f format, table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `DO $$ BEGIN CREATE TYPE e2e_color AS ENUM ('RED', 'GREEN', 'BLUE'); EXCEPTION WHEN duplicate_object THEN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range f.cols {
		cols = append(cols, pgx.Identifier{c.name}.Sanitize()+" "+c.pg)
	}
	cols = append(cols, "__connect_topic text", "__connect_partition int", "__connect_offset bigint", "rn bigserial")
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (`+strings.Join(cols, ", ")+`)`); err != nil {
		t.Fatal(err)
	}
}

// chModern reports whether the ClickHouse server has DateTime64, Map and
// Bool (22.x and later); 18.16 has none of them.
func chModern(t testing.TB, conn driver.Conn) bool {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return major >= 22
}

// chFormatTable creates f's table in ClickHouse with a de-duplicating
// engine and the coordinate columns.
func chFormatTable(t testing.TB, ch *harness.ClickHouseService, conn driver.Conn, db string, f format, table string) {
	t.Helper()
	modern := chModern(t, conn)
	var cols []string
	for _, c := range f.cols {
		typ := c.ch
		if modern && c.chV2 != "" {
			typ = c.chV2
		}
		cols = append(cols, "`"+c.name+"` "+typ)
	}
	cols = append(cols, "__connect_topic String", "__connect_partition Int32", "__connect_offset Int64")
	chExec(t, conn, "CREATE TABLE `"+table+"` ("+strings.Join(cols, ", ")+") ENGINE = "+chEngine(ch, db, table, 100))
}

// seqByCoord maps each committed record's (partition, offset) to its
// sequence number.
func seqByCoord(u *upstream) map[[2]int64]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := map[[2]int64]int{}
	for p, rs := range u.committed {
		for _, r := range rs {
			m[[2]int64{int64(p), r.Offset}] = r.Seq
		}
	}
	return m
}

// valueChecker compares rows read back with what was produced.
type valueChecker struct {
	t        testing.TB
	f        format
	topic    string
	seqs     map[[2]int64]int
	skip     func(seq int) bool // records not expected in the table
	rows     int
	values   int
	problems []string
}

func newValueChecker(t testing.TB, f format, topic string, u *upstream) *valueChecker {
	return &valueChecker{t: t, f: f, topic: topic, seqs: seqByCoord(u)}
}

// row checks one row: vals are the driver's values of f.cols in order.
func (c *valueChecker) row(part int32, off int64, vals []any) {
	c.rows++
	seq, ok := c.seqs[[2]int64{int64(part), off}]
	if !ok {
		c.problems = append(c.problems, fmt.Sprintf("p%d@%d: not a committed record", part, off))
		return
	}
	want := c.f.want(seq, fmt.Sprintf("%s-%d", c.topic, seq))
	for i, col := range c.f.cols {
		got, err := fval(col.kind, vals[i])
		if err != nil {
			c.problems = append(c.problems, fmt.Sprintf("p%d@%d seq %d column %s: %v", part, off, seq, col.name, err))
			continue
		}
		c.values++
		if w := want[col.name]; !reflect.DeepEqual(got, w) {
			c.problems = append(c.problems, fmt.Sprintf("p%d@%d seq %d column %s: got %#v, want %#v", part, off, seq, col.name, got, w))
		}
	}
}

func (c *valueChecker) done(what string) {
	c.t.Helper()
	if len(c.problems) > 0 {
		c.t.Fatalf("%s: %d value mismatches in %d rows, first: %s", what, len(c.problems), c.rows, strings.Join(c.problems[:min(8, len(c.problems))], "\n"))
	}
	c.t.Logf("%s: %d rows, %d typed values equal to what was produced", what, c.rows, c.values)
}

// pgCheckValues reads every row of table and compares each column with
// what was produced.
func pgCheckValues(t testing.TB, pool *pgxpool.Pool, f format, table, topic string, u *upstream) {
	t.Helper()
	var sel []string
	for _, c := range f.cols {
		id := pgx.Identifier{c.name}.Sanitize()
		switch {
		case c.kind == kJSON, strings.HasPrefix(c.pg, "e2e_"):
			id += "::text" // jsonb as its text, exact; enum labels
		}
		sel = append(sel, id)
	}
	rows, err := pool.Query(context.Background(), `SELECT __connect_partition, __connect_offset, `+strings.Join(sel, ", ")+` FROM `+pgx.Identifier{table}.Sanitize()+` ORDER BY rn`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	c := newValueChecker(t, f, topic, u)
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		c.row(vals[0].(int32), vals[1].(int64), vals[2:])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	c.done("PostgreSQL " + table)
}

// chCheckValues does the same for a ClickHouse table.
func chCheckValues(t testing.TB, conn driver.Conn, f format, table, topic string, u *upstream) {
	t.Helper()
	var sel []string
	for _, c := range f.cols {
		sel = append(sel, "`"+c.name+"`")
	}
	rows, err := conn.Query(context.Background(), "SELECT __connect_partition, __connect_offset, "+strings.Join(sel, ", ")+" FROM `"+table+"` WHERE __connect_topic = ? ORDER BY __connect_partition, __connect_offset", topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	c := newValueChecker(t, f, topic, u)
	for rows.Next() {
		vals := scanCHRow(t, rows, types)
		c.row(vals[0].(int32), vals[1].(int64), vals[2:])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	c.done("ClickHouse " + table)
}

// deref returns what a pointer points to, nil for a nil pointer.
func deref(v any) any {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return nil
	}
	return rv.Interface()
}

func pgNumeric(v any) (*big.Rat, bool) {
	n, ok := v.(pgtype.Numeric)
	if !ok || !n.Valid || n.NaN || n.InfinityModifier != pgtype.Finite {
		return nil, false
	}
	r := new(big.Rat).SetInt(n.Int)
	e := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(n.Exp))), nil))
	if n.Exp >= 0 {
		return r.Mul(r, e), true
	}
	return r.Quo(r, e), true
}

func abs(n int32) int32 {
	if n < 0 {
		return -n
	}
	return n
}

func pgMicros(v any) (int64, bool) {
	x, ok := v.(pgtype.Time)
	return x.Microseconds, ok && x.Valid
}

func pgInterval(v any) (time.Duration, bool) {
	x, ok := v.(pgtype.Interval)
	if !ok || !x.Valid || x.Months != 0 {
		return 0, false
	}
	return time.Duration(x.Microseconds)*time.Microsecond + time.Duration(x.Days)*24*time.Hour, true
}

// formatTopic creates a topic for f with a random suffix.
func formatTopic(t *testing.T, k *harness.KafkaService, prefix string, partitions int32) string {
	t.Helper()
	topic := prefix + "-" + randSuffix(t)
	k.CreateTopic(t, topic, partitions)
	return topic
}

// procAlive fails when p exited.
func procAlive(p *proc) func() error {
	return func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d:\n%s", code, tail(p.output(), 3000))
		}
		return nil
	}
}

// TestFormatsEndToEnd: an Avro, a Protobuf and a JSON Schema topic, each
// with 50,000 committed records (two schema versions of one subject
// interleaved; about 15 % of the transactions aborted), drained by a
// PostgreSQL and a ClickHouse connector each. Both tables hold every
// committed record once and no aborted one, and every column of every row
// equals, as a typed value, what the format's library encoded.
//
// ClickHouse is the server of TXSINK_TEST_CLICKHOUSE_LANE, so the test is
// in the Makefile's CH26_TESTS too. On lane 26 the PostgreSQL legs are
// skipped, as TestPySerdeFormats skips its own: they do not depend on the
// ClickHouse lane and already ran on the default lane.
func TestFormatsEndToEnd(t *testing.T) {
	k := harness.Kafka(t)
	reg := harness.SchemaRegistry(t)
	ch := harness.ClickHouse(t)
	var pg *harness.PostgresService
	if ch.Lane != harness.Lane26 {
		pg = harness.Postgres(t)
	}
	t.Logf("ClickHouse lane %s; PostgreSQL legs %v", ch.Lane, pg != nil)
	records := formatRecords(t)
	for i, f := range allFormats() {
		t.Run(f.name, func(t *testing.T) {
			topic := formatTopic(t, k, "fmt-"+f.name, 3)
			enc := f.register(t, reg, reg.Subject(topic+"-value"))
			var u upstream
			start := time.Now()
			produce(t, k.Bootstrap, topic, produceOpts{Records: records, Partitions: 3, AbortRatio: 0.15, MaxTxn: min(500, max(records/100, 5)), Seed: uint64(1400 + i), Value: enc}, &u)
			if u.abortedTx*10 < u.totalTx {
				t.Fatalf("workload aborted %d of %d transactions, want >= 10 %%", u.abortedTx, u.totalTx)
			}
			t.Logf("%s: produced %d committed records (%d/%d transactions aborted, %d records) in %v",
				f.name, u.total(), u.abortedTx, u.totalTx, u.abortedRc, time.Since(start).Round(time.Millisecond))

			var pool *pgxpool.Pool
			var pgProc *proc
			pgName, chName := topic+"-pg", topic+"-ch"
			chDB := ch.NewDatabase(t)
			chConn := ch.Conn(t, chDB)
			chFormatTable(t, ch, chConn, chDB, f, topic)
			start = time.Now()
			if pg != nil {
				pgDB := pg.NewDatabase(t)
				pool = connectPool(t, pgDB)
				pgFormatTable(t, pool, f, topic)
				pgProc = startTxsink(t, k.Bootstrap, writeConnector(t, converterSettings(baseConnector(pgName, topic, pgDB, "exactly_once"), f, reg)), "w-"+pgName)
			}
			chProc := startTxsink(t, k.Bootstrap, writeConnector(t, converterSettings(chConnector(chName, topic, ch, chDB, "exactly_once"), f, reg)), "w-"+chName)
			if pg != nil {
				waitDrained(t, pool, pgName, &u, 5*time.Minute, procAlive(pgProc))
				t.Logf("%s: drained by PostgreSQL in %v (ClickHouse drains concurrently)", f.name, time.Since(start).Round(time.Millisecond))
				stopTxsink(t, pgProc)
			}
			chWaitDrained(t, chConn, chName, &u, 5*time.Minute, procAlive(chProc))
			t.Logf("%s: drained by ClickHouse in %v", f.name, time.Since(start).Round(time.Millisecond))
			stopTxsink(t, chProc)

			if pg != nil {
				// The PostgreSQL sink writes a batch's rows in groups of the
				// same columns (one COPY per column set), so records of the
				// two schema versions interleave out of offset order:
				// exactness without the order check.
				if problems := exactness(&u, readRows(t, pool, topic), anyOrder); len(problems) > 0 {
					t.Fatalf("PostgreSQL: %d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
				}
				pgCheckValues(t, pool, f, topic, topic, &u)
			}
			chExact(t, chConn, &u, topic, topic)
			chCheckValues(t, chConn, f, topic, topic, &u)
		})
	}
}

// anyOrder makes exactness skip its offset-order check (and expect every
// record once).
var anyOrder = map[int32][2]int64{}

// scanCHRow scans the current row of a ClickHouse query into values of
// the Go types the driver gives its columns.
func scanCHRow(t testing.TB, rows driver.Rows, types []driver.ColumnType) []any {
	t.Helper()
	ptrs := make([]any, len(types))
	for i, ct := range types {
		ptrs[i] = reflect.New(ct.ScanType()).Interface()
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	vals := make([]any, len(ptrs))
	for i, p := range ptrs {
		vals[i] = reflect.ValueOf(p).Elem().Interface()
	}
	return vals
}
