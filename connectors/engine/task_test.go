package engine_test

// Fast tests of the task loop: an in-memory Kafka (kfake, with transactions
// and read_committed) and a real throwaway PostgreSQL (internal/pgtest).
// The same guarantees are proven on the real broker in integration/.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// kfakeAndTable starts an in-memory Kafka with the topic (partitions
// partitions) and a throwaway PostgreSQL database holding the table ddl
// creates; both end with the test.
func kfakeAndTable(t *testing.T, topic string, partitions int, ddl string) (c *kfake.Cluster, db string, pool *pgxpool.Pool) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	db = pgtest.Start(t).NewDatabase(t)
	pool, err = pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), ddl); err != nil {
		t.Fatal(err)
	}
	return c, db, pool
}

// waitCount waits up to 60 s for the count query to reach want.
func waitCount(t *testing.T, pool *pgxpool.Pool, query string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after 60s, want %d", query, n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type coord struct {
	p   int32
	off int64
}

// produceTxns writes n transactions of 1..20 records over the topic's
// partitions, aborting every fourth, and returns the committed records.
func produceTxns(t *testing.T, addrs []string, topic string, n int) map[coord]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	return produceTxnsWith(t, addrs, topic, n, func(_, j int) bool { return j < 1+rng.IntN(20) })
}

// produceTxnsWith writes n transactions, transaction i taking records while
// more(i, j) holds for its j-th record, aborting every fourth, and returns
// the committed records (values {"id":…,"seq":…}).
func produceTxnsWith(t *testing.T, addrs []string, topic string, n int, more func(i, j int) bool, opts ...kgo.Opt) map[coord]string {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.TransactionalID("up-" + topic), kgo.DefaultProduceTopic(topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	want := map[coord]string{}
	seq := 0
	for i := 0; i < n; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := 0; more(i, j); j++ {
			seq++
			v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(seq), "seq": seq})
			recs = append(recs, &kgo.Record{Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		abort := i%4 == 3
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatal(err)
		}
		if !abort {
			for _, r := range recs {
				var v struct{ ID string }
				_ = json.Unmarshal(r.Value, &v)
				want[coord{r.Partition, r.Offset}] = v.ID
			}
		}
	}
	return want
}

