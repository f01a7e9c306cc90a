package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/offsets"
)

// TestPostgresUpsertDelete: keyed records with updates and tombstones, some
// in aborted transactions, end in exactly the table the final committed
// state implies.
func TestPostgresUpsertDelete(t *testing.T) {
	k, db := sinkEnv(t)
	const topic, conn = "kv", "kv-upsert"
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE kv (k text PRIMARY KEY, v bigint NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	key := func(seq int) string { return fmt.Sprintf("k%d", (seq*7919)%250) }
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{
		Records: 6000, Partitions: 3, AbortRatio: 0.15, MaxTxn: 40, Seed: 300,
		Key: func(seq int) []byte { return []byte(`{"k":"` + key(seq) + `"}`) },
		Partition: func(seq int) int32 {
			h := fnv.New32a()
			h.Write([]byte(key(seq)))
			return int32(h.Sum32() % 3)
		},
		Value: func(seq int, id string) []byte {
			if seq%9 == 0 {
				return nil // tombstone
			}
			return []byte(fmt.Sprintf(`{"k":"%s","v":%d,"note":"%s"}`, key(seq), seq, id))
		},
	}, &u)
	// The final state: per key, its last committed record (one partition
	// per key, so offset order is the key's order).
	want := map[string]int64{}
	u.mu.Lock()
	for _, rs := range u.committed {
		for _, r := range rs {
			var kk struct{ K string }
			_ = json.Unmarshal(r.Key, &kk)
			if r.Value == nil {
				delete(want, kk.K)
				continue
			}
			want[kk.K] = int64(r.Seq)
		}
	}
	u.mu.Unlock()

	cfg := baseConnector(conn, topic, db, "exactly_once")
	cfg["insert.mode"] = "upsert"
	cfg["pk.mode"] = "record_key"
	cfg["pk.fields"] = "k"
	cfg["delete.enabled"] = "true"
	cfg["batch.max.records"] = "700"
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w1")
	waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)

	rows, err := pool.Query(context.Background(), `SELECT k, v FROM kv`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var kk string
		var v int64
		if err := rows.Scan(&kk, &v); err != nil {
			t.Fatal(err)
		}
		got[kk] = v
	}
	if len(got) != len(want) {
		t.Errorf("table has %d keys, the final state has %d", len(got), len(want))
	}
	for kk, v := range want {
		if got[kk] != v {
			t.Errorf("key %s: table v=%d, want %d", kk, got[kk], v)
		}
	}
	for kk := range got {
		if _, ok := want[kk]; !ok {
			t.Errorf("key %s is in the table but was deleted (or never committed)", kk)
		}
	}
	t.Logf("%d keys live, %d deleted, from %d committed records", len(want), 250-len(want), u.total())
}

// poison returns a bad value for some sequence numbers: invalid JSON, a
// wrong type, a NUL byte in text, a 2 MB string into varchar(10).
func poisonValue(seq int, id string) []byte {
	if seq%100 != 0 {
		return []byte(fmt.Sprintf(`{"id":"%s","seq":%d,"body":"ok","short":"ok"}`, id, seq))
	}
	switch (seq / 100) % 4 {
	case 0:
		return []byte(`{"id":"` + id + `", not json`)
	case 1:
		return []byte(fmt.Sprintf(`{"id":"%s","seq":"not a number","body":"x","short":"ok"}`, id))
	case 2:
		return []byte(fmt.Sprintf(`{"id":"%s","seq":%d,"body":"nul\u0000byte","short":"ok"}`, id, seq))
	default:
		return []byte(fmt.Sprintf(`{"id":"%s","seq":%d,"body":"x","short":"%s"}`, id, seq, strings.Repeat("y", 2<<20)))
	}
}

