package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
)

// TestDeadLetterTopicExactlyOnceAcrossKills (issue 17 item 5): with 1 %
// poison records (half not JSON at all, half with a value the table's
// bigint column refuses) and the worker SIGKILLed twice in the middle, an
// exactly_once connector with errors.tolerance=all writes every good
// record once, and a read_committed consumer of the dead-letter topic sees
// each poison record exactly once, with its original value and Kafka
// Connect's __connect.errors.* headers. The dead-letter table, set too,
// holds each poison record once.
func TestDeadLetterTopicExactlyOnceAcrossKills(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	sfx := randSuffix(t)
	topic, dlqTopic, dlqTable := "dlq-src-"+sfx, "dlq-"+sfx, "dlq_"+sfx
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)
	dbURL := canaryURL(t, pg, db)

	poison := func(seq int) bool { return seq%100 == 0 }
	value := func(seq int, id string) []byte {
		switch {
		case poison(seq) && seq%200 == 0:
			return []byte(fmt.Sprintf(`{"id": "%s", "seq": `, id)) // not JSON: the value converter fails
		case poison(seq):
			return []byte(fmt.Sprintf(`{"id": %q, "seq": "poison-%d"}`, id, seq)) // seq is a bigint column
		}
		b, _ := json.Marshal(map[string]any{"id": id, "seq": seq})
		return b
	}
	var u upstream
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produce(t, k.Bootstrap, topic, produceOpts{Records: 6000, Partitions: 3, AbortRatio: 0.1, MaxTxn: 50, Seed: 91, Value: value}, &u)
	}()

	dataDir, addr := t.TempDir(), freeAddr(t)
	w := startServe(t, k.Bootstrap, addr, dataDir, "dlq-w")
	name := "dlq-" + sfx
	cfg := apiConnector(name, topic, dbURL)
	cfg["batch.max.records"] = "200"
	cfg["errors.tolerance"] = "all"
	cfg["errors.deadletterqueue.topic.name"] = dlqTopic
	cfg["errors.deadletterqueue.topic.replication.factor"] = "1"
	cfg["errors.deadletterqueue.context.headers.enable"] = "true"
	cfg["errors.deadletterqueue.table.name"] = dlqTable
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	w.waitState(t, name, "RUNNING", 1, time.Minute)

	for kill := 1; kill <= 2; kill++ {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			got, _ := sinkOffsets(context.Background(), pool, name)
			sum := int64(0)
			for _, n := range got {
				sum += max(n, 0)
			}
			if sum > int64(kill*1500) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress before kill %d: %v", kill, got)
			}
		}
		w.signal(syscall.SIGKILL)
		if !w.wait(10 * time.Second) {
			t.Fatal("SIGKILL did not end the worker")
		}
		t.Logf("kill %d: worker killed", kill)
		w = startServe(t, k.Bootstrap, addr, dataDir, "dlq-w")
		w.waitState(t, name, "RUNNING", 1, time.Minute)
	}
	wg.Wait()
	waitDrained(t, pool, name, &u, 3*time.Minute, nil)
	w.signal(syscall.SIGTERM)
	w.wait(30 * time.Second)

	// The poison records, by coordinates, and the good ones.
	type coord struct {
		p   int32
		off int64
	}
	bad := map[coord]upRecord{}
	good := &upstream{committed: map[int32][]upRecord{}}
	u.mu.Lock()
	for p, rs := range u.committed {
		for _, r := range rs {
			if poison(r.Seq) {
				bad[coord{p, r.Offset}] = r
			} else {
				good.committed[p] = append(good.committed[p], r)
			}
		}
	}
	u.mu.Unlock()
	if problems := exactness(good, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("table: %d anomalies, first: %v", len(problems), problems[:min(10, len(problems))])
	}

	// The topic, as a read_committed consumer sees it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap), kgo.ConsumeTopics(dlqTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[coord]int{}
	var problems []string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		n := 0
		f.EachRecord(func(r *kgo.Record) {
			n++
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			p, _ := strconv.Atoi(h["__connect.errors.partition"])
			off, _ := strconv.ParseInt(h["__connect.errors.offset"], 10, 64)
			c := coord{int32(p), off}
			seen[c]++
			orig, ok := bad[c]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("dead letter for p%d@%d, not a poison record (headers %v)", c.p, c.off, h))
			case string(r.Value) != string(orig.Value):
				problems = append(problems, fmt.Sprintf("p%d@%d: value %q, produced %q", c.p, c.off, r.Value, orig.Value))
			case h["__connect.errors.topic"] != topic || h["__connect.errors.connector.name"] != name || h["__connect.errors.task.id"] != "0" ||
				h["__connect.errors.exception.class.name"] != "org.apache.kafka.connect.errors.DataException" ||
				!strings.Contains(h["__connect.errors.exception.message"], fmt.Sprintf("bad record %s[%d]@%d", topic, c.p, c.off)) ||
				!strings.HasPrefix(h["__connect.errors.exception.stacktrace"], "org.apache.kafka.connect.errors.DataException: ") ||
				h["__connect.errors.class.name"] == "":
				problems = append(problems, fmt.Sprintf("p%d@%d: headers %v", c.p, c.off, h))
			}
			wantStage := "TASK_PUT"
			if orig.Seq%200 == 0 {
				wantStage = "VALUE_CONVERTER"
			}
			if ok && h["__connect.errors.stage"] != wantStage {
				problems = append(problems, fmt.Sprintf("p%d@%d: stage %q, want %s", c.p, c.off, h["__connect.errors.stage"], wantStage))
			}
		})
		if n == 0 && len(seen) >= len(bad) {
			break // everything read, and a further poll brought nothing
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d dead letters", len(seen), len(bad))
		}
	}
	for c := range bad {
		if seen[c] != 1 {
			problems = append(problems, fmt.Sprintf("poison p%d@%d seen %d times in the dead-letter topic", c.p, c.off, seen[c]))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("dead-letter topic: %d problems, first: %v", len(problems), problems[:min(10, len(problems))])
	}
	var inTable int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{dlqTable}.Sanitize()).Scan(&inTable); err != nil {
		t.Fatal(err)
	}
	if inTable != len(bad) {
		t.Errorf("dead-letter table holds %d rows, want the %d poison records", inTable, len(bad))
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
	t.Logf("%d records (%d poison) across 2 SIGKILLs: table exact; each poison record once in the dead-letter topic (read_committed) with Connect's headers, and once in the dead-letter table",
		u.total(), len(bad))
}