func TestTaskExactlyOnceOnKfake(t *testing.T) {
	for _, mode := range []string{"exactly_once", "exactly_once/rounds=1", "exactly_once_sink", "exactly_once_sink/rounds=1"} {
		t.Run(mode, func(t *testing.T) {
			inFlight := "2"
			if m, ok := strings.CutSuffix(mode, "/rounds=1"); ok {
				mode, inFlight = m, "1"
			}
			obs := &roundObserver{}
			c, db, pool := kfakeAndTable(t, "events", 3, `CREATE TABLE events (id text, seq bigint, __connect_topic text, __connect_partition int, __connect_offset bigint)`)
			ctx := context.Background()
			want := produceTxns(t, c.ListenAddrs(), "events", 60)

			reg := &connectors.Registry{}
			if err := reg.Register(postgres.Spec()); err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			conn, err := engine.Open(ctx, reg, map[string]string{
				"name": "kfake-" + mode, "connector.class": "postgres", "topics": "events",
				"connection.url": db, "delivery.guarantee": mode, "pk.mode": "kafka",
				"batch.max.records": "50", "batch.linger.ms": "5", "session.timeout.ms": "3000",
				// The largest batch.max.bytes: the Kafka client must accept it.
				"batch.max.bytes": "1073741824", "rounds.max.in.flight": inFlight,
			}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Log: log, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			conn.Start(nil)
			defer conn.Stop()

			waitCount(t, pool, `SELECT count(*) FROM events`, len(want))
			time.Sleep(300 * time.Millisecond) // let a wrong extra round show up
			rows, err := pool.Query(ctx, `SELECT __connect_partition, __connect_offset, id FROM events`)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[coord]int{}
			for rows.Next() {
				var k coord
				var id string
				if err := rows.Scan(&k.p, &k.off, &id); err != nil {
					t.Fatal(err)
				}
				seen[k]++
				if want[k] != id {
					t.Errorf("row p%d@%d id %q: produced %q (aborted?)", k.p, k.off, id, want[k])
				}
			}
			for k := range want {
				if seen[k] != 1 {
					t.Errorf("p%d@%d written %d times", k.p, k.off, seen[k])
				}
			}
			var prepared int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`).Scan(&prepared); err != nil || prepared != 0 {
				t.Errorf("%d prepared transactions left (err %v)", prepared, err)
			}
			// The records were waiting before the task started: with
			// pipelined rounds (the default) some batches were written
			// ahead; otherwise none.
			ahead := obs.writtenAhead()
			if pipelined := inFlight == "2"; pipelined != (ahead > 0) {
				t.Errorf("%d batches written ahead over %d rounds (pipelined: %t)", ahead, obs.count(), pipelined)
			}
			t.Logf("%d rounds, %d batches written ahead", obs.count(), ahead)
		})
	}
}

// TestTaskFailsOnMissingTable: a target table that does not exist is not a
// bad record and not worth retrying forever: the task fails with an error
// naming the table.
func TestTaskFailsOnMissingTable(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orphans"), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db := pgtest.Start(t).NewDatabase(t)
	produceTxns(t, c.ListenAddrs(), "orphans", 3)
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := engine.Open(ctx, reg, map[string]string{
		"name": "orphans", "connector.class": "postgres", "topics": "orphans",
		"connection.url": db, "table.name.format": "no_such_table", "session.timeout.ms": "3000",
	}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t",
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	conn.Start(func(_ int, err error) { done <- err })
	defer conn.Stop()
	select {
	case err := <-done:
		if !connectors.IsTerminal(err) || !strings.Contains(err.Error(), "no_such_table") {
			t.Fatalf("task ended with %v, want a terminal error naming the table", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("task still running 60s after hitting a missing table")
	}
}

// roundObserver records rounds for tests.
type roundObserver struct {
	mu     sync.Mutex
	rounds []engine.RoundStats
}

func (o *roundObserver) Assigned(int, []offsets.Position) {}
func (o *roundObserver) Revoked(int, string, []int32)     {}
func (o *roundObserver) FenceConflict(int, error)         {}
func (o *roundObserver) Waiting(int, error)               {}
func (o *roundObserver) Round(_ int, r engine.RoundStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rounds = append(o.rounds, r)
}

func (o *roundObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.rounds)
}

// committedSum sums f over the committed rounds.
func (o *roundObserver) committedSum(f func(engine.RoundStats) int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.rounds {
		if r.Outcome == "committed" {
			n += f(r)
		}
	}
	return n
}

// writtenAhead sums the committed rounds' batches written ahead.
func (o *roundObserver) writtenAhead() int {
	return o.committedSum(func(r engine.RoundStats) int { return r.WrittenAhead })
}

func (o *roundObserver) deadLettered() int {
	return o.committedSum(func(r engine.RoundStats) int { return r.DeadLettered })
}

// TestTaskReportsDeadLetters: the rounds a task reports count the records
// the sink dead-lettered (errors.tolerance=all), for the status API and
// the metrics.
func TestTaskReportsDeadLetters(t *testing.T) {
	c, db, pool := kfakeAndTable(t, "dl", 1, `CREATE TABLE dl (id text, seq bigint)`)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("dl"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := 0; i < 20; i++ {
		v := fmt.Sprintf(`{"id":"%d","seq":%d}`, i, i)
		if i%7 == 3 {
			v = `{"id":"bad","seq":"not a number"}`
		}
		recs = append(recs, &kgo.Record{Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	obs := &roundObserver{}
	conn, err := engine.Open(ctx, reg, map[string]string{
		"name": "dl", "connector.class": "postgres", "topics": "dl", "connection.url": db,
		"errors.tolerance": "all", "errors.deadletterqueue.table.name": "dl_dlq", "session.timeout.ms": "3000",
	}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Observer: obs,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	conn.Start(nil)
	defer conn.Stop()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var rows, dlq int
		_ = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM dl), (SELECT count(*) FROM dl_dlq)`).Scan(&rows, &dlq)
		if rows == 17 && dlq == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d rows, %d dead letters; want 17 and 3", rows, dlq)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := obs.deadLettered(); n != 3 {
		t.Fatalf("committed rounds reported %d dead-lettered records, want 3", n)
	}
}

// TestTaskInitialLatest: with offsets.initial=latest a connector without
// stored offsets starts at each partition's end, listed once per topic:
// records produced before it was assigned are skipped, every later one is
// written once.
func TestTaskInitialLatest(t *testing.T) {
	c, db, pool := kfakeAndTable(t, "late", 3, `CREATE TABLE late (id text)`)
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("late"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(prefix string, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"id":"%s-%d"}`, prefix, i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("old", 30)

	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := engine.Open(ctx, reg, map[string]string{
		"name": "latest", "connector.class": "postgres", "topics": "late", "connection.url": db,
		"delivery.guarantee": "exactly_once", "offsets.initial": "latest",
		"batch.linger.ms": "5", "session.timeout.ms": "3000",
	}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	conn.Start(nil)
	defer conn.Stop()

	// All three partitions positioned at their ends.
	waitCount(t, pool, `SELECT count(*) FROM txsink_offsets WHERE connector = 'latest' AND next_offset IS NOT NULL`, 3)
	var stored int64
	if err := pool.QueryRow(ctx, `SELECT sum(next_offset) FROM txsink_offsets WHERE connector = 'latest'`).Scan(&stored); err != nil || stored != 30 {
		t.Fatalf("stored next offsets sum to %d (err %v), want 30: the end of every partition", stored, err)
	}
	produce("new", 30)
	waitCount(t, pool, `SELECT count(*) FROM late`, 30)
	time.Sleep(300 * time.Millisecond) // let a wrong extra round show up
	var total, fresh, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id LIKE 'new-%'), count(DISTINCT id) FROM late`).Scan(&total, &fresh, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != 30 || fresh != 30 || distinct != 30 {
		t.Fatalf("rows: %d, of them %d produced after the start, %d distinct; want 30 new rows once each", total, fresh, distinct)
	}
}

// flakySink refuses rounds as if a schema registry were down until up is
// set: its Prepare and WriteLocal fail with an error wrapping
// record.ErrUnavailable before writing anything.
type flakySink struct {
	connectors.Sink
	up      *atomic.Bool
	refused *atomic.Int64
}

func (s flakySink) down() error {
	if s.up.Load() {
		return nil
	}
	s.refused.Add(1)
	return fmt.Errorf("schema registry at 127.0.0.1:1: connection refused: %w", record.ErrUnavailable)
}

// Prepare fails as a sink does when its records cannot be converted: before
// anything is durable, so nothing is prepared.
func (s flakySink) Prepare(ctx context.Context, b *twophase.Batch) error {
	if err := s.down(); err != nil {
		return fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
	}
	return s.Sink.Prepare(ctx, b)
}

func (s flakySink) WriteLocal(ctx context.Context, b *twophase.Batch, g offsets.Guard, o connectors.Order) error {
	if err := s.down(); err != nil {
		return err
	}
	return s.Sink.(connectors.LocalWriter).WriteLocal(ctx, b, g, o)
}

// waitObserver records the task's Waiting events.
type waitObserver struct {
	roundObserver
	mu      sync.Mutex
	waits   int
	cleared int
}

func (o *waitObserver) Waiting(_ int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil && errors.Is(err, record.ErrUnavailable) {
		o.waits++
	} else if err == nil {
		o.cleared++
	}
}

// TestTaskWaitsForUnavailableDependency: while the record pipeline's
// dependency is down, rounds fail without writing, the task keeps running,
// retries with backoff and says so; once it is back every record is
// written exactly once and the wait is cleared. Both commit paths.
func TestTaskWaitsForUnavailableDependency(t *testing.T) {
	for _, delivery := range []string{"exactly_once", "exactly_once_sink"} {
		t.Run(delivery, func(t *testing.T) {
			c, db, pool := kfakeAndTable(t, "flaky", 2, `CREATE TABLE flaky (id text)`)
			ctx := context.Background()
			prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("flaky"))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			var recs []*kgo.Record
			for i := range 200 {
				recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"id":"r%d"}`, i)})
			}
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			var up atomic.Bool
			var refused atomic.Int64
			spec := postgres.Spec()
			spec.Name, spec.Class = "flaky", "flaky"
			open := spec.New
			spec.New = func(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
				s, err := open(ctx, env, c, v)
				if err != nil {
					return nil, err
				}
				return flakySink{Sink: s, up: &up, refused: &refused}, nil
			}
			reg := &connectors.Registry{}
			if err := reg.Register(spec); err != nil {
				t.Fatal(err)
			}
			obs := &waitObserver{}
			conn, err := engine.Open(ctx, reg, map[string]string{
				"name": "flaky", "connector.class": "flaky", "topics": "flaky", "connection.url": db,
				"delivery.guarantee": delivery, "batch.linger.ms": "5", "session.timeout.ms": "3000",
			}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Observer: obs,
				Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err != nil {
				t.Fatal(err)
			}
			exits := make(chan error, 1)
			conn.Start(func(_ int, err error) { exits <- err })
			defer conn.Stop()
			deadline := time.Now().Add(30 * time.Second)
			for refused.Load() < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("only %d refused rounds after 30s", refused.Load())
				}
				time.Sleep(50 * time.Millisecond)
			}
			var rows int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM flaky`).Scan(&rows); err != nil || rows != 0 {
				t.Fatalf("%d rows written while the dependency was down (err %v)", rows, err)
			}
			select {
			case err := <-exits:
				t.Fatalf("task exited while waiting: %v", err)
			default:
			}
			up.Store(true)
			waitCount(t, pool, `SELECT count(DISTINCT id) FROM flaky`, 200)
			time.Sleep(300 * time.Millisecond)
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM flaky`).Scan(&rows); err != nil || rows != 200 {
				t.Fatalf("%d rows, want each of the 200 records once (err %v)", rows, err)
			}
			obs.mu.Lock()
			waits, cleared := obs.waits, obs.cleared
			obs.mu.Unlock()
			if waits < 3 || cleared < 1 {
				t.Fatalf("observer saw %d waits and %d clears; want a wait per refused round and a clear", waits, cleared)
			}
		})
	}
}

// TestTaskRunsSchemaChangesAlone: under exactly_once a batch that needs a
// schema change (auto.create, auto.evolve) gets a round of its own, since
// its prepared transaction keeps an ACCESS EXCLUSIVE lock until the
// decision; the other partitions follow in the next rounds and every
// record lands exactly once.
func TestTaskRunsSchemaChangesAlone(t *testing.T) {
	c, db, pool := kfakeAndTable(t, "grow", 3, `SELECT 1`)
	ctx := context.Background()
	want := produceTxns(t, c.ListenAddrs(), "grow", 12)
	// A later generation of the records has a new field.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("grow"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		id := fmt.Sprintf("x%d", i)
		r := &kgo.Record{Value: fmt.Appendf(nil, `{"id":%q,"seq":%d,"color":"c%d"}`, id, 1000+i, i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want[coord{r.Partition, r.Offset}] = id
	}
	cl.Close()

	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := engine.Open(ctx, reg, map[string]string{
		"name": "grow", "connector.class": "postgres", "topics": "grow",
		"connection.url": db, "pk.mode": "kafka", "auto.create": "true", "auto.evolve": "true",
		"batch.max.records": "40", "batch.linger.ms": "5", "session.timeout.ms": "3000",
	}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	conn.Start(func(_ int, err error) { done <- err })
	defer conn.Stop()
	waitCount(t, pool, `SELECT count(*) FROM pg_tables WHERE tablename = 'grow'`, 1)
	waitCount(t, pool, `SELECT count(*) FROM grow`, len(want))
	select {
	case err := <-done:
		t.Fatalf("task ended: %v", err)
	default:
	}
	rows, err := pool.Query(ctx, `SELECT __connect_partition, __connect_offset, id, coalesce(color, '') FROM grow`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[coord]int{}
	colors := 0
	for rows.Next() {
		var k coord
		var id, color string
		if err := rows.Scan(&k.p, &k.off, &id, &color); err != nil {
			t.Fatal(err)
		}
		seen[k]++
		if want[k] != id {
			t.Errorf("row p%d@%d id %q: produced %q", k.p, k.off, id, want[k])
		}
		if color != "" {
			colors++
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("p%d@%d written %d times", k.p, k.off, seen[k])
		}
	}
	if colors != 30 {
		t.Errorf("%d rows with the evolved column, want 30", colors)
	}
	var prepared int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`).Scan(&prepared); err != nil || prepared != 0 {
		t.Errorf("%d prepared transactions left (err %v)", prepared, err)
	}
}

// TestTaskTopicsRegex: topics.regex consumes every matching topic,
// whole-name matched, including one created after the task started.
func TestTaskTopicsRegex(t *testing.T) {
	c, db, pool := kfakeAndTable(t, "rx-a", 2, `SELECT 1`)
	ctx := context.Background()
	wantA := produceTxns(t, c.ListenAddrs(), "rx-a", 4)
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := engine.Open(ctx, reg, map[string]string{
		"name": "rx", "connector.class": "postgres", "topics.regex": "rx-[a-z]",
		"connection.url": db, "pk.mode": "kafka", "auto.create": "true", "table.name.format": "t_${topic}",
		"metadata.max.age.ms": "1000", "batch.linger.ms": "5", "session.timeout.ms": "3000",
	}, engine.TaskOptions{Bootstrap: c.ListenAddrs(), InstanceID: "t", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	conn.Start(nil)
	defer conn.Stop()
	waitCount(t, pool, `SELECT count(*) FROM pg_tables WHERE tablename = 't_rx-a'`, 1)
	waitCount(t, pool, `SELECT count(*) FROM "t_rx-a"`, len(wantA))

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{"rx-b", "rx-bb"} { // rx-bb does not match the whole pattern
		r := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
		r.Topics = append(r.Topics, rt)
		if _, err := r.RequestWith(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	wantB := produceTxns(t, c.ListenAddrs(), "rx-b", 4)
	produceTxns(t, c.ListenAddrs(), "rx-bb", 2)
	waitCount(t, pool, `SELECT count(*) FROM pg_tables WHERE tablename = 't_rx-b'`, 1)
	waitCount(t, pool, `SELECT count(*) FROM "t_rx-b"`, len(wantB))
	time.Sleep(500 * time.Millisecond)
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM "t_rx-a") + (SELECT count(*) FROM "t_rx-b") + (SELECT count(*) FROM pg_tables WHERE tablename = 't_rx-bb')`).Scan(&n); err != nil || n != len(wantA)+len(wantB) {
		t.Errorf("rows %d (err %v), want %d and no table for rx-bb", n, err, len(wantA)+len(wantB))
	}
}
