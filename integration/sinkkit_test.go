package integration

// Test kit for the sink tests: an upstream transactional producer that keeps
// a log of what it committed, a txsink process runner, and an exactness
// check of a PostgreSQL table against the producer's log.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
)

// upRecord is a record the upstream producer committed.
type upRecord struct {
	Partition int32
	Offset    int64
	ID        string
	Seq       int
	Key       []byte
	Value     []byte
}

// upstream is the producer's log: committed records per partition in
// offset order, and counts of aborted transactions and records.
type upstream struct {
	mu        sync.Mutex
	committed map[int32][]upRecord
	abortedTx int
	totalTx   int
	abortedRc int
	seq       int
}

func (u *upstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, rs := range u.committed {
		n += len(rs)
	}
	return n
}

// ends returns, per partition, one past the last committed record.
func (u *upstream) ends() map[int32]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[int32]int64{}
	for p, rs := range u.committed {
		if len(rs) > 0 {
			out[p] = rs[len(rs)-1].Offset + 1
		}
	}
	return out
}

// produceOpts shape the upstream workload.
type produceOpts struct {
	Records    int     // at least this many committed records
	Partitions int32   // records spread over partitions 0..Partitions-1
	AbortRatio float64 // fraction of transactions aborted
	MaxTxn     int     // records per transaction: 1..MaxTxn
	BodyBytes  int
	Seed       uint64
	Key        func(seq int) []byte            // optional record key
	Partition  func(seq int) int32             // optional partition choice
	Value      func(seq int, id string) []byte // optional value (default JSON)
}

