package twophase

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	kTopic = "in"
	kGroup = "g"
)

func newKfake(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, kTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func produce(t *testing.T, c *kfake.Cluster, partition int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: kTopic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i)}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func newSession(t *testing.T, c *kfake.Cluster, txnID string, opts ...kgo.Opt) *kgo.GroupTransactSession {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup(kGroup),
		kgo.ConsumeTopics(kTopic),
		kgo.TransactionalID(txnID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
	}, opts...)
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// pollBatches polls until want records arrived and cuts one batch per
// partition, as the runtime does.
func pollBatches(t *testing.T, s *kgo.GroupTransactSession, want int) map[int32]BatchID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[int32]BatchID{}
	got := 0
	for got < want {
		fs := s.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("polled %d of %d records: %v", got, want, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got++
			id, ok := out[r.Partition]
			if !ok {
				id = BatchID{Connector: "c", Topic: r.Topic, Partition: r.Partition, First: r.Offset}
			}
			id.Last = r.Offset
			out[r.Partition] = id
		})
	}
	return out
}

func TestKafkaDeciderCommitAbort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newKfake(t, 1)
	produce(t, c, 0, 10)
	s := newSession(t, c, "tx-1")
	d := NewKafkaDecider(s, kGroup)

	// Nothing committed yet: the group is unknown, nothing is committed.
	if ok, err := d.Outcome(ctx, BatchID{Topic: kTopic, Partition: 0, First: 0, Last: 9}); err != nil || ok {
		t.Fatalf("outcome before any commit: %t %v", ok, err)
	}

	batches := pollBatches(t, s, 10)
	id := batches[0]
	if id.First != 0 || id.Last != 9 {
		t.Fatalf("batch %s", id)
	}
	if err := d.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	committed, err := d.Decide(ctx, true)
	if err != nil || !committed {
		t.Fatalf("decide commit: %t %v", committed, err)
	}
	if ok, err := d.Outcome(ctx, id); err != nil || !ok {
		t.Fatalf("outcome of committed %s: %t %v", id, ok, err)
	}
	other := id
	other.Last = 14
	if ok, err := d.Outcome(ctx, other); err != nil || ok {
		t.Fatalf("outcome of %s: %t %v", other, ok, err)
	}
	offs, err := StableOffsets(ctx, s.Client(), kGroup)
	if err != nil || offs[kTopic][0] != 10 {
		t.Fatalf("stable offsets %v %v", offs, err)
	}
	if offs, err := StableOffsets(ctx, s.Client(), kGroup, kTopic); err != nil || offs[kTopic][0] != 10 || len(offs) != 1 {
		t.Fatalf("offsets of %s: %v %v", kTopic, offs, err)
	}
	if _, err := StableOffsets(ctx, s.Client(), kGroup, "no-such-topic"); err == nil {
		t.Fatal("offsets of a missing topic: no error")
	}

	// Decide(false): the next range is not committed.
	produce(t, c, 0, 5)
	id2 := pollBatches(t, s, 5)[0]
	if err := d.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	committed, err = d.Decide(ctx, false)
	if err != nil || committed {
		t.Fatalf("decide abort: %t %v", committed, err)
	}
	if ok, err := d.Outcome(ctx, id2); err != nil || ok {
		t.Fatalf("outcome of aborted %s: %t %v", id2, ok, err)
	}
	if ok, err := d.Outcome(ctx, id); err != nil || !ok {
		t.Fatalf("outcome of %s after the abort: %t %v", id, ok, err)
	}
}

// TestKafkaCoordinatorRound runs Coordinator rounds with a KafkaDecider and
// the fake participant, including recovery after an ambiguous decision.
func TestKafkaCoordinatorRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newKfake(t, 2)
	produce(t, c, 0, 4)
	produce(t, c, 1, 6)
	s := newSession(t, c, "tx-round")
	d := NewKafkaDecider(s, kGroup)
	p := newFakeParticipant()
	coord := NewCoordinator(p, d)

	var bs []*Batch
	for _, id := range pollBatches(t, s, 10) {
		bs = append(bs, &Batch{ID: id})
	}
	res, err := coord.Round(ctx, bs)
	if err != nil || res.Outcome != OutcomeCommitted {
		t.Fatalf("res %+v err %v", res, err)
	}
	// Pretend the sink lost its commit answers: recovery sees the Kafka
	// decision and commits again (idempotently).
	for _, b := range bs {
		delete(p.committed, b.ID)
		p.prepared[b.ID] = true
	}
	rep, err := Recover(ctx, p, d, "c", nil)
	if err != nil || len(rep.Committed) != 2 {
		t.Fatalf("rep %+v err %v", rep, err)
	}
}

