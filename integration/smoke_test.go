package integration

// Smoke tests of the real services the harness provides: each checks the
// behaviour txsink relies on, so a broken stand-in image fails here first.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
)

func randSuffix(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestSmokeKafkaTransactions: committed transactions are visible to a
// read_committed consumer and aborted ones are not; a read_uncommitted
// consumer sees both; all of it survives a broker kill and restart.
func TestSmokeKafkaTransactions(t *testing.T) {
	// A broker of its own: the test kills and restarts it.
	k := harness.KafkaOwn(t)
	// A bound, not a wait: on a loaded machine (CI: 2 cores, load 20+) a
	// broker restart alone can take a minute or two.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	topic := "smoke-txn-" + randSuffix(t)
	k.CreateTopic(t, topic, 2)
	t.Logf("created topic %s on %s", topic, k.Bootstrap)

	producer := k.Client(t,
		kgo.TransactionalID("smoke-"+randSuffix(t)),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	committed := map[string]bool{}
	all := map[string]bool{}
	const txns = 10
	for i := range txns + 1 {
		if err := producer.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction %d: %v", i, err)
		}
		// Transaction txns is the committed end marker on both partitions.
		commit := i == txns || i%3 != 0
		for p := range int32(2) {
			v := fmt.Sprintf("txn%d-p%d", i, p)
			if i == txns {
				v = fmt.Sprintf("end-p%d", p)
			}
			if err := producer.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			all[v] = true
			if commit {
				committed[v] = true
			}
		}
		if err := producer.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction %d (commit=%v): %v", i, commit, err)
		}
	}
	if len(committed) != 2*6+2 || len(all) != 2*(txns+1) {
		t.Fatalf("test bug: %d committed, %d produced", len(committed), len(all))
	}

	check := func(name string, level kgo.IsolationLevel, want map[string]bool) {
		t.Helper()
		got := consumeUntilEnd(ctx, t, k, topic, level)
		if !maps.Equal(got, want) {
			t.Fatalf("%s consumer saw %v, want %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	t.Logf("produced %d transactions", txns+1)
	check("read_committed", kgo.ReadCommitted(), committed)
	check("read_uncommitted", kgo.ReadUncommitted(), all)
	t.Log("consumed committed and uncommitted records")

	if k.External() {
		return
	}
	if err := k.Stop(ctx); err != nil {
		t.Fatalf("stop broker: %v", err)
	}
	// The restart recovers the killed broker's logs first: it gets the
	// bound a first start has, not what is left of the test's.
	startCtx, cancelStart := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancelStart()
	if err := k.Start(startCtx); err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Log("broker killed and restarted")
	check("read_committed after broker restart", kgo.ReadCommitted(), committed)
}

// consumeUntilEnd reads topic from the start at the given isolation level
// until it has seen both partitions' end markers, and returns the values seen.
func consumeUntilEnd(ctx context.Context, t *testing.T, k *harness.KafkaService, topic string, level kgo.IsolationLevel) map[string]bool {
	t.Helper()
	cl := k.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level),
	)
	seen := map[string]bool{}
	for !seen["end-p0"] || !seen["end-p1"] {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consuming %s: %v; saw %v", topic, err, slices.Sorted(maps.Keys(seen)))
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if seen[v] {
				t.Errorf("record %s seen twice", v)
			}
			seen[v] = true
		})
	}
	return seen
}

// TestSmokePostgresTwoPhaseCommit: a prepared transaction is invisible to
// other sessions until COMMIT PREPARED, and survives a crash restart.
func TestSmokePostgresTwoPhaseCommit(t *testing.T) {
	pg := harness.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := pg.NewDatabase(t)

	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	mustExec := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(c *pgx.Conn, id int) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM smoke WHERE id = $1", id).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}

	a, b := connect(), connect()
	var fsync, maxPrepared string
	if err := a.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('max_prepared_transactions')").Scan(&fsync, &maxPrepared); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || maxPrepared == "0" {
		t.Fatalf("fsync=%s max_prepared_transactions=%s, want on and > 0", fsync, maxPrepared)
	}
	mustExec(a, "CREATE TABLE smoke (id int PRIMARY KEY, v text NOT NULL)")

	mustExec(a, "BEGIN")
	mustExec(a, "INSERT INTO smoke VALUES (1, 'one')")
	mustExec(a, "PREPARE TRANSACTION 'smoke-1'")
	if n := count(b, 1); n != 0 {
		t.Fatalf("row of a prepared, uncommitted transaction visible: count %d", n)
	}
	mustExec(b, "COMMIT PREPARED 'smoke-1'")
	if n := count(b, 1); n != 1 {
		t.Fatalf("after COMMIT PREPARED: count %d, want 1", n)
	}

	gid := "smoke-2-" + randSuffix(t)
	mustExec(a, "BEGIN")
	mustExec(a, "INSERT INTO smoke VALUES (2, 'two')")
	mustExec(a, "PREPARE TRANSACTION '"+gid+"'")

	if pg.External() {
		mustExec(b, "ROLLBACK PREPARED '"+gid+"'")
		return
	}
	if err := pg.Restart(ctx, true); err != nil {
		t.Fatalf("crash restart: %v", err)
	}
	if _, err := a.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection from before the crash restart still works")
	}
	c := connect()
	var database string
	err := c.QueryRow(ctx, "SELECT database FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&database)
	if errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("prepared transaction %s lost in the crash restart", gid)
	} else if err != nil {
		t.Fatal(err)
	}
	var current string
	if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
		t.Fatal(err)
	}
	if database != current {
		t.Fatalf("prepared transaction in database %q, want %q", database, current)
	}
	if n := count(c, 2); n != 0 {
		t.Fatalf("row of the prepared transaction visible after restart: count %d", n)
	}
	mustExec(c, "COMMIT PREPARED '"+gid+"'")
	if n := count(c, 2); n != 1 {
		t.Fatalf("after COMMIT PREPARED following restart: count %d, want 1", n)
	}
}

