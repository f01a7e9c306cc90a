package twophase

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// tp is a topic-partition.
type tp struct {
	topic     string
	partition int32
}

// fakeParticipant is an in-memory Participant whose maps are its "durable"
// state: they survive a simulated crash of the coordinator.
type fakeParticipant struct {
	mu        sync.Mutex
	prepared  map[BatchID]bool
	committed map[BatchID]bool

	// Injected errors, by batch. prepareErr with leavePrepared models a
	// failure after PREPARE TRANSACTION succeeded.
	prepareErr    map[BatchID]error
	leavePrepared bool
	commitErr     map[BatchID]error
	abortErr      map[BatchID]error
	inDoubtErr    error
	// blockPrepare makes Prepare wait for ctx to be done.
	blockPrepare bool

	inflight, maxInflight int
	calls                 []string
}

var _ Participant = (*fakeParticipant)(nil)

func newFakeParticipant() *fakeParticipant {
	return &fakeParticipant{
		prepared:   map[BatchID]bool{},
		committed:  map[BatchID]bool{},
		prepareErr: map[BatchID]error{},
		commitErr:  map[BatchID]error{},
		abortErr:   map[BatchID]error{},
	}
}

func (f *fakeParticipant) enter(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
}

func (f *fakeParticipant) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight--
}

func (f *fakeParticipant) Prepare(ctx context.Context, b *Batch) error {
	f.enter("prepare " + b.ID.String())
	defer f.leave()
	f.mu.Lock()
	block := f.blockPrepare
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return fmt.Errorf("fake prepare: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.prepareErr[b.ID]; err != nil {
		if f.leavePrepared {
			f.prepared[b.ID] = true
		}
		return err
	}
	if f.prepared[b.ID] {
		return fmt.Errorf("fake prepare %s: already prepared", b.ID)
	}
	f.prepared[b.ID] = true
	return nil
}

func (f *fakeParticipant) Commit(ctx context.Context, id BatchID) error {
	f.enter("commit " + id.String())
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.commitErr[id]; err != nil {
		return err
	}
	switch {
	case f.prepared[id]:
		delete(f.prepared, id)
		f.committed[id] = true
		return nil
	case f.committed[id]:
		return nil
	}
	return fmt.Errorf("fake commit %s: %w", id, ErrNotPrepared)
}

func (f *fakeParticipant) Abort(ctx context.Context, id BatchID) error {
	f.enter("abort " + id.String())
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.abortErr[id]; err != nil {
		return err
	}
	delete(f.prepared, id)
	return nil
}

func (f *fakeParticipant) InDoubt(ctx context.Context, connector string) ([]BatchID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inDoubtErr != nil {
		return nil, f.inDoubtErr
	}
	var out []BatchID
	for id := range f.prepared {
		if id.Connector == connector {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, compareIDs)
	return out, nil
}

func (f *fakeParticipant) callsOf(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			out = append(out, c)
		}
	}
	return out
}

// fakeStore is the decider's durable record: the group's committed
// offsets. It survives a simulated crash.
type fakeStore struct {
	mu      sync.Mutex
	offsets map[tp]int64
}

// fakeDecider models a Kafka transaction committing group offsets. The
// test stages the offsets a round would commit (what the session polled).
type fakeDecider struct {
	store *fakeStore

	mu     sync.Mutex
	inTxn  bool
	staged map[tp]int64

	beginErr error
	// decideErr makes Decide fail; with commitThenErr the commit is
	// applied first (the answer was lost, the decision was not).
	decideErr     error
	commitThenErr bool
	// rebalance makes Decide(true) abort (KIP-447 fencing).
	rebalance  bool
	outcomeErr map[BatchID]error

	calls []string
}

var _ Decider = (*fakeDecider)(nil)

func newFakeDecider(store *fakeStore) *fakeDecider {
	if store == nil {
		store = &fakeStore{offsets: map[tp]int64{}}
	}
	return &fakeDecider{store: store, staged: map[tp]int64{}, outcomeErr: map[BatchID]error{}}
}

// stage records the offsets the next decision commits, as a session that
// polled batches would.
func (d *fakeDecider) stage(batches []*Batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range batches {
		d.staged[tp{b.ID.Topic, b.ID.Partition}] = b.ID.NextOffset()
	}
}

func (d *fakeDecider) Begin(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "begin")
	if d.beginErr != nil {
		return d.beginErr
	}
	if d.inTxn {
		return fmt.Errorf("fake begin: already in a transaction")
	}
	d.inTxn = true
	return nil
}

func (d *fakeDecider) Decide(ctx context.Context, commit bool) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("decide %t", commit))
	if !d.inTxn {
		return false, fmt.Errorf("fake decide: not in a transaction")
	}
	d.inTxn = false
	staged := d.staged
	d.staged = map[tp]int64{}
	apply := func() {
		d.store.mu.Lock()
		defer d.store.mu.Unlock()
		for k, v := range staged {
			d.store.offsets[k] = v
		}
	}
	if d.decideErr != nil {
		if commit && d.commitThenErr {
			apply()
		}
		return false, d.decideErr
	}
	if !commit || d.rebalance {
		return false, nil
	}
	apply()
	return true, nil
}

func (d *fakeDecider) Outcome(ctx context.Context, id BatchID) (bool, error) {
	d.mu.Lock()
	err := d.outcomeErr[id]
	d.mu.Unlock()
	if err != nil {
		return false, err
	}
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	off, ok := d.store.offsets[tp{id.Topic, id.Partition}]
	return ok && off == id.NextOffset(), nil
}

func (d *fakeDecider) callList() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// testBatches returns n batches of connector "c", topic "t", partition i,
// offsets 10i..10i+9.
func testBatches(n int) []*Batch {
	out := make([]*Batch, n)
	for i := range out {
		out[i] = &Batch{ID: testID(i), Fence: 1}
	}
	return out
}

func testID(i int) BatchID {
	return BatchID{Connector: "c", Topic: "t", Partition: int32(i), First: int64(10 * i), Last: int64(10*i + 9)}
}
