package sinktest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

func batch(prev, fence, first, last int64) *twophase.Batch {
	b := &twophase.Batch{ID: twophase.BatchID{Connector: "c", Topic: "t", Partition: 0, First: first, Last: last}, Prev: prev, Fence: fence}
	for o := first; o <= last; o++ {
		b.Records = append(b.Records, &kgo.Record{Topic: "t", Partition: 0, Offset: o, Value: fmt.Appendf(nil, `{"id":"v%d"}`, o)})
	}
	return b
}

// acquireP0 fences partition 0 of t and initializes it at 0.
func acquireP0(t *testing.T, m *MemSink) int64 {
	t.Helper()
	ctx := context.Background()
	pos, err := m.Acquire(ctx, "t", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if pos[0].Next == offsets.Unset {
		if err := m.Initialize(ctx, "t", 0, pos[0].Fence, 0); err != nil {
			t.Fatal(err)
		}
	}
	return pos[0].Fence
}

// TestTwoPhaseContract: prepare is a CAS under the fence, a prepared batch
// is in doubt and holds its partition, commit and abort are idempotent.
func TestTwoPhaseContract(t *testing.T) {
	ctx := context.Background()
	st := NewStore()
	a := st.Open("c")
	fa := acquireP0(t, a)
	if err := a.Prepare(ctx, batch(5, fa, 5, 9)); !errors.Is(err, twophase.ErrFenced) {
		t.Fatalf("prepare from a wrong prev: %v, want fenced", err)
	}
	b1 := batch(0, fa, 0, 4)
	if err := a.Prepare(ctx, b1); err != nil {
		t.Fatal(err)
	}
	// Another instance sees it in doubt and cannot acquire meanwhile.
	b := st.Open("c")
	if ids, _ := b.InDoubt(ctx, "c"); len(ids) != 1 || ids[0] != b1.ID {
		t.Fatalf("in doubt %v, want %v", ids, b1.ID)
	}
	if _, err := b.Acquire(ctx, "t", []int32{0}); !errors.Is(err, offsets.ErrBusy) {
		t.Fatalf("acquire while prepared: %v, want busy", err)
	}
	if len(st.Rows()) != 0 {
		t.Fatal("prepared rows visible")
	}
	if err := b.Commit(ctx, b1.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx, b1.ID); err != nil {
		t.Fatalf("second commit: %v, want nil", err)
	}
	if err := a.Commit(ctx, batch(5, fa, 5, 9).ID); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("commit of an unknown batch: %v, want ErrNotPrepared", err)
	}
	if rows := st.Rows(); len(rows) != 5 || rows[0].Seq != 1 || rows[4].Offset != 4 {
		t.Fatalf("rows %+v", rows)
	}
	// B takes over: A is fenced.
	fb := acquireP0(t, b)
	if err := a.Prepare(ctx, batch(5, fa, 5, 9)); !errors.Is(err, twophase.ErrFenced) {
		t.Fatalf("zombie prepare: %v, want fenced", err)
	}
	b2 := batch(5, fb, 5, 9)
	if err := b.Prepare(ctx, b2); err != nil {
		t.Fatal(err)
	}
	if err := b.Abort(ctx, b2.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Abort(ctx, b2.ID); err != nil {
		t.Fatalf("second abort: %v", err)
	}
	if err := b.Commit(ctx, b2.ID); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("commit after abort: %v, want ErrNotPrepared", err)
	}
	if pos, _ := b.Positions(ctx); len(pos) != 1 || pos[0].Next != 5 || pos[0].Fence != fb {
		t.Fatalf("positions %+v", pos)
	}
}

