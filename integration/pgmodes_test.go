package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// TestPostgresModes runs every delivery guarantee end to end. Without
// faults each is exact. With one crash between the two transactions of the
// non-atomic modes, at_least_once duplicates and at_most_once loses, which
// shows that the exactness check of the other tests can fail.
func TestPostgresModes(t *testing.T) {
	k := harness.Kafka(t)
	cases := []struct {
		mode      string
		crash     bool
		wantExact bool
		wantKind  string // anomaly expected when not exact
	}{
		{"exactly_once", false, true, ""},
		{"exactly_once_sink", false, true, ""},
		{"at_least_once", false, true, ""},
		{"at_most_once", false, true, ""},
		{"exactly_once", true, true, ""},
		{"exactly_once_sink", true, true, ""},
		{"at_least_once", true, false, "written 2 times"},
		{"at_most_once", true, false, "missing"},
	}
	for i, c := range cases {
		name := c.mode
		if c.crash {
			name += "/crash-after-write"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := harness.Postgres(t).NewDatabase(t)
			topic := fmt.Sprintf("modes-%d-%s", i, randSuffix(t))
			conn := topic
			k.CreateTopic(t, topic, 2)
			pool := connectPool(t, db)
			createEventsTable(t, pool, topic)
			var u upstream
			produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 2, AbortRatio: 0.15, MaxTxn: 50, Seed: uint64(100 + i)}, &u)
			cfg := baseConnector(conn, topic, db, c.mode)
			cfg["batch.max.records"] = "500"
			path := writeConnector(t, cfg)
			if c.crash {
				p := startTxsink(t, k.Bootstrap, path, "w1", failpoint.Env+"="+failpoint.AfterWrite+":2")
				if !p.wait(90*time.Second) || func() bool { _, code := p.exited(); return code != -1 }() {
					t.Fatalf("txsink was not killed at %s:\n%s", failpoint.AfterWrite, tail(p.output(), 3000))
				}
			}
			p := startTxsink(t, k.Bootstrap, path, "w1")
			waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)
			problems := exactness(&u, readRows(t, pool, topic), nil)
			if c.wantExact {
				if len(problems) > 0 {
					t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
				}
				return
			}
			found := 0
			for _, p := range problems {
				if strings.Contains(p, c.wantKind) {
					found++
				}
			}
			if found == 0 {
				t.Fatalf("%s after a crash between its two transactions should show %q anomalies; got %d anomalies: %v", c.mode, c.wantKind, len(problems), problems[:min(5, len(problems))])
			}
			t.Logf("%s after a crash: %d %q anomalies, as the mode implies", c.mode, found, c.wantKind)
		})
	}
}

