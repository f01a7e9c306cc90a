package engine_test

// source.transactions=whole on the driver, kfake and the in-memory sink:
// source transactions spread over two topics and five partitions, with
// their ENDs in a transaction topic (sometimes before their last event, and
// with the LSN part of their ids differing from their events', as
// Debezium's PostgreSQL connector writes them). After every round the
// store must hold whole transactions only; a crash of the sink at a round
// and a new task over a new instance change nothing of that; the same
// records without the setting show partial transactions (the check is not
// blind).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/twophase"
)

// txnRig is a kfake cluster with topics a (3 partitions), b (2) and tx (1)
// holding source transactions, and the store they are written to.
type txnRig struct {
	memRig
	size   map[string]int // transaction id → its events
	events int
}

func newTxnRig(t *testing.T, txns int) *txnRig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "a"), kfake.SeedTopics(2, "b"), kfake.SeedTopics(1, "tx"),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &txnRig{memRig: memRig{c: c, store: sinktest.NewStore(), topic: "a,b", ev: newEvents()}, size: map[string]int{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	var recs []*kgo.Record
	for i := 1; i <= txns; i++ {
		id := fmt.Sprint(100 + i)
		n := 1 + rng.IntN(6)
		r.size[id] = n
		r.events += n
		begin, _ := json.Marshal(map[string]any{"status": "BEGIN", "id": id + ":1"})
		recs = append(recs, &kgo.Record{Topic: "tx", Value: begin})
		var evs []*kgo.Record
		for j := range n {
			topic, part := "a", int32(rng.IntN(3))
			if rng.IntN(2) == 0 {
				topic, part = "b", int32(rng.IntN(2))
			}
			v, _ := json.Marshal(map[string]any{"op": "u", "source": map[string]any{"table": topic}, "after": map[string]any{"n": j},
				"transaction": map[string]any{"id": fmt.Sprintf("%s:%d", id, 1000+j), "total_order": j + 1}})
			evs = append(evs, &kgo.Record{Topic: topic, Partition: part, Value: v})
		}
		end, _ := json.Marshal(map[string]any{"status": "END", "id": id + ":9", "event_count": n})
		endRec := &kgo.Record{Topic: "tx", Value: end}
		if rng.IntN(3) == 0 {
			// The END reaches Kafka before the transaction's last event.
			recs = append(recs, evs[:n-1]...)
			recs = append(recs, endRec, evs[n-1])
		} else {
			recs = append(append(recs, evs...), endRec)
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return r
}

// torn returns the transactions the store holds in part.
func (r *txnRig) torn() []string {
	held := map[string]int{}
	for _, row := range r.store.Rows() {
		var v struct{ Transaction struct{ ID string } }
		if json.Unmarshal(row.Value, &v) == nil && v.Transaction.ID != "" {
			held[record.TxnID(v.Transaction.ID)]++
		}
	}
	var out []string
	for id, n := range held {
		if n != r.size[id] {
			out = append(out, fmt.Sprintf("%s: %d of %d events", id, n, r.size[id]))
		}
	}
	return out
}

// checkEach is a sink hook that checks the store after every round.
func (r *txnRig) checkEach(mu *sync.Mutex, seen *[]string) func(context.Context, sinktest.Point, twophase.BatchID) error {
	return func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
		if p == sinktest.AfterLocalCommit {
			if torn := r.torn(); len(torn) > 0 {
				mu.Lock()
				*seen = append(*seen, torn...)
				mu.Unlock()
			}
		}
		return nil
	}
}

func TestDriverSourceTransactions(t *testing.T) {
	whole := []string{"source.transactions", "whole", "source.transactions.topic", "tx", "batch.max.records", "7"}
	for _, point := range []sinktest.Point{sinktest.BeforeLocalCommit, sinktest.AfterLocalCommit} {
		t.Run("whole/crash-"+string(point), func(t *testing.T) {
			t.Parallel()
			r := newTxnRig(t, 80)
			var mu sync.Mutex
			var torn []string
			var rounds atomic.Int64
			check := r.checkEach(&mu, &torn)
			var a *sinktest.MemSink
			// The first instance crashes in its fifth round: before its
			// transaction commits, or after (the task never learns it did).
			connA := r.open(t, "exactly_once_sink", "1", "a", nil, func(s *sinktest.MemSink) {
				a = s
				s.Hook = func(ctx context.Context, p sinktest.Point, id twophase.BatchID) error {
					if err := check(ctx, p, id); err != nil {
						return err
					}
					if p == point && rounds.Add(1) == 5 {
						return sinktest.ErrCrashed
					}
					return nil
				}
			}, whole...)
			connA.Start(nil)
			r.ev.waitFor(t, "the sink crashed", func() bool { return rounds.Load() >= 5 })
			connA.Stop()
			if !a.Crashed() {
				t.Fatal("the first instance did not crash")
			}
			before := len(r.store.Rows())
			connB := r.open(t, "exactly_once_sink", "1", "b", nil, func(s *sinktest.MemSink) { s.Hook = check }, whole...)
			connB.Start(nil)
			r.ev.waitFor(t, fmt.Sprintf("all %d events stored", r.events), func() bool { return len(r.store.Rows()) >= r.events })
			connB.Stop()
			t.Logf("%d events in %d transactions; %d rows before the crash, %d after", r.events, len(r.size), before, len(r.store.Rows()))
			mu.Lock()
			defer mu.Unlock()
			if len(torn) > 0 {
				t.Errorf("the store held part of a source transaction after a round: %v", torn)
			}
			if got := len(r.store.Rows()); got != r.events || before == 0 {
				t.Errorf("%d rows stored (%d before the crash), want %d: every event once", got, before, r.events)
			}
			if left := r.torn(); len(left) > 0 {
				t.Errorf("at the end: %v", left)
			}
		})
	}
	t.Run("record-at-a-time", func(t *testing.T) {
		t.Parallel()
		r := newTxnRig(t, 80)
		var mu sync.Mutex
		var torn []string
		conn := r.open(t, "exactly_once_sink", "1", "a", nil, func(s *sinktest.MemSink) { s.Hook = r.checkEach(&mu, &torn) },
			"batch.max.records", "7", "topics", "a,b")
		conn.Start(nil)
		r.ev.waitFor(t, fmt.Sprintf("all %d events stored", r.events), func() bool { return len(r.store.Rows()) >= r.events })
		conn.Stop()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d events; %d times a round left transactions in part", r.events, len(torn))
		if len(torn) == 0 {
			t.Error("without source.transactions=whole no round left a transaction in part: the check is blind")
		}
	})
}
