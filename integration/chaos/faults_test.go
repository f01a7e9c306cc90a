package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

// The focused fault tests: each runs one explicit plan (Profile.Plan) of a
// few faults of one family through the same runner as the seeded profiles,
// with lanes into both sinks, and asserts every fault was applied and
// every exactly-once lane ended exact, with the negative controls failing
// where one makes sense.

// focused is a short run of plan: 2 workers per lane, 3 partitions, 100
// records/s, every fault spaced by at least gap.
func focused(name string, e Env, gap time.Duration, plan []Fault, lanes ...Lane) Profile {
	for i := range plan {
		plan[i].Seq = i + 1
		plan[i].At = time.Duration(i+1) * gap
	}
	return Profile{
		Name: name, Seed: 1, Workers: 2, Partitions: 3, Lanes: lanes,
		Rate: 100, MaxTxn: 20, AbortRatio: 0.15, SessionTimeout: 6 * time.Second,
		Warmup: 5 * time.Second, Cooldown: 10 * time.Second, DrainTimeout: 90 * time.Second,
		CutWait: 30 * time.Second, Plan: plan, Env: e,
	}
}

// runFocused runs p and fails the test when the run fails or a fault on a
// lane not in mayFail could not be applied.
func runFocused(t *testing.T, p Profile, mayFail ...string) Summary {
	t.Helper()
	sum := runProfile(t, p, 15*time.Minute)
	if sum.Injected != len(p.Plan) {
		t.Errorf("%d of %d planned faults applied", sum.Injected, len(p.Plan))
	}
next:
	for _, fe := range sum.FaultErrors {
		for _, l := range mayFail {
			if strings.Contains(fe, "lane "+l+":") && !strings.Contains(fe, "\n") {
				continue next
			}
		}
		t.Errorf("fault not applied as planned: %s", fe)
	}
	return sum
}

// checkInDoubtLeft asserts a lane without recovery was caught by the
// checker with the leftover of kind (prepared transactions, or ClickHouse
// intents) the lost commit answer left.
func checkInDoubtLeft(t *testing.T, l *LaneSummary, kind verify.Kind) {
	t.Helper()
	if l == nil || l.Report == nil {
		t.Fatalf("no report for the lane without recovery")
	}
	if l.VerifyExit != 1 || l.Report.Counts[kind] == 0 {
		t.Errorf("negative control %s (recovery off): verify exit %d, anomalies %s; want %s found and exit 1",
			l.Name, l.VerifyExit, countList(l.Report.Counts), kind)
		return
	}
	t.Logf("negative control %s (recovery off) failed as it must: %s", l.Name, countList(l.Report.Counts))
}

// TestFaultCuts loses the answer to a commit the database executed:
// COMMIT PREPARED (PostgreSQL, exactly_once), the local COMMIT of rows and
// offsets compare-and-set (PostgreSQL, exactly_once_sink), a block insert
// (ClickHouse); then the commit request itself, never executed; then the
// answers to the Kafka decision's requests, executed by the brokers:
// EndTxn (the transaction coordinator ends the transaction) and
// TxnOffsetCommit (the group coordinator records the offsets in it). The
// runtime resolves each from durable records (invariant 7) and the result
// is exact. (franz-go retries a Kafka request whose answer was lost on a
// new connection, and the coordinator answers the retry from the
// transaction's state, so those never reach txsink as unknown outcomes.)
//
// The negative controls have recovery switched off
// (txsink.test.unsafe.disable.recovery) and get only the lost request: an
// executed COMMIT PREPARED whose answer is lost needs no recovery (the
// sink's offsets are the truth), but a COMMIT PREPARED that never ran
// leaves the decided batch prepared, and an interrupted ClickHouse commit
// leaves its intent pending: "txsink verify" reports them.
func TestFaultCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := env(t, true, true)
	exact := []string{"eo", "eos", "cheo"}
	sum := runFocused(t, focused("cuts", e, 3*time.Second,
		[]Fault{
			{Kind: CutCommit, Hit: 2, Lanes: exact},
			{Kind: CutCommit, Hit: 1, Request: true},
			{Kind: CutEndTxn, Hit: 2, Lanes: exact},
			{Kind: CutTxnOffsets, Hit: 2, Lanes: exact},
			{Kind: CutEndTxn, Hit: 1, Request: true, Lanes: exact},
		},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
		Lane{Name: "cheo", Sink: SinkClickHouse, Delivery: "exactly_once"},
		Lane{Name: "norec", Delivery: "exactly_once", UnsafeNoRecovery: true},
		Lane{Name: "chnorec", Sink: SinkClickHouse, Delivery: "exactly_once", UnsafeNoRecovery: true},
	))
	for _, name := range exact {
		checkExact(t, 1, sum.Lane(name))
	}
	checkInDoubtLeft(t, sum.Lane("norec"), verify.PreparedLeft)
	checkInDoubtLeft(t, sum.Lane("chnorec"), verify.IntentLeft)
}

