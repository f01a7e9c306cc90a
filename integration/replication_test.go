package integration

// Replication end to end (issue 15's acceptance): a source PostgreSQL
// (wal_level=logical), Debezium's PostgreSQL source connector in a real
// Kafka Connect worker, the real broker, then txsink into a target
// PostgreSQL and a ClickHouse, with Connect's JSON converter and with Avro
// through the registry (Debezium's events re-encoded, reencode_test.go).
// A random mix of inserts, updates (some of them primary key changes) and
// deletes on three source tables, two ALTER TABLE … ADD COLUMN on the
// source in the middle of the stream, the txsink worker SIGKILLed several
// times; once drained, "txsink verify -source-url" must report every
// target equal to the source, row for row.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

// replicationChanges is the number of row changes the workload makes.
// The acceptance is 100,000 (TXSINK_TEST_REPL_CHANGES=100000); CI runs a
// smaller default, measured in docs/testing.md.
func replicationChanges(t *testing.T) int {
	return envCount(t, "TXSINK_TEST_REPL_CHANGES", 20_000, 100)
}

// replicationKills is how many times the txsink worker is SIGKILLed
// (TXSINK_TEST_REPL_KILLS, default 3).
func replicationKills(t *testing.T) int { return envCount(t, "TXSINK_TEST_REPL_KILLS", 3, 0) }

// replicationSinks are the kinds of sink the test replicates into
// (TXSINK_TEST_REPL_SINKS, a comma list of postgres and clickhouse; default
// both). The PostgreSQL 18 lane replicates into PostgreSQL only: what it
// adds is 18 as the logical-decoding source and as the target, and the
// ClickHouse legs run on the main lane (docs/testing.md).
func replicationSinks(t *testing.T) map[string]bool {
	t.Helper()
	s := os.Getenv("TXSINK_TEST_REPL_SINKS")
	if s == "" {
		return map[string]bool{"postgres": true, "clickhouse": true}
	}
	kinds := map[string]bool{}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k != "postgres" && k != "clickhouse" {
			t.Fatalf("TXSINK_TEST_REPL_SINKS=%q: %q is not postgres or clickhouse", s, k)
		}
		kinds[k] = true
	}
	return kinds
}

// envCount reads a test size from the environment variable name: def when
// unset, else an integer of at least least.
func envCount(t *testing.T, name string, def, least int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want an integer ≥ %d", name, s, least)
	}
	return n
}

// replTables are the source tables: a bigint key, an int key, and a
// composite key; between them the types Debezium maps to Connect's
// logical and Debezium's semantic types.
var replTables = []string{
	`CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, email varchar(80), score double precision,
		active boolean NOT NULL DEFAULT true, created_at timestamp(0) NOT NULL, balance numeric(12,2))`,
	`CREATE TABLE orders (id integer PRIMARY KEY, customer_id bigint NOT NULL, status text NOT NULL, total numeric(14,4),
		placed_at timestamptz NOT NULL, ship_day date, note text)`,
	// Some notes are large enough to be stored out of line (TOAST): an
	// update that leaves one unchanged carries it only with REPLICA
	// IDENTITY FULL (with DEFAULT, Debezium sends a placeholder instead;
	// docs/cdc.md).
	`ALTER TABLE orders REPLICA IDENTITY FULL`,
	`CREATE TABLE order_lines (order_id integer, line smallint, sku uuid NOT NULL, qty integer NOT NULL, price real,
		attrs jsonb, data bytea, tod time(3), PRIMARY KEY (order_id, line))`,
}

var replTableNames = []string{"customers", "orders", "order_lines"}

// The schema changes made on the source in the middle of the stream.
var replAlters = []string{
	`ALTER TABLE customers ADD COLUMN tier text`,
	`ALTER TABLE orders ADD COLUMN priority smallint`,
}

