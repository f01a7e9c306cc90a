package twophase

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

var errBoom = errors.New("boom")

func newRound(n int, opts ...Option) (*Coordinator, *fakeParticipant, *fakeDecider, []*Batch) {
	p := newFakeParticipant()
	d := newFakeDecider(nil)
	bs := testBatches(n)
	d.stage(bs)
	return NewCoordinator(p, d, opts...), p, d, bs
}

func ids(bs []*Batch) []BatchID {
	out := make([]BatchID, len(bs))
	for i, b := range bs {
		out[i] = b.ID
	}
	return out
}

func TestRoundCommits(t *testing.T) {
	c, p, d, bs := newRound(6, WithPrepareConcurrency(2), WithCommitConcurrency(3))
	res, err := c.Round(context.Background(), bs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeCommitted || len(res.InDoubt) != 0 || len(res.Fenced) != 0 {
		t.Fatalf("res = %+v", res)
	}
	for _, b := range bs {
		if !p.committed[b.ID] || p.prepared[b.ID] {
			t.Errorf("%s not committed", b.ID)
		}
	}
	if p.maxInflight > 3 {
		t.Errorf("max in-flight participant calls %d > 3", p.maxInflight)
	}
	if got := d.callList(); !slices.Equal(got, []string{"begin", "decide true"}) {
		t.Errorf("decider calls %v", got)
	}
	if res.Phases.Prepare <= 0 || res.Phases.Commit <= 0 {
		t.Errorf("phases %+v", res.Phases)
	}
}

func TestRoundPrepareConcurrencyBound(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		c, p, _, bs := newRound(12, WithPrepareConcurrency(n), WithCommitConcurrency(1))
		if _, err := c.Round(context.Background(), bs); err != nil {
			t.Fatal(err)
		}
		if p.maxInflight > n {
			t.Errorf("concurrency %d: saw %d in flight", n, p.maxInflight)
		}
	}
}

func TestRoundZeroBatches(t *testing.T) {
	c, p, d, _ := newRound(0)
	res, err := c.Round(context.Background(), nil)
	if err != nil || res.Outcome != OutcomeCommitted {
		t.Fatalf("res %+v err %v", res, err)
	}
	if got := d.callList(); !slices.Equal(got, []string{"begin", "decide true"}) {
		t.Errorf("decider calls %v", got)
	}
	if len(p.calls) != 0 {
		t.Errorf("participant calls %v", p.calls)
	}
}

func TestRoundBadInput(t *testing.T) {
	c, _, d, bs := newRound(2)
	if _, err := c.Round(context.Background(), []*Batch{bs[0], nil}); err == nil {
		t.Error("nil batch accepted")
	}
	if _, err := c.Round(context.Background(), []*Batch{bs[0], bs[0]}); err == nil {
		t.Error("duplicate batch accepted")
	}
	if len(d.callList()) != 0 {
		t.Error("decider called on bad input")
	}
}

func TestRoundBeginErr(t *testing.T) {
	c, p, d, bs := newRound(2)
	d.beginErr = errBoom
	res, err := c.Round(context.Background(), bs)
	if !errors.Is(err, errBoom) || res.Outcome != OutcomeAborted {
		t.Fatalf("res %+v err %v", res, err)
	}
	if len(p.calls) != 0 {
		t.Errorf("participant called: %v", p.calls)
	}
}

func TestRoundFenced(t *testing.T) {
	c, p, d, bs := newRound(3)
	p.prepareErr[bs[1].ID] = ErrFenced
	res, err := c.Round(context.Background(), bs)
	if !errors.Is(err, ErrFenced) || errors.Is(err, ErrInDoubt) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeAborted || !slices.Equal(res.Fenced, []BatchID{bs[1].ID}) || len(res.InDoubt) != 0 {
		t.Fatalf("res %+v", res)
	}
	if got := d.callList(); !slices.Equal(got, []string{"begin", "decide false"}) {
		t.Errorf("decider calls %v", got)
	}
	aborts := p.callsOf("abort")
	if len(aborts) != 2 || slices.Contains(aborts, "abort "+bs[1].ID.String()) {
		t.Errorf("aborts %v", aborts)
	}
	if len(p.prepared) != 0 || len(p.committed) != 0 || len(p.callsOf("commit")) != 0 {
		t.Errorf("prepared %v committed %v", p.prepared, p.committed)
	}
}

