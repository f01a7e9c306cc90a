//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/internal/dbztest"
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

// TestStageDeleteBeforeTableCommitted: a round that creates its table
// (auto.create, alone in its round) is prepared; the next round is
// written ahead while it waits for its decision, and for that round's
// writes the table does not exist yet. A delete it holds is no no-op:
// the table's existence is a read of the table, so the batch is not
// staged and, written in its round, deletes the row the round before
// inserted. (Seen as three un-deleted rows in a replication run.)
func TestStageDeleteBeforeTableCommitted(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	ctx := context.Background()
	w := cdcWriter(t, WriterConfig{Connector: "stdel", TableNameFormat: "${source.table}", AutoCreate: true},
		map[string]string{convert.KeyCDCFormat: "debezium"})
	s, err := NewSink(ctx, db.pool, "stdel", w, "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.EnableStaging(2)
	topic := items.Topic()
	acq, err := s.Acquire(ctx, topic, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	fence := acq[0].Fence
	if err := s.Initialize(ctx, topic, 0, fence, 0); err != nil {
		t.Fatal(err)
	}
	batch := func(recs []*kgo.Record) *twophase.Batch {
		first, last := recs[0].Offset, recs[len(recs)-1].Offset
		return &twophase.Batch{ID: twophase.BatchID{Connector: "stdel", Topic: topic, Partition: 0, First: first, Last: last}, Prev: first, Fence: fence, Records: recs}
	}
	create := batch(events(items, 0,
		&dbztest.Event{Op: 'c', After: row(1, "a", 1)},
		&dbztest.Event{Op: 'c', After: row(2, "b", 2)},
	))
	create.Alone = true
	if err := s.Prepare(ctx, create); err != nil {
		t.Fatal(err)
	}
	del := batch(events(items, 2, &dbztest.Event{Op: 'd', Before: row(2, "b", 2)}, nil))
	staged := s.Stage(ctx, del) == nil
	if err := s.Commit(ctx, create.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, del); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, del.ID); err != nil {
		t.Fatal(err)
	}
	if got := db.rows("items"); got != "(1,a,1)" {
		t.Fatalf("rows %s, want (1,a,1): the delete written ahead (staged %v) while the table's creation was prepared was lost", got, staged)
	}
	if staged {
		t.Errorf("a delete of a table not yet visible was staged")
	}
}

// TestWriteRoundIsOneTransaction (source.transactions=whole): a round's
// batches, rows and offsets, commit together or not at all. A round one
// of whose batches fails its compare-and-set leaves neither its own nor
// the other batch's rows or offsets; the same round from the right
// offsets commits both.
func TestWriteRoundIsOneTransaction(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	s, err := NewSink(ctx, db.pool, "round", mustWriter(t, WriterConfig{Connector: "round"}), "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	acq, err := s.Acquire(ctx, "ev", []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for p, q := range acq {
		if err := s.Initialize(ctx, "ev", p, q.Fence, 0); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(p int32, prev int64, n int) *twophase.Batch {
		b := &twophase.Batch{ID: twophase.BatchID{Connector: "round", Topic: "ev", Partition: p, First: prev, Last: prev + int64(n) - 1}, Prev: prev, Fence: acq[p].Fence}
		for i := range n {
			r := rec("ev", prev+int64(i), nil, []byte(`{"id":"x"}`))
			r.Partition = p
			b.Records = append(b.Records, r)
		}
		return b
	}
	stored := func() map[int32]int64 {
		ps, err := s.Positions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		for _, p := range ps {
			out[p.Partition] = p.Next
		}
		return out
	}
	// Partition 1's batch claims to continue from 5: its compare-and-set
	// fails after partition 0's batch was written in the transaction.
	err = s.WriteRound(ctx, []*twophase.Batch{batch(0, 0, 3), batch(1, 5, 2)}, offsets.GuardCAS)
	if !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("round with a stale batch: %v, want a fence conflict", err)
	}
	if n, pos := db.count("ev"), stored(); n != 0 || pos[0] != 0 || pos[1] != 0 {
		t.Fatalf("after the failed round: %d rows, offsets %v; want none written", n, pos)
	}
	if err := s.WriteRound(ctx, []*twophase.Batch{batch(0, 0, 3), batch(1, 0, 2)}, offsets.GuardCAS); err != nil {
		t.Fatal(err)
	}
	if n, pos := db.count("ev"), stored(); n != 5 || pos[0] != 3 || pos[1] != 2 {
		t.Fatalf("after the round: %d rows, offsets %v; want 5 rows, offsets 3 and 2", n, pos)
	}
}