func execSQL(ctx context.Context, u, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func TestReplicationEndToEnd(t *testing.T) {
	changes, kills, sinks := replicationChanges(t), replicationKills(t), replicationSinks(t)
	k := harness.Kafka(t)
	source := harness.PostgresSource(t)
	target := harness.Postgres(t)
	var ch *harness.ClickHouseService
	if sinks["clickhouse"] {
		ch = harness.ClickHouse(t)
	}
	reg := harness.SchemaRegistry(t)
	ctx := context.Background()

	srcURL := source.NewDatabase(t)
	t.Logf("source PostgreSQL %s, target PostgreSQL %s", pgServerVersion(t, srcURL), pgServerVersion(t, target.URL))
	for _, s := range replTables {
		if err := execSQL(ctx, srcURL, s); err != nil {
			t.Fatal(err)
		}
	}
	prefix := "rp" + randSuffix(t)
	avroPrefix := prefix + "a"
	var jsonTopics, avroTopics []string
	for _, tb := range replTableNames {
		jsonTopics = append(jsonTopics, prefix+".public."+tb)
		avroTopics = append(avroTopics, avroPrefix+".public."+tb)
	}
	for _, tp := range append(append([]string{}, jsonTopics...), avroTopics...) {
		k.CreateTopic(t, tp, 3)
	}
	var include []string
	for _, tb := range replTableNames {
		include = append(include, "public."+tb)
	}
	dbz := startDebezium(t, k, debeziumOptions{SourceURL: srcURL, Prefix: prefix, Tables: include,
		Slot: "slot_" + prefix, Publication: "pub_" + prefix})
	re := startReencoder(t, k, reg, jsonTopics, func(s string) string { return avroPrefix + strings.TrimPrefix(s, prefix) })

	// Four connectors in one txsink worker: JSON and Avro, each into
	// PostgreSQL and ClickHouse, tables created and evolved from the
	// events and named by ${source.table}.
	pgJSON, pgAvro := target.NewDatabase(t), target.NewDatabase(t)
	avro := map[string]string{
		"key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": reg.URL,
		"value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": reg.URL,
	}
	type sinkCase struct {
		name, kind, db string
		cfg            map[string]string
	}
	cases := []sinkCase{
		// This one also keeps Debezium's position and operation per row
		// (cdc.columns), which verify reports as the target's position.
		{"repl-pg-json", "postgres", pgJSON, replPostgresConnector("repl-pg-json", pgJSON, prefix, map[string]string{"cdc.columns": "__op,__lsn,__source_ts_ms"})},
		{"repl-pg-avro", "postgres", pgAvro, replPostgresConnector("repl-pg-avro", pgAvro, avroPrefix, avro)},
	}
	var chJSON string
	if ch != nil {
		chAvro := ch.NewDatabase(t)
		chJSON = ch.NewDatabase(t)
		cases = append(cases,
			sinkCase{"repl-ch-json", "clickhouse", chJSON, replClickHouseConnector("repl-ch-json", ch, chJSON, prefix, nil)},
			sinkCase{"repl-ch-avro", "clickhouse", chAvro, replClickHouseConnector("repl-ch-avro", ch, chAvro, avroPrefix, avro)})
	}
	t.Logf("replicating into %d targets: %v (TXSINK_TEST_REPL_SINKS)", len(cases), slices.Sorted(maps.Keys(sinks)))
	var files []string
	for _, c := range cases {
		files = append(files, writeConnector(t, c.cfg))
	}
	w := startServeWorker(t, k.Bootstrap, "repl-w1", files)

	// The workload, with the kills spread over it.
	gen := newReplWorkload(srcURL)
	t.Logf("workload: %d changes on %v, %d SIGKILLs of the txsink worker, seed %d", changes, replTableNames, kills, gen.seed)
	start := time.Now()
	workErr := make(chan error, 1)
	go func() { workErr <- gen.run(ctx, changes, replAlters) }()
	lastStart := time.Now()
	for w.kills < kills {
		done := gen.done.Load()
		due := int64(changes) * int64(w.kills+1) / int64(kills+1)
		if done >= due && time.Since(lastStart) > 5*time.Second || done >= int64(changes) && time.Since(lastStart) > 8*time.Second {
			w.kill(t)
			t.Logf("SIGKILL %d of the txsink worker after %d changes (%.1fs)", w.kills, done, time.Since(start).Seconds())
			w.start(t)
			lastStart = time.Now()
		}
		if err := re.check(); err != nil {
			t.Fatal(err)
		}
		if err := dbz.alive(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	workDone := time.Since(start)
	st := gen.stats()
	toasted := pgTexts(t, srcURL, `SELECT count(*)::text FROM orders WHERE length(note) > 4000`)
	t.Logf("orders with a TOASTed note at the end: %s", *toasted[0][0])
	t.Logf("workload done in %.1fs: %d changes (%d inserts, %d updates, %d key changes, %d deletes) in %d transactions; %d rows left",
		workDone.Seconds(), st.changes, st.inserts, st.updates, st.keyChanges, st.deletes, st.txns, st.rows)

	// Debezium delivers every change event (a key change is a delete and a
	// create), the copier copies them; then every connector drains.
	wantEvents := st.inserts + st.updates + st.deletes + 2*st.keyChanges
	wantTombstones := st.deletes + st.keyChanges
	waitFor(t, 5*time.Minute, "Debezium's change events", func() (bool, string) {
		var events, tombs int64
		for _, tp := range jsonTopics {
			e, tb := re.counts(tp)
			events, tombs = events+e, tombs+tb
		}
		if err := re.check(); err != nil {
			t.Fatal(err)
		}
		if err := dbz.alive(); err != nil {
			t.Fatal(err)
		}
		return events >= wantEvents && tombs >= wantTombstones, fmt.Sprintf("%d of %d events, %d of %d tombstones", events, wantEvents, tombs, wantTombstones)
	})
	jsonEnds, avroEnds := topicEnds(t, k, jsonTopics), topicEnds(t, k, avroTopics)
	for i, tp := range jsonTopics {
		for p, e := range jsonEnds[tp] {
			if a := avroEnds[avroTopics[i]][p]; a != e {
				t.Fatalf("%s[%d] ends at %d, its Avro copy at %d", tp, p, e, a)
			}
		}
	}
	events := int64(0)
	for _, tp := range jsonTopics {
		e, _ := re.counts(tp)
		events += e
	}
	if events != wantEvents {
		t.Errorf("Debezium wrote %d change events, the workload made %d (duplicates?)", events, wantEvents)
	}
	for _, c := range cases {
		want := jsonEnds
		if strings.Contains(c.name, "avro") {
			want = avroEnds
		}
		var o offsetRows
		if c.kind == "postgres" {
			o = pgOffsets{connectPool(t, c.db), c.name}
		} else {
			o = chOffsetRows{ch.Conn(t, c.db), c.name}
		}
		waitEnds(t, o, want, 10*time.Minute, w.p)
	}
	drain := time.Since(start) - workDone
	t.Logf("drained %.1fs after the workload ended (%.1fs in all); %d change events, %d tombstones per format", drain.Seconds(), time.Since(start).Seconds(), wantEvents, wantTombstones)

	// Every target equals the source, row for row, by txsink verify.
	for _, c := range cases {
		sinkURL := c.db
		if c.kind == "clickhouse" {
			sinkURL = fmt.Sprintf("clickhouse://%s:%s@%s/%s", ch.User, ch.Password, ch.Addr, c.db)
		}
		args := []string{"verify", "-source-url", srcURL, "-sink-url", sinkURL, "-connector", c.name, "-bootstrap", k.Bootstrap}
		out, code := runVerifyCLI(t, append(args, "-output", "json")...)
		var r verify.ReplicaReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: verify output: %v\n%s", c.name, err, out)
		}
		text, _ := runVerifyCLI(t, args...)
		t.Logf("%s:\n%s", c.name, text)
		if code != 0 || !r.OK() {
			t.Errorf("%s: verify exited %d: missing %d, extra %d, different %d", c.name, code, r.Missing, r.Extra, r.Different)
		}
		if r.SourceRows != st.rows || r.TargetRows != st.rows || len(r.Tables) != 3 || r.Lag.KafkaRecords != 0 {
			t.Errorf("%s: %d source rows, %d target rows over %d tables, Kafka lag %d; the workload left %d rows",
				c.name, r.SourceRows, r.TargetRows, len(r.Tables), r.Lag.KafkaRecords, st.rows)
		}
		// The columns added at the source during the stream are compared
		// (the targets have them: auto.evolve).
		added := map[string]string{"public.customers": "tier", "public.orders": "priority"}
		for _, tr := range r.Tables {
			if len(tr.TargetLacks) > 0 || !tr.TargetExists {
				t.Errorf("%s: %s lacks %v", c.name, tr.Target, tr.TargetLacks)
			}
			if col, ok := added[tr.Source]; ok && !slices.Contains(tr.Columns, col) {
				t.Errorf("%s: %s: column %s added at the source is not compared (columns %v)", c.name, tr.Source, col, tr.Columns)
			}
		}
	}
	if w.kills < kills {
		t.Fatalf("%d kills, want %d", w.kills, kills)
	}

	// The check is not blind: one row deleted and one changed in the
	// PostgreSQL copy, one row deleted in the ClickHouse copy (a newer
	// deletion row) are reported as such.
	if err := execSQL(ctx, pgJSON, `DELETE FROM customers WHERE id = (SELECT min(id) FROM customers)`); err != nil {
		t.Fatal(err)
	}
	if err := execSQL(ctx, pgJSON, `UPDATE orders SET status = 'tampered' WHERE id = (SELECT min(id) FROM orders)`); err != nil {
		t.Fatal(err)
	}
	if ch != nil {
		chExec(t, ch.Conn(t, chJSON), "INSERT INTO order_lines (order_id, line, sku, qty, _version, is_deleted) "+
			"SELECT order_id, line, sku, qty, _version + 1, 1 FROM order_lines FINAL WHERE is_deleted = 0 ORDER BY order_id, line LIMIT 1")
	}
	for _, c := range cases {
		if c.name != "repl-pg-json" && c.name != "repl-ch-json" {
			continue
		}
		sinkURL := c.db
		if c.kind == "clickhouse" {
			sinkURL = fmt.Sprintf("clickhouse://%s:%s@%s/%s", ch.User, ch.Password, ch.Addr, c.db)
		}
		out, code := runVerifyCLI(t, "verify", "-source-url", srcURL, "-sink-url", sinkURL, "-output", "json")
		var r verify.ReplicaReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: verify output: %v\n%s", c.name, err, out)
		}
		want := [3]int64{1, 0, 1} // missing, extra, different
		if c.kind == "clickhouse" {
			want = [3]int64{1, 0, 0}
		}
		if got := [3]int64{r.Missing, r.Extra, r.Different}; code != 1 || got != want {
			t.Errorf("%s after tampering: exit %d, missing/extra/different %v, want exit 1 and %v", c.name, code, got, want)
		}
		text, _ := runVerifyCLI(t, "verify", "-source-url", srcURL, "-sink-url", sinkURL)
		t.Logf("%s after tampering:\n%s", c.name, text)
	}
}

// replPostgresConnector is a postgres connector applying the Debezium
// topics of prefix.
func replPostgresConnector(name, dbURL, prefix string, extra map[string]string) map[string]string {
	cfg := map[string]string{
		"name": name, "connector.class": "postgres", "connection.url": dbURL,
		"topics.regex": strings.ReplaceAll(prefix, ".", `\.`) + `\.public\..*`,
		"cdc.format":   "debezium", "table.name.format": "${source.table}", "auto.create": "true", "auto.evolve": "true",
		"batch.max.records": "5000", "batch.linger.ms": "50", "session.timeout.ms": "6000", "transaction.timeout.ms": "10000",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// replClickHouseConnector is a clickhouse connector applying the Debezium
// topics of prefix into ReplacingMergeTree tables versioned by the source
// LSN.
func replClickHouseConnector(name string, ch *harness.ClickHouseService, db, prefix string, extra map[string]string) map[string]string {
	cfg := chConnector(name, "", ch, db, "exactly_once")
	delete(cfg, "topics")
	delete(cfg, "pk.mode")
	for k, v := range map[string]string{
		"topics.regex": strings.ReplaceAll(prefix, ".", `\.`) + `\.public\..*`,
		"cdc.format":   "debezium", "table.name.format": "${source.table}", "auto.create": "true", "auto.evolve": "true",
		"version.column": "_version", "batch.max.records": "5000",
	} {
		cfg[k] = v
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// serveWorker is a "txsink serve" worker with a fixed data directory and
// address, killed and restarted by the test.
type serveWorker struct {
	bootstrap, id, dir string
	port               int
	files              []string
	p                  *proc
	kills              int
}

func startServeWorker(t *testing.T, bootstrap, id string, connectorFiles []string) *serveWorker {
	t.Helper()
	w := &serveWorker{bootstrap: bootstrap, id: id, dir: filepath.Join(t.TempDir(), "data"), port: cliFreePort(t), files: connectorFiles}
	w.start(t)
	return w
}

// start runs the worker and waits until /health answers 200.
func (w *serveWorker) start(t *testing.T) {
	t.Helper()
	args := []string{"serve", "-listen", fmt.Sprintf("127.0.0.1:%d", w.port), "-bootstrap", w.bootstrap,
		"-worker-id", w.id, "-data-dir", w.dir}
	for _, f := range w.files {
		args = append(args, "-connector", f)
	}
	w.p = runTxsink(t, args, w.id, nil)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", w.port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if ok, code := w.p.exited(); ok {
			t.Fatalf("txsink serve exited with %d before it was healthy:\n%s", code, tail(w.p.output(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("txsink serve not healthy after 60s (last error %v):\n%s", err, tail(w.p.output(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the worker and waits for it to end.
func (w *serveWorker) kill(t *testing.T) {
	t.Helper()
	if ok, code := w.p.exited(); ok {
		t.Fatalf("txsink serve had exited with %d before the kill:\n%s", code, tail(w.p.output(), 4000))
	}
	w.p.signal(syscall.SIGKILL)
	if !w.p.wait(30 * time.Second) {
		t.Fatal("txsink serve still running 30s after SIGKILL")
	}
	w.kills++
}

// topicEnds lists the end offsets of topics' partitions.
func topicEnds(t *testing.T, k *harness.KafkaService, topics []string) ends {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := kadm.NewClient(k.Client(t)).ListEndOffsets(ctx, topics...)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	e := ends{}
	l.Each(func(o kadm.ListedOffset) {
		if e[o.Topic] == nil {
			e[o.Topic] = map[int32]int64{}
		}
		e[o.Topic][o.Partition] = o.Offset
	})
	return e
}

// waitFor polls cond until it holds, failing after d with its last
// description.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not there after %v: %s", what, d, desc)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runVerifyCLI runs the txsink binary with args and returns its standard
// output and exit code.
func runVerifyCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(txsinkBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		if ee.ExitCode() > 1 {
			t.Fatalf("txsink %s: exit %d\n%s%s", strings.Join(args[:1], " "), ee.ExitCode(), out.String(), errb.String())
		}
		return out.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", -1
}

// pgServerVersion is the server_version of the server at url.
func pgServerVersion(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