func TestRoundPrepareErrLeavesInDoubt(t *testing.T) {
	c, p, _, bs := newRound(2)
	p.prepareErr[bs[0].ID] = errBoom
	p.leavePrepared = true // prepared, then the answer was lost
	res, err := c.Round(context.Background(), bs)
	if !errors.Is(err, errBoom) || !errors.Is(err, ErrInDoubt) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeAborted || !slices.Equal(res.InDoubt, []BatchID{bs[0].ID}) {
		t.Fatalf("res %+v", res)
	}
	if slices.Contains(p.callsOf("abort"), "abort "+bs[0].ID.String()) {
		t.Error("batch with a failed prepare was aborted")
	}
	// Recovery aborts it: the decision did not commit its offsets.
	rep, err := Recover(context.Background(), p, c.d, "c", nil)
	if err != nil || !slices.Equal(rep.Aborted, []BatchID{bs[0].ID}) {
		t.Fatalf("rep %+v err %v", rep, err)
	}
	if len(p.prepared) != 0 {
		t.Errorf("still prepared %v", p.prepared)
	}
}

func TestRoundDecideAmbiguous(t *testing.T) {
	for _, applied := range []bool{false, true} {
		c, p, d, bs := newRound(3)
		d.decideErr = errBoom
		d.commitThenErr = applied
		res, err := c.Round(context.Background(), bs)
		if !errors.Is(err, ErrInDoubt) || !errors.Is(err, errBoom) {
			t.Fatalf("err %v", err)
		}
		if res.Outcome != OutcomeInDoubt || !slices.Equal(res.InDoubt, ids(bs)) {
			t.Fatalf("res %+v", res)
		}
		if n := len(p.callsOf("commit")) + len(p.callsOf("abort")); n != 0 {
			t.Fatalf("participant commit/abort after an ambiguous decision: %v", p.calls)
		}
		rep, err := Recover(context.Background(), p, d, "c", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := RecoveryReport{Aborted: ids(bs)}
		if applied {
			want = RecoveryReport{Committed: ids(bs)}
		}
		if !slices.Equal(rep.Committed, want.Committed) || !slices.Equal(rep.Aborted, want.Aborted) {
			t.Errorf("applied=%t: rep %+v", applied, rep)
		}
	}
}

func TestRoundRebalanceAborts(t *testing.T) {
	c, p, d, bs := newRound(2)
	d.rebalance = true
	res, err := c.Round(context.Background(), bs)
	if err != nil || res.Outcome != OutcomeAborted {
		t.Fatalf("res %+v err %v", res, err)
	}
	if len(p.callsOf("abort")) != 2 || len(p.callsOf("commit")) != 0 || len(p.prepared) != 0 {
		t.Errorf("calls %v", p.calls)
	}
}

func TestRoundCommitErr(t *testing.T) {
	c, p, d, bs := newRound(3)
	p.commitErr[bs[2].ID] = errBoom
	res, err := c.Round(context.Background(), bs)
	if !errors.Is(err, ErrInDoubt) || !errors.Is(err, errBoom) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeCommitted || !slices.Equal(res.InDoubt, []BatchID{bs[2].ID}) {
		t.Fatalf("res %+v", res)
	}
	if len(p.callsOf("abort")) != 0 {
		t.Fatal("abort after a committed decision")
	}
	delete(p.commitErr, bs[2].ID)
	rep, err := Recover(context.Background(), p, d, "c", nil)
	if err != nil || !slices.Equal(rep.Committed, []BatchID{bs[2].ID}) {
		t.Fatalf("rep %+v err %v", rep, err)
	}
}

func TestRoundAbortErr(t *testing.T) {
	c, p, d, bs := newRound(2)
	p.prepareErr[bs[1].ID] = ErrFenced
	p.abortErr[bs[0].ID] = errBoom
	res, err := c.Round(context.Background(), bs)
	if !errors.Is(err, ErrInDoubt) || !errors.Is(err, ErrFenced) || !errors.Is(err, errBoom) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeAborted || !slices.Equal(res.InDoubt, []BatchID{bs[0].ID}) {
		t.Fatalf("res %+v", res)
	}
	delete(p.abortErr, bs[0].ID)
	rep, err := Recover(context.Background(), p, d, "c", nil)
	if err != nil || !slices.Equal(rep.Aborted, []BatchID{bs[0].ID}) {
		t.Fatalf("rep %+v err %v", rep, err)
	}
}

// A decider that claims Decide(false) committed breaks the contract; the
// round treats the decision as unknown but never commits.
type lyingDecider struct{ *fakeDecider }

func (l lyingDecider) Decide(ctx context.Context, commit bool) (bool, error) {
	_, _ = l.fakeDecider.Decide(ctx, commit)
	return true, nil
}

func TestRoundDeciderContractViolation(t *testing.T) {
	p := newFakeParticipant()
	d := lyingDecider{newFakeDecider(nil)}
	bs := testBatches(2)
	p.prepareErr[bs[1].ID] = ErrFenced
	res, err := NewCoordinator(p, d).Round(context.Background(), bs)
	if err == nil || res.Outcome != OutcomeAborted || len(p.callsOf("commit")) != 0 {
		t.Fatalf("res %+v err %v calls %v", res, err, p.calls)
	}
}

func TestRoundContextCancelled(t *testing.T) {
	c, p, d, bs := newRound(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Round(ctx, bs); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if len(d.callList()) != 0 || len(p.calls) != 0 {
		t.Error("I/O after cancel")
	}
}

func TestRoundCancelDuringPrepare(t *testing.T) {
	c, p, d, bs := newRound(3)
	p.blockPrepare = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	checkPrepareTimedOut(t, c, d, bs, ctx)
}

// checkPrepareTimedOut runs a round whose prepares block until their
// context ends and checks it aborted, its batches in doubt.
func checkPrepareTimedOut(t *testing.T, c *Coordinator, d *fakeDecider, bs []*Batch, ctx context.Context) {
	t.Helper()
	res, err := c.Round(ctx, bs)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrInDoubt) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeAborted || !slices.Equal(res.InDoubt, ids(bs)) {
		t.Fatalf("res %+v", res)
	}
	if got := d.callList(); !slices.Equal(got, []string{"begin", "decide false"}) {
		t.Errorf("decider calls %v", got)
	}
}

// TestRoundCallTimeout: a participant call that never returns by itself (a
// server that vanished without closing the connection) is ended by
// WithCallTimeout: a stuck prepare aborts the round, the decider still
// decides (abort) and the round returns with the batches in doubt.
func TestRoundCallTimeout(t *testing.T) {
	c, p, d, bs := newRound(2, WithCallTimeout(20*time.Millisecond))
	p.blockPrepare = true
	checkPrepareTimedOut(t, c, d, bs, context.Background())
}

func TestRoundHooks(t *testing.T) {
	var points []string
	c, _, _, bs := newRound(2, WithHook(func(p string) { points = append(points, p) }))
	if _, err := c.Round(context.Background(), bs); err != nil {
		t.Fatal(err)
	}
	want := []string{HookAfterBegin, HookAfterPrepare, HookBeforeDecide, HookAfterDecide, HookAfterCommit}
	if !slices.Equal(points, want) {
		t.Errorf("points %v, want %v", points, want)
	}
}

// TestCrashRecovery crashes a round at every hook point (the hook ends the
// round's goroutine, as a process crash would end everything), then
// restarts: a fresh decider over the same durable offsets (the open Kafka
// transaction of the dead process aborts) and Recover. Whatever the crash
// point, every batch ends committed in the sink exactly when the durable
// decision covers it, and nothing stays prepared.
func TestCrashRecovery(t *testing.T) {
	cases := []struct {
		point         string
		partialCommit bool // p1's commit fails before the crash
		wantCommitted bool
	}{
		{point: HookAfterBegin},
		{point: HookAfterPrepare},
		{point: HookAfterDecide, wantCommitted: true},
		{point: HookAfterCommit, partialCommit: true, wantCommitted: true},
		{point: HookAfterCommit, wantCommitted: true},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			p := newFakeParticipant()
			store := &fakeStore{offsets: map[tp]int64{}}
			d := newFakeDecider(store)
			bs := testBatches(3)
			d.stage(bs)
			if tc.partialCommit {
				p.commitErr[bs[1].ID] = errBoom
			}
			crash := func(point string) {
				if point == tc.point {
					runtime.Goexit()
				}
			}
			c := NewCoordinator(p, d, WithHook(crash))
			var wg sync.WaitGroup
			finished := false
			wg.Go(func() {
				_, _ = c.Round(context.Background(), bs)
				finished = true
			})
			wg.Wait()
			if finished {
				t.Fatal("round did not crash")
			}

			// Restart.
			delete(p.commitErr, bs[1].ID)
			d2 := newFakeDecider(store)
			rep, err := Recover(context.Background(), p, d2, "c", nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.prepared) != 0 {
				t.Fatalf("still prepared after recovery: %v", p.prepared)
			}
			for _, b := range bs {
				decided, _ := d2.Outcome(context.Background(), b.ID)
				if decided != tc.wantCommitted || p.committed[b.ID] != decided {
					t.Errorf("%s: decided %t, committed in sink %t, want %t", b.ID, decided, p.committed[b.ID], tc.wantCommitted)
				}
			}
			switch {
			case tc.point == HookAfterBegin && (len(rep.Committed)+len(rep.Aborted)) != 0:
				t.Errorf("rep %+v", rep)
			case tc.point == HookAfterPrepare && len(rep.Aborted) != 3:
				t.Errorf("rep %+v", rep)
			case tc.point == HookAfterDecide && len(rep.Committed) != 3:
				t.Errorf("rep %+v", rep)
			case tc.partialCommit && !slices.Equal(rep.Committed, []BatchID{bs[1].ID}):
				t.Errorf("rep %+v", rep)
			}
		})
	}
}

