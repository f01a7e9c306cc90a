package twophase

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// fakeRounds is a RoundParticipant over a fakeParticipant: PrepareRound
// and CommitRound call its Prepare and Commit for each batch, after
// recording the group. errs, when set, replaces PrepareRound's answers.
type fakeRounds struct {
	*fakeParticipant
	mu     sync.Mutex
	groups []string
	errs   func(batches []*Batch) []error
}

var _ RoundParticipant = (*fakeRounds)(nil)

func (f *fakeRounds) record(what string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups = append(f.groups, fmt.Sprintf("%s %d", what, n))
}

func (f *fakeRounds) PrepareRound(ctx context.Context, batches []*Batch) []error {
	f.record("prepare-round", len(batches))
	if f.errs != nil {
		return f.errs(batches)
	}
	out := make([]error, len(batches))
	for i, b := range batches {
		out[i] = f.Prepare(ctx, b)
	}
	return out
}

func (f *fakeRounds) CommitRound(ctx context.Context, ids []BatchID) []error {
	f.record("commit-round", len(ids))
	out := make([]error, len(ids))
	for i, id := range ids {
		out[i] = f.Commit(ctx, id)
	}
	return out
}

func (f *fakeRounds) groupList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.groups)
}

// TestRoundParticipantGroupsCalls: a RoundParticipant gets one
// PrepareRound and one CommitRound per round, whatever the concurrency.
func TestRoundParticipantGroupsCalls(t *testing.T) {
	p := &fakeRounds{fakeParticipant: newFakeParticipant()}
	d := newFakeDecider(nil)
	bs := testBatches(5)
	d.stage(bs)
	res, err := NewCoordinator(p, d, WithPrepareConcurrency(4)).Round(context.Background(), bs)
	if err != nil || res.Outcome != OutcomeCommitted {
		t.Fatalf("res %+v err %v", res, err)
	}
	if got := p.groupList(); !slices.Equal(got, []string{"prepare-round 5", "commit-round 5"}) {
		t.Fatalf("grouped calls %v, want one prepare-round and one commit-round of 5", got)
	}
	for _, b := range bs {
		if !p.committed[b.ID] {
			t.Errorf("%s not committed", b.ID)
		}
	}
}

// TestRoundParticipantErrors: PrepareRound's per-batch answers mean what
// Prepare's mean: fenced, refused (nothing prepared: not aborted, not in
// doubt), failed (in doubt); a missing answer is a failure.
func TestRoundParticipantErrors(t *testing.T) {
	p := &fakeRounds{fakeParticipant: newFakeParticipant()}
	p.errs = func(bs []*Batch) []error {
		return []error{
			fmt.Errorf("fence moved: %w", ErrFenced),
			fmt.Errorf("sibling fenced: %w", ErrNothingPrepared),
			errBoom,
			// the fourth answer is missing
		}
	}
	d := newFakeDecider(nil)
	bs := testBatches(4)
	d.stage(bs)
	res, err := NewCoordinator(p, d).Round(context.Background(), bs)
	if !errors.Is(err, ErrFenced) || !errors.Is(err, errBoom) || !errors.Is(err, ErrInDoubt) {
		t.Fatalf("err %v", err)
	}
	if res.Outcome != OutcomeAborted || !slices.Equal(res.Fenced, []BatchID{bs[0].ID}) {
		t.Fatalf("res %+v", res)
	}
	if !slices.Equal(res.InDoubt, []BatchID{bs[2].ID, bs[3].ID}) {
		t.Fatalf("in doubt %v, want the failed batch and the one without an answer", res.InDoubt)
	}
	if got := d.callList(); !slices.Equal(got, []string{"begin", "decide false"}) {
		t.Errorf("decider calls %v", got)
	}
	if aborts := p.callsOf("abort"); len(aborts) != 0 {
		t.Errorf("aborts %v: no batch reported prepared", aborts)
	}
}

// TestRoundParticipantRecovery: recovery after a crash past the decision
// commits the in-doubt batches in one CommitRound; those whose round
// aborted are aborted one by one.
func TestRoundParticipantRecovery(t *testing.T) {
	p := &fakeRounds{fakeParticipant: newFakeParticipant()}
	store := &fakeStore{offsets: map[tp]int64{}}
	d := newFakeDecider(store)
	bs := testBatches(3)
	d.stage(bs)
	c := NewCoordinator(p, d, WithHook(func(point string) {
		if point == HookAfterDecide {
			runtime.Goexit()
		}
	}))
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Round(context.Background(), bs) })
	wg.Wait()
	// A batch of an earlier round that never decided is in doubt too.
	stale := BatchID{Connector: "c", Topic: "t", Partition: 7, First: 70, Last: 79}
	p.prepared[stale] = true

	rep, err := Recover(context.Background(), p, newFakeDecider(store), "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Committed, ids(bs)) || !slices.Equal(rep.Aborted, []BatchID{stale}) {
		t.Fatalf("rep %+v", rep)
	}
	if got := p.groupList(); !slices.Equal(got, []string{"prepare-round 3", "commit-round 3"}) {
		t.Fatalf("grouped calls %v", got)
	}
	if len(p.callsOf("abort")) != 1 {
		t.Errorf("aborts %v", p.callsOf("abort"))
	}
}