// TestCrashKeepsPrepared: a hook error wrapping ErrCrashed kills the
// instance after its batch became durable; a new instance recovers it.
func TestCrashKeepsPrepared(t *testing.T) {
	ctx := context.Background()
	st := NewStore()
	a := st.Open("c")
	a.Hook = func(_ context.Context, p Point, _ twophase.BatchID) error {
		if p == AfterPrepare {
			return ErrCrashed
		}
		return nil
	}
	f := acquireP0(t, a)
	b1 := batch(0, f, 0, 2)
	if err := a.Prepare(ctx, b1); !errors.Is(err, ErrCrashed) {
		t.Fatalf("prepare: %v", err)
	}
	if _, err := a.Positions(ctx); !errors.Is(err, ErrCrashed) {
		t.Fatalf("dead instance answered: %v", err)
	}
	b := st.Open("c")
	if ids, _ := b.InDoubt(ctx, "c"); len(ids) != 1 {
		t.Fatalf("in doubt %v", ids)
	}
	if err := b.Commit(ctx, b1.ID); err != nil || len(st.Rows()) != 3 {
		t.Fatalf("recovery commit: %v, %d rows", err, len(st.Rows()))
	}
}

// TestBadRecord: with tolerance none a bad record fails Prepare and
// WriteLocal with a RecordLocator and nothing prepared; with all it is a
// dead letter.
func TestBadRecord(t *testing.T) {
	ctx := context.Background()
	st := NewStore()
	m := st.Open("c")
	m.Bad = map[Coord]error{{"t", 0, 3}: errors.New("boom")}
	f := acquireP0(t, m)
	err := m.Prepare(ctx, batch(0, f, 0, 4))
	var rl connectors.RecordLocator
	if !errors.As(err, &rl) || !errors.Is(err, twophase.ErrNothingPrepared) {
		t.Fatalf("prepare: %v", err)
	}
	if _, _, off := rl.RecordCoordinates(); off != 3 {
		t.Fatalf("located at %d", off)
	}
	if err := m.WriteLocal(ctx, batch(0, f, 0, 4), offsets.GuardCAS, connectors.Atomic); !errors.As(err, &rl) {
		t.Fatalf("write local: %v", err)
	}
	if len(st.Prepared()) != 0 || len(st.Rows()) != 0 {
		t.Fatal("something written")
	}
	m.Tolerate = true
	b := batch(0, f, 0, 4)
	if err := m.Stage(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if dl := connectors.DeadLettersOf([]*twophase.Batch{b}); len(dl) != 1 || dl[0].Record.Offset != 3 {
		t.Fatalf("dead letters %+v", dl)
	}
	if len(st.Rows()) != 4 {
		t.Fatalf("%d rows, want 4", len(st.Rows()))
	}
}

// TestWriteLocal: GuardCAS refuses a stale fence; GuardNone with RowsFirst
// and OffsetFirst write the two steps in order (seen at BetweenLocal).
func TestWriteLocal(t *testing.T) {
	ctx := context.Background()
	st := NewStore()
	m := st.Open("c")
	f := acquireP0(t, m)
	if err := m.WriteLocal(ctx, batch(0, f+1, 0, 1), offsets.GuardCAS, connectors.Atomic); !errors.Is(err, twophase.ErrFenced) {
		t.Fatalf("stale fence: %v", err)
	}
	if err := m.WriteLocal(ctx, batch(0, f, 0, 1), offsets.GuardCAS, connectors.Atomic); err != nil {
		t.Fatal(err)
	}
	var between []int // rows seen between the steps
	m.Hook = func(_ context.Context, p Point, _ twophase.BatchID) error {
		if p == BetweenLocal {
			between = append(between, len(st.Rows()))
			return ErrCrashed
		}
		return nil
	}
	if err := m.WriteLocal(ctx, batch(99, 0, 2, 3), offsets.GuardNone, connectors.RowsFirst); !errors.Is(err, ErrCrashed) {
		t.Fatal(err)
	}
	m2 := st.Open("c")
	m2.Hook = m.Hook
	if err := m2.WriteLocal(ctx, batch(99, 0, 4, 5), offsets.GuardNone, connectors.OffsetFirst); !errors.Is(err, ErrCrashed) {
		t.Fatal(err)
	}
	pos, _ := st.Open("c").Positions(ctx)
	if between[0] != 4 || between[1] != 4 || len(st.Rows()) != 4 || pos[0].Next != 6 {
		t.Fatalf("between %v, %d rows, next %d: want rows first then offset first", between, len(st.Rows()), pos[0].Next)
	}
}