func TestRecoverOwnsAndErrors(t *testing.T) {
	p := newFakeParticipant()
	store := &fakeStore{offsets: map[tp]int64{}}
	d := newFakeDecider(store)
	bs := testBatches(4)
	for _, b := range bs {
		p.prepared[b.ID] = true
	}
	other := BatchID{Connector: "other", Topic: "t", Partition: 0, First: 0, Last: 9}
	p.prepared[other] = true
	store.offsets[tp{"t", 0}] = bs[0].ID.NextOffset() // p0 committed
	store.offsets[tp{"t", 1}] = bs[1].ID.First        // p1 aborted
	d.outcomeErr[bs[2].ID] = errBoom                  // p2 unknown
	// p3 is not ours.
	owns := func(topic string, partition int32) bool { return partition != 3 }

	rep, err := Recover(context.Background(), p, d, "c", owns)
	if !errors.Is(err, errBoom) || !errors.Is(err, ErrInDoubt) {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(rep.Committed, []BatchID{bs[0].ID}) || !slices.Equal(rep.Aborted, []BatchID{bs[1].ID}) ||
		!slices.Equal(rep.InDoubt, []BatchID{bs[2].ID}) {
		t.Fatalf("rep %+v", rep)
	}
	if !p.prepared[bs[2].ID] || !p.prepared[bs[3].ID] || !p.prepared[other] {
		t.Error("recovery touched a batch it must leave")
	}

	// Second pass, outcome readable now: nil owns takes everything of "c".
	delete(d.outcomeErr, bs[2].ID)
	rep, err = Recover(context.Background(), p, d, "c", nil)
	if err != nil || !slices.Equal(rep.Aborted, []BatchID{bs[2].ID, bs[3].ID}) {
		t.Fatalf("rep %+v err %v", rep, err)
	}

	p.inDoubtErr = errBoom
	if _, err := Recover(context.Background(), p, d, "c", nil); !errors.Is(err, errBoom) {
		t.Fatalf("err %v", err)
	}
}

func TestRecoverCommitNotPrepared(t *testing.T) {
	p := newFakeParticipant()
	d := newFakeDecider(nil)
	id := testID(0)
	p.prepared[id] = true
	d.store.offsets[tp{"t", 0}] = id.NextOffset()
	p.commitErr[id] = ErrNotPrepared
	rep, err := Recover(context.Background(), p, d, "c", nil)
	if !errors.Is(err, ErrNotPrepared) || !slices.Equal(rep.InDoubt, []BatchID{id}) {
		t.Fatalf("rep %+v err %v", rep, err)
	}
}