func createPoisonTable(t *testing.T, db, table string) {
	t.Helper()
	pool := connectPool(t, db)
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (
		id text NOT NULL, seq bigint, body text, short varchar(10),
		__connect_topic text, __connect_partition int, __connect_offset bigint, rn bigserial)`)
	if err != nil {
		t.Fatal(err)
	}
}

// TestPostgresDeadLetters: with errors.tolerance=all, 1 % poison records end
// in the dead-letter table exactly once with their context, and every good
// record lands exactly once, through a crash in the middle.
func TestPostgresDeadLetters(t *testing.T) {
	k, db := sinkEnv(t)
	const topic, conn = "poison", "poison-all"
	createTopic(t, k, topic, 3)
	createPoisonTable(t, db, topic)
	pool := connectPool(t, db)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 5000, Partitions: 3, AbortRatio: 0.12, MaxTxn: 50, Seed: 400, Value: poisonValue}, &u)

	cfg := baseConnector(conn, topic, db, "exactly_once")
	cfg["errors.tolerance"] = "all"
	cfg["errors.deadletterqueue.table.name"] = "poison_dlq"
	cfg["batch.max.records"] = "800"
	path := writeConnector(t, cfg)
	crash := startTxsink(t, k.Bootstrap, path, "w1", "TXSINK_FAILPOINT=after-prepare:3")
	crash.wait(90 * time.Second)
	p := startTxsink(t, k.Bootstrap, path, "w1")
	waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)

	// Split the producer's log into good and poison records.
	var good upstream
	good.committed = map[int32][]upRecord{}
	poison := map[[2]int64]bool{}
	u.mu.Lock()
	for part, rs := range u.committed {
		for _, r := range rs {
			if r.Seq%100 == 0 {
				poison[[2]int64{int64(part), r.Offset}] = true
			} else {
				good.committed[part] = append(good.committed[part], r)
			}
		}
	}
	u.mu.Unlock()
	if len(poison) < 40 {
		t.Fatalf("workload has only %d committed poison records", len(poison))
	}
	if problems := exactness(&good, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("good records: %d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
	rows, err := pool.Query(context.Background(), `SELECT "partition", kafka_offset, connector, topic, error, octet_length(value) FROM poison_dlq`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int64]int{}
	for rows.Next() {
		var part int32
		var off int64
		var c, tp, msg string
		var vlen *int
		if err := rows.Scan(&part, &off, &c, &tp, &msg, &vlen); err != nil {
			t.Fatal(err)
		}
		k := [2]int64{int64(part), off}
		seen[k]++
		if !poison[k] {
			t.Errorf("dead letter p%d@%d is not a poison record: %s", part, off, msg)
		}
		if c != conn || tp != topic || msg == "" || vlen == nil || *vlen == 0 {
			t.Errorf("dead letter p%d@%d lacks context: connector=%q topic=%q error=%q", part, off, c, tp, msg)
		}
	}
	for k := range poison {
		if seen[k] != 1 {
			t.Errorf("poison record p%d@%d is in the dead-letter table %d times, want 1", k[0], k[1], seen[k])
		}
	}
	t.Logf("%d good records exact, %d poison records dead-lettered once each", good.total(), len(poison))
}

// TestPostgresStopOnBadRecord: with errors.tolerance=none the task stops at
// exactly the bad record with an error naming topic, partition and offset;
// after the record is skipped through an offsets reset, it resumes from
// there and the table ends exact.
func TestPostgresStopOnBadRecord(t *testing.T) {
	k, db := sinkEnv(t)
	const topic, conn = "strict", "strict-none"
	k.CreateTopic(t, topic, 1)
	createPoisonTable(t, db, topic)
	pool := connectPool(t, db)
	var u upstream
	good := func(seq int, id string) []byte {
		return []byte(fmt.Sprintf(`{"id":"%s","seq":%d,"body":"ok","short":"ok"}`, id, seq))
	}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 700, Partitions: 1, AbortRatio: 0.1, MaxTxn: 30, Seed: 500, Value: good}, &u)
	// One committed transaction holding only the bad record.
	badSeq := -1
	produce(t, k.Bootstrap, topic, produceOpts{Records: u.total() + 1, Partitions: 1, MaxTxn: 1, Seed: 501,
		Value: func(seq int, id string) []byte {
			badSeq = seq
			return []byte(`{"id":"` + id + `","seq":"seven hundred"}`)
		}}, &u)
	produce(t, k.Bootstrap, topic, produceOpts{Records: u.total() + 800, Partitions: 1, AbortRatio: 0.1, MaxTxn: 30, Seed: 502, Value: good}, &u)
	var bad *upRecord
	u.mu.Lock()
	for i, r := range u.committed[0] {
		if r.Seq == badSeq {
			bad = &u.committed[0][i]
		}
	}
	u.mu.Unlock()
	if bad == nil {
		t.Fatal("the bad record is not in the producer's log")
	}
	cfg := baseConnector(conn, topic, db, "exactly_once")
	cfg["batch.max.records"] = "250"
	path := writeConnector(t, cfg)
	p := startTxsink(t, k.Bootstrap, path, "w1")
	if !p.wait(90 * time.Second) {
		t.Fatal("txsink did not stop at the bad record")
	}
	_, code := p.exited()
	out := p.output()
	wantMsg := fmt.Sprintf("topic %s partition 0 offset %d", topic, bad.Offset)
	if code != 4 || !strings.Contains(out, wantMsg) {
		t.Fatalf("exit code %d (want 4) and output lacking %q:\n%s", code, wantMsg, tail(out, 3000))
	}
	// Everything before the bad record is written, nothing after it.
	got, _ := sinkOffsets(context.Background(), pool, conn)
	var before int64 = -1
	u.mu.Lock()
	for _, r := range u.committed[0] {
		if r.Offset < bad.Offset {
			before = r.Offset
		}
	}
	u.mu.Unlock()
	if got[0] <= before || got[0] > bad.Offset {
		t.Fatalf("stored next_offset %d, want one past the last good record before the bad one (%d) and at most the bad offset %d", got[0], before+1, bad.Offset)
	}
	var after int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM strict WHERE __connect_offset >= $1`, bad.Offset).Scan(&after); err != nil || after != 0 {
		t.Fatalf("%d rows at or after the bad offset (err %v)", after, err)
	}
	// The operator skips the record, as the error message says.
	if err := offsets.NewPG(pool, "public", "").Reset(context.Background(), conn, false,
		[]offsets.Position{{Topic: topic, Partition: 0, Next: bad.Offset + 1}}); err != nil {
		t.Fatal(err)
	}
	p = startTxsink(t, k.Bootstrap, path, "w1")
	waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
	var rest upstream
	rest.committed = map[int32][]upRecord{}
	u.mu.Lock()
	for _, r := range u.committed[0] {
		if r.Seq != badSeq {
			rest.committed[0] = append(rest.committed[0], r)
		}
	}
	u.mu.Unlock()
	if problems := exactness(&rest, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
}