// TestFaultNetwork puts latency spikes past the session and transaction
// timeouts, half-open connections (silent black holes, then cut) and
// bandwidth limits between the workers and Kafka, PostgreSQL and
// ClickHouse. Every lane ends exact.
func TestFaultNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := env(t, true, true)
	sum := runFocused(t, focused("network", e, 2*time.Second, []Fault{
		{Kind: NetLatency, Target: TargetKafka, Latency: 8 * time.Second, Hold: 6 * time.Second},
		{Kind: NetHalfOpen, Target: TargetPostgres, Hold: 8 * time.Second},
		{Kind: NetBandwidth, Target: TargetClickHouse, Rate: 16, Hold: 6 * time.Second},
		{Kind: NetHalfOpen, Target: TargetKafka, Hold: 8 * time.Second},
		{Kind: NetLatency, Target: TargetPostgres, Latency: 8 * time.Second, Hold: 5 * time.Second},
		{Kind: NetHalfOpen, Target: TargetClickHouse, Hold: 8 * time.Second},
		{Kind: NetBandwidth, Target: TargetKafka, Rate: 16, Hold: 6 * time.Second},
	},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
		Lane{Name: "cheo", Sink: SinkClickHouse, Delivery: "exactly_once"},
	))
	for _, name := range []string{"eo", "eos", "cheo"} {
		checkExact(t, 1, sum.Lane(name))
	}
}

// TestFaultBrokers kills, in the middle of rounds, the leader of a data
// partition, of the connector's __consumer_offsets partition (its group
// coordinator) and of its __transaction_state partition (its transaction
// coordinator), then the active KRaft controller, then restarts every
// broker in turn. Every lane ends exact.
func TestFaultBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := env(t, true, true)
	sum := runFocused(t, focused("brokers", e, 2*time.Second, []Fault{
		{Kind: BrokerLeader, Hit: 0, Hold: 2 * time.Second},
		{Kind: BrokerGroupCoordinator, Hold: 2 * time.Second},
		{Kind: BrokerTxnCoordinator, Hold: 2 * time.Second},
		{Kind: ControllerFailover, Hold: 2 * time.Second},
		{Kind: RollingRestart},
	},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
		Lane{Name: "cheo", Sink: SinkClickHouse, Delivery: "exactly_once"},
	))
	for _, name := range []string{"eo", "eos", "cheo"} {
		checkExact(t, 1, sum.Lane(name))
	}
}

// failoverEnv is env with the lanes' databases on a primary with a
// streaming standby (synchronous or not) instead of the shared server.
func failoverEnv(t *testing.T, synchronous bool) Env {
	t.Helper()
	e := env(t, false, false)
	pair := harness.StartPostgresReplicated(t, harness.ReplicationOptions{Synchronous: synchronous})
	e.Postgres = nil
	e.Failover = pair
	e.NewDatabase = func(string) (string, error) {
		both, _, _ := pair.NewDatabase(t)
		return both, nil
	}
	return e
}

// TestFaultPostgresFailover fails PostgreSQL over to its synchronous
// standby in the middle of a stream: a worker of each exactly_once lane is
// frozen right after a decision, its PREPAREs are on the standby, the
// primary is killed and the standby promoted; the connectors, whose
// connection.url names both servers with target_session_attrs=read-write,
// follow it, and recovery on the new primary commits the replicated
// prepared transactions the decision covers. Both lanes end exact, and
// the stored offsets never went backwards.
func TestFaultPostgresFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := failoverEnv(t, true)
	sum := runFocused(t, focused("pg-failover-sync", e, 3*time.Second,
		[]Fault{{Kind: PostgresFailover, Worker: 0}},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
	))
	for _, name := range []string{"eo", "eos"} {
		checkExact(t, 1, sum.Lane(name))
	}
}

