//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/twophase"
)

// TestRoundPreparedTogether: a round's batches that were not written
// ahead are one prepared transaction (txsink2_) whose batches the
// membership table names; a batch written ahead is prepared on its own
// (txsink1_). Committing the round removes its membership rows, and so
// does rolling one back; a gid whose rows were written but which was
// never prepared (a crash between the two) is not in doubt.
func TestRoundPreparedTogether(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	open := func() *Sink { return newEvSink(t, db, "rnd").Sink }
	e := newEvSink(t, db, "rnd", 0, 1, 2)
	s, batch := e.Sink, e.batch
	s.EnableStaging(1)
	s.SetRoundParallelism(1) // the batches not written ahead in one transaction
	prepared := func() []string {
		return db.strings(`SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY gid`)
	}
	members := func() int { return db.count("txsink_offsets_rounds") }

	bs := []*twophase.Batch{batch(2, 0, 2), batch(0, 0, 3), batch(1, 0, 4)}
	if err := s.Stage(ctx, bs[0]); err != nil { // written ahead: prepared alone
		t.Fatal(err)
	}
	for i, err := range s.PrepareRound(ctx, bs) {
		if err != nil {
			t.Fatalf("PrepareRound: %s: %v", bs[i].ID, err)
		}
	}
	gids := prepared()
	if len(gids) != 2 || !strings.HasPrefix(gids[0], GIDPrefix) || !strings.HasPrefix(gids[1], RoundGIDPrefix) {
		t.Fatalf("prepared %v; want the staged batch's own gid and one round gid", gids)
	}
	if want := RoundGID("rnd", []twophase.BatchID{bs[1].ID, bs[2].ID}); gids[1] != want {
		t.Fatalf("round gid %s, want %s (partitions in order)", gids[1], want)
	}
	if got := db.strings(`SELECT partition::text || ':' || first_offset || '-' || last_offset FROM txsink_offsets_rounds WHERE gid = $1 ORDER BY partition`, gids[1]); strings.Join(got, " ") != "0:0-2 1:0-3" {
		t.Fatalf("membership rows %v, want 0:0-2 1:0-3", got)
	}
	// A new instance finds all three in doubt, the round's from its rows.
	indoubt, err := open().InDoubt(ctx, "rnd")
	if err != nil {
		t.Fatal(err)
	}
	if len(indoubt) != 3 {
		t.Fatalf("InDoubt: %v, want the three batches", indoubt)
	}
	for i, err := range s.CommitRound(ctx, []twophase.BatchID{bs[0].ID, bs[1].ID, bs[2].ID}) {
		if err != nil {
			t.Fatalf("CommitRound: %s: %v", bs[i].ID, err)
		}
	}
	if n := db.count("ev"); n != 9 || len(prepared()) != 0 || members() != 0 {
		t.Fatalf("after the commit: %d rows (want 9), prepared %v, %d membership rows (want 0)", n, prepared(), members())
	}

	// Rolled back: a member's Abort rolls the round back and drops its rows.
	next := []*twophase.Batch{batch(0, 3, 1), batch(1, 4, 1)}
	for i, err := range s.PrepareRound(ctx, next) {
		if err != nil {
			t.Fatalf("PrepareRound: %s: %v", next[i].ID, err)
		}
	}
	if err := open().Abort(ctx, next[1].ID); err != nil { // another instance, from the rows
		t.Fatal(err)
	}
	if err := s.Abort(ctx, next[0].ID); err != nil { // already rolled back
		t.Fatal(err)
	}
	if n := db.count("ev"); n != 9 || len(prepared()) != 0 || members() != 0 {
		t.Fatalf("after the abort: %d rows (want 9), prepared %v, %d membership rows (want 0)", n, prepared(), members())
	}
	if err := s.Commit(ctx, next[0].ID); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("Commit of a rolled-back member: %v, want ErrNotPrepared", err)
	}

	// Rows of a gid never prepared: nothing in doubt, and a commit of one
	// of its batches finds nothing prepared.
	ghost := RoundGID("rnd", []twophase.BatchID{next[0].ID, next[1].ID})
	if err := s.addMembers(ctx, [][]twophase.BatchID{{next[0].ID, next[1].ID}}); err != nil {
		t.Fatal(err)
	}
	if got := db.strings(`SELECT count(*)::text FROM txsink_offsets_rounds WHERE gid = $1`, ghost); got[0] != "2" {
		t.Fatalf("membership rows of %s: %v, want 2", ghost, got)
	}
	if got, err := open().InDoubt(ctx, "rnd"); err != nil || len(got) != 0 {
		t.Fatalf("InDoubt with membership rows of a gid never prepared: %v, %v; want none", got, err)
	}
	if err := open().Commit(ctx, next[1].ID); !errors.Is(err, twophase.ErrNotPrepared) {
		t.Fatalf("Commit of a batch of a gid never prepared: %v, want ErrNotPrepared", err)
	}
}

