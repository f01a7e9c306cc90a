// Package sinktest is the test kit of the sink contract (connectors.Sink,
// twophase.Participant, twophase.Stager): one conformance suite that every
// sink runs against its real database, and an in-memory sink.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// LocalMode is one way the runtime calls WriteLocal: the guard and commit
// order of one delivery guarantee.
type LocalMode struct {
	Name      string // the delivery.guarantee that uses it
	Guarantee connectors.Guarantee
	Guard     offsets.Guard
	Order     connectors.Order
}

func localMode(g connectors.Guarantee) LocalMode {
	guard, order := g.WriteMode()
	return LocalMode{g.String(), g, guard, order}
}

// The WriteLocal modes of the local delivery guarantees.
var (
	ExactlyOnceSink = localMode(connectors.SinkCAS)
	AtLeastOnce     = localMode(connectors.AtLeastOnce)
	AtMostOnce      = localMode(connectors.AtMostOnce)
)

// LocalModes lists every WriteLocal mode the suite checks.
var LocalModes = []LocalMode{ExactlyOnceSink, AtLeastOnce, AtMostOnce}

// Harness is one sink under test on a fresh database.
type Harness struct {
	// Connector is the connector name every instance of Open serves.
	Connector string
	// Open opens a new, independent instance of the sink (its own
	// connections, as another process would) for Connector on the
	// harness's database. The harness closes it at the end of the test;
	// the suite may close it earlier to model a crash.
	Open func(t *testing.T) connectors.Sink
	// NewTopic returns a fresh topic name with the given number of
	// partitions, whose target table exists with a text column "id" (or
	// the sink creates it). Records carry JSON values {"id": "..."}.
	NewTopic func(t *testing.T, partitions int32) string
	// Produce appends one record per value to the topic's partition and
	// returns them as consumed (read_committed, contiguous offsets). Sinks
	// that re-read a batch's range during recovery need the records to
	// exist upstream; nil makes the suite build them in memory, with
	// offsets counted per partition from 0.
	Produce func(t *testing.T, topic string, partition int32, values [][]byte) []*kgo.Record
	// IDs returns the "id" of every visible row of topic's table, in any
	// order, duplicates included.
	IDs func(t *testing.T, topic string) []string
	// Local lists the WriteLocal modes the sink implements: the sink must
	// declare exactly their guarantees among the local ones
	// (Sink.Guarantees) and implement connectors.LocalWriter if any.
	// LocalWhy says why the missing ones are missing (printed when they
	// are skipped).
	Local    []LocalMode
	LocalWhy string
	// Stager says that the instances of Open implement twophase.Stager
	// (and have staging enabled); a sink without it has its Stager cases
	// skipped, and StagerWhy says why.
	Stager    bool
	StagerWhy string
	// Known lists cases (by subtest path below Conformance, e.g.
	// "redo/same-fence") that fail on this sink because of a known bug,
	// with the reason: they are skipped with it, visibly. Remove an entry
	// once its bug is fixed.
	Known map[string]string
}

// Conformance runs every case of the sink contract on the sink open
// returns. Each case calls open for a fresh harness (a fresh database,
// or fresh topics and connector name on a shared one).
func Conformance(t *testing.T, open func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(*testing.T, *suite)
	}{
		{"positions", testPositions},
		{"fencing", testFencing},
		{"compare-and-set", testCAS},
		{"commit-idempotent", testCommitIdempotent},
		{"abort-idempotent", testAbortIdempotent},
		{"in-doubt", testInDoubt},
		{"redo", testRedo},
		{"reset-offsets", testReset},
		{"write-local", testWriteLocal},
		{"stager", testStager},
		{"rounds", testRounds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := open(t)
			s := &suite{h: h, next: map[string]int64{}}
			c.fn(t, s)
		})
	}
}