// TestSmokeClickHouse: a batch insert reads back exactly; with ZooKeeper, a
// ReplicatedMergeTree table de-duplicates an identical re-inserted block but
// not a different one; on a server with tokens, a MergeTree table with a
// non-replicated window drops an insert whose token it has seen, also after
// a restart (its de-duplication log is durable); data survives a restart.
func TestSmokeClickHouse(t *testing.T) {
	ch := harness.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := ch.NewDatabase(t)
	conn := ch.Conn(t, db)

	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("ClickHouse %s at %s, ZooKeeper: %v", version, ch.Addr, ch.HasZooKeeper)

	const rows = 1000
	insert := func(table string, from uint32, settings ...clickhouse.Settings) {
		t.Helper()
		ictx := ctx
		if len(settings) > 0 {
			ictx = clickhouse.Context(ctx, clickhouse.WithSettings(settings[0]))
		}
		// Old servers (18.16) need the column list in the INSERT.
		batch, err := conn.PrepareBatch(ictx, "INSERT INTO "+db+"."+table+" (a, s)")
		if err != nil {
			t.Fatalf("prepare batch: %v", err)
		}
		for a := from; a < from+rows; a++ {
			if err := batch.Append(a, fmt.Sprintf("row-%d", a)); err != nil {
				t.Fatalf("append: %v", err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatalf("send batch: %v", err)
		}
	}
	countRows := func(table string) uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+"."+table).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}

	if err := conn.Exec(ctx, "CREATE TABLE "+db+".t (a UInt32, s String) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	insert("t", 0)
	readBack := func() {
		t.Helper()
		r, err := conn.Query(ctx, "SELECT a, s FROM "+db+".t ORDER BY a")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var want uint32
		for r.Next() {
			var a uint32
			var s string
			if err := r.Scan(&a, &s); err != nil {
				t.Fatal(err)
			}
			if a != want || s != fmt.Sprintf("row-%d", want) {
				t.Fatalf("row %d: got (%d, %q)", want, a, s)
			}
			want++
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		if want != rows {
			t.Fatalf("read %d rows, want %d", want, rows)
		}
	}
	readBack()

	if ch.HasZooKeeper {
		// The ZooKeeper path holds the database name: it must be unique per table.
		engine := fmt.Sprintf("ReplicatedMergeTree('/clickhouse/tables/{shard}/%s/r', '{replica}')", db)
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".r (a UInt32, s String) ENGINE = "+engine+" ORDER BY a"); err != nil {
			t.Fatal(err)
		}
		insert("r", 0)
		insert("r", 0) // identical block: de-duplicated
		if n := countRows("r"); n != rows {
			t.Fatalf("after inserting the same block twice: %d rows, want %d", n, rows)
		}
		insert("r", rows) // a different block is not
		if n := countRows("r"); n != 2*rows {
			t.Fatalf("after inserting a different block: %d rows, want %d", n, 2*rows)
		}
	} else {
		t.Log("no ZooKeeper: ReplicatedMergeTree de-duplication not checked")
	}
	var tokens uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.settings WHERE name = 'insert_deduplication_token'").Scan(&tokens); err != nil {
		t.Fatal(err)
	}
	token := func(s string) clickhouse.Settings { return clickhouse.Settings{"insert_deduplication_token": s} }
	if tokens > 0 {
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".k (a UInt32, s String) ENGINE = MergeTree ORDER BY a SETTINGS non_replicated_deduplication_window = 100"); err != nil {
			t.Fatal(err)
		}
		insert("k", 0, token("t1"))
		insert("k", rows, token("t1")) // other rows, a token already seen: dropped
		if n := countRows("k"); n != rows {
			t.Fatalf("after a second insert with the same token: %d rows, want %d", n, rows)
		}
		insert("k", rows, token("t2"))
		if n := countRows("k"); n != 2*rows {
			t.Fatalf("after an insert with a new token: %d rows, want %d", n, 2*rows)
		}
	} else {
		t.Logf("ClickHouse %s has no insert_deduplication_token: token de-duplication not checked", version)
	}

	if ch.External() {
		return
	}
	if err := ch.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	conn = ch.Conn(t, db)
	readBack()
	if tokens > 0 {
		insert("k", 2*rows, token("t2")) // the de-duplication log survived the restart
		if n := countRows("k"); n != 2*rows {
			t.Fatalf("after the restart, an insert with a token seen before it: %d rows, want %d", n, 2*rows)
		}
	}
}