// produce writes transactions until o.Records committed records exist and
// logs them in u.
func produce(t testing.TB, bootstrap, topic string, o produceOpts, u *upstream) {
	t.Helper()
	if o.MaxTxn == 0 {
		o.MaxTxn = 200
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID(fmt.Sprintf("up-%s-%d", topic, o.Seed)),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(8<<20),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	body := strings.Repeat("x", o.BodyBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	u.mu.Lock()
	if u.committed == nil {
		u.committed = map[int32][]upRecord{}
	}
	u.mu.Unlock()
	for u.total() < o.Records {
		size := 1 + rng.IntN(o.MaxTxn)
		abort := rng.Float64() < o.AbortRatio
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		recs := make([]*kgo.Record, size)
		seqs := make([]int, size)
		u.mu.Lock()
		for i := range recs {
			u.seq++
			id := fmt.Sprintf("%s-%d", topic, u.seq)
			var v []byte
			if o.Value != nil {
				v = o.Value(u.seq, id)
			} else {
				v, _ = json.Marshal(map[string]any{"id": id, "seq": u.seq, "body": body})
			}
			r := &kgo.Record{Partition: rng.Int32N(o.Partitions), Value: v}
			if o.Key != nil {
				r.Key = o.Key(u.seq)
			}
			if o.Partition != nil {
				r.Partition = o.Partition(u.seq)
			}
			recs[i], seqs[i] = r, u.seq
		}
		u.mu.Unlock()
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		end := kgo.TryCommit
		if abort {
			end = kgo.TryAbort
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
		u.mu.Lock()
		u.totalTx++
		if abort {
			u.abortedTx++
			u.abortedRc += len(recs)
		} else {
			for i, r := range recs {
				u.committed[r.Partition] = append(u.committed[r.Partition], upRecord{Partition: r.Partition, Offset: r.Offset, ID: fmt.Sprintf("%s-%d", topic, seqs[i]), Seq: seqs[i], Key: r.Key, Value: r.Value})
			}
		}
		u.mu.Unlock()
	}
	u.mu.Lock()
	for p := range u.committed {
		sort.Slice(u.committed[p], func(i, j int) bool { return u.committed[p][i].Offset < u.committed[p][j].Offset })
	}
	u.mu.Unlock()
}

// createTopic creates a topic that accepts records up to 8 MiB.
func createTopic(t testing.TB, k *harness.KafkaService, topic string, partitions int32) {
	t.Helper()
	cl := k.Client(t)
	adm := kadm.NewClient(cl)
	mb := "8388608"
	resp, err := adm.CreateTopic(context.Background(), partitions, 1, map[string]*string{"max.message.bytes": &mb}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// txsinkBinary builds cmd/txsink once per test binary.
func txsinkBinary(t testing.TB) string { return harness.TxsinkBinary(t) }

// proc is a process the test started (harness.Process), its output
// collected.
type proc struct {
	*harness.Process
	out *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (p *proc) output() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.out.b.String()
}

// exited reports whether the process ended, and its exit code (-1 when
// killed by a signal).
func (p *proc) exited() (bool, int) {
	if !p.Exited() {
		return false, 0
	}
	return true, p.ExitCode()
}

func (p *proc) wait(d time.Duration) bool { return p.Wait(d) }

func (p *proc) signal(sig syscall.Signal) { p.Signal(sig) }

// writeConnector writes a connector config file and returns its path.
func writeConnector(t testing.TB, cfg map[string]string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": cfg["name"], "config": cfg})
	path := filepath.Join(t.TempDir(), "connector.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startTxsink runs "txsink run" with the connector config; the process is
// killed at cleanup if still running.
func startTxsink(t testing.TB, bootstrap, cfgPath, workerID string, env ...string) *proc {
	t.Helper()
	return runTxsink(t, []string{"run", "-bootstrap", bootstrap, "-config", cfgPath, "-worker-id", workerID}, workerID, env)
}

// startUnsafeTxsink is startTxsink for a negative control: the process
// accepts test-only settings (txsink.test.unsafe.disable.fencing), which
// txsink refuses without the flag.
func startUnsafeTxsink(t testing.TB, bootstrap, cfgPath, workerID string, env ...string) *proc {
	t.Helper()
	return runTxsink(t, []string{"run", "-bootstrap", bootstrap, "-config", cfgPath, "-worker-id", workerID, "-allow-unsafe-test-settings"}, workerID, env)
}

// runTxsink runs the txsink binary with args; the process is killed at
// cleanup if still running.
func runTxsink(t testing.TB, args []string, workerID string, env []string) *proc {
	t.Helper()
	cmd := exec.Command(txsinkBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	return startProc(t, cmd, "txsink "+workerID)
}

// startProc starts cmd, collecting its output; at cleanup the process
// ends if still running (stop: SIGTERM, then SIGKILL after stop; zero:
// SIGKILL at once, a stopped one continued first), and its output's tail
// is logged when the test failed (or TXSINK_TEST_VERBOSE is set).
func startProc(t testing.TB, cmd *exec.Cmd, label string) *proc {
	t.Helper()
	return startProcStop(t, cmd, label, 0)
}

// startProcStop is startProc ending the process at cleanup with SIGTERM,
// waiting up to stop before it kills it.
func startProcStop(t testing.TB, cmd *exec.Cmd, label string, stop time.Duration) *proc {
	t.Helper()
	out := &syncBuffer{}
	hp, err := harness.StartCommand(cmd, out)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Process: hp, out: out}
	t.Cleanup(func() {
		if stop > 0 {
			p.Stop(stop)
		} else {
			p.Kill()
		}
		if t.Failed() || os.Getenv("TXSINK_TEST_VERBOSE") != "" {
			t.Logf("%s output (tail):\n%s", label, tail(p.output(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// sinkOffsets reads the connector's stored next offsets.
func sinkOffsets(ctx context.Context, pool *pgxpool.Pool, connector string) (map[int32]int64, error) {
	rows, err := pool.Query(ctx, `SELECT partition, coalesce(next_offset, -1) FROM txsink_offsets WHERE connector = $1`, connector)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, err
		}
		out[p] = n
	}
	return out, rows.Err()
}

// waitWritten waits until the stored offsets that read returns add up to
// more than n (a stream is under way), or fails after a minute or two.
func waitWritten(t testing.TB, read func() map[int32]int64, n int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		got := read()
		sum := int64(0)
		for _, off := range got {
			sum += max(off, 0)
		}
		if sum > n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress before %s: %v", what, got)
		}
	}
}

// drained reports whether every partition's stored offset reached the
// upstream end.
func drained(ctx context.Context, pool *pgxpool.Pool, connector string, ends map[int32]int64) bool {
	got, err := sinkOffsets(ctx, pool, connector)
	if err != nil {
		return false
	}
	for p, e := range ends {
		if got[p] < e {
			return false
		}
	}
	return true
}

// waitDrained waits until the sink reached the upstream end, or fails.
func waitDrained(t testing.TB, pool *pgxpool.Pool, connector string, u *upstream, d time.Duration, alive func() error) {
	t.Helper()
	ends := u.ends()
	deadline := time.Now().Add(d)
	ctx := context.Background()
	for !drained(ctx, pool, connector, ends) {
		if time.Now().After(deadline) {
			got, _ := sinkOffsets(ctx, pool, connector)
			t.Fatalf("not drained after %v: sink offsets %v, upstream ends %v", d, got, ends)
		}
		if alive != nil {
			if err := alive(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sinkRow is one row of a test table.
type sinkRow struct {
	Partition int32
	Offset    int64
	ID        string
	RN        int64
}

// readRows reads the kafka coordinates, id and insertion order of table.
func readRows(t testing.TB, pool *pgxpool.Pool, table string) []sinkRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT __connect_partition, __connect_offset, id, rn FROM `+pgx.Identifier{table}.Sanitize()+` ORDER BY rn`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sinkRow, error) {
		var s sinkRow
		err := r.Scan(&s.Partition, &s.Offset, &s.ID, &s.RN)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exactness compares the table with the producer's log and returns every
// anomaly: missing, duplicated, unexpected (aborted or unknown) records,
// and records out of offset order within a partition.
func exactness(u *upstream, rows []sinkRow, extra map[int32][2]int64) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	type key struct {
		p   int32
		off int64
	}
	want := map[key]string{}
	for p, rs := range u.committed {
		for _, r := range rs {
			want[key{p, r.Offset}] = r.ID
		}
	}
	seen := map[key]int{}
	var problems []string
	last := map[int32]int64{}
	for _, r := range rows {
		k := key{r.Partition, r.Offset}
		seen[k]++
		id, ok := want[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("unexpected row p%d@%d id=%s (aborted or never produced)", r.Partition, r.Offset, r.ID))
			continue
		}
		if id != r.ID {
			problems = append(problems, fmt.Sprintf("value mismatch p%d@%d: row id %s, produced %s", r.Partition, r.Offset, r.ID, id))
		}
		if l, ok := last[r.Partition]; ok && r.Offset <= l && extra == nil {
			problems = append(problems, fmt.Sprintf("out of order p%d: offset %d after %d", r.Partition, r.Offset, l))
		}
		last[r.Partition] = r.Offset
	}
	for k := range want {
		n := seen[k]
		wantN := 1
		if rng, ok := extra[k.p]; ok && k.off >= rng[0] && k.off < rng[1] {
			wantN = 2
		}
		switch {
		case n == 0:
			problems = append(problems, fmt.Sprintf("missing p%d@%d", k.p, k.off))
		case n != wantN:
			problems = append(problems, fmt.Sprintf("p%d@%d written %d times, want %d", k.p, k.off, n, wantN))
		}
	}
	sort.Strings(problems)
	return problems
}

// createEventsTable creates the test table: no primary key, so duplicates
// stay visible; rn records insertion order.
func createEventsTable(t testing.TB, pool *pgxpool.Pool, table string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (
		id text NOT NULL, seq bigint, body text,
		__connect_topic text, __connect_partition int, __connect_offset bigint,
		rn bigserial)`)
	if err != nil {
		t.Fatal(err)
	}
}

// preparedXacts counts our prepared transactions left in the database.
func preparedXacts(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE 'txsink%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// preparedRounds counts our prepared transactions that hold a round's
// batches (txsink2_), and fails t if one of them has no membership rows:
// recovery could not tell which batches it holds.
func preparedRounds(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n, orphans int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM txsink_offsets_rounds r WHERE r.gid = x.gid))
		FROM pg_prepared_xacts x WHERE database = current_database() AND gid LIKE 'txsink2%'`).Scan(&n, &orphans); err != nil {
		t.Fatal(err)
	}
	if orphans > 0 {
		t.Errorf("%d of %d prepared round transactions have no membership rows", orphans, n)
	}
	return n
}

func connectPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sinkEnv starts (or reuses) Kafka and PostgreSQL for a sink test and
// returns the bootstrap address and a fresh database.
func sinkEnv(t *testing.T) (*harness.KafkaService, string) {
	t.Helper()
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	return k, pg.NewDatabase(t)
}

// baseConnector returns a postgres connector config for tests.
func baseConnector(name, topic, dbURL, delivery string) map[string]string {
	return map[string]string{
		"name":                   name,
		"connector.class":        "postgres",
		"topics":                 topic,
		"connection.url":         dbURL,
		"delivery.guarantee":     delivery,
		"pk.mode":                "kafka",
		"table.name.format":      "${topic}",
		"batch.max.records":      "5000",
		"batch.linger.ms":        "20",
		"session.timeout.ms":     "6000",
		"transaction.timeout.ms": "10000",
	}
}

// decisionAborted is the log line of a round the Kafka decision aborted.
const decisionAborted = "round aborted by the decision"

// logShowsRejection reports whether a zombie's log shows its commit
// rejected as marker says. A Kafka decision can be refused two ways: the
// session aborts the round (a rebalance, KIP-447 generation fencing), or,
// when the zombie stayed frozen past transaction.timeout.ms, the
// coordinator has already aborted its transaction and bumped the epoch, so
// ending it fails (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED) and the
// runtime restarts the session and recovers.
func logShowsRejection(out, marker string) bool {
	if strings.Contains(out, marker) {
		return true
	}
	if marker != decisionAborted {
		return false
	}
	return strings.Contains(out, "INVALID_PRODUCER_EPOCH") || strings.Contains(out, "PRODUCER_FENCED")
}

// decodeOffsets decodes an offsets body, failing the test when it is not
// one.
func decodeOffsets(t *testing.T, body string) harness.ConnectOffsets {
	t.Helper()
	var offs harness.ConnectOffsets
	if err := json.Unmarshal([]byte(body), &offs); err != nil {
		t.Fatalf("offsets body %q: %v", body, err)
	}
	return offs
}

// missingDatabaseURL is dbURL with a database that does not exist on its
// server: a sink that cannot open and will not by itself, which FAILED
// means (a server that cannot be reached is waited for instead: RUNNING
// with the waiting cause "database", docs/api.md).
func missingDatabaseURL(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/txsink_no_such_database"
	return u.String()
}