// suite is one case's state.
type suite struct {
	h    Harness
	next map[string]int64 // in-memory offsets per topic/partition (no Produce)
	seq  int
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// records returns n new records of topic's partition.
func (s *suite) records(t *testing.T, topic string, p int32, n int) []*kgo.Record {
	t.Helper()
	var values [][]byte
	for range n {
		s.seq++
		values = append(values, fmt.Appendf(nil, `{"id":"p%d-%d"}`, p, s.seq))
	}
	if s.h.Produce != nil {
		recs := s.h.Produce(t, topic, p, values)
		if len(recs) != n {
			t.Fatalf("Produce returned %d records, want %d", len(recs), n)
		}
		return recs
	}
	key := fmt.Sprintf("%s/%d", topic, p)
	out := make([]*kgo.Record, n)
	for i, v := range values {
		out[i] = &kgo.Record{Topic: topic, Partition: p, Offset: s.next[key], Value: v, Timestamp: time.Unix(1700000000, 0)}
		s.next[key]++
	}
	return out
}

// batch builds the batch of recs (one partition, contiguous).
func (s *suite) batch(recs []*kgo.Record, prev, fence int64) *twophase.Batch {
	r0, rn := recs[0], recs[len(recs)-1]
	return &twophase.Batch{
		ID:      twophase.BatchID{Connector: s.h.Connector, Topic: r0.Topic, Partition: r0.Partition, First: r0.Offset, Last: rn.Offset},
		Prev:    prev,
		Fence:   fence,
		Records: recs,
		Alone:   true,
	}
}

func ids(recs ...[]*kgo.Record) []string {
	var out []string
	for _, rs := range recs {
		for _, r := range rs {
			out = append(out, string(r.Value[len(`{"id":"`):len(r.Value)-len(`"}`)]))
		}
	}
	sort.Strings(out)
	return out
}

// rows checks that topic's visible rows are exactly want, once each.
func (s *suite) rows(t *testing.T, topic string, want []string, what string) {
	t.Helper()
	got := slices.Clone(s.h.IDs(t, topic))
	sort.Strings(got)
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: visible rows %v, want exactly %v", what, got, want)
	}
}

// acquire fences one partition and initializes it at next when unset.
func acquire(t *testing.T, sk connectors.Sink, topic string, p int32, next int64) offsets.Position {
	t.Helper()
	ctx := ctxT(t)
	got, err := sk.Acquire(ctx, topic, []int32{p})
	if err != nil {
		t.Fatalf("Acquire %s[%d]: %v", topic, p, err)
	}
	pos, ok := got[p]
	if !ok {
		t.Fatalf("Acquire %s[%d] returned no position: %v", topic, p, got)
	}
	if pos.Next == offsets.Unset {
		if err := sk.Initialize(ctx, topic, p, pos.Fence, next); err != nil {
			t.Fatalf("Initialize %s[%d] at %d: %v", topic, p, next, err)
		}
		pos.Next = next
	}
	return pos
}

// position reads the stored position of topic's partition (ok=false: none).
func position(t *testing.T, sk connectors.Sink, topic string, p int32) (offsets.Position, bool) {
	t.Helper()
	ps, err := sk.Positions(ctxT(t))
	if err != nil {
		t.Fatalf("Positions: %v", err)
	}
	for _, q := range ps {
		if q.Topic == topic && q.Partition == p {
			return q, true
		}
	}
	return offsets.Position{}, false
}

func wantNext(t *testing.T, sk connectors.Sink, topic string, p int32, next int64, what string) {
	t.Helper()
	pos, ok := position(t, sk, topic, p)
	if !ok || pos.Next != next {
		t.Fatalf("%s: stored position of %s[%d] = %+v (stored %v), want next_offset %d", what, topic, p, pos, ok, next)
	}
}

// inDoubt lists the connector's in-doubt batches.
func (s *suite) inDoubt(t *testing.T, sk connectors.Sink) []twophase.BatchID {
	t.Helper()
	ids, err := sk.InDoubt(ctxT(t), s.h.Connector)
	if err != nil {
		t.Fatalf("InDoubt: %v", err)
	}
	return ids
}

func (s *suite) noneInDoubt(t *testing.T, sk connectors.Sink, what string) {
	t.Helper()
	if ids := s.inDoubt(t, sk); len(ids) > 0 {
		t.Fatalf("%s: in doubt %v, want none", what, ids)
	}
}

func wantFenced(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, twophase.ErrFenced) || !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("%s: %v, want an error wrapping twophase.ErrFenced (= offsets.ErrFenced)", what, err)
	}
}

func mustPrepareCommit(t *testing.T, sk connectors.Sink, b *twophase.Batch) {
	t.Helper()
	ctx := ctxT(t)
	if err := sk.Prepare(ctx, b); err != nil {
		t.Fatalf("Prepare %s: %v", b.ID, err)
	}
	if err := sk.Commit(ctx, b.ID); err != nil {
		t.Fatalf("Commit %s: %v", b.ID, err)
	}
}

