package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/offsets"
)

// TestLagReader: the lag "txsink run" logs counts committed records only,
// as the status does: an aborted transaction at the log's end adds
// nothing; a position without a stored offset is left out.
func TestLagReader(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("lr-up"), kgo.DefaultProduceTopic("ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	for _, commit := range []bool{true, false} {
		if err := up.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if err := up.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := up.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := NewLagReader(cl, nil)
	for _, tc := range []struct {
		next  int64
		lag   int64
		known int
	}{{4, 6, 1}, {10, 0, 1}, {offsets.Unset, 0, 0}} {
		lag, known := r.Lag(ctx, []offsets.Position{{Topic: "ev", Partition: 0, Next: tc.next}})
		if lag != tc.lag || known != tc.known {
			t.Errorf("next %d: lag %d over %d partitions, want %d over %d", tc.next, lag, known, tc.lag, tc.known)
		}
	}
}
