package cluster

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/internal/verify"
)

// TestClusterZombie (issue 16, acceptance 3): a worker frozen in a round
// past the task's ownership checks (SIGSTOP at the before-write failpoint:
// records in hand, nothing of the round written) past the session timeout
// loses its tasks and partitions to the others; continued (SIGCONT), it
// commits nothing: its write is refused by the sink's fence and the table
// stays exact. The negative control runs the same zombie with fencing
// switched off: its late write duplicates rows, so the check can fail.
// Both use exactly_once_sink, where the fence is the only guard
// (exactly_once adds KIP-447's generation fencing on top).
//
// The test tells in one run: frozen at before-write, the zombie's round
// holds no sink transaction (one round in flight: none is written ahead),
// so no idle-transaction timeout can end it during the freeze, and once
// continued it goes straight to its write, without another look at its
// assignment: only the fence (or, switched off, nothing) decides it. The
// freeze also stops the worker's other task wherever it is, maybe inside a
// transaction holding an offsets row, which its new owner then waits out
// (connection.idle.transaction.timeout.ms): that delays the take-over and
// may fail that task's late write on its ended session, but the aimed
// round's write is not affected.
func TestClusterZombie(t *testing.T) {
	for _, c := range []struct {
		name     string
		unfenced bool
	}{{"fenced", false}, {"unfenced_negative_control", true}} {
		t.Run(c.name, func(t *testing.T) {
			var args []string
			if c.unfenced {
				args = []string{"-allow-unsafe-test-settings"}
			}
			e := newEnv(t, 4, nil, args...)
			ws := e.start(3)
			a, b := ws[0], ws[1]
			prod, stopProd := e.upstream(300)
			name := e.connectorName("zombie")
			cfg := e.connector("exactly_once_sink", 4)
			// One round in flight: the frozen round is the task's only
			// one, with no round written ahead (an open transaction the
			// idle-transaction timeout could end during the freeze).
			// Pipelined zombies are in the chaos suite, whose unfenced
			// exactly_once_sink lane must fail.
			cfg["rounds.max.in.flight"] = "1"
			if c.unfenced {
				cfg["txsink.test.unsafe.disable.fencing"] = "true"
			}
			must(t, a, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
			waitStatus(t, a, name, 90*time.Second, "four tasks on three workers", func(st apiStatus) bool {
				ok, per := runningOn(st, 4, ids(ws...)...)
				return ok && per[b.ID] > 0
			})
			e.waitCaughtUp(name, prod, time.Minute)

			// B again, armed to freeze before the write of its 30th round.
			b.Stop(30 * time.Second)
			if err := b.Start(failpoint.BeforeWrite + "@" + name + ":30:stop"); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for !b.Stopped() {
				if !b.Running() || time.Now().After(deadline) {
					t.Fatalf("the armed worker did not freeze (running %v)", b.Running())
				}
				time.Sleep(50 * time.Millisecond)
			}
			frozen := time.Now()
			fr, _ := prod.Snapshot()
			waitStatus(t, a, name, 2*time.Minute, "the zombie's tasks running on the others", func(st apiStatus) bool {
				ok, _ := runningOn(st, 4, a.ID, ws[2].ID)
				return ok
			})
			// The others took over its partitions: everything
			// acknowledged when it froze is written (past what it holds).
			deadline = time.Now().Add(2 * time.Minute)
			for !e.caughtUp(name, fr) {
				if time.Now().After(deadline) {
					t.Fatalf("the others did not take over the zombie's partitions: sink %v, upstream at freeze %v", e.sinkOffsets(name), fr)
				}
				time.Sleep(100 * time.Millisecond)
			}
			resumed := time.Now()
			t.Logf("zombie %s frozen for %v; continued", b.ID, resumed.Sub(frozen).Round(time.Millisecond))
			b.Signal(syscall.SIGCONT)
			if err := b.WaitHealthy(t.Context()); err != nil {
				t.Fatal(err)
			}
			// Its round's write: refused by the fence, or, unfenced, a
			// second copy of rows the others wrote.
			deadline = time.Now().Add(2 * time.Minute)
			for {
				if c.unfenced && duplicatedIDs(t, e) > 0 {
					break
				}
				if !c.unfenced && strings.Contains(logSince(t, b.Logs(), resumed), "fence conflict") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no outcome of the zombie's write within 2 minutes of its resume (unfenced %v: no duplicate id in the table, or no fence conflict in its log):\n%s", c.unfenced, logSince(t, b.Logs(), resumed))
				}
				time.Sleep(100 * time.Millisecond)
			}
			waitStatus(t, a, name, 2*time.Minute, "settled after the zombie came back", func(st apiStatus) bool {
				ok, _ := runningOn(st, 4, ids(ws...)...)
				return ok
			})
			if c.unfenced {
				// No drain: the unfenced zombie also wrote its stale
				// offset blindly, maybe after the owner's last write on
				// that partition, and with no newer record there nobody
				// moves it forward again, so the stored offsets may
				// never reach the log's end. The duplicates are what the
				// control must show, and they are there already.
				stopProd()
				r := e.check(name)
				if r.OK() || r.Counts[verify.Duplicate] == 0 {
					t.Fatalf("negative control: the unfenced zombie's late write left the table exact; the test could not fail:\n%s", reportText(r))
				}
				t.Logf("negative control: the unfenced zombie duplicated rows as it must: %d committed records, %d rows, anomalies %v", r.Committed, r.Rows, r.Counts)
				return
			}
			e.drain(name, prod, stopProd, 3*time.Minute)
			r := e.check(name)
			fenceConflicts := strings.Count(logSince(t, b.Logs(), resumed), "fence conflict")
			if !r.OK() || r.Rows != r.Committed {
				t.Fatalf("the zombie committed something:\n%s", reportText(r))
			}
			t.Logf("exact: %d committed records, %d rows; the zombie's commits refused by the fence: %d", r.Committed, r.Rows, fenceConflicts)
		})
	}
}

// duplicatedIDs counts the ids the connector's table holds more than once.
func duplicatedIDs(t *testing.T, e *env) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM events GROUP BY id HAVING count(*) > 1) d`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// logSince returns the lines of a JSON log written at or after a moment.
func logSince(t *testing.T, log string, since time.Time) string {
	t.Helper()
	var b strings.Builder
	stamp := `"time":"`
	for _, l := range strings.Split(log, "\n") {
		i := strings.Index(l, stamp)
		if i < 0 {
			continue
		}
		rest := l[i+len(stamp):]
		end := strings.IndexByte(rest, '"')
		if end < 0 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, rest[:end])
		if err == nil && !at.Before(since) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
