package integration

// txsink verify against a ClickHouse sink: a clean run is reported exact;
// then a duplicate row, a missing row and a stale pending intent are
// injected into the real server and the checker must name each of them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/txsink/txsink/internal/verify"
)

func TestVerifyClickHouse(t *testing.T) {
	k, ch, db, conn := chEnv(t)
	const topic, name = "chverify", "chverify-eo"
	k.CreateTopic(t, topic, 3)
	createCHEvents(t, conn, topic, chEngine(ch, db, topic, 100))
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 3, AbortRatio: 0.15, MaxTxn: 50, BodyBytes: 10, Seed: 61}, &u)
	cfg := chConnector(name, topic, ch, db, "exactly_once")
	cfgPath := writeConnector(t, cfg)
	p := startTxsink(t, k.Bootstrap, cfgPath, "w1")
	chWaitDrained(t, conn, name, &u, 3*time.Minute, func() error {
		if ok, code := p.exited(); ok {
			return fmt.Errorf("txsink exited early with %d:\n%s", code, tail(p.output(), 3000))
		}
		return nil
	})
	stopTxsink(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := verify.Config{
		Bootstrap: []string{k.Bootstrap},
		Topics:    []string{topic},
		Sink: verify.SinkOptions{
			URL: cfg["connection.url"], User: ch.User, Password: ch.Password,
			Connector: name, Table: "${topic}", IDColumn: "id", CompareColumns: []string{"seq"},
		},
		IDField:       "id",
		CompareFields: []string{"seq"},
		PreparedGrace: -1,
		CheckLag:      true,
		ScanIdle:      2 * time.Second,
	}
	r, err := verify.Check(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = r.WriteText(&text)
	t.Logf("clean sink:\n%s", text.String())
	if !r.OK() || r.UpstreamAnomalies != 0 || r.Committed != u.total() || r.Rows != u.total() || r.Lag != 0 {
		t.Fatalf("clean sink: want OK with %d committed records and rows, lag 0; got %d sink faults, %d committed, %d rows, lag %d",
			u.total(), r.SinkFaults, r.Committed, r.Rows, r.Lag)
	}
	if r.Sink != "clickhouse" {
		t.Errorf("report.sink = %q, want clickhouse", r.Sink)
	}

	// Inject: a copy of one row (insert de-duplication off, so the server
	// keeps it on every lane), the loss of another, and a pending intent two minutes old.
	var dupP, lostP int32
	var dupOff, lostOff, seq int64
	var id, body string
	if err := conn.QueryRow(ctx, "SELECT id, seq, body, __connect_partition, __connect_offset FROM `"+topic+"` ORDER BY __connect_partition, __connect_offset LIMIT 1").
		Scan(&id, &seq, &body, &dupP, &dupOff); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT __connect_partition, __connect_offset FROM `"+topic+"` WHERE __connect_partition = 1 ORDER BY __connect_offset LIMIT 1 OFFSET 10").
		Scan(&lostP, &lostOff); err != nil {
		t.Fatal(err)
	}
	ictx := chNoDedup(t, ctx, conn)
	b, err := conn.PrepareBatch(ictx, "INSERT INTO `"+topic+"` (id, seq, body, __connect_topic, __connect_partition, __connect_offset)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(id, seq, body, topic, dupP, dupOff); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	chExec(t, conn, fmt.Sprintf("ALTER TABLE `%s` DELETE WHERE __connect_partition = %d AND __connect_offset = %d", topic, lostP, lostOff))
	for deadline := time.Now().Add(time.Minute); ; {
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s` WHERE __connect_partition = %d AND __connect_offset = %d", topic, lostP, lostOff)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the DELETE mutation did not finish within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
	ib, err := conn.PrepareBatch(ctx, "INSERT INTO txsink_intents (connector, topic, `partition`, first, last, fence, prev, token, target, records, blocks, block_rows, mechanism, status, prepared_at, updated_at, note)")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Second)
	if err := ib.Append(name, topic, int32(2), int64(1_000_000), int64(1_000_009), uint64(1), int64(999_999), "txsink1-test", topic,
		uint32(10), uint32(1), uint32(100000), "blocks", uint8(1), old, old, "injected by TestVerifyClickHouse"); err != nil {
		t.Fatal(err)
	}
	if err := ib.Send(); err != nil {
		t.Fatal(err)
	}

	// The CLI, with the connector's own file, as a user would run it.
	cmd := exec.CommandContext(ctx, txsinkBinary(t), "verify", "-bootstrap", k.Bootstrap, "-config", cfgPath,
		"-id-column", "id", "-compare", "seq", "-prepared-grace", "30s", "-max-lag", "0", "-scan-idle", "2s", "-output", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("txsink verify after the injection: %v (want exit status 1)\n%s\n%s", err, stderr.String(), stdout.String())
	}
	var got verify.Report
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	text.Reset()
	_ = got.WriteText(&text)
	t.Logf("after injecting a duplicate, a loss and a stale intent:\n%s", text.String())
	want := map[verify.Kind]int{verify.Duplicate: 1, verify.Loss: 1, verify.IntentLeft: 1}
	for _, kind := range verify.SinkKinds {
		if got.Counts[kind] != want[kind] {
			t.Errorf("%s: %d, want %d", kind, got.Counts[kind], want[kind])
		}
	}
	found := map[verify.Kind]bool{}
	for _, a := range got.Examples {
		switch {
		case a.Kind == verify.Duplicate && a.Partition == dupP && a.Offset == dupOff:
			found[a.Kind] = true
		case a.Kind == verify.Loss && a.Partition == lostP && a.Offset == lostOff:
			found[a.Kind] = true
		case a.Kind == verify.IntentLeft:
			found[a.Kind] = true
		}
	}
	for kind := range want {
		if !found[kind] {
			t.Errorf("no %s example at the injected coordinates (duplicate %d@%d, loss %d@%d)", kind, dupP, dupOff, lostP, lostOff)
		}
	}
	if got.Rows != u.total() { // one more, one less
		t.Errorf("rows: %d, want %d", got.Rows, u.total())
	}
}
