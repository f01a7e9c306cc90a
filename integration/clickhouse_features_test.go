package integration

// End-to-end tests of what a current ClickHouse server offers the sink
// (CI: lane 26, ClickHouse 26.9): deletion rows of a
// ReplacingMergeTree(version, is_deleted) table, upserts read back with
// FINAL, the JSON column type, and auto.create's de-duplicating MergeTree.
// Each test checks that the final table is exactly what the committed
// records imply, and skips, saying why, on a server that lacks the feature
// (CI's default lane, 18.16). They run in parallel with each other (own
// topics and databases; after the package's sequential tests, which
// restart services).

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/failpoint"
)

// chFeatureEnv is chEnv for the tests of this file, which run in parallel
// with each other: it marks t parallel and creates topic (2 partitions).
func chFeatureEnv(t *testing.T, topic string) (*harness.KafkaService, *harness.ClickHouseService, string, driver.Conn) {
	t.Helper()
	t.Parallel()
	k, ch, db, conn := chEnv(t)
	k.CreateTopic(t, topic, 2)
	return k, ch, db, conn
}

// requireCH skips t, saying why, unless the server is major.minor or
// later; what names the feature older servers lack.
func requireCH(t *testing.T, conn driver.Conn, major, minor int, what string) {
	t.Helper()
	if s := chServerOf(t, conn); !s.atLeast(major, minor) {
		t.Skipf("ClickHouse %s has no %s (%d.%d+): run lane 26 (%s=26) for this test", s.version, what, major, minor, harness.EnvClickHouseLane)
	}
}

// chDedupEngine returns a de-duplicating engine: Replicated<base> with a
// ZooKeeper path unique to db.table when the server has ZooKeeper, else
// <base> with a non-replicated window. args are the base engine's own
// arguments (a ReplacingMergeTree's version and is_deleted columns).
func chDedupEngine(ch *harness.ClickHouseService, db, table, base, args, orderBy string) string {
	if ch.HasZooKeeper {
		path := fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s', '{replica}'", db, table)
		if args != "" {
			path += ", " + args
		}
		return fmt.Sprintf("Replicated%s(%s) ORDER BY %s", base, path, orderBy)
	}
	return fmt.Sprintf("%s(%s) ORDER BY %s SETTINGS non_replicated_deduplication_window = 1000", base, args, orderBy)
}

// keyedOpts is a workload over nKeys keys: each key always goes to the
// same partition (the version column is the offset, comparable only
// within a partition); every tombEvery-th record is a tombstone (0: none).
func keyedOpts(records, nKeys int, partitions int32, tombEvery int, seed uint64) produceOpts {
	keyOf := func(seq int) int { return (seq * 7919) % nKeys }
	return produceOpts{
		Records: records, Partitions: partitions, AbortRatio: 0.15, MaxTxn: 20, Seed: seed,
		Key:       func(seq int) []byte { return []byte(fmt.Sprintf(`{"id":"k%d"}`, keyOf(seq))) },
		Partition: func(seq int) int32 { return int32(keyOf(seq)) % partitions },
		Value: func(seq int, _ string) []byte {
			if tombEvery > 0 && seq%tombEvery == 0 {
				return nil
			}
			return []byte(fmt.Sprintf(`{"id":"k%d","name":"n-%d"}`, keyOf(seq), seq))
		},
	}
}

// latestByKey replays the committed records in offset order (each key
// lives in one partition) and returns each live key's last value; a key
// whose last record is a tombstone is absent.
func latestByKey(t testing.TB, u *upstream) map[string]string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]string{}
	for _, rs := range u.committed {
		for _, r := range rs {
			var k struct{ ID string }
			if err := json.Unmarshal(r.Key, &k); err != nil {
				t.Fatal(err)
			}
			if r.Value == nil {
				delete(out, k.ID)
				continue
			}
			var v struct{ Name string }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatal(err)
			}
			out[k.ID] = v.Name
		}
	}
	return out
}

// chKeyValues reads id → name from query.
func chKeyValues(t testing.TB, conn driver.Conn, query string) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[id]; dup {
			t.Fatalf("%s: key %s twice", query, id)
		}
		out[id] = name
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameKeyValues fails t unless got equals want, naming the differences.
func sameKeyValues(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %s, want %s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %s should not be there", k, g))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: %d differences, first: %s", what, len(diffs), strings.Join(diffs[:min(10, len(diffs))], "; "))
	}
}

// runDrained runs "txsink run" with cfg until its stored offsets reach
// the upstream's end, then stops it.
func runDrained(t *testing.T, k *harness.KafkaService, conn driver.Conn, cfg map[string]string, u *upstream, env ...string) *proc {
	t.Helper()
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w1", env...)
	chWaitDrained(t, conn, cfg["name"], u, 3*time.Minute, func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d:\n%s", code, tail(p.output(), 3000))
		}
		return nil
	})
	stopTxsink(t, p)
	return p
}

