package integration

// Graceful shutdown under load: "txsink run" gets SIGTERM while a
// transactional producer is writing, must exit within a bound, and a
// restarted worker must finish the job exactly once with no prepared
// transaction left. The run logs in JSON, and every line must be a JSON
// object.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// shutdownBound is how long txsink may take to exit after SIGTERM: well
// inside Kubernetes' default 30 s grace period and systemd's TimeoutStopSec.
const shutdownBound = 15 * time.Second

// checkJSONLogs fails the test unless every non-empty line of out is a
// JSON object with slog's time, level and msg keys.
func checkJSONLogs(t *testing.T, out string) {
	t.Helper()
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lines++
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("log line is not JSON (%v): %s", err, l)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Errorf("log line lacks %q: %s", k, l)
			}
		}
	}
	if lines == 0 {
		t.Error("no log lines")
	}
}

func TestShutdownUnderLoad(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "shutdown_events_" + randSuffix(t)
	name := "shutdown-" + randSuffix(t)
	createTopic(t, k, topic, 3)
	createEventsTable(t, pool, topic)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	cfgPath := writeConnector(t, cfg)

	// A producer of many small transactions keeps traffic flowing through
	// the shutdown.
	u := &upstream{}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, k.Bootstrap, topic, produceOpts{Records: 8000, Partitions: 3, AbortRatio: 0.2, MaxTxn: 40, Seed: 31}, u)
	}()
	t.Cleanup(func() { <-produced }) // the producer uses t: outlive it

	p := startTxsink(t, k.Bootstrap, cfgPath, "shutdown-1", "TXSINK_LOG_FORMAT=json")

	// Wait until rows are landing, then stop in the middle of the traffic.
	deadline := time.Now().Add(60 * time.Second)
	for shutdownRows(t, pool, topic) < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 1000 rows after 60s")
		}
		if ok, code := p.exited(); ok {
			t.Fatalf("txsink exited early with %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-produced:
		t.Log("warning: the producer finished before SIGTERM; the shutdown was not under load")
	default:
	}
	start := time.Now()
	p.signal(syscall.SIGTERM)
	if !p.wait(shutdownBound) {
		t.Fatalf("txsink did not exit within %v of SIGTERM", shutdownBound)
	}
	took := time.Since(start)
	_, code := p.exited()
	left := preparedXacts(t, pool)
	t.Logf("txsink exited %d after %v; %d rows by then; %d prepared transactions left at exit",
		code, took.Round(time.Millisecond), shutdownRows(t, pool, topic), left)
	if left != 0 {
		t.Errorf("SIGTERM left %d prepared transactions: the round in flight should end before exit", left)
	}

	// Restart with the same worker id: it fences the old incarnation,
	// resolves what was in doubt and finishes the job.
	<-produced
	if t.Failed() {
		t.FailNow()
	}
	p2 := startTxsink(t, k.Bootstrap, cfgPath, "shutdown-1", "TXSINK_LOG_FORMAT=json")
	waitDrained(t, pool, name, u, 120*time.Second, func() error {
		if ok, code := p2.exited(); ok {
			return fmt.Errorf("restarted txsink exited with %d:\n%s", code, tail(p2.output(), 3000))
		}
		return nil
	})
	p2.signal(syscall.SIGTERM)
	if !p2.wait(shutdownBound) {
		t.Fatalf("restarted txsink did not exit within %v of SIGTERM", shutdownBound)
	}
	checkJSONLogs(t, p2.output())

	rows := readRows(t, pool, topic)
	if problems := exactness(u, rows, nil); len(problems) > 0 {
		t.Fatalf("%d anomalies in %d rows (upstream: %d committed, %d aborted records), first: %v",
			len(problems), len(rows), u.total(), u.abortedRc, problems[:min(10, len(problems))])
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left after the final shutdown", n)
	}
	t.Logf("exact: %d rows, %d aborted upstream records absent", len(rows), u.abortedRc)
}

const exitCodeOK = 0

// shutdownRows counts the rows of table.
func shutdownRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