// TestStableOffsetsWaitsForPendingTxn holds a transaction's EndTxn while
// its offsets are pending: StableOffsets must wait (UNSTABLE_OFFSET_COMMIT)
// and then read the committed offset.
func TestStableOffsetsWaitsForPendingTxn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newKfake(t, 1)
	produce(t, c, 0, 3)
	s := newSession(t, c, "tx-pending")
	d := NewKafkaDecider(s, kGroup)
	id := pollBatches(t, s, 3)[0]

	release := make(chan struct{})
	var once sync.Once
	held := make(chan struct{})
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(held) })
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})

	if err := d.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	decided := make(chan error, 1)
	go func() {
		ok, err := d.Decide(ctx, true)
		if err == nil && !ok {
			err = errors.New("not committed")
		}
		decided <- err
	}()
	<-held

	// A separate client: requests on the session's connection queue
	// behind the held EndTxn.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The client's offset fetches: a second one means the first was
	// answered UNSTABLE_OFFSET_COMMIT and StableOffsets waits.
	var fetches atomic.Int64
	fetched := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.OffsetFetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
		select {
		case fetched <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	waitFetches := func(n int64) {
		t.Helper()
		for fetches.Load() < n {
			select {
			case <-fetched:
			case <-ctx.Done():
				t.Fatalf("%d offset fetches while the transaction was pending, want %d", fetches.Load(), n)
			}
		}
	}

	// While the transaction is pending, StableOffsets keeps asking (a
	// second fetch: the first was not answered with offsets it could
	// return) and returns once the decision is made, with the offsets it
	// committed. No deadline decides it: a check bounded by a few hundred
	// milliseconds failed on a loaded CI machine before any answer came.
	got := make(chan map[string]map[int32]int64, 1)
	go func() {
		offs, err := StableOffsets(ctx, cl, kGroup, kTopic)
		if err != nil {
			t.Error(err)
		}
		got <- offs
	}()
	waitFetches(2)
	close(release)
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	offs := <-got
	if !OutcomeFromOffsets(id, offs) {
		t.Fatalf("offsets %v do not commit %s", offs, id)
	}
}

// TestKafkaDeciderRebalanceAborts: a second member joins the group while
// the first is in a transaction; the cooperative rebalance revokes a
// partition from the first, whose Decide(commit) then aborts
// (committed=false, nil error) and commits no offsets.
func TestKafkaDeciderRebalanceAborts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newKfake(t, 2)
	produce(t, c, 0, 5)
	produce(t, c, 1, 5)

	revoked := make(chan struct{})
	var once sync.Once
	a := newSession(t, c, "tx-a", kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, rev map[string][]int32) {
		if len(rev) > 0 {
			once.Do(func() { close(revoked) })
		}
	}))
	da := NewKafkaDecider(a, kGroup)
	batches := pollBatches(t, a, 10)
	if err := da.Begin(ctx); err != nil {
		t.Fatal(err)
	}

	b := newSession(t, c, "tx-b")
	go func() { // b must poll to join
		for ctx.Err() == nil {
			b.PollFetches(ctx)
			select {
			case <-revoked:
				return
			default:
			}
		}
	}()
	select {
	case <-revoked:
	case <-ctx.Done():
		t.Fatal("no revoke: kfake did not rebalance")
	}

	committed, err := da.Decide(ctx, true)
	if err != nil || committed {
		t.Fatalf("decide after revoke: %t %v", committed, err)
	}
	for _, id := range batches {
		if ok, err := da.Outcome(ctx, id); err != nil || ok {
			t.Fatalf("outcome of %s: %t %v", id, ok, err)
		}
	}
}

