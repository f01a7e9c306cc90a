package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPostgresMemoryBudget: a worker with the smallest memory budget
// (memory.budget.bytes=16 MiB) drains a backlog twice its size (about
// 30 MB of 6 KB records over 6 partitions, snappy-compressed by the
// producer, 10 % of the upstream transactions aborted) exactly once: its fetches and rounds shrink to
// its share of the budget, and rounds are cut short under pressure,
// instead of the worker failing. The negative control drains the same
// topic into another table on a worker without a budget: its peak
// resident set must be larger, or the budget bounded nothing.
func TestPostgresMemoryBudget(t *testing.T) {
	k, db := sinkEnv(t)
	const topic = "membudget"
	k.CreateTopic(t, topic, 6)
	pool := connectPool(t, db)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 5000, Partitions: 6, AbortRatio: 0.1, MaxTxn: 50, BodyBytes: 6000, Seed: 29}, &u)
	t.Logf("upstream: %d committed records of 6 KB, %d/%d transactions aborted", u.total(), u.abortedTx, u.totalTx)

	drain := func(conn, budget string) (peakMB float64, out string) {
		createEventsTable(t, pool, conn)
		cfg := baseConnector(conn, topic, db, "exactly_once")
		cfg["table.name.format"] = conn
		delete(cfg, "batch.max.records") // the defaults: 100,000 records, 16 MiB
		p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), conn,
			"TXSINK_MEMORY_BUDGET_BYTES="+budget, "TXSINK_LOG_LEVEL=debug")
		waitDrained(t, pool, conn, &u, 4*time.Minute, func() error {
			if ok, code := p.exited(); ok {
				return fmt.Errorf("%s: txsink exited early with %d", conn, code)
			}
			return nil
		})
		peakMB = float64(procStatusKB(t, p.Pid(), "VmHWM")) / 1024
		p.signal(syscall.SIGTERM)
		if !p.wait(30 * time.Second) {
			t.Fatalf("%s: txsink did not stop within 30s of SIGTERM", conn)
		}
		if problems := exactness(&u, readRows(t, pool, conn), nil); len(problems) > 0 {
			t.Fatalf("%s: %d anomalies, first: %s", conn, len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
		}
		return peakMB, p.output()
	}

	budgeted, out := drain("membudget-16m", "16777216")
	if !strings.Contains(out, `msg="memory budget" budget_bytes=16777216 go_memory_limit_bytes=`) {
		t.Errorf("the worker did not log its 16 MiB budget and the Go memory limit it set")
	}
	cuts := strings.Count(out, "round cut short: memory pressure")
	unbudgeted, out0 := drain("membudget-none", "0")
	if strings.Contains(out0, "round cut short") {
		t.Error("a worker without a budget cut a round short under memory pressure")
	}
	t.Logf("peak RSS: %.0f MB with a 16 MiB budget (%d rounds cut short under pressure), %.0f MB without a budget", budgeted, cuts, unbudgeted)
	if budgeted >= unbudgeted {
		t.Errorf("peak RSS %.0f MB with a 16 MiB budget, not below the %.0f MB of the same drain without one", budgeted, unbudgeted)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestPostgresMemorySharesHalve: a round's first poll is a whole fetch,
// so cutting rounds short does not bound what a task holds; what does is
// the fetch share halving while the heap live after a collection nears
// Go's soft limit (README, Memory). A worker with a 16 MiB budget drains
// 300,000 small records (100 bytes: the 200 bytes of Go structure per
// record weigh most) in exactly_once_sink, whose rounds hold rows as well
// as records, exactly once; its log shows the shares halving, which only
// the live heap of a real drain reaching three quarters of Go's limit
// makes it do.
func TestPostgresMemorySharesHalve(t *testing.T) {
	k, db := sinkEnv(t)
	topic := "memhalve-" + randSuffix(t)
	k.CreateTopic(t, topic, 6)
	pool := connectPool(t, db)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 300000, Partitions: 6, AbortRatio: 0.05, MaxTxn: 2000, BodyBytes: 100, Seed: 31}, &u)
	createEventsTable(t, pool, topic)
	cfg := baseConnector(topic, topic, db, "exactly_once_sink")
	cfg["table.name.format"] = topic
	delete(cfg, "batch.max.records") // the defaults: 100,000 records, 16 MiB
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), topic,
		"TXSINK_MEMORY_BUDGET_BYTES=16777216", "TXSINK_LOG_LEVEL=debug")
	waitDrained(t, pool, topic, &u, 4*time.Minute, func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d", code)
		}
		return nil
	})
	peakMB := float64(procStatusKB(t, p.Pid(), "VmHWM")) / 1024
	p.signal(syscall.SIGTERM)
	if !p.wait(30 * time.Second) {
		t.Fatal("txsink did not stop within 30s of SIGTERM")
	}
	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
	out := p.output()
	halved := strings.Count(out, "the fetch and round shares of the memory budget halve")
	raised := strings.Count(out, "outgrew the memory budget")
	t.Logf("peak RSS %.0f MB with a 16 MiB budget; shares halved %d times, doubled back %d, Go's limit raised %d", peakMB, halved,
		strings.Count(out, "shares of the memory budget double"), raised)
	if halved == 0 {
		t.Fatalf("the shares never halved: the live heap of this drain passes three quarters of Go's limit")
	}
	// Go's limit rises only with the shares at their least (1 MiB; a 16
	// MiB budget's share is 2 MiB, so its first halving reaches it).
	if w := strings.Index(out, "outgrew the memory budget"); w >= 0 {
		if f := strings.Index(out, "fetch_share_bytes=1048576"); f < 0 || f > w {
			t.Errorf("Go's limit rose before the shares reached their least:\n%s", tail(out, 3000))
		}
	}
}