// testPositions: Acquire of a new partition returns it unset with a
// fence; Initialize stores it; Positions lists it; Acquire again bumps the
// fence and keeps next_offset; Initialize with the old fence is refused.
func testPositions(t *testing.T, s *suite) {
	ctx := ctxT(t)
	sk := s.h.Open(t)
	topic := s.h.NewTopic(t, 2)
	got, err := sk.Acquire(ctx, topic, []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Acquire of 2 partitions returned %v", got)
	}
	for p, pos := range got {
		if pos.Next != offsets.Unset {
			t.Fatalf("new partition %d acquired with next_offset %d, want unset", p, pos.Next)
		}
		if pos.Fence <= 0 {
			t.Fatalf("partition %d acquired with fence %d, want > 0", p, pos.Fence)
		}
	}
	if err := sk.Initialize(ctx, topic, 0, got[0].Fence, 7); err != nil {
		t.Fatal(err)
	}
	if err := sk.Initialize(ctx, topic, 1, got[1].Fence, 0); err != nil {
		t.Fatal(err)
	}
	wantNext(t, sk, topic, 0, 7, "after Initialize")
	wantNext(t, sk, topic, 1, 0, "after Initialize")
	again, err := sk.Acquire(ctx, topic, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Fence <= got[0].Fence || again[0].Next != 7 {
		t.Fatalf("second Acquire: %+v, want fence > %d and next_offset 7", again[0], got[0].Fence)
	}
	// A second instance sees what the first stored.
	other := s.h.Open(t)
	wantNext(t, other, topic, 0, 7, "read by another instance")
	if pos, _ := position(t, other, topic, 0); pos.Fence != again[0].Fence {
		t.Fatalf("another instance reads fence %d, want %d", pos.Fence, again[0].Fence)
	}
	// The old owner's Initialize (a new partition initialized twice) is
	// refused: its fence is gone.
	topic2 := s.h.NewTopic(t, 1)
	old, err := sk.Acquire(ctx, topic2, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, topic2, []int32{0}); err != nil {
		t.Fatal(err)
	}
	wantFenced(t, sk.Initialize(ctx, topic2, 0, old[0].Fence, 3), "Initialize with a fence a newer Acquire replaced")
	if pos, ok := position(t, other, topic2, 0); ok && pos.Next != offsets.Unset {
		t.Fatalf("a refused Initialize stored next_offset %d", pos.Next)
	}
}

// testFencing: after another instance's Acquire, the old owner's Prepare
// is refused with ErrFenced and leaves nothing; the new owner's works.
func testFencing(t *testing.T, s *suite) {
	ctx := ctxT(t)
	a, b := s.h.Open(t), s.h.Open(t)
	topic := s.h.NewTopic(t, 1)
	old := acquire(t, a, topic, 0, 0)
	recs := s.records(t, topic, 0, 3)
	cur := acquire(t, b, topic, 0, 0)
	if cur.Fence <= old.Fence {
		t.Fatalf("Acquire by another instance: fence %d, not above %d", cur.Fence, old.Fence)
	}
	wantFenced(t, a.Prepare(ctx, s.batch(recs, 0, old.Fence)), "Prepare with the old fence")
	s.noneInDoubt(t, b, "after a fenced Prepare")
	s.rows(t, topic, nil, "after a fenced Prepare")
	wantNext(t, b, topic, 0, 0, "after a fenced Prepare")

	mustPrepareCommit(t, b, s.batch(recs, 0, cur.Fence))
	s.rows(t, topic, ids(recs), "after the new owner's commit")
	wantNext(t, a, topic, 0, recs[2].Offset+1, "after the new owner's commit")
}

// testCAS: a batch that does not continue from the stored next_offset is
// refused, in both directions, and leaves nothing.
func testCAS(t *testing.T, s *suite) {
	ctx := ctxT(t)
	sk := s.h.Open(t)
	topic := s.h.NewTopic(t, 1)
	pos := acquire(t, sk, topic, 0, 0)
	first := s.records(t, topic, 0, 2)
	second := s.records(t, topic, 0, 2)
	// Skips the first batch: Prev is ahead of the stored next_offset.
	wantFenced(t, sk.Prepare(ctx, s.batch(second, second[0].Offset, pos.Fence)), "Prepare with Prev ahead of the stored next_offset")
	s.noneInDoubt(t, sk, "after a refused Prepare")
	mustPrepareCommit(t, sk, s.batch(first, 0, pos.Fence))
	// Repeats the first batch: Prev is behind the stored next_offset.
	wantFenced(t, sk.Prepare(ctx, s.batch(first, 0, pos.Fence)), "Prepare of a committed range again (Prev behind)")
	s.noneInDoubt(t, sk, "after a refused Prepare")
	s.rows(t, topic, ids(first), "after refused Prepares")
	wantNext(t, sk, topic, 0, first[1].Offset+1, "after refused Prepares")
	mustPrepareCommit(t, sk, s.batch(second, first[1].Offset+1, pos.Fence))
	s.rows(t, topic, ids(first, second), "after the continuing batch")
}

// testCommitIdempotent: Commit twice, from two instances, is one commit;
// Commit of a batch never prepared is ErrNotPrepared.
func testCommitIdempotent(t *testing.T, s *suite) {
	ctx := ctxT(t)
	a, b := s.h.Open(t), s.h.Open(t)
	topic := s.h.NewTopic(t, 1)
	pos := acquire(t, a, topic, 0, 0)
	recs := s.records(t, topic, 0, 4)
	bt := s.batch(recs, 0, pos.Fence)
	mustPrepareCommit(t, a, bt)
	if err := a.Commit(ctx, bt.ID); err != nil {
		t.Fatalf("second Commit: %v, want nil (idempotent)", err)
	}
	if err := b.Commit(ctx, bt.ID); err != nil {
		t.Fatalf("Commit by another instance of a committed batch: %v, want nil", err)
	}
	s.rows(t, topic, ids(recs), "after three Commits")
	wantNext(t, b, topic, 0, recs[3].Offset+1, "after three Commits")
	s.noneInDoubt(t, b, "after Commit")
	unknown := twophase.BatchID{Connector: s.h.Connector, Topic: topic, Partition: 0, First: recs[3].Offset + 1, Last: recs[3].Offset + 5}
	if err := a.Commit(ctx, unknown); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("Commit of a batch never prepared: %v, want ErrNotPrepared", err)
	}
	s.rows(t, topic, ids(recs), "after Commit of an unknown batch")
}