// TestRoundOffsetsTableName: offsets.table must leave room for the
// membership table's name; the error names the setting.
func TestRoundOffsetsTableName(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	long := strings.Repeat("o", 57)
	_, err := NewSink(context.Background(), db.pool, "c", mustWriter(t, WriterConfig{Connector: "c"}), "public", long, nil)
	if err == nil || !strings.Contains(err.Error(), KeyOffsetsTable) {
		t.Fatalf("NewSink with a 57-byte offsets table: %v, want an error naming %s", err, KeyOffsetsTable)
	}
	if _, err := NewSink(context.Background(), db.pool, "c", mustWriter(t, WriterConfig{Connector: "c"}), "public", long[:56], nil); err != nil {
		t.Fatalf("NewSink with a 56-byte offsets table: %v", err)
	}
}

// TestRoundCutIntoTransactions: a round's batches are written in up to
// commit.parallelism transactions, each of two batches or more with its
// batches in the membership table (a transaction of one is the batch's
// own), and commit whole.
func TestRoundCutIntoTransactions(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	parts := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8}
	e := newEvSink(t, db, "cut", parts...)
	s := e.Sink
	next := map[int32]int64{}
	round := func(ps []int32) []*twophase.Batch {
		var bs []*twophase.Batch
		for _, p := range ps {
			bs = append(bs, e.batch(p, next[p], 2))
			next[p] += 2
		}
		return bs
	}
	for _, c := range []struct {
		conc  int
		parts []int32
		want  []int // batches per prepared transaction
	}{
		{3, parts, []int{3, 3, 3}},
		{4, parts[:6], []int{2, 2}}, // and two batches alone
		{4, parts[:3], nil},         // each alone
		{1, parts, []int{9}},
	} {
		s.SetRoundParallelism(c.conc)
		bs := round(c.parts)
		for i, err := range s.PrepareRound(ctx, bs) {
			if err != nil {
				t.Fatalf("PrepareRound: %s: %v", bs[i].ID, err)
			}
		}
		got := db.strings(`SELECT count(*)::text FROM txsink_offsets_rounds r JOIN pg_prepared_xacts x ON x.gid = r.gid GROUP BY r.gid ORDER BY count(*), r.gid`)
		if strings.Join(got, ",") != strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.want)), ","), "[]") {
			t.Fatalf("commit.parallelism %d, %d batches: batches per prepared transaction %v, want %v", c.conc, len(bs), got, c.want)
		}
		ids := make([]twophase.BatchID, len(bs))
		for i, b := range bs {
			ids[i] = b.ID
		}
		for i, err := range s.CommitRound(ctx, ids) {
			if err != nil {
				t.Fatalf("CommitRound: %s: %v", ids[i], err)
			}
		}
	}
	if n := db.count("ev"); n != 2*(9+6+3+9) {
		t.Fatalf("%d rows, want %d", n, 2*(9+6+3+9))
	}
}

// evSink is a sink of connector on db whose partitions of topic ev were
// acquired and start at offset 0.
type evSink struct {
	*Sink
	fences map[int32]int64
}

func newEvSink(t *testing.T, db *testDB, connector string, parts ...int32) *evSink {
	t.Helper()
	return newEvSinkWith(t, db, WriterConfig{Connector: connector}, parts...)
}