// keyedCase is a run of the keyed workload into a ReplacingMergeTree
// table read back with FINAL.
type keyedCase struct {
	topic      string
	deletes    bool   // delete.enabled, an is_deleted column and tombstones
	point      string // where the one crash on the way happens
	blockRows  string
	seed       uint64
	minVersion [2]int // the server version the case needs
	needs      string // what older servers lack
}

// runKeyed creates c.topic's ReplacingMergeTree(v[, is_deleted]) table,
// produces upserts (and, with deletes, a tombstone every fifth record) of
// 40 keys, runs the connector (version.column v, the key's id) through one
// crash at c.point and a drain, and checks that FINAL reads exactly the
// keys whose last committed record is not a tombstone, with its value. It
// returns the connection and the expected live keys.
func runKeyed(t *testing.T, c keyedCase) (driver.Conn, map[string]string) {
	t.Helper()
	k, ch, db, conn := chFeatureEnv(t, c.topic)
	if c.needs != "" {
		requireCH(t, conn, c.minVersion[0], c.minVersion[1], c.needs)
	}
	cols, args, tombEvery := "id String, name String, v UInt64", "v", 0
	cfg := chConnector(c.topic, c.topic, ch, db, "exactly_once")
	cfg["pk.mode"], cfg["pk.fields"], cfg["version.column"] = "record_key", "id", "v"
	cfg["batch.max.records"], cfg["insert.block.rows"] = "200", c.blockRows
	if c.deletes {
		cols, args, tombEvery = cols+", is_deleted UInt8", "v, is_deleted", 5
		cfg["delete.enabled"] = "true"
	}
	chExec(t, conn, "CREATE TABLE "+c.topic+" ("+cols+") ENGINE = "+chDedupEngine(ch, db, c.topic, "ReplacingMergeTree", args, "id"))
	var u upstream
	produce(t, k.Bootstrap, c.topic, keyedOpts(1200, 40, 2, tombEvery, c.seed), &u)
	killAt(t, k.Bootstrap, writeConnector(t, cfg), c.point, 1)
	runDrained(t, k, conn, cfg, &u)
	want := latestByKey(t, &u)
	sameKeyValues(t, "FINAL", chKeyValues(t, conn, "SELECT id, name FROM "+c.topic+" FINAL"), want)
	return conn, want
}