// testAbortIdempotent: Abort twice, and of a batch never prepared, is nil;
// an aborted batch leaves nothing and its Commit is ErrNotPrepared.
func testAbortIdempotent(t *testing.T, s *suite) {
	ctx := ctxT(t)
	a, b := s.h.Open(t), s.h.Open(t)
	topic := s.h.NewTopic(t, 1)
	pos := acquire(t, a, topic, 0, 0)
	recs := s.records(t, topic, 0, 3)
	bt := s.batch(recs, 0, pos.Fence)
	if err := a.Prepare(ctx, bt); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(ctx, bt.ID); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := a.Abort(ctx, bt.ID); err != nil {
		t.Fatalf("second Abort: %v, want nil", err)
	}
	if err := b.Abort(ctx, bt.ID); err != nil {
		t.Fatalf("Abort by another instance: %v, want nil", err)
	}
	unknown := twophase.BatchID{Connector: s.h.Connector, Topic: topic, Partition: 0, First: 100, Last: 110}
	if err := a.Abort(ctx, unknown); err != nil {
		t.Fatalf("Abort of a batch never prepared: %v, want nil", err)
	}
	if err := b.Commit(ctx, bt.ID); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("Commit of an aborted batch: %v, want ErrNotPrepared", err)
	}
	s.noneInDoubt(t, b, "after Abort")
	s.rows(t, topic, nil, "after Abort")
	wantNext(t, b, topic, 0, 0, "after Abort")
}

// testInDoubt: what a crashed owner left prepared is listed by another
// instance, holds its partition (Acquire is busy), and is resolved by that
// instance: one batch committed, exactly once, one aborted.
func testInDoubt(t *testing.T, s *suite) {
	ctx := ctxT(t)
	a := s.h.Open(t)
	topic := s.h.NewTopic(t, 2)
	p0, p1 := acquire(t, a, topic, 0, 0), acquire(t, a, topic, 1, 0)
	r0, r1 := s.records(t, topic, 0, 3), s.records(t, topic, 1, 2)
	b0, b1 := s.batch(r0, 0, p0.Fence), s.batch(r1, 0, p1.Fence)
	for _, b := range []*twophase.Batch{b0, b1} {
		if err := a.Prepare(ctx, b); err != nil {
			t.Fatalf("Prepare %s: %v", b.ID, err)
		}
	}
	a.Close() // the owner crashes: nothing of it in memory is left

	b := s.h.Open(t)
	got := s.inDoubt(t, b)
	sort.Slice(got, func(i, j int) bool { return got[i].Partition < got[j].Partition })
	if !slices.Equal(got, []twophase.BatchID{b0.ID, b1.ID}) {
		t.Fatalf("InDoubt from another instance: %v, want [%s %s]", got, b0.ID, b1.ID)
	}
	s.rows(t, topic, nil, "while in doubt")
	if _, err := b.Acquire(ctx, topic, []int32{0}); !errors.Is(err, offsets.ErrBusy) {
		t.Fatalf("Acquire of a partition with an in-doubt batch: %v, want ErrBusy", err)
	}
	if err := b.Commit(ctx, b0.ID); err != nil {
		t.Fatalf("Commit of the crashed owner's batch by another instance: %v", err)
	}
	if err := b.Abort(ctx, b1.ID); err != nil {
		t.Fatalf("Abort of the crashed owner's batch by another instance: %v", err)
	}
	s.noneInDoubt(t, b, "after resolution")
	s.rows(t, topic, ids(r0), "after resolution")
	wantNext(t, b, topic, 0, r0[2].Offset+1, "after resolution")
	wantNext(t, b, topic, 1, 0, "after resolution")
	// The partitions are free again, and the aborted range can be redone.
	q1 := acquire(t, b, topic, 1, 0)
	mustPrepareCommit(t, b, s.batch(r1, 0, q1.Fence))
	s.rows(t, topic, ids(r0, r1), "after the aborted range was redone")
}