func waitStopped(t *testing.T, p *proc, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for p.State() != "T" {
		if ok, code := p.exited(); ok {
			t.Fatalf("process exited (%d) instead of stopping:\n%s", code, tail(p.output(), 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("process did not stop at its failpoint within %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPostgresZombie pauses a worker (SIGSTOP from a failpoint inside a
// round) for longer than the group session timeout; a second worker takes
// its partitions and writes past them; then the first resumes (SIGCONT).
// Its commit must be rejected: by the group generation of the Kafka
// decision in exactly_once, by the sink's fence and compare-and-set in
// exactly_once_sink. The "rewind" variants add an administrative offsets
// rewind while the zombie is paused, which puts next_offset back where the
// zombie expects it: only the fence can reject it then. The negative
// controls switch the sink checks off and must produce duplicates.
//
// Each case tells in one run. The zombies the fence must stop freeze past
// every ownership check the task makes, with nothing of the round written
// and no sink transaction open: before-write (local rounds) or after-begin
// (two-phase rounds: the Kafka transaction begun, nothing prepared). So
// PostgreSQL's idle-in-transaction timeout has nothing of theirs to end
// during the freeze, the task cannot drop the round on learning of its
// revocation, and once continued the round goes straight to its write:
// only the fence (or, switched off, nothing) decides it. The test then
// waits for that outcome (the rejection in the zombie's log, or the
// duplicate in the table), not for a fixed time.
func TestPostgresZombie(t *testing.T) {
	k := harness.Kafka(t)
	cases := []struct {
		name, mode, point string
		rewind, unsafe    bool
		rejectLog         string
	}{
		// Frozen with its round prepared: the new owner aborts the
		// prepared batches (the Kafka decision was not taken), and the
		// zombie's decision is refused by the group generation.
		{"exactly_once", "exactly_once", failpoint.AfterPrepare, false, false, decisionAborted},
		{"exactly_once_sink", "exactly_once_sink", failpoint.BeforeWrite, false, false, "fence conflict"},
		{"exactly_once/rewind", "exactly_once", twophase.HookAfterBegin, true, false, "fence conflict"},
		{"exactly_once_sink/rewind", "exactly_once_sink", failpoint.BeforeWrite, true, false, "fence conflict"},
		{"negative/exactly_once_sink-unfenced", "exactly_once_sink", failpoint.BeforeWrite, false, true, ""},
		{"negative/exactly_once_sink-unfenced-rewind", "exactly_once_sink", failpoint.BeforeWrite, true, true, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := harness.Postgres(t).NewDatabase(t)
			topic := fmt.Sprintf("zombie-%d-%s", i, randSuffix(t))
			conn := topic
			k.CreateTopic(t, topic, 2)
			pool := connectPool(t, db)
			createEventsTable(t, pool, topic)
			var u upstream
			produce(t, k.Bootstrap, topic, produceOpts{Records: 2000, Partitions: 2, AbortRatio: 0.1, MaxTxn: 40, Seed: uint64(200 + i)}, &u)
			cfg := baseConnector(conn, topic, db, c.mode)
			cfg["batch.max.records"] = "200"
			// One round in flight: the zombie's frozen round is the only
			// one, with no round written ahead (an open transaction the
			// server's idle-transaction timeout could end during the
			// freeze). Pipelined zombies are in the chaos suite (zombie
			// and zombie-failpoint faults on the exactly_once and
			// exactly_once_sink lanes, whose unfenced control must fail).
			cfg["rounds.max.in.flight"] = "1"
			if c.unsafe {
				cfg["txsink.test.unsafe.disable.fencing"] = "true"
			}
			path := writeConnector(t, cfg)
			start := startTxsink
			if c.unsafe {
				start = startUnsafeTxsink
			}

			// A freezes inside its third round.
			a := start(t, k.Bootstrap, path, "wA", failpoint.Env+"="+c.point+":3:stop")
			waitStopped(t, a, 90*time.Second)
			ctx := context.Background()
			atPause, err := sinkOffsets(ctx, pool, conn)
			if err != nil {
				t.Fatal(err)
			}
			// B takes over once A's session times out, and drains.
			b := start(t, k.Bootstrap, path, "wB")
			waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
			var extra map[int32][2]int64
			if c.rewind {
				b.signal(syscall.SIGTERM)
				b.wait(30 * time.Second)
				ends := u.ends()
				extra = map[int32][2]int64{}
				var reset []offsets.Position
				for p, off := range atPause {
					extra[p] = [2]int64{off, ends[p]}
					reset = append(reset, offsets.Position{Topic: topic, Partition: p, Next: off})
				}
				rewind(t, pool, conn, reset)
				b = start(t, k.Bootstrap, path, "wB2")
				waitDrained(t, pool, conn, &u, 2*time.Minute, nil)
			}
			// The zombie resumes straight into its round's write (or
			// decision): wait for what that write did.
			a.signal(syscall.SIGCONT)
			if c.unsafe {
				waitFor(t, 2*time.Minute, "negative control: with the sink's fence and compare-and-set switched off the zombie's write should duplicate rows (the test cannot tell otherwise)", func() (bool, string) {
					return len(exactness(&u, readRows(t, pool, topic), extra)) > 0, "the table is exact; zombie's log:\n" + tail(a.output(), 3000)
				})
			} else {
				waitFor(t, 2*time.Minute, "the zombie's commit rejected", func() (bool, string) {
					return logShowsRejection(a.output(), c.rejectLog), fmt.Sprintf("no %q in the zombie's log:\n%s", c.rejectLog, tail(a.output(), 3000))
				})
			}
			b.signal(syscall.SIGTERM)
			a.signal(syscall.SIGTERM)
			b.wait(30 * time.Second)
			a.wait(30 * time.Second)
			problems := exactness(&u, readRows(t, pool, topic), extra)
			if c.unsafe {
				if len(problems) == 0 {
					t.Fatal("negative control: the zombie's duplicate is gone from the table")
				}
				t.Logf("negative control caught %d anomalies, e.g. %s", len(problems), problems[0])
				return
			}
			if len(problems) > 0 {
				t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
			}
			if n := preparedXacts(t, pool); n != 0 {
				t.Errorf("%d prepared transactions left", n)
			}
		})
	}
}

// TestPostgresZombieFrozenInFence: an owner frozen inside the fence bump
// of an assignment holds the offsets rows in an open transaction (a paused
// VM, a SIGSTOP, a partition). Its new owner's fence bump waits on those
// rows; connection.idle.transaction.timeout.ms makes PostgreSQL end the
// frozen session, so the new owner fences and drains, and the zombie, once
// resumed, writes nothing twice. The negative control sets the timeout to
// an hour: the new owner then stays blocked, so the test can fail.
func TestPostgresZombieFrozenInFence(t *testing.T) {
	k := harness.Kafka(t)
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		db := harness.Postgres(t).NewDatabase(t)
		pool := connectPool(t, db)
		f := freezeInFence(t, k, db, pool, "4000")
		waitDrained(t, pool, f.topic, f.u, 2*time.Minute, nil)
		// The zombie resumes on a connection the server ended. It has
		// acted once it rejoined the group (its session timed out during
		// the freeze) and was given a partition again under a new fence;
		// what it wrote by then, and what both write after, must stay
		// exact.
		assigned := strings.Count(f.a.output(), "partitions assigned and fenced")
		f.a.signal(syscall.SIGCONT)
		waitFor(t, 2*time.Minute, "the resumed zombie rejoined the group and was assigned a partition", func() (bool, string) {
			return strings.Count(f.a.output(), "partitions assigned and fenced") > assigned, tail(f.a.output(), 2000)
		})
		waitDrained(t, pool, f.topic, f.u, 2*time.Minute, nil)
		f.b.signal(syscall.SIGTERM)
		f.a.signal(syscall.SIGTERM)
		f.b.wait(30 * time.Second)
		f.a.wait(30 * time.Second)
		if problems := exactness(f.u, readRows(t, pool, f.topic), nil); len(problems) > 0 {
			t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
		}
		if n := preparedXacts(t, pool); n != 0 {
			t.Errorf("%d prepared transactions left", n)
		}
	})
	// The negative control. Its premise is that the frozen owner's session
	// holds the offsets row, idle in its open transaction, for the whole
	// observation: the holder is looked up first (none found fails the
	// test: the control could not tell) and checked again at the end. The
	// observation ends once the new owner's fence bump was refused three
	// times on the locked row (each try waits out the lock timeout), which
	// is past A's session timeout (B is assigned only then): no row may
	// have been written by then.
	t.Run("negative/unbounded", func(t *testing.T) {
		t.Parallel()
		db := harness.Postgres(t).NewDatabase(t)
		pool := connectPool(t, db)
		f := freezeInFence(t, k, db, pool, "3600000")
		if f.holder == 0 {
			t.Fatalf("negative control: no session idle in transaction holds a lock on %s after wA stopped in its fence bump: the premise is not there, the control cannot tell", offsets.DefaultTable)
		}
		const refusals = 3
		waitFor(t, 3*time.Minute, "the new owner's fence bump refused on the frozen owner's locked row", func() (bool, string) {
			n := strings.Count(f.b.output(), "offsets row locked")
			return n >= refusals, fmt.Sprintf("%d of %d refusals; %d rows written; new owner's log:\n%s", n, refusals, rowCount(t, pool, f.topic), tail(f.b.output(), 2000))
		})
		rows := rowCount(t, pool, f.topic)
		still := holdsOffsets(t, pool, f.holder)
		f.a.signal(syscall.SIGKILL)
		f.b.signal(syscall.SIGTERM)
		f.a.wait(30 * time.Second)
		f.b.wait(30 * time.Second)
		if rows != 0 {
			t.Fatalf("negative control: the frozen owner's session %d (still holding the row: %v) was there, yet %d rows were written (log:\n%s)", f.holder, still, rows, tail(f.b.output(), 2000))
		}
		if !still {
			t.Fatalf("negative control: the frozen owner's session %d no longer holds the offsets row, with an hour-long idle-in-transaction timeout: the premise broke (log:\n%s)", f.holder, tail(f.b.output(), 2000))
		}
		t.Logf("negative control: the new owner stayed blocked on the frozen owner's locked row (session %d), as designed", f.holder)
	})
}

// frozenFence is one run of the frozen-owner scenario: wA stopped inside
// its first fence bump, wB started after it.
type frozenFence struct {
	topic  string
	u      *upstream
	a, b   *proc
	holder int32 // the backend idle in transaction with a lock on the offsets table; 0 if none was seen
}

// freezeInFence creates a topic and table of its own in db, starts wA with
// connection.idle.transaction.timeout.ms idleMs so that it freezes inside
// its first fence bump (its first partition's offsets row locked), finds
// the frozen session, then starts wB.
func freezeInFence(t *testing.T, k *harness.KafkaService, db string, pool *pgxpool.Pool, idleMs string) frozenFence {
	t.Helper()
	f := frozenFence{topic: "fence-frozen-" + randSuffix(t), u: &upstream{}}
	k.CreateTopic(t, f.topic, 2)
	createEventsTable(t, pool, f.topic)
	produce(t, k.Bootstrap, f.topic, produceOpts{Records: 600, Partitions: 2, AbortRatio: 0.1, MaxTxn: 40, Seed: 77}, f.u)
	cfg := baseConnector(f.topic, f.topic, db, "exactly_once")
	cfg["connection.idle.transaction.timeout.ms"] = idleMs
	path := writeConnector(t, cfg)
	f.a = startTxsink(t, k.Bootstrap, path, "wA", failpoint.Env+"="+failpoint.InFence+":1:stop")
	waitStopped(t, f.a, 90*time.Second)
	for deadline := time.Now().Add(10 * time.Second); f.holder == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		f.holder = offsetsHolder(t, pool)
	}
	if f.holder == 0 {
		t.Logf("no session idle in transaction holds a lock on %s after wA stopped in its fence bump", offsets.DefaultTable)
	}
	f.b = startTxsink(t, k.Bootstrap, path, "wB")
	return f
}

// offsetsHolder returns the backend of another session, idle in an open
// transaction, that holds a lock on the offsets table; 0 if there is none.
func offsetsHolder(t *testing.T, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	err := pool.QueryRow(context.Background(), `SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND l.relation = to_regclass($1) AND a.state = 'idle in transaction' AND a.pid <> pg_backend_pid()
		ORDER BY a.pid LIMIT 1`, offsets.DefaultTable).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// holdsOffsets reports whether backend pid is still idle in transaction
// with a lock on the offsets table.
func holdsOffsets(t *testing.T, pool *pgxpool.Pool, pid int32) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND l.relation = to_regclass($1) AND a.state = 'idle in transaction' AND a.pid = $2`, offsets.DefaultTable, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func rewind(t *testing.T, pool *pgxpool.Pool, conn string, ps []offsets.Position) {
	t.Helper()
	st := offsets.NewPG(pool, "public", "")
	if err := st.Reset(context.Background(), conn, false, ps); err != nil {
		t.Fatal(err)
	}
}