// newEvSinkWith is newEvSink with the writer of wc.
func newEvSinkWith(t *testing.T, db *testDB, wc WriterConfig, parts ...int32) *evSink {
	t.Helper()
	ctx := context.Background()
	connector := wc.Connector
	s, err := NewSink(ctx, db.pool, connector, mustWriter(t, wc), "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.discardStaged) // a failed test's transactions written ahead would hold the database
	e := &evSink{Sink: s, fences: map[int32]int64{}}
	if len(parts) == 0 {
		return e
	}
	acq, err := s.Acquire(ctx, "ev", parts)
	if err != nil {
		t.Fatal(err)
	}
	for p, q := range acq {
		e.fences[p] = q.Fence
		if err := s.Initialize(ctx, "ev", p, q.Fence, 0); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// batch is a batch of n records of partition p from offset first.
func (e *evSink) batch(p int32, first int64, n int) *twophase.Batch {
	b := &twophase.Batch{ID: twophase.BatchID{Connector: e.connector, Topic: "ev", Partition: p, First: first, Last: first + int64(n) - 1}, Prev: first, Fence: e.fences[p]}
	for i := range n {
		r := rec("ev", first+int64(i), nil, []byte(`{"id":"x"}`))
		r.Partition = p
		b.Records = append(b.Records, r)
	}
	return b
}

// TestRoundFencedMember: in a round transaction of three batches whose
// middle partition another owner took (its fence moved), that batch is
// fenced, its siblings are refused with nothing prepared and are not
// taken for fenced, and nothing is written or prepared.
func TestRoundFencedMember(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	e := newEvSink(t, db, "fnc", 0, 1, 2)
	e.SetRoundParallelism(1)
	if _, err := newEvSink(t, db, "fnc").Acquire(ctx, "ev", []int32{1}); err != nil {
		t.Fatal(err)
	}
	bs := []*twophase.Batch{e.batch(0, 0, 2), e.batch(1, 0, 2), e.batch(2, 0, 2)}
	errs := e.PrepareRound(ctx, bs)
	if !errors.Is(errs[1], twophase.ErrFenced) {
		t.Fatalf("the fenced partition's batch: %v, want ErrFenced", errs[1])
	}
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], twophase.ErrNothingPrepared) || errors.Is(errs[i], twophase.ErrFenced) {
			t.Fatalf("sibling %s: %v, want ErrNothingPrepared and not ErrFenced", bs[i].ID, errs[i])
		}
	}
	prepared := db.strings(`SELECT gid FROM pg_prepared_xacts WHERE database = current_database()`)
	if n := db.count("ev"); n != 0 || len(prepared) != 0 {
		t.Fatalf("after a fenced round: %d rows, prepared %v; want none", n, prepared)
	}
	if got := db.strings(`SELECT coalesce(next_offset, -1)::text FROM txsink_offsets WHERE connector = 'fnc' ORDER BY partition`); strings.Join(got, ",") != "0,0,0" {
		t.Fatalf("stored offsets %v, want 0,0,0", got)
	}
}

// TestRoundMembersSwept: a new owner's Acquire deletes the membership rows
// of its partitions whose gid is not prepared (left by a crash before
// PREPARE), and keeps those of a prepared gid (its partitions' Acquire is
// busy until recovery resolves it) and those of other partitions and
// connectors.
func TestRoundMembersSwept(t *testing.T) {
	db := newTestDB(t, pgtest.Start(t))
	db.exec(`CREATE TABLE ev (id text)`)
	ctx := context.Background()
	e := newEvSink(t, db, "swp", 0, 1, 2, 3)
	e.SetRoundParallelism(1)
	// A prepared round of partitions 2 and 3.
	live := []*twophase.Batch{e.batch(2, 0, 2), e.batch(3, 0, 2)}
	for i, err := range e.PrepareRound(ctx, live) {
		if err != nil {
			t.Fatalf("PrepareRound: %s: %v", live[i].ID, err)
		}
	}
	// Rows of a gid never prepared: partitions 0 and 1, and 0 of another
	// connector.
	ghost := []twophase.BatchID{e.batch(0, 0, 2).ID, e.batch(1, 0, 2).ID}
	if err := e.addMembers(ctx, [][]twophase.BatchID{ghost}); err != nil {
		t.Fatal(err)
	}
	other := newEvSink(t, db, "oth")
	if err := other.addMembers(ctx, [][]twophase.BatchID{{{Connector: "oth", Topic: "ev", Partition: 0, First: 0, Last: 1}, {Connector: "oth", Topic: "ev", Partition: 1, First: 0, Last: 1}}}); err != nil {
		t.Fatal(err)
	}
	rows := func() string {
		return strings.Join(db.strings(`SELECT connector || ':' || partition FROM txsink_offsets_rounds ORDER BY connector, partition`), " ")
	}
	if got := rows(); got != "oth:0 oth:1 swp:0 swp:1 swp:2 swp:3" {
		t.Fatalf("membership rows %q before the sweep", got)
	}
	next := newEvSink(t, db, "swp")
	if _, err := next.Acquire(ctx, "ev", []int32{0, 1}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != "oth:0 oth:1 swp:2 swp:3" {
		t.Fatalf("membership rows %q after acquiring partitions 0 and 1; want those of the other connector and of the prepared round", got)
	}
	if _, err := next.Acquire(ctx, "ev", []int32{2}); err == nil {
		t.Fatal("Acquire of a partition a prepared round holds succeeded; want busy")
	}
	if got := rows(); got != "oth:0 oth:1 swp:2 swp:3" {
		t.Fatalf("membership rows %q after a busy Acquire; want the prepared round's kept", got)
	}
	// Resolved by recovery (here: committed), its rows go, and the next
	// Acquire finds nothing to sweep.
	for i, err := range next.CommitRound(ctx, []twophase.BatchID{live[0].ID, live[1].ID}) {
		if err != nil {
			t.Fatalf("CommitRound: %s: %v", live[i].ID, err)
		}
	}
	if _, err := next.Acquire(ctx, "ev", []int32{2, 3}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != "oth:0 oth:1" {
		t.Fatalf("membership rows %q at the end", got)
	}
}