// testRedo: a batch range prepared again after an abort yields the same
// rows exactly once: in the same instance with the same fence (a round
// the decision aborted cleanly, which the runtime redoes without a new
// Acquire), and in another instance under a new fence.
func testRedo(t *testing.T, s *suite) {
	t.Run("same-fence", func(t *testing.T) {
		if why := s.h.Known["redo/same-fence"]; why != "" {
			t.Skipf("known sink bug, declared by the harness: %s", why)
		}
		ctx := ctxT(t)
		a := s.h.Open(t)
		topic := s.h.NewTopic(t, 1)
		pos := acquire(t, a, topic, 0, 0)
		recs := s.records(t, topic, 0, 5)
		bt := s.batch(recs, 0, pos.Fence)
		if err := a.Prepare(ctx, bt); err != nil {
			t.Fatal(err)
		}
		if err := a.Abort(ctx, bt.ID); err != nil {
			t.Fatal(err)
		}
		if err := a.Prepare(ctx, bt); err != nil {
			t.Fatalf("Prepare again after Abort, same fence: %v", err)
		}
		if got := s.inDoubt(t, s.h.Open(t)); !slices.Equal(got, []twophase.BatchID{bt.ID}) {
			t.Fatalf("InDoubt after the second Prepare: %v, want [%s]", got, bt.ID)
		}
		if err := a.Commit(ctx, bt.ID); err != nil {
			t.Fatalf("Commit of the batch prepared again after Abort: %v", err)
		}
		s.noneInDoubt(t, a, "after the redo")
		s.rows(t, topic, ids(recs), "after prepare, abort, prepare, commit")
		wantNext(t, a, topic, 0, recs[4].Offset+1, "after the redo")
	})
	t.Run("new-owner", func(t *testing.T) {
		ctx := ctxT(t)
		a := s.h.Open(t)
		topic := s.h.NewTopic(t, 1)
		pos := acquire(t, a, topic, 0, 0)
		first := s.records(t, topic, 0, 2)
		mustPrepareCommit(t, a, s.batch(first, 0, pos.Fence))
		more := s.records(t, topic, 0, 3)
		bm := s.batch(more, first[1].Offset+1, pos.Fence)
		if err := a.Prepare(ctx, bm); err != nil {
			t.Fatal(err)
		}
		b := s.h.Open(t)
		if err := b.Abort(ctx, bm.ID); err != nil {
			t.Fatal(err)
		}
		q := acquire(t, b, topic, 0, 0)
		mustPrepareCommit(t, b, s.batch(more, q.Next, q.Fence))
		s.noneInDoubt(t, b, "after the redo")
		s.rows(t, topic, ids(first, more), "after a redo by a new owner")
		wantNext(t, a, topic, 0, more[2].Offset+1, "after a redo by a new owner")
	})
}

