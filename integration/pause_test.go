package integration

import (
	"context"
	"maps"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

// TestPauseLongerThanSessionTimeout (issue 17 item 5): a connector paused
// in the middle of a stream keeps its task in the consumer group for
// longer than the session timeout (the group stays Stable, as Kafka
// Connect's), stops fetching (the stored offsets do not move while
// records arrive), leaves no prepared transaction behind (the round in
// flight finished first), and after the resume the table is exact: no
// record lost, none twice, none of an aborted upstream transaction.
func TestPauseLongerThanSessionTimeout(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	topic := "pause-" + randSuffix(t)
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)
	dbURL := canaryURL(t, pg, db)

	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 3, AbortRatio: 0.1, MaxTxn: 50, Seed: 71}, &u)

	w := startServe(t, k.Bootstrap, freeAddr(t), t.TempDir(), "pause-w")
	name := "pause-" + randSuffix(t)
	cfg := apiConnector(name, topic, dbURL)
	cfg["batch.max.records"] = "100"
	const sessionMs = 6000 // the broker's group.min.session.timeout.ms
	cfg["session.timeout.ms"] = "6000"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	w.waitState(t, name, "RUNNING", 1, time.Minute)

	// Pause once some records are written.
	ctx := context.Background()
	waitWritten(t, func() map[int32]int64 { got, _ := sinkOffsets(ctx, pool, name); return got }, 300, "the pause")
	w.must(t, 202, "PUT", "/connectors/"+name+"/pause", nil)
	w.waitState(t, name, "PAUSED", 1, 10*time.Second)
	// The round in flight ends (committed or aborted): the task says so
	// once nothing is in flight; then nothing is prepared and the offsets
	// stay put.
	waitFor(t, time.Minute, "the paused task idle", func() (bool, string) {
		return strings.Contains(w.output(), "task paused and idle"), tail(w.output(), 2000)
	})
	if n := preparedXacts(t, pool); n != 0 {
		t.Fatalf("%d prepared transactions once the paused task was idle", n)
	}
	held, _ := sinkOffsets(ctx, pool, name)
	// More records arrive while paused, for twice the session timeout.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produce(t, k.Bootstrap, topic, produceOpts{Records: 6000, Partitions: 3, AbortRatio: 0.1, MaxTxn: 50, Seed: 72}, &u)
	}()
	group := "txsink-" + name
	for end := time.Now().Add(2 * sessionMs * time.Millisecond); time.Now().Before(end); time.Sleep(time.Second) {
		if st := groupState(t, k.Bootstrap, group); st != "Stable" {
			t.Fatalf("consumer group %s is %s while PAUSED (Connect's stays Stable)", group, st)
		}
	}
	wg.Wait()
	if got, _ := sinkOffsets(ctx, pool, name); !maps.Equal(got, held) {
		t.Fatalf("stored offsets moved while PAUSED: %v, then %v", held, got)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Fatalf("%d prepared transactions while PAUSED", n)
	}
	st := w.waitState(t, name, "PAUSED", 1, time.Second)
	if len(st.Tasks[0].Txsink.Partitions) != 3 {
		t.Errorf("the PAUSED task owns %d partitions, want all 3", len(st.Tasks[0].Txsink.Partitions))
	}

	w.must(t, 202, "PUT", "/connectors/"+name+"/resume", nil)
	w.waitState(t, name, "RUNNING", 1, 10*time.Second)
	waitDrained(t, pool, name, &u, 3*time.Minute, nil)
	if problems := exactness(&u, readRows(t, pool, topic), nil); len(problems) > 0 {
		t.Fatalf("after a pause of %d ms: %d anomalies, first: %v", 2*sessionMs, len(problems), problems[:min(10, len(problems))])
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
	w.signal(syscall.SIGTERM)
	w.wait(30 * time.Second)
	t.Logf("%d records exact across a pause of %d ms (session timeout %d ms); group Stable throughout", u.total(), 2*sessionMs, sessionMs)
}
