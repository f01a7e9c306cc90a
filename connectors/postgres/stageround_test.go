//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/twophase"
)

// TestStageRound: a round written ahead in its round transactions
// (StageRound) holds one staging slot per transaction of several batches,
// shows no rows until it commits, and is prepared by PrepareRound from
// the transactions written ahead (their slots are released and no session
// is left in a transaction); a discarded batch rolls its transaction back;
// a round that is not the one written ahead is written anew; a fenced
// batch of a transaction written ahead is fenced and nothing of it is
// written.
func TestStageRound(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	parts := []int32{0, 1, 2, 3, 4}
	e := newEvSink(t, db, "sr", parts...)
	s := e.Sink
	s.EnableStaging(8)
	s.SetRoundParallelism(2)
	next := map[int32]int64{}
	round := func(ps ...int32) []*twophase.Batch {
		var bs []*twophase.Batch
		for _, p := range ps {
			bs = append(bs, e.batch(p, next[p], 2))
		}
		return bs
	}
	advance := func(bs []*twophase.Batch) {
		for _, b := range bs {
			next[b.ID.Partition] = b.ID.NextOffset()
		}
	}
	idle := func() int {
		return len(db.strings(`SELECT pid::text FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`))
	}
	ids := func(bs []*twophase.Batch) []twophase.BatchID {
		out := make([]twophase.BatchID, len(bs))
		for i, b := range bs {
			out[i] = b.ID
		}
		return out
	}
	commit := func(bs []*twophase.Batch) {
		t.Helper()
		for i, err := range s.CommitRound(ctx, ids(bs)) {
			if err != nil {
				t.Fatalf("CommitRound: %s: %v", bs[i].ID, err)
			}
		}
		advance(bs)
	}
	prepare := func(bs []*twophase.Batch) {
		t.Helper()
		for i, err := range s.PrepareRound(ctx, bs) {
			if err != nil {
				t.Fatalf("PrepareRound: %s: %v", bs[i].ID, err)
			}
		}
	}

	// Five batches at commit.parallelism 2: transactions of two and
	// three batches, one slot each.
	bs := round(parts...)
	for i, err := range s.StageRound(ctx, bs) {
		if err != nil {
			t.Fatalf("StageRound: %s: %v", bs[i].ID, err)
		}
	}
	if n, open := len(s.slots), idle(); n != 2 || open != 2 {
		t.Fatalf("after StageRound: %d slots taken, %d sessions in a transaction; want 2 and 2", n, open)
	}
	if n := db.count("ev"); n != 0 {
		t.Fatalf("%d rows written ahead visible before their commit", n)
	}
	prepare(bs)
	if n, open := len(s.slots), idle(); n != 0 || open != 0 {
		t.Fatalf("after PrepareRound: %d slots taken, %d sessions in a transaction; want none (the transactions written ahead were prepared)", n, open)
	}
	got := db.strings(`SELECT count(*)::text FROM txsink_offsets_rounds r JOIN pg_prepared_xacts x ON x.gid = r.gid GROUP BY r.gid ORDER BY count(*)`)
	if strings.Join(got, ",") != "2,3" {
		t.Fatalf("batches per prepared round transaction %v, want 2,3", got)
	}
	commit(bs)
	if n := db.count("ev"); n != 10 {
		t.Fatalf("%d rows after the commit, want 10", n)
	}

	// Discard of one batch rolls back its transaction; the round is then
	// written whole at its prepare.
	bs = round(0, 1, 2, 3)
	s.StageRound(ctx, bs)
	s.Discard([]twophase.BatchID{bs[3].ID})
	if n := len(s.slots); n != 1 {
		t.Fatalf("after discarding one batch: %d slots taken, want 1", n)
	}
	prepare(bs)
	commit(bs)
	if n, open := db.count("ev"), idle(); n != 18 || open != 0 || len(s.slots) != 0 {
		t.Fatalf("after a discard: %d rows (want 18), %d sessions in a transaction, %d slots taken", n, open, len(s.slots))
	}

	// Prepared as another round (a subset): what was written ahead for
	// the missing batch's transaction is rolled back and written anew.
	bs = round(0, 1, 2, 3)
	s.StageRound(ctx, bs)
	prepare(bs[:3])
	commit(bs[:3])
	prepare(bs[3:])
	commit(bs[3:])
	if n, open := db.count("ev"), idle(); n != 26 || open != 0 || len(s.slots) != 0 {
		t.Fatalf("after a subset: %d rows (want 26), %d sessions in a transaction, %d slots taken", n, open, len(s.slots))
	}

	// Another owner takes partition 1: its batch is fenced at the
	// prepare of the transaction written ahead, its sibling refused and
	// not taken for fenced, and none of their rows is written.
	bs = round(0, 1, 2, 3)
	s.StageRound(ctx, bs)
	if _, err := newEvSink(t, db, "sr").Acquire(ctx, "ev", []int32{1}); err != nil {
		t.Fatal(err)
	}
	errs := s.PrepareRound(ctx, bs)
	if !errors.Is(errs[1], twophase.ErrFenced) {
		t.Fatalf("the fenced batch: %v, want ErrFenced", errs[1])
	}
	if !errors.Is(errs[0], twophase.ErrNothingPrepared) || errors.Is(errs[0], twophase.ErrFenced) {
		t.Fatalf("its sibling: %v, want ErrNothingPrepared and not ErrFenced", errs[0])
	}
	for _, i := range []int{2, 3} {
		if errs[i] != nil {
			t.Fatalf("batch %s of the other transaction: %v", bs[i].ID, errs[i])
		}
	}
	commit(bs[2:])
	if n, open := db.count("ev"), idle(); n != 30 || open != 0 || len(s.slots) != 0 {
		t.Fatalf("after a fenced batch: %d rows (want 30), %d sessions in a transaction, %d slots taken", n, open, len(s.slots))
	}
}

// TestStageRoundKeyed: a round transaction one of whose batches needs a
// keyed write (here a tombstone, a delete) is not written ahead, the
// topic is never written ahead again, and the round is written right at
// its prepare.
func TestStageRoundKeyed(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text PRIMARY KEY)`)
	ctx := context.Background()
	e := newEvSinkWith(t, db, WriterConfig{Connector: "srk", PKMode: PKModeRecordKey, DeleteEnabled: true}, 0, 1)
	s := e.Sink
	s.EnableStaging(8)
	s.SetRoundParallelism(1)
	a, b := e.batch(0, 0, 1), e.batch(1, 0, 1)
	a.Records[0].Key, a.Records[0].Value = []byte(`{"id":"a"}`), []byte(`{"id":"a"}`)
	b.Records[0].Key, b.Records[0].Value = []byte(`{"id":"b"}`), nil
	for i, err := range s.StageRound(ctx, []*twophase.Batch{a, b}) {
		if !errors.Is(err, errNotAppendOnly) {
			t.Fatalf("StageRound of a round with a delete: batch %d: %v, want errNotAppendOnly", i, err)
		}
	}
	if len(s.slots) != 0 || !s.keyedTopics["ev"] {
		t.Fatalf("after a refused round: %d slots taken, topic marked keyed %v", len(s.slots), s.keyedTopics["ev"])
	}
	for i, err := range s.PrepareRound(ctx, []*twophase.Batch{a, b}) {
		if err != nil {
			t.Fatalf("PrepareRound: %d: %v", i, err)
		}
	}
	for i, err := range s.CommitRound(ctx, []twophase.BatchID{a.ID, b.ID}) {
		if err != nil {
			t.Fatalf("CommitRound: %d: %v", i, err)
		}
	}
	if n := db.count("ev"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}
