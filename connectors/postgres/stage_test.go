//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// TestStageSlotsAndLocalCommit: a batch that finds every staging slot
// taken is refused at once (the slots may be held by its own round), not
// after a wait; a staged batch's rows stay invisible until WriteLocal
// sets its offsets in the same transaction, and a staged batch whose
// compare-and-set fails leaves neither rows nor offsets.
func TestStageSlotsAndLocalCommit(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	s, err := NewSink(ctx, db.pool, "stage", mustWriter(t, WriterConfig{Connector: "stage"}), "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.EnableStaging(1)
	fences := map[int32]int64{}
	acq, err := s.Acquire(ctx, "ev", []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for p, q := range acq {
		fences[p] = q.Fence
		if err := s.Initialize(ctx, "ev", p, q.Fence, 0); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(p int32, first int64, n int) *twophase.Batch {
		b := &twophase.Batch{ID: twophase.BatchID{Connector: "stage", Topic: "ev", Partition: p, First: first, Last: first + int64(n) - 1}, Prev: first, Fence: fences[p]}
		for i := range n {
			r := rec("ev", first+int64(i), nil, []byte(`{"id":"x"}`))
			r.Partition = p
			b.Records = append(b.Records, r)
		}
		return b
	}
	a, b := batch(0, 0, 3), batch(1, 0, 2)
	if err := s.Stage(ctx, a); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Stage(sctx, b); !errors.Is(err, errNoSlot) {
		t.Fatalf("staging with no slot free: %v, want errNoSlot at once", err)
	}
	if n := db.count("ev"); n != 0 {
		t.Fatalf("%d staged rows visible before their commit", n)
	}
	// Not staged: b is written whole by WriteLocal.
	if err := s.WriteLocal(ctx, b, offsets.GuardCAS, connectors.Atomic); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteLocal(ctx, a, offsets.GuardCAS, connectors.Atomic); err != nil {
		t.Fatal(err)
	}
	if n := db.count("ev"); n != 5 {
		t.Fatalf("%d rows after both commits, want 5", n)
	}
	// The slot is free again; a staged batch whose compare-and-set fails
	// (it does not continue from the stored offset) commits nothing.
	c := batch(0, 10, 4)
	if err := s.Stage(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteLocal(ctx, c, offsets.GuardCAS, connectors.Atomic); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("a staged batch from offset 10 over next_offset 3: %v, want a fence conflict", err)
	}
	if n := db.count("ev"); n != 5 {
		t.Fatalf("%d rows after a failed compare-and-set, want 5", n)
	}
	if err := s.Stage(ctx, batch(0, 3, 1)); err != nil {
		t.Fatalf("the failed batch's slot was not released: %v", err)
	}
	s.Discard([]twophase.BatchID{batch(0, 3, 1).ID})
}
