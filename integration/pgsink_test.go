package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/failpoint"
)

// TestPostgresExactlyOnceDrain: an upstream transactional producer writes
// 100,000 committed records over 6 partitions, aborting about 15 % of its
// transactions; a txsink process drains them in exactly_once mode. The
// table holds exactly the committed records, once each, in offset order
// per partition, and the stored next_offset is each partition's end.
func TestPostgresExactlyOnceDrain(t *testing.T) {
	k, db := sinkEnv(t)
	const topic, conn = "drain", "drain-eo"
	k.CreateTopic(t, topic, 6)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)

	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 100_000, Partitions: 6, AbortRatio: 0.15, MaxTxn: 400, BodyBytes: 40, Seed: 1}, &u)
	if u.abortedTx*10 < u.totalTx {
		t.Fatalf("workload aborted %d of %d transactions, want >= 10 %%", u.abortedTx, u.totalTx)
	}
	t.Logf("upstream: %d committed records, %d/%d transactions aborted (%d records)", u.total(), u.abortedTx, u.totalTx, u.abortedRc)

	cfg := baseConnector(conn, topic, db, "exactly_once")
	start := time.Now()
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w1")
	waitDrained(t, pool, conn, &u, 4*time.Minute, func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d", code)
		}
		return nil
	})
	t.Logf("drained %d records in %v", u.total(), time.Since(start).Round(time.Millisecond))
	p.signal(syscall.SIGTERM)
	if !p.wait(30 * time.Second) {
		t.Fatal("txsink did not stop within 30s of SIGTERM")
	}

	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
	got, err := sinkOffsets(context.Background(), pool, conn)
	if err != nil {
		t.Fatal(err)
	}
	for part, end := range u.ends() {
		if got[part] != end {
			t.Errorf("partition %d: stored next_offset %d, want %d (one past the last committed record)", part, got[part], end)
		}
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestPostgresCrashPoints kills the txsink process (SIGKILL, from a
// failpoint inside the process) at each point of the protocol, five times
// each, restarting it every time, while the producer keeps writing. The
// result stays exact and no prepared transaction of ours is left. The two
// ahead-* points are the windows of pipelined rounds (the default): round
// N prepared and undecided with round N+1 written ahead, and round N
// committed with round N+1 written ahead and not prepared; the producer's
// backlog makes the task write ahead, and a point that never fires fails
// the test. exactly_once_sink (pipelined too) is killed at its three
// points.
func TestPostgresCrashPoints(t *testing.T) {
	k, _ := sinkEnv(t)
	type crash struct{ mode, point string }
	var cases []crash
	for _, p := range []string{failpoint.AfterPoll, failpoint.AfterWrite, failpoint.AfterPrepare, failpoint.AfterDecide, failpoint.AfterCommit,
		failpoint.AheadBeforeDecide, failpoint.AheadAfterCommit} {
		cases = append(cases, crash{"exactly_once", p})
	}
	// exactly_once_sink, pipelined: rows written ahead before the local
	// COMMIT (after-write), and the same two windows: round N written and
	// not committed with N+1 written ahead; N committed with N+1 written
	// ahead and its offsets not set.
	for _, p := range []string{failpoint.AfterWrite, failpoint.AheadBeforeDecide, failpoint.AheadAfterCommit} {
		cases = append(cases, crash{"exactly_once_sink", p})
	}
	// exactly_once without write-ahead at commit.parallelism=1: a round
	// of two or three partitions is one prepared transaction (txsink2_,
	// its batches in the membership table).
	// after-write is after the membership rows and before PREPARE.
	for _, p := range []string{failpoint.AfterWrite, failpoint.AfterPrepare, failpoint.AfterDecide, failpoint.AfterCommit} {
		cases = append(cases, crash{"exactly_once/rounds=1", p})
	}
	// exactly_once with write-ahead at commit.parallelism=1: round N+1 is
	// written ahead as one transaction of its batches (StageRound) while
	// round N prepares, decides and commits. after-write is after the
	// membership rows and before PREPARE of the transaction written ahead.
	for _, p := range []string{failpoint.AfterWrite, failpoint.AheadBeforeDecide, failpoint.AheadAfterCommit} {
		cases = append(cases, crash{"exactly_once/ahead-rounds=1", p})
	}
	for i, c := range cases {
		point := c.point
		t.Run(c.mode+"/"+point, func(t *testing.T) {
			t.Parallel()
			db := harness.Postgres(t).NewDatabase(t)
			topic := "crash-" + point + "-" + randSuffix(t)
			conn := topic
			k.CreateTopic(t, topic, 3)
			pool := connectPool(t, db)
			createEventsTable(t, pool, topic)
			mode, ahead := strings.CutSuffix(c.mode, "/ahead-rounds=1")
			mode, serial := strings.CutSuffix(mode, "/rounds=1")
			cfg := baseConnector(conn, topic, db, mode)
			cfg["batch.max.records"] = "300"
			if ahead {
				cfg["commit.parallelism"] = "1"
			}
			if serial {
				// One transaction per round: any round of two partitions
				// or more is a txsink2_ one. (At commit.parallelism 2 a
				// round that held only two partitions was two batches
				// alone, and a CI run found no txsink2_ at any kill.)
				cfg["rounds.max.in.flight"] = "1"
				cfg["commit.parallelism"] = "1"
			}
			cfgPath := writeConnector(t, cfg)
			// Rounds found prepared as one transaction at a kill.
			roundsPrepared := 0

			var u upstream
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				produce(t, k.Bootstrap, topic, produceOpts{Records: 6000, Partitions: 3, AbortRatio: 0.15, MaxTxn: 60, Seed: uint64(10 + i)}, &u)
			}()
			kills := 0
			for kills < 5 {
				p := startTxsink(t, k.Bootstrap, cfgPath, "w1", failpoint.Env+"="+point+":"+fmt.Sprint(1+kills%3))
				if !p.wait(90 * time.Second) {
					t.Fatalf("failpoint %s did not fire within 90s (kill %d)", point, kills+1)
				}
				if _, code := p.exited(); code != -1 {
					t.Fatalf("txsink exited with %d instead of being killed at %s:\n%s", code, point, tail(p.output(), 3000))
				}
				roundsPrepared += preparedRounds(t, pool)
				kills++
			}
			if (serial || ahead) && (point == failpoint.AfterPrepare || point == failpoint.AfterDecide || point == failpoint.AheadBeforeDecide) && roundsPrepared == 0 {
				// Whether a kill lands on a round of two partitions or more
				// depends on how the producer's records spread: not an
				// assertion (a CI run once found none). The txsink2_ path
				// is proven deterministically by the sink's dbtests
				// (TestRoundPreparedTogether, the conformance rounds case).
				t.Logf("no kill at %s found a round prepared as one transaction (txsink2_)", point)
			}
			wg.Wait()
			p := startTxsink(t, k.Bootstrap, cfgPath, "w1")
			waitDrained(t, pool, conn, &u, 3*time.Minute, nil)
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)
			if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
				t.Fatalf("after %d kills at %s: %d anomalies, first: %s", kills, point, len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
			}
			if n := preparedXacts(t, pool); n != 0 {
				t.Errorf("%d prepared transactions left", n)
			}
			t.Logf("%s: %d kills, %d records exact, %d round transactions (txsink2_) prepared at the kills", point, kills, u.total(), roundsPrepared)
		})
	}
}
