package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLagCountsReadableRecordsOnly: a partition whose log ends with
// aborted transactions and their markers has lag 0 once the stored
// position is past the last committed record, where the end offset minus
// the position (txsink's lag before issue 27) counts the markers and the
// aborted records; from an earlier position the lag is the number of
// committed records left.
func TestLagCountsReadableRecordsOnly(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("lag-up"), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// 3 committed transactions of 10, then 4 aborted ones of 20.
	var lastCommitted int64
	txn := func(n int, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			r := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")})
			if err := r.FirstErr(); err != nil {
				t.Fatal(err)
			}
			if commit {
				lastCommitted = r[0].Record.Offset
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		txn(10, true)
	}
	for range 4 {
		txn(20, false)
	}

	e := &Engine{opt: Options{Bootstrap: addrs, Log: slog.New(slog.DiscardHandler)}}
	defer func() {
		if e.adminCl != nil {
			e.adminCl.Close()
		}
	}()
	drained := lagAt{tp{"ev", 0}, lastCommitted + 1}
	mid := lagAt{tp{"ev", 0}, 0}
	ends, lags := e.partitionLags(ctx, []lagAt{drained, mid})
	end := ends[tp{"ev", 0}]
	if end-drained.next < 80 {
		t.Fatalf("end offset %d, drained at %d: the log should end with 80 aborted records and markers", end, drained.next)
	}
	if l, ok := lags[drained]; !ok || l != 0 {
		t.Errorf("lag when drained: %d (known %v), want 0 (end offset − next offset is %d)", l, ok, end-drained.next)
	}
	if l, ok := lags[mid]; !ok || l != 30 {
		t.Errorf("lag from offset 0: %d (known %v), want the 30 committed records", l, ok)
	}
	// A second look is served from the cache, with the same answer.
	if _, lags := e.partitionLags(ctx, []lagAt{mid}); lags[mid] != 30 {
		t.Errorf("cached lag %d, want 30", lags[mid])
	}
}
