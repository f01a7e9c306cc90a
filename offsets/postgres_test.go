//go:build dbtest

package offsets_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/internal/pgtest"
	"github.com/txsink/txsink/offsets"
)

func newStore(t *testing.T) (*offsets.PG, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Start(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := offsets.NewPG(pool, "", "")
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatalf("EnsureSchema is not idempotent: %v", err)
	}
	return s, pool
}

func advance(ctx context.Context, t *testing.T, pool *pgxpool.Pool, s *offsets.PG, g offsets.Guard, fence, from, to int64) error {
	t.Helper()
	var err error
	txErr := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		err = s.Advance(ctx, tx, g, "c", "t", 0, fence, from, to)
		return err
	})
	if err == nil && txErr != nil {
		t.Fatal(txErr)
	}
	return err
}

func TestFenceAndCompareAndSet(t *testing.T) {
	ctx := context.Background()
	s, pool := newStore(t)

	// First use: a row with no offset and a fence.
	a, err := s.Acquire(ctx, "c", "t", []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if a[0].Next != offsets.Unset || a[0].Fence <= 0 {
		t.Fatalf("first acquire: %+v", a[0])
	}
	if err := s.Initialize(ctx, "c", "t", 0, a[0].Fence, 100); err != nil {
		t.Fatal(err)
	}
	if err := advance(ctx, t, pool, s, offsets.GuardCAS, a[0].Fence, 100, 150); err != nil {
		t.Fatalf("owner's advance: %v", err)
	}

	// A new owner bumps the fence; the old owner's CAS from the right
	// offset is now rejected, and only the fence can tell.
	b, err := s.Acquire(ctx, "c", "t", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if b[0].Fence <= a[0].Fence || b[0].Next != 150 {
		t.Fatalf("second acquire: %+v after %+v", b[0], a[0])
	}
	err = advance(ctx, t, pool, s, offsets.GuardCAS, a[0].Fence, 150, 200)
	var fe *offsets.FencedError
	if !errors.Is(err, offsets.ErrFenced) || !errors.As(err, &fe) {
		t.Fatalf("zombie advance: got %v, want ErrFenced", err)
	}
	// The new owner with a stale expected offset is rejected too.
	if err := advance(ctx, t, pool, s, offsets.GuardCAS, b[0].Fence, 100, 200); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("advance from a stale offset: got %v, want ErrFenced", err)
	}
	if err := advance(ctx, t, pool, s, offsets.GuardCAS, b[0].Fence, 150, 200); err != nil {
		t.Fatal(err)
	}
	// Initialize never moves an existing offset.
	if err := s.Initialize(ctx, "c", "t", 0, b[0].Fence, 5); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("initialize over a stored offset: got %v", err)
	}

	// An administrative rewind fences the live owner.
	if err := s.Reset(ctx, "c", false, []offsets.Position{{Topic: "t", Partition: 0, Next: 150}}); err != nil {
		t.Fatal(err)
	}
	if err := advance(ctx, t, pool, s, offsets.GuardCAS, b[0].Fence, 150, 200); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("owner after a rewind: got %v, want ErrFenced", err)
	}
	// A full reset deletes the rows; a recreated row's fence is above every
	// fence handed out before.
	if err := s.Reset(ctx, "c", true, nil); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Read(ctx, "c")
	if err != nil || len(ps) != 0 {
		t.Fatalf("after full reset: %v, %v", ps, err)
	}
	// A new row's fence is the clock in milliseconds: once the server's
	// clock has passed the old fence.
	for passed := false; !passed; {
		if err := pool.QueryRow(ctx, `SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint > $1`, b[0].Fence).Scan(&passed); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Acquire(ctx, "c", "t", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Fence <= b[0].Fence || c[0].Next != offsets.Unset {
		t.Fatalf("acquire after full reset: %+v, previous fence %d", c[0], b[0].Fence)
	}

	// Blind advance (at_least_once) ignores fence and offset.
	if err := advance(ctx, t, pool, s, offsets.GuardNone, 0, 0, 999); err != nil {
		t.Fatal(err)
	}
	p, ok, err := s.Lookup(ctx, "c", "t", 0)
	if err != nil || !ok || p.Next != 999 {
		t.Fatalf("after blind advance: %+v %v %v", p, ok, err)
	}
}

// TestAcquireBusy: a row held by another transaction (as a prepared batch
// holds it) makes Acquire give up after LockTimeout with ErrBusy.
func TestAcquireBusy(t *testing.T) {
	ctx := context.Background()
	s, pool := newStore(t)
	a, err := s.Acquire(ctx, "c", "t", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Initialize(ctx, "c", "t", 0, a[0].Fence, 0); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := s.Advance(ctx, tx, offsets.GuardCAS, "c", "t", 0, a[0].Fence, 0, 10); err != nil {
		t.Fatal(err)
	}
	s.LockTimeout = 200 * time.Millisecond
	if _, err := s.Acquire(ctx, "c", "t", []int32{0}); !errors.Is(err, offsets.ErrBusy) {
		t.Fatalf("acquire of a locked row: got %v, want ErrBusy", err)
	}
}

// TestAdvanceAll: the compare-and-sets of several partitions in one round
// trip apply together when all match, and the first that does not names
// its index, with Advance's error, and leaves the transaction aborted.
func TestAdvanceAll(t *testing.T) {
	ctx := context.Background()
	s, pool := newStore(t)
	a, err := s.Acquire(ctx, "c", "t", []int32{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		if err := s.Initialize(ctx, "c", "t", p, a[p].Fence, 10); err != nil {
			t.Fatal(err)
		}
	}
	steps := func(from1 int64, fence2 int64) []offsets.Step {
		return []offsets.Step{
			{Connector: "c", Topic: "t", Partition: 0, Fence: a[0].Fence, From: 10, To: 20},
			{Connector: "c", Topic: "t", Partition: 1, Fence: a[1].Fence, From: from1, To: 20},
			{Connector: "c", Topic: "t", Partition: 2, Fence: fence2, From: 10, To: 20},
		}
	}
	run := func(st []offsets.Step) (int, error) {
		var at int
		var err error
		txErr := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			at, err = s.AdvanceAll(ctx, tx, st)
			return err
		})
		if err == nil && txErr != nil {
			t.Fatal(txErr)
		}
		return at, err
	}
	next := func() []int64 {
		ps, err := s.Read(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, p := range ps {
			out = append(out, p.Next)
		}
		return out
	}
	// A stale offset at index 1, a stale fence at index 2: index 1 is
	// named, and nothing moved.
	at, err := run(steps(9, a[2].Fence-1))
	var fe *offsets.FencedError
	if at != 1 || !errors.As(err, &fe) || fe.Partition != 1 || fe.WantNext != 9 {
		t.Fatalf("stale offset at 1: got index %d, %v", at, err)
	}
	if got := next(); !slices.Equal(got, []int64{10, 10, 10}) {
		t.Fatalf("after a refused step: next offsets %v, want all 10", got)
	}
	at, err = run(steps(10, a[2].Fence-1))
	if at != 2 || !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("stale fence at 2: got index %d, %v", at, err)
	}
	if at, err := run(steps(10, a[2].Fence)); at != -1 || err != nil {
		t.Fatalf("all matching: got index %d, %v", at, err)
	}
	if got := next(); !slices.Equal(got, []int64{20, 20, 20}) {
		t.Fatalf("after all matched: next offsets %v, want all 20", got)
	}
	if at, err := run(nil); at != -1 || err != nil {
		t.Fatalf("no steps: got index %d, %v", at, err)
	}
}