// testReset: ResetOffsets stores the given positions (or unsets all) and
// fences the live owner; it is refused while the partition is in doubt.
func testReset(t *testing.T, s *suite) {
	ctx := ctxT(t)
	sk := s.h.Open(t)
	topic := s.h.NewTopic(t, 2)
	p0, p1 := acquire(t, sk, topic, 0, 0), acquire(t, sk, topic, 1, 0)
	recs := s.records(t, topic, 0, 2)
	mustPrepareCommit(t, sk, s.batch(recs, 0, p0.Fence))
	if err := sk.ResetOffsets(ctx, false, []offsets.Position{{Topic: topic, Partition: 0, Next: 1}}); err != nil {
		t.Fatalf("ResetOffsets: %v", err)
	}
	wantNext(t, sk, topic, 0, 1, "after ResetOffsets")
	if pos, _ := position(t, sk, topic, 0); pos.Fence <= p0.Fence {
		t.Fatalf("ResetOffsets left fence %d, want above the owner's %d", pos.Fence, p0.Fence)
	}
	wantNext(t, sk, topic, 1, 0, "partition not reset")
	// The owner from before the reset is fenced.
	more := s.records(t, topic, 0, 1)
	wantFenced(t, sk.Prepare(ctx, s.batch(more, 1, p0.Fence)), "Prepare by the owner from before ResetOffsets")
	s.noneInDoubt(t, sk, "after a fenced Prepare")

	// In doubt: the reset is refused and changes nothing.
	r1 := s.records(t, topic, 1, 2)
	b1 := s.batch(r1, 0, p1.Fence)
	if err := sk.Prepare(ctx, b1); err != nil {
		t.Fatal(err)
	}
	if err := sk.ResetOffsets(ctx, false, []offsets.Position{{Topic: topic, Partition: 1, Next: 5}}); !errors.Is(err, offsets.ErrBusy) {
		t.Fatalf("ResetOffsets of an in-doubt partition: %v, want ErrBusy", err)
	}
	if err := sk.Commit(ctx, b1.ID); err != nil {
		t.Fatalf("Commit after a refused ResetOffsets: %v", err)
	}
	s.rows(t, topic, ids(recs, r1), "after the in-doubt batch committed")

	if err := sk.ResetOffsets(ctx, true, nil); err != nil {
		t.Fatalf("ResetOffsets(all): %v", err)
	}
	for _, p := range []int32{0, 1} {
		if pos, ok := position(t, sk, topic, p); ok && pos.Next != offsets.Unset {
			t.Fatalf("after ResetOffsets(all): %s[%d] at %d, want unset or absent", topic, p, pos.Next)
		}
	}
	got, err := sk.Acquire(ctx, topic, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Next != offsets.Unset {
		t.Fatalf("Acquire after ResetOffsets(all): next_offset %d, want unset", got[0].Next)
	}
}

// testWriteLocal: each WriteLocal mode the sink declares writes rows and
// advances the offset; exactly_once_sink refuses an old fence and a
// batch not continuing from the stored offset, leaving nothing. A mode
// the harness says the sink cannot do must not be among the guarantees
// the sink declares, and the runtime's check refuses it.
func testWriteLocal(t *testing.T, s *suite) {
	for _, m := range LocalModes {
		t.Run(m.Name, func(t *testing.T) {
			ctx := ctxT(t)
			sk := s.h.Open(t)
			declared, _ := sk.Guarantees()
			if !slices.Contains(s.h.Local, m) {
				if declared.Has(m.Guarantee) {
					t.Fatalf("the sink declares %s (%s), but the harness says it cannot do it", m.Name, declared)
				}
				if err := connectors.Supports(sk, m.Guarantee); err == nil {
					t.Fatalf("connectors.Supports(%s) accepted a guarantee the sink does not declare", m.Name)
				}
				t.Skipf("sink does not declare %s (%s); checked that the runtime refuses it", m.Name, s.h.LocalWhy)
			}
			if !declared.Has(m.Guarantee) {
				t.Fatalf("the sink does not declare %s (%s), but the harness says it implements it", m.Name, declared)
			}
			if err := connectors.Supports(sk, m.Guarantee); err != nil {
				t.Fatalf("connectors.Supports(%s): %v", m.Name, err)
			}
			lw := sk.(connectors.LocalWriter)
			topic := s.h.NewTopic(t, 1)
			pos := acquire(t, sk, topic, 0, 0)
			recs := s.records(t, topic, 0, 3)
			if m.Guard == offsets.GuardCAS {
				newer := acquire(t, s.h.Open(t), topic, 0, 0)
				wantFenced(t, lw.WriteLocal(ctx, s.batch(recs, 0, pos.Fence), m.Guard, m.Order), "WriteLocal with an old fence")
				wantFenced(t, lw.WriteLocal(ctx, s.batch(recs, 2, newer.Fence), m.Guard, m.Order), "WriteLocal with Prev not the stored next_offset")
				s.rows(t, topic, nil, "after refused WriteLocals")
				wantNext(t, sk, topic, 0, 0, "after refused WriteLocals")
				pos = newer
			}
			if err := lw.WriteLocal(ctx, s.batch(recs, 0, pos.Fence), m.Guard, m.Order); err != nil {
				t.Fatalf("WriteLocal(%s): %v", m.Name, err)
			}
			s.rows(t, topic, ids(recs), "after WriteLocal")
			wantNext(t, sk, topic, 0, recs[2].Offset+1, "after WriteLocal")
			s.noneInDoubt(t, sk, "after WriteLocal")
			more := s.records(t, topic, 0, 2)
			if err := lw.WriteLocal(ctx, s.batch(more, recs[2].Offset+1, pos.Fence), m.Guard, m.Order); err != nil {
				t.Fatalf("second WriteLocal(%s): %v", m.Name, err)
			}
			s.rows(t, topic, ids(recs, more), "after two WriteLocals")
			wantNext(t, sk, topic, 0, more[1].Offset+1, "after two WriteLocals")
		})
	}
}

// testStager: a staged batch is not visible, not in doubt and moves no
// offset; Prepare and Commit of it make it visible exactly once; a
// discarded batch leaves nothing and its Prepare writes it whole; a staged
// batch whose compare-and-set fails leaves nothing.
func testStager(t *testing.T, s *suite) {
	ctx := ctxT(t)
	sk := s.h.Open(t)
	st, ok := sk.(twophase.Stager)
	if !s.h.Stager {
		t.Skipf("sink does not stage (%s)", s.h.StagerWhy)
	}
	if !ok {
		t.Fatalf("the harness declares a Stager, but %T does not implement twophase.Stager", sk)
	}
	topic := s.h.NewTopic(t, 1)
	pos := acquire(t, sk, topic, 0, 0)
	recs := s.records(t, topic, 0, 3)
	bt := s.batch(recs, 0, pos.Fence)
	if err := st.Stage(ctx, bt); err != nil {
		t.Fatalf("Stage: %v", err)
	}
	s.rows(t, topic, nil, "while staged")
	s.noneInDoubt(t, s.h.Open(t), "while staged")
	wantNext(t, sk, topic, 0, 0, "while staged")
	mustPrepareCommit(t, sk, bt)
	s.rows(t, topic, ids(recs), "after the staged batch committed")

	t.Run("discard", func(t *testing.T) {
		more := s.records(t, topic, 0, 2)
		bm := s.batch(more, recs[2].Offset+1, pos.Fence)
		if err := st.Stage(ctx, bm); err != nil {
			t.Fatalf("Stage: %v", err)
		}
		st.Discard([]twophase.BatchID{bm.ID})
		s.rows(t, topic, ids(recs), "after Discard")
		s.noneInDoubt(t, sk, "after Discard")
		mustPrepareCommit(t, sk, bm)
		s.rows(t, topic, ids(recs, more), "after a discarded batch was prepared whole")
	})
	t.Run("fenced", func(t *testing.T) {
		cur, _ := position(t, sk, topic, 0)
		more := s.records(t, topic, 0, 2)
		bm := s.batch(more, cur.Next-1, cur.Fence) // does not continue from next_offset
		if err := st.Stage(ctx, bm); err != nil {
			t.Fatalf("Stage: %v", err)
		}
		wantFenced(t, sk.Prepare(ctx, bm), "Prepare of a staged batch whose Prev is not the stored next_offset")
		s.noneInDoubt(t, sk, "after a fenced staged Prepare")
		before := slices.Clone(s.h.IDs(t, topic))
		sort.Strings(before)
		s.rows(t, topic, before, "after a fenced staged Prepare")
		for _, id := range ids(more) {
			if slices.Contains(before, id) {
				t.Fatalf("row %s of a fenced staged batch is visible", id)
			}
		}
		wantNext(t, sk, topic, 0, cur.Next, "after a fenced staged Prepare")
		// The staging slot is free again: the next batch stages and commits.
		ok := s.batch(more, cur.Next, cur.Fence)
		if err := st.Stage(ctx, ok); err != nil {
			t.Fatalf("Stage after a fenced staged Prepare: %v", err)
		}
		mustPrepareCommit(t, sk, ok)
		if got := s.h.IDs(t, topic); len(got) != len(before)+len(more) {
			t.Fatalf("%d rows after the continuing staged batch, want %d", len(got), len(before)+len(more))
		}
	})
}

// testRounds: a twophase.RoundParticipant (set up by its harness to write
// a round as one unit) prepares a round's batches as one unit and commits
// the whole round when any of its batches is committed, from whichever
// instance; a fenced batch leaves the whole
// round unprepared; an aborted round is redone exactly once; two
// instances that each commit part of a crashed owner's round (two new
// owners recovering their own partitions) leave every row once.
func testRounds(t *testing.T, s *suite) {
	if _, ok := s.h.Open(t).(twophase.RoundParticipant); !ok {
		t.Skip("sink prepares and commits batch by batch (not a twophase.RoundParticipant)")
	}
	// round prepares one batch of n records on each of parts partitions
	// of a new topic, in instance a.
	round := func(t *testing.T, a connectors.Sink, parts int32, n int) (string, []*twophase.Batch, [][]*kgo.Record) {
		t.Helper()
		topic := s.h.NewTopic(t, parts)
		var bs []*twophase.Batch
		var recs [][]*kgo.Record
		for p := range parts {
			pos := acquire(t, a, topic, p, 0)
			r := s.records(t, topic, p, n)
			recs = append(recs, r)
			bs = append(bs, s.batch(r, 0, pos.Fence))
		}
		for i, err := range a.(twophase.RoundParticipant).PrepareRound(ctxT(t), bs) {
			if err != nil {
				t.Fatalf("PrepareRound: batch %s: %v", bs[i].ID, err)
			}
		}
		return topic, bs, recs
	}
	idsOf := func(bs []*twophase.Batch) []twophase.BatchID {
		var out []twophase.BatchID
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	commit := func(t *testing.T, sk connectors.Sink, ids ...twophase.BatchID) {
		t.Helper()
		for i, err := range sk.(twophase.RoundParticipant).CommitRound(ctxT(t), ids) {
			if err != nil {
				t.Fatalf("CommitRound: batch %s: %v", ids[i], err)
			}
		}
	}

	t.Run("commit-by-one-member", func(t *testing.T) {
		a := s.h.Open(t)
		topic, bs, recs := round(t, a, 3, 4)
		a.Close() // the owner crashes after the decision
		b := s.h.Open(t)
		got := s.inDoubt(t, b)
		slices.SortFunc(got, func(x, y twophase.BatchID) int { return int(x.Partition - y.Partition) })
		if !slices.Equal(got, idsOf(bs)) {
			t.Fatalf("InDoubt: %v, want the round's batches %v", got, idsOf(bs))
		}
		commit(t, b, bs[1].ID) // a new owner of partition 1 only
		s.rows(t, topic, ids(recs...), "after one batch of the round was committed")
		for p, r := range recs {
			wantNext(t, b, topic, int32(p), r[len(r)-1].Offset+1, "after one batch of the round was committed")
		}
		s.noneInDoubt(t, b, "after one batch of the round was committed")
		commit(t, s.h.Open(t), bs[0].ID, bs[2].ID) // the other owners, later
		s.rows(t, topic, ids(recs...), "after the other batches were committed again")
	})

	t.Run("fenced-member", func(t *testing.T) {
		a := s.h.Open(t)
		topic := s.h.NewTopic(t, 2)
		p0, p1 := acquire(t, a, topic, 0, 0), acquire(t, a, topic, 1, 0)
		acquire(t, s.h.Open(t), topic, 1, 0) // partition 1 has a new owner
		r0, r1 := s.records(t, topic, 0, 2), s.records(t, topic, 1, 2)
		errs := a.(twophase.RoundParticipant).PrepareRound(ctxT(t), []*twophase.Batch{s.batch(r0, 0, p0.Fence), s.batch(r1, 0, p1.Fence)})
		wantFenced(t, errs[1], "PrepareRound: the batch of the partition a new owner took")
		if !errors.Is(errs[0], twophase.ErrNothingPrepared) || errors.Is(errs[0], twophase.ErrFenced) {
			t.Fatalf("PrepareRound: the other batch: %v, want an error wrapping ErrNothingPrepared", errs[0])
		}
		s.noneInDoubt(t, a, "after a fenced round")
		s.rows(t, topic, nil, "after a fenced round")
	})

	t.Run("abort-and-redo", func(t *testing.T) {
		a := s.h.Open(t)
		topic, bs, recs := round(t, a, 2, 3)
		for _, b := range bs {
			if err := a.Abort(ctxT(t), b.ID); err != nil {
				t.Fatalf("Abort %s: %v", b.ID, err)
			}
		}
		s.noneInDoubt(t, a, "after the round aborted")
		for i, err := range a.(twophase.RoundParticipant).PrepareRound(ctxT(t), bs) {
			if err != nil {
				t.Fatalf("PrepareRound again after the abort: %s: %v", bs[i].ID, err)
			}
		}
		commit(t, a, idsOf(bs)...)
		s.rows(t, topic, ids(recs...), "after the aborted round was redone")
	})

	t.Run("two-owners-recover", func(t *testing.T) {
		a := s.h.Open(t)
		topic, bs, recs := round(t, a, 4, 3)
		a.Close()
		b, c := s.h.Open(t), s.h.Open(t)
		var wg sync.WaitGroup
		errs := make([][]error, 2)
		wg.Go(func() {
			errs[0] = b.(twophase.RoundParticipant).CommitRound(ctxT(t), []twophase.BatchID{bs[0].ID, bs[1].ID})
		})
		wg.Go(func() {
			errs[1] = c.(twophase.RoundParticipant).CommitRound(ctxT(t), []twophase.BatchID{bs[2].ID, bs[3].ID})
		})
		wg.Wait()
		for _, es := range errs {
			for _, err := range es {
				if err != nil {
					t.Fatalf("CommitRound by one of two new owners: %v", err)
				}
			}
		}
		s.rows(t, topic, ids(recs...), "after two owners each committed part of the round")
		for p, r := range recs {
			wantNext(t, b, topic, int32(p), r[len(r)-1].Offset+1, "after two owners each committed part of the round")
		}
		s.noneInDoubt(t, b, "after two owners each committed part of the round")
	})
}
