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
// integer column refuses) and the worker SIGKILLed twice in the middle, an
// exactly_once connector with errors.tolerance=all writes every good
// record once, and a read_committed consumer of the dead-letter topic sees
// each poison record exactly once, with its original value and Kafka
// Connect's __connect.errors.* headers. The dead-letter table, set too,
// holds each poison record once. PostgreSQL and ClickHouse.
func TestDeadLetterTopicExactlyOnceAcrossKills(t *testing.T) {
	k := harness.Kafka(t)
	t.Run("postgres", func(t *testing.T) {
		pg := harness.Postgres(t)
		db := pg.NewDatabase(t)
		pool := connectPool(t, db)
		runDLQKills(t, k, dlqSink{
			name: "pg",
			setup: func(topic string) map[string]string {
				createEventsTable(t, pool, topic)
				return apiConnector("dlq-pg-"+randSuffix(t), topic, canaryURL(t, pg, db))
			},
			offsets: func(name string) map[int32]int64 {
				got, _ := sinkOffsets(context.Background(), pool, name)
				return got
			},
			drained: func(name string, u *upstream) { waitDrained(t, pool, name, u, 3*time.Minute, nil) },
			exact: func(topic string, good *upstream) {
				if problems := exactness(good, readRows(t, pool, topic), nil); len(problems) > 0 {
					t.Fatalf("table: %d anomalies, first: %v", len(problems), problems[:min(10, len(problems))])
				}
				if n := preparedXacts(t, pool); n != 0 {
					t.Errorf("%d prepared transactions left", n)
				}
			},
			dlqTable: func(table string) int {
				var n int
				if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		})
	})
	t.Run("clickhouse", func(t *testing.T) {
		ch := harness.ClickHouse(t)
		db := ch.NewDatabase(t)
		conn := ch.Conn(t, db)
		runDLQKills(t, k, dlqSink{
			name: "ch",
			setup: func(topic string) map[string]string {
				createCHEvents(t, conn, topic, chEngine(ch, db, topic, 1000))
				return chConnector("dlq-ch-"+randSuffix(t), topic, ch, db, "exactly_once")
			},
			offsets: func(name string) map[int32]int64 {
				got, _ := chOffsets(context.Background(), conn, name)
				return got
			},
			drained: func(name string, u *upstream) { chWaitDrained(t, conn, name, u, 3*time.Minute, nil) },
			exact:   func(topic string, good *upstream) { chExact(t, conn, good, topic, topic) },
			dlqTable: func(table string) int {
				var n uint64
				if err := conn.QueryRow(context.Background(), "SELECT uniqExact(__connect_partition, __connect_offset) FROM `"+table+"`").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return int(n)
			},
		})
	})
}

// dlqSink is one sink under runDLQKills.
type dlqSink struct {
	name string
	// setup creates the target table of topic and returns a connector
	// configuration (exactly_once) writing it.
	setup    func(topic string) map[string]string
	offsets  func(connector string) map[int32]int64
	drained  func(connector string, u *upstream)
	exact    func(topic string, good *upstream)
	dlqTable func(table string) int // distinct dead letters in the table
}

func runDLQKills(t *testing.T, k *harness.KafkaService, s dlqSink) {
	sfx := randSuffix(t)
	topic, dlqTopic, dlqTable := "dlq-src-"+s.name+"-"+sfx, "dlq-"+s.name+"-"+sfx, "dlq_"+s.name+"_"+sfx
	k.CreateTopic(t, topic, 3)
	cfg := s.setup(topic)
	name := cfg["name"]
	poison := func(seq int) bool { return seq%100 == 0 }
	value := func(seq int, id string) []byte {
		switch {
		case poison(seq) && seq%200 == 0:
			return []byte(fmt.Sprintf(`{"id": "%s", "seq": `, id)) // not JSON: the value converter fails
		case poison(seq):
			return []byte(fmt.Sprintf(`{"id": %q, "seq": "poison-%d"}`, id, seq)) // seq is an integer column
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
	w := startServe(t, k.Bootstrap, addr, dataDir, "dlq-"+s.name)
	cfg["batch.max.records"] = "200"
	cfg["errors.tolerance"] = "all"
	cfg["errors.deadletterqueue.topic.name"] = dlqTopic
	cfg["errors.deadletterqueue.topic.replication.factor"] = "1"
	cfg["errors.deadletterqueue.context.headers.enable"] = "true"
	cfg["errors.deadletterqueue.table.name"] = dlqTable
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	w.waitState(t, name, "RUNNING", 1, time.Minute)

	for kill := 1; kill <= 2; kill++ {
		waitWritten(t, func() map[int32]int64 { return s.offsets(name) }, int64(kill*1500), fmt.Sprintf("kill %d", kill))
		w.signal(syscall.SIGKILL)
		if !w.wait(10 * time.Second) {
			t.Fatal("SIGKILL did not end the worker")
		}
		t.Logf("kill %d: worker killed", kill)
		w = startServe(t, k.Bootstrap, addr, dataDir, "dlq-"+s.name)
		w.waitState(t, name, "RUNNING", 1, time.Minute)
	}
	wg.Wait()
	s.drained(name, &u)
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
	s.exact(topic, good)

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
	if inTable := s.dlqTable(dlqTable); inTable != len(bad) {
		t.Errorf("dead-letter table holds %d dead letters, want the %d poison records", inTable, len(bad))
	}
	t.Logf("%d records (%d poison) across 2 SIGKILLs: table exact; each poison record once in the dead-letter topic (read_committed) with Connect's headers, and once in the dead-letter table",
		u.total(), len(bad))
}