// TestFaultPostgresFailoverAsync is the same failover with asynchronous
// replication and a standby that fell behind (its WAL receiver paused for
// 8 s while the primary went on committing): what the primary acknowledged
// after that is lost on failover. The sink is the source of truth for
// progress (invariant 1), so the lost batches are read again from Kafka and
// the final rows are exact; but rows and stored offsets that readers had
// seen went away for a while, which the checker reports as offsets going
// backwards. That is what synchronous replication is needed for.
func TestFaultPostgresFailoverAsync(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := failoverEnv(t, false)
	sum := runFocused(t, focused("pg-failover-async", e, 3*time.Second,
		[]Fault{{Kind: PostgresFailover, Worker: 0, Hold: 8 * time.Second}},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
	))
	for _, name := range []string{"eo", "eos"} {
		l := sum.Lane(name)
		if l == nil || l.Report == nil {
			t.Fatalf("no report for lane %s", name)
		}
		if !l.Drained || l.Report.Rows != l.Report.Committed {
			t.Errorf("lane %s: drained %v, %d rows for %d committed records: the lost batches must be written again", name, l.Drained, l.Report.Rows, l.Report.Committed)
		}
		c := l.Report.Counts
		if c[verify.Loss] != 0 || c[verify.Duplicate] != 0 || c[verify.DuplicateID] != 0 || c[verify.AbortedRead] != 0 {
			t.Errorf("lane %s: the final rows are not exact: %s", name, countList(c))
		}
		if l.VerifyExit != 1 || c[verify.OffsetBackwards] == 0 {
			t.Errorf("lane %s: verify exit %d, anomalies %s; want the offsets that went backwards with the lost commits reported", name, l.VerifyExit, countList(c))
		} else {
			t.Logf("lane %s: without synchronous replication, as expected: %s", name, countList(c))
		}
	}
}

// TestFaultDiskFull fills the PostgreSQL data directory's filesystem (a
// 128 MB tmpfs) in the middle of a stream for 15 s, then frees it. Writes
// fail with SQLSTATE 53100 meanwhile: the tasks wait with a growing
// backoff and say why ("waiting …", the "waiting" status of the REST API),
// write and skip nothing, and go on once space is back. Both lanes end
// exact.
func TestFaultDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	// On the lone broker: the fault is the database's, and the rows must
	// keep coming while the disk is full. The bodies ("xxx…") compress to
	// a few bytes in PostgreSQL, so a lane that writes slowly fits its
	// rows in pages it has and never needs a new one; one CI run saw the
	// three-broker cluster's producers commit one transaction in 5 s
	// while this test ran, and no write failed.
	e := loneBrokerEnv(t, false, false)
	pg := harness.StartPostgresSmallDisk(t, "128m")
	e.Postgres, e.Disk = pg, pg
	e.NewDatabase = func(string) (string, error) { return pg.NewDatabase(t), nil }
	p := focused("disk-full", e, 3*time.Second,
		[]Fault{{Kind: DiskFull, Hold: 15 * time.Second}},
		Lane{Name: "eo", Delivery: "exactly_once"},
		Lane{Name: "eos", Delivery: "exactly_once_sink"},
	)
	p.BodyBytes = 2000
	sum := runFocused(t, p)
	waited := 0
	for _, name := range []string{"eo", "eos"} {
		checkExact(t, 1, sum.Lane(name))
		logs, _ := filepath.Glob(filepath.Join(e.Dir, name+"-w*.log"))
		for _, f := range logs {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), "waiting for an unavailable dependency") && strings.Contains(string(b), "53100") {
				t.Logf("lane %s: %s waited on the full disk (SQLSTATE 53100)", name, filepath.Base(f))
				waited++
			}
		}
	}
	// A lane whose producer wrote little while the disk was full may need
	// no new page; the fault must have hit at least one.
	if waited == 0 {
		t.Errorf("no worker reported waiting on the full disk (SQLSTATE 53100): the fault did not happen")
	}
}

// TestFaultREST drives a connector through the REST API while its
// producer writes transactions (with aborts) the whole time: pause and
// resume, stop and resume, restarts (the connector with
// includeTasks=true&onlyFailed=false, the connector, a task), a config
// update, an offsets edit on the stopped connector (PATCH to the stored
// positions: see ConnectREST), delete and re-create with the same name.
// One PostgreSQL exactly_once lane on a cluster of two "txsink serve"
// workers (the lone broker). Every call must get Connect's status and the
// status endpoint must show the states Connect's would after each action
// (ConnectREST fails the fault otherwise), and the lane ends exact.
func TestFaultREST(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	e := loneBrokerEnv(t, true, false)
	e.REST = &ConnectREST{Logf: e.Logf}
	p := focused("rest", e, 2*time.Second, []Fault{
		{Kind: RESTPause, Hold: 3 * time.Second},
		{Kind: RESTStop, Hold: 3 * time.Second},
		{Kind: RESTRestart},
		{Kind: RESTConfig},
		{Kind: RESTOffsets, Hold: time.Second},
		{Kind: RESTRecreate, Hold: 3 * time.Second},
	}, Lane{Name: "eo", Delivery: "exactly_once"})
	p.Cluster = true
	sum := runFocused(t, p)
	checkExact(t, 1, sum.Lane("eo"))
}
