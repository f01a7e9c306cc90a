package integration

// Intent retention (intents.retention.ms) on a real ClickHouse server: the
// cleanup's rule on a hand-made intents table, and a long stream with a
// short retention, crashes in the cleanup and in the commit, a cleanup
// while a batch is in doubt, and the redo after it.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/txsink/txsink/connectors"
	chsink "github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/twophase"
)

// Intent states of txsink_intents (connectors/clickhouse).
const (
	chPending, chAborted, chFenced, chDone uint8 = 1, 2, 3, 4
)

// openCHSink opens the ClickHouse sink of connector on db with retention,
// as the worker would (the state tables are created if missing).
func openCHSink(t testing.TB, ch *harness.ClickHouseService, db, connector, bootstrap string, retention time.Duration) *chsink.Sink {
	t.Helper()
	cfg := chsink.Config{
		Connector: connector, Delivery: "exactly_once", Addr: []string{ch.Addr}, Database: db,
		User: ch.User, Password: ch.Password, DialTimeout: 5 * time.Second, TableNameFormat: "${topic}",
		OffsetsTable: "txsink_offsets", IntentsTable: "txsink_intents", IntentRetention: retention,
		BlockRows: 1000, Dedup: "auto", RedoSkipPresent: true,
	}
	env := connectors.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if bootstrap != "" {
		env.Bootstrap = []string{bootstrap}
	}
	s, err := chsink.Open(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// chIntent is one (batch, fence) intent as the tests see it.
type chIntent struct {
	Topic       string
	Partition   int32
	First, Last int64
	Fence       uint64
	Status      uint8
}

func (i chIntent) String() string {
	return fmt.Sprintf("%s[%d] %d..%d fence %d status %d", i.Topic, i.Partition, i.First, i.Last, i.Fence, i.Status)
}

// chIntents reads the connector's intents, one per (batch, fence) with
// its final state (the stored status is attempt*4 + state: a round the
// decision aborted is redone under the same fence as a new attempt), in
// order.
func chIntents(t testing.TB, conn driver.Conn, connector string) []chIntent {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT topic, `partition`, first, last, fence, toUInt8(modulo(toUInt16(max(status)) + 3, 4) + 1) FROM txsink_intents WHERE connector = ? "+
		"GROUP BY topic, `partition`, first, last, fence ORDER BY topic, `partition`, first, fence", connector)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []chIntent
	for rows.Next() {
		var i chIntent
		if err := rows.Scan(&i.Topic, &i.Partition, &i.First, &i.Last, &i.Fence, &i.Status); err != nil {
			t.Fatal(err)
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// chWaitMutations waits until no mutation of db's intents table is
// unfinished (the cleanup's deletions are mutations).
func chWaitMutations(t testing.TB, conn driver.Conn, db string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.mutations WHERE database = ? AND table = 'txsink_intents' AND is_done = 0", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d mutations of %s.txsink_intents unfinished after 2 minutes", n, db)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClickHouseIntentRetentionRule checks the cleanup's rule on a
// hand-made intents table: resolved intents (done, aborted, fenced)
// prepared before the retention go; the intent still in doubt, everything
// prepared after it, and the latest batch of every partition stay. Once the
// doubt is resolved, a second cleanup takes what the first had to keep.
func TestClickHouseIntentRetentionRule(t *testing.T) {
	ch := harness.ClickHouse(t)
	db := ch.NewDatabase(t)
	conn := ch.Conn(t, db)
	const connector, topic = "chret-rule", "chret"
	retention := 2 * time.Hour // the background cleanup's first run is an hour away
	s := openCHSink(t, ch, db, connector, "", retention)
	now := time.Now().UTC().Truncate(time.Second)
	h := func(n int) time.Time { return now.Add(-time.Duration(n) * time.Hour) }
	type row struct {
		i        chIntent
		prepared time.Time
	}
	rows := []row{
		{chIntent{topic, 0, 0, 9, 1, chDone}, h(9)},
		{chIntent{topic, 0, 10, 19, 1, chAborted}, h(8)},
		{chIntent{topic, 0, 10, 19, 2, chFenced}, h(8)},
		{chIntent{topic, 0, 20, 29, 2, chPending}, h(7)}, // in doubt
		{chIntent{topic, 0, 30, 39, 3, chDone}, h(6)},    // prepared after the doubt
		{chIntent{topic, 0, 40, 49, 3, chDone}, h(0)},    // latest of partition 0
		{chIntent{topic, 1, 0, 4, 1, chDone}, h(9)},
		{chIntent{topic, 1, 5, 9, 1, chDone}, h(5)},  // latest of partition 1, yet old
		{chIntent{topic, 2, 0, 99, 1, chDone}, h(9)}, // the only, so latest, of partition 2
	}
	b, err := conn.PrepareBatch(context.Background(), "INSERT INTO txsink_intents (connector, topic, `partition`, first, last, fence, prev, token, target, records, blocks, block_rows, mechanism, status, prepared_at, updated_at, note)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		// Every state change of an intent is a row; resolved ones have
		// their pending row too, written at the same prepared_at.
		for _, st := range []uint8{chPending, r.i.Status} {
			if err := b.Append(connector, r.i.Topic, r.i.Partition, r.i.First, r.i.Last, r.i.Fence, r.i.First, "txsink1-test", topic,
				uint32(r.i.Last-r.i.First+1), uint32(1), uint32(1000), "token", st, r.prepared, r.prepared, "TestClickHouseIntentRetentionRule"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	want := func(idx ...int) []chIntent {
		var out []chIntent
		for _, i := range idx {
			out = append(out, rows[i].i)
		}
		sort.Slice(out, func(a, b int) bool { return out[a].String() < out[b].String() })
		return out
	}
	check := func(step string, deleted, wantDeleted int, keep []chIntent) {
		t.Helper()
		chWaitMutations(t, conn, db)
		got := chIntents(t, conn, connector)
		sort.Slice(got, func(a, b int) bool { return got[a].String() < got[b].String() })
		if deleted != wantDeleted || fmt.Sprint(got) != fmt.Sprint(keep) {
			t.Fatalf("%s: deleted %d intents, want %d; left\n  %v\nwant\n  %v", step, deleted, wantDeleted, got, keep)
		}
		t.Logf("%s: deleted %d, kept %v", step, deleted, got)
	}

	n, err := s.CleanIntents(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	check("with an intent in doubt", n, 4, want(3, 4, 5, 7, 8))
	doubt := twophase.BatchID{Connector: connector, Topic: topic, Partition: 0, First: 20, Last: 29}
	ids, err := s.InDoubt(context.Background(), connector)
	if err != nil || len(ids) != 1 || ids[0] != doubt {
		t.Fatalf("in doubt after the cleanup: %v (%v), want only %s", ids, err, doubt)
	}

	// Recovery aborts it (the decision did not commit); the next cleanup
	// may take it and what it held back, never the latest batches.
	if err := s.Abort(context.Background(), doubt); err != nil {
		t.Fatal(err)
	}
	n, err = s.CleanIntents(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	check("after the doubt was resolved", n, 2, want(5, 7, 8))
	if n, err = s.CleanIntents(context.Background(), now); err != nil || n != 0 {
		t.Fatalf("a third cleanup deleted %d (%v), want 0: only latest batches are left", n, err)
	}
	if st := s.Status(); st.IntentsDeleted != 6 {
		t.Errorf("Status().IntentsDeleted = %d, want 6", st.IntentsDeleted)
	}
}

// sortedIDs returns the batch ids' texts, sorted.
func sortedIDs(ids []twophase.BatchID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	sort.Strings(out)
	return out
}

var cleanupLogRE = regexp.MustCompile(`intents cleanup: deleting resolved intents.* intents=(\d+)`)

// deletedInLog sums the intents the cleanup log lines of out report.
func deletedInLog(out string) int {
	n := 0
	for _, m := range cleanupLogRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// TestClickHouseIntentRetention streams 9,000 records (15 % aborted
// upstream) over 3 partitions in small batches with intents.retention.ms
// of 2 s: the process is killed once inside a cleanup (after it submitted
// its deletion) and once after a decision (a batch in doubt). While that
// batch is in doubt a cleanup runs, and must keep it; the restarted
// process's recovery then redoes it. The table ends exact, no intent is
// left in doubt, and once the stream is over the intents table shrinks to
// the latest batch of each partition.
func TestClickHouseIntentRetention(t *testing.T) {
	k, ch, db, conn := chEnv(t)
	const topic, name = "chretain", "chretain"
	const partitions = 3
	k.CreateTopic(t, topic, partitions)
	createCHEvents(t, conn, topic, chEngine(ch, db, topic, 1000))
	cfg := chConnector(name, topic, ch, db, "exactly_once")
	cfg["batch.max.records"] = "90"
	cfg["intents.retention.ms"] = "2000"
	cfg["redo.skip.present"] = "false" // the redo relies on de-duplication alone
	path := writeConnector(t, cfg)

	// A long stream: 15 slices of 600 records, a second apart.
	var u upstream
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(wg.Wait) // the producer reports to t: the test waits for it
	go func() {
		defer wg.Done()
		for i := 1; i <= 15; i++ {
			produce(t, k.Bootstrap, topic, produceOpts{Records: 600 * i, Partitions: partitions, AbortRatio: 0.15, MaxTxn: 30, Seed: uint64(400 + i)}, &u)
			time.Sleep(time.Second)
		}
	}()
	var logs string
	start := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(start).Round(100*time.Millisecond), what) }
	// 1. Killed inside a cleanup, right after it submitted a deletion.
	p := startTxsink(t, k.Bootstrap, path, "w1", failpoint.Env+"="+chsink.PointIntentsCleanup+":2")
	if !p.wait(3*time.Minute) || func() bool { _, code := p.exited(); return code != -1 }() {
		t.Fatalf("txsink was not killed in the intents cleanup:\n%s", tail(p.output(), 3000))
	}
	logs += p.output()
	step("killed in a cleanup")
	// 2. Killed after a decision: that batch is in doubt. This run keeps
	// its intents (retention 0), so that the cleanup of step 3 finds
	// resolved intents older than the doubtful one.
	keep := maps.Clone(cfg)
	keep["intents.retention.ms"] = "0"
	p = startTxsink(t, k.Bootstrap, writeConnector(t, keep), "w1", failpoint.Env+"="+failpoint.AfterDecide+":10")
	if !p.wait(3*time.Minute) || func() bool { _, code := p.exited(); return code != -1 }() {
		t.Fatalf("txsink was not killed at %s:\n%s", failpoint.AfterDecide, tail(p.output(), 3000))
	}
	logs += p.output()
	step("killed after a decision")
	// 3. A cleanup while it is in doubt (another worker's, say): older
	// resolved intents go, the doubtful one stays. The sink is opened with
	// a retention of an hour (its background cleanup would first run in
	// half an hour) and asked to clean as of an hour from now.
	s := openCHSink(t, ch, db, name, k.Bootstrap, time.Hour)
	chWaitMutations(t, conn, db) // the killed cleanup's deletion runs on
	doubt, err := s.InDoubt(context.Background(), name)
	if err != nil || len(doubt) == 0 {
		t.Fatalf("no batch in doubt after the kill at %s (%v)", failpoint.AfterDecide, err)
	}
	before := len(chIntents(t, conn, name))
	deleted, err := s.CleanIntents(context.Background(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	chWaitMutations(t, conn, db)
	after, err := s.InDoubt(context.Background(), name)
	if err != nil || fmt.Sprint(sortedIDs(after)) != fmt.Sprint(sortedIDs(doubt)) {
		t.Fatalf("in doubt before the cleanup %v, after %v (%v): the cleanup must keep them", doubt, after, err)
	}
	t.Logf("cleanup with %d batches in doubt (%v): %d of %d intents deleted", len(doubt), doubt, deleted, before)
	if deleted == 0 {
		t.Fatal("the cleanup deleted nothing: the test proves nothing")
	}
	s.Close()
	step("cleanup while in doubt done")
	// 4. Recovery resolves (redoes) the doubtful batch; the stream drains.
	p = startTxsink(t, k.Bootstrap, path, "w1")
	wg.Wait()
	chWaitDrained(t, conn, name, &u, 3*time.Minute, func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d:\n%s", code, tail(p.output(), 3000))
		}
		return nil
	})
	chExact(t, conn, &u, topic, topic)
	// The last round's intent is resolved after its decision, which can
	// come after its rows are visible: wait for it, bounded.
	waitFor(t, time.Minute, "no intent left pending", func() (bool, string) {
		n := chPendingIntents(t, conn, name)
		return n == 0, fmt.Sprintf("%d intents pending", n)
	})
	step("drained")
	// 5. Bounded: with the stream over, the cleanup shrinks the table to the
	// latest batch of each partition, whose end is the partition's end.
	ends := u.ends()
	deadline := time.Now().Add(2 * time.Minute)
	var left []chIntent
	for {
		left = chIntents(t, conn, name)
		if len(left) == partitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("intents table still holds %d intents 2 minutes after the stream ended, want %d (the latest of each partition): %v", len(left), partitions, left)
		}
		time.Sleep(500 * time.Millisecond)
	}
	step("intents table shrunk to the latest batches")
	stopTxsink(t, p)
	logs += p.output()
	for _, i := range left {
		if i.Status != chDone || i.Last+1 < ends[i.Partition] {
			t.Errorf("kept %v, want the done last batch of partition %d (reaching offset %d)", i, i.Partition, ends[i.Partition]-1)
		}
	}
	total := deletedInLog(logs) + deleted + len(left)
	t.Logf("%d records exact; intents written %d or more, deleted by the sink's cleanups %d (+%d by the test's), %d left", u.total(), total, deletedInLog(logs), deleted, len(left))
	if deletedInLog(logs) == 0 {
		t.Error("the sink's background cleanup never logged a deletion")
	}
}