// chCount runs a count() query.
func chCount(t testing.TB, conn driver.Conn, query string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestClickHouseDeletes: delete.enabled into ReplacingMergeTree(v,
// is_deleted). Upserts and tombstones of 40 keys, 15 % of the upstream
// transactions aborted, one crash between two blocks (W2) on the way;
// read with FINAL, the table holds exactly the keys whose last committed
// record is not a tombstone, with that record's value.
func TestClickHouseDeletes(t *testing.T) {
	conn, want := runKeyed(t, keyedCase{topic: "chdeletes", deletes: true, point: chMidInsert, blockRows: "30", seed: 301,
		minVersion: [2]int{23, 2}, needs: "is_deleted column for ReplacingMergeTree"})
	if len(want) == 0 || len(want) == 40 {
		t.Fatalf("workload: %d of 40 keys live, want some deleted and some live", len(want))
	}
	deleted := chCount(t, conn, "SELECT count() FROM chdeletes WHERE is_deleted = 1")
	if deleted == 0 {
		t.Fatal("no deletion rows were written")
	}
	t.Logf("%d live keys of 40 exact after FINAL; %d deletion rows written", len(want), deleted)
}

// TestClickHouseUpsert: version.column into ReplacingMergeTree(v); 40 keys
// updated ~30 times each, a crash after the decision (W1) on the way; read
// back with FINAL, each key holds its last committed value. Runs on both
// lanes (18.16 has ReplacingMergeTree and FINAL).
func TestClickHouseUpsert(t *testing.T) {
	conn, want := runKeyed(t, keyedCase{topic: "chupsert", point: failpoint.AfterDecide, blockRows: "100000", seed: 302})
	t.Logf("%d keys exact after FINAL (%d versions stored before merges)", len(want), chCount(t, conn, "SELECT count() FROM chupsert"))
}

// TestClickHouseJSONColumn: an object field of the record goes into a
// column of the JSON type. Nested objects and arrays, 15 % aborted
// upstream transactions, a crash after all blocks went in (W3); every id's
// column equals its record's object, and a typed path sums as produced.
func TestClickHouseJSONColumn(t *testing.T) {
	const topic = "chjson"
	k, ch, db, conn := chFeatureEnv(t, topic)
	requireCH(t, conn, 25, 3, "production JSON column type")
	createCols := "id String, seq Int64, doc JSON, __connect_topic String, __connect_partition Int32, __connect_offset Int64"
	chExec(t, conn, "CREATE TABLE "+topic+" ("+createCols+") ENGINE = "+chEngine(ch, db, topic, 1000))
	var u upstream
	opts := produceOpts{Records: 1000, Partitions: 2, AbortRatio: 0.15, MaxTxn: 30, Seed: 303,
		Value: func(seq int, id string) []byte {
			doc := map[string]any{"user": map[string]any{"n": seq, "name": fmt.Sprintf("u%d", seq%13)}, "tags": []string{"a", fmt.Sprint(seq % 3)}}
			if seq%4 == 0 {
				doc["extra"] = map[string]any{"deep": map[string]any{"flag": true}}
			}
			b, _ := json.Marshal(map[string]any{"id": id, "seq": seq, "doc": doc})
			return b
		}}
	produce(t, k.Bootstrap, topic, opts, &u)
	cfg := chConnector(topic, topic, ch, db, "exactly_once")
	cfg["batch.max.records"], cfg["insert.block.rows"] = "200", "50"
	killAt(t, k.Bootstrap, writeConnector(t, cfg), chAfterInsert, 1)
	runDrained(t, k, conn, cfg, &u)
	chExact(t, conn, &u, topic, topic)

	want := map[string]any{}
	var sum int64
	u.mu.Lock()
	for _, rs := range u.committed {
		for _, r := range rs {
			var v struct {
				ID  string
				Seq int64
				Doc json.RawMessage
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatal(err)
			}
			var doc any
			_ = json.Unmarshal(v.Doc, &doc)
			want[v.ID] = doc
			sum += v.Seq
		}
	}
	u.mu.Unlock()
	rows, err := conn.Query(context.Background(), "SELECT id, toString(doc), toTypeName(doc) FROM "+topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id, text, typ string
		if err := rows.Scan(&id, &text, &typ); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal([]byte(text), &got); err != nil {
			t.Fatalf("%s: column text %q: %v", id, text, err)
		}
		if typ != "JSON" || !reflect.DeepEqual(got, want[id]) {
			t.Fatalf("%s: column %s %s, want the record's object %v", id, typ, text, want[id])
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var pathSum int64
	if err := conn.QueryRow(context.Background(), "SELECT toInt64(sum(doc.user.n::Int64)) FROM "+topic).Scan(&pathSum); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) || pathSum != sum {
		t.Fatalf("%d rows for %d records; sum(doc.user.n) = %d, want %d", seen, len(want), pathSum, sum)
	}
	t.Logf("%d JSON documents exact; sum(doc.user.n) = %d", seen, pathSum)
}

// TestClickHouseAutoCreate: auto.create makes the missing table with an
// engine that de-duplicates a redo, chosen from the server's features:
// MergeTree with non_replicated_deduplication_window where tokens exist
// (lane 26), ReplicatedMergeTree where only ZooKeeper does (18.16). A
// crash between two blocks (W2) and its redo then leave the table exact.
func TestClickHouseAutoCreate(t *testing.T) {
	const topic = "chauto"
	k, ch, db, conn := chFeatureEnv(t, topic)
	s := chServerOf(t, conn)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 1500, Partitions: 2, AbortRatio: 0.15, MaxTxn: 40, Seed: 304}, &u)
	cfg := chConnector(topic, topic, ch, db, "exactly_once")
	cfg["auto.create"] = "true"
	cfg["batch.max.records"], cfg["insert.block.rows"] = "300", "40"
	cfg["redo.skip.present"] = "false" // the engine's de-duplication alone
	killAt(t, k.Bootstrap, writeConnector(t, cfg), chMidInsert, 1)

	var engine, full string
	if err := conn.QueryRow(context.Background(), "SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", db, topic).Scan(&engine, &full); err != nil {
		t.Fatalf("the auto-created table: %v", err)
	}
	t.Logf("ClickHouse %s: auto.create made %s", s.version, full)
	switch {
	case s.tokens:
		if engine != "MergeTree" || !strings.Contains(full, "non_replicated_deduplication_window = 1000") {
			t.Fatalf("on a server with tokens auto.create made %s, want MergeTree with non_replicated_deduplication_window = 1000", full)
		}
	case ch.HasZooKeeper:
		if engine != "ReplicatedMergeTree" {
			t.Fatalf("on a server without tokens auto.create made %s, want ReplicatedMergeTree", full)
		}
	}
	runDrained(t, k, conn, cfg, &u)
	chExact(t, conn, &u, topic, topic)
}