// TestKafkaDeciderZombieFenced: member a blocks rebalances (as a runtime
// stuck in a long round would) and is kicked out of the group after its
// rebalance timeout; b takes every partition in a new generation. a's
// Decide(commit) is then refused by the group coordinator (KIP-447
// generation fencing: kfake answers UNKNOWN_MEMBER_ID, one of the errors
// franz-go treats as "abort") and returns committed=false with a nil error.
func TestKafkaDeciderZombieFenced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newKfake(t, 2)
	produce(t, c, 0, 5)
	produce(t, c, 1, 5)

	a := newSession(t, c, "tx-a", kgo.BlockRebalanceOnPoll(), kgo.RebalanceTimeout(time.Second), kgo.SessionTimeout(time.Second))
	da := NewKafkaDecider(a, kGroup)
	batches := pollBatches(t, a, 10)
	if err := da.Begin(ctx); err != nil {
		t.Fatal(err)
	}

	b := newSession(t, c, "tx-b", kgo.RebalanceTimeout(time.Second), kgo.SessionTimeout(time.Second))
	bIDs := pollBatches(t, b, 10) // b can only read once it owns both partitions
	if len(bIDs) != 2 {
		t.Fatalf("b got %v", bIDs)
	}

	committed, err := da.Decide(ctx, true)
	if err != nil || committed {
		t.Fatalf("zombie decide: %t %v", committed, err)
	}
	for _, id := range batches {
		if ok, err := da.Outcome(ctx, id); err != nil || ok {
			t.Fatalf("outcome of %s: %t %v", id, ok, err)
		}
	}
	a.AllowRebalance()
}

// TestKafkaDeciderCommitExactly: with the next round's records already
// polled, a decision commits exactly the round's offsets, not the
// session's; the next decision then commits the next round's.
func TestKafkaDeciderCommitExactly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newKfake(t, 2)
	produce(t, c, 0, 10)
	produce(t, c, 1, 10)
	s := newSession(t, c, "tx-exact")
	d := NewKafkaDecider(s, kGroup)
	polled := pollBatches(t, s, 20) // both partitions, offsets 0..9

	// Round N: partition 0 up to offset 3 only, partition 1 not at all.
	n := []*Batch{{ID: BatchID{Connector: "c", Topic: kTopic, Partition: 0, First: 0, Last: 3}}}
	offs := commitExactly(ctx, t, d, s, n)
	if got := offs[kTopic][0]; got != 4 {
		t.Fatalf("partition 0 committed at %d, want 4 (round N's end, not the polled %d)", got, polled[0].NextOffset())
	}
	if got, ok := offs[kTopic][1]; ok {
		t.Fatalf("partition 1 committed at %d, want nothing (no batch in round N)", got)
	}
	if ok, err := d.Outcome(ctx, n[0].ID); err != nil || !ok {
		t.Fatalf("outcome of round N: %t %v", ok, err)
	}

	// Round N+1: the rest of both partitions.
	n1 := []*Batch{
		{ID: BatchID{Connector: "c", Topic: kTopic, Partition: 0, First: 4, Last: 9}},
		{ID: BatchID{Connector: "c", Topic: kTopic, Partition: 1, First: 0, Last: 9}},
	}
	offs = commitExactly(ctx, t, d, s, n1)
	if offs[kTopic][0] != 10 || offs[kTopic][1] != 10 {
		t.Fatalf("after round N+1: %v, want both at 10", offs)
	}
	if ok, err := d.Outcome(ctx, n[0].ID); err != nil || ok {
		t.Fatalf("outcome of round N after N+1: %t %v (the offset moved past it)", ok, err)
	}
}

// commitExactly commits one round of batches through d (CommitExactly,
// Begin, Decide) and returns the group's stable offsets after it.
func commitExactly(ctx context.Context, t *testing.T, d *KafkaDecider, s *kgo.GroupTransactSession, batches []*Batch) map[string]map[int32]int64 {
	t.Helper()
	d.CommitExactly(batches)
	if err := d.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Decide(ctx, true); err != nil || !ok {
		t.Fatalf("decide %v: %t %v", batches[0].ID, ok, err)
	}
	offs, err := StableOffsets(ctx, s.Client(), kGroup, kTopic)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}
