//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/twophase"
)

// The PostgreSQL halves of two task behaviours the engine tests prove on
// the in-memory sink (connectors/engine TestTaskFailsOnTerminalError,
// TestTaskRunsSchemaChangesAlone): what makes this sink refuse a batch in
// those ways.

// preparer opens a sink of connector "c" over a fresh database and returns
// a function preparing one batch of values at the next offsets of ev[0].
func preparer(t *testing.T, db *testDB, cfg WriterConfig) (*Sink, func(alone bool, values ...string) (twophase.BatchID, error)) {
	t.Helper()
	ctx := context.Background()
	cfg.Connector = "c"
	s, err := NewSink(ctx, db.pool, "c", mustWriter(t, cfg), "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	acq, err := s.Acquire(ctx, "ev", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	fence := acq[0].Fence
	if err := s.Initialize(ctx, "ev", 0, fence, 0); err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	return s, func(alone bool, values ...string) (twophase.BatchID, error) {
		b := &twophase.Batch{ID: twophase.BatchID{Connector: "c", Topic: "ev", Partition: 0, First: next, Last: next + int64(len(values)) - 1}, Prev: next, Fence: fence, Alone: alone}
		for i, v := range values {
			b.Records = append(b.Records, rec("ev", next+int64(i), nil, []byte(v)))
		}
		err := s.Prepare(ctx, b)
		if err == nil {
			next = b.ID.NextOffset()
		}
		return b.ID, err
	}
}

// TestMissingTableIsTerminal: a target table that does not exist (and
// auto.create off) is not a bad record and not worth retrying: Prepare
// fails with a connectors.Terminal error naming the table and prepares
// nothing.
func TestMissingTableIsTerminal(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	_, prepare := preparer(t, db, WriterConfig{TableNameFormat: "no_such_table"})
	_, err := prepare(false, `{"id":"a"}`)
	if !connectors.IsTerminal(err) || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("prepare into a missing table: %v, want a terminal error naming it", err)
	}
	if n := db.strings(`SELECT count(*)::text FROM pg_prepared_xacts WHERE database = current_database()`); n[0] != "0" {
		t.Errorf("%s transactions left prepared", n[0])
	}
}

// TestSchemaChangeNeedsOwnRound: a batch that needs ALTER TABLE (auto.evolve)
// takes an ACCESS EXCLUSIVE lock its prepared transaction keeps until the
// decision, so it is refused with a *twophase.OwnRoundError unless it is
// alone in its round; alone, it is prepared with the change.
func TestSchemaChangeNeedsOwnRound(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	s, prepare := preparer(t, db, WriterConfig{AutoEvolve: true})
	ctx := context.Background()
	if id, err := prepare(false, `{"id":"a"}`); err != nil {
		t.Fatalf("a batch without a schema change: %v", err)
	} else if err := s.Commit(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err := prepare(false, `{"id":"b","color":"red"}`)
	var own *twophase.OwnRoundError
	if !errors.As(err, &own) || !errors.Is(err, twophase.ErrNothingPrepared) {
		t.Fatalf("a batch needing a new column, not alone: %v, want an OwnRoundError", err)
	}
	if n := db.strings(`SELECT count(*)::text FROM pg_prepared_xacts WHERE database = current_database()`); n[0] != "0" {
		t.Fatalf("%s transactions left prepared by the refusal", n[0])
	}
	id, err := prepare(true, `{"id":"b","color":"red"}`)
	if err != nil {
		t.Fatalf("the same batch alone: %v", err)
	}
	if err := s.Commit(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := db.strings(`SELECT coalesce(color, '-') FROM ev ORDER BY id`); strings.Join(got, ",") != "-,red" {
		t.Errorf("rows %v, want the evolved column filled for b only", got)
	}
}
