// Package sinktest is an in-memory connectors.Sink with fault knobs, for tests of the runtime.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// Point names a place in a MemSink method where its Hook is called.
type Point string

// Hook points.
const (
	InAcquire         Point = "acquire"              // before Acquire fences anything
	BeforePrepare     Point = "before-prepare"       // nothing of the batch durable yet
	AfterPrepare      Point = "after-prepare"        // the batch is prepared (durable, in doubt)
	BeforeCommit      Point = "before-commit"        // the batch is still prepared
	AfterCommit       Point = "after-commit"         // the batch is visible
	BeforeLocalCommit Point = "before-local-commit"  // WriteLocal, nothing written yet
	BetweenLocal      Point = "between-local-commit" // WriteLocal with GuardNone: the first of rows/offset is written
	AfterLocalCommit  Point = "after-local-commit"   // WriteLocal, rows and offset written
)

// ErrCrashed is returned by every method of a MemSink instance that
// crashed. A Hook returning an error that wraps it crashes the instance.
var ErrCrashed = errors.New("sinktest: sink instance crashed")

// Row is one written record, as stored.
type Row struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	// Seq is the row's global insertion order in its MemStore (from 1).
	Seq int64
}

type slotKey struct {
	connector, topic string
	partition        int32
}

// slot is one partition's offsets row.
type slot struct {
	next, fence int64
	held        *twophase.BatchID // the prepared batch that locks the row
}

type prepared struct {
	rows []Row
}

// MemStore is the durable state that MemSink instances share: offsets,
// prepared batches and rows. It survives the crash of an instance. The
// zero value is not usable; call NewStore.
type MemStore struct {
	mu        sync.Mutex
	slots     map[slotKey]*slot
	prepared  map[twophase.BatchID]*prepared
	committed map[twophase.BatchID]bool
	rows      []Row
	seq       int64
}

// NewStore returns an empty store.
func NewStore() *MemStore {
	return &MemStore{slots: map[slotKey]*slot{}, prepared: map[twophase.BatchID]*prepared{}, committed: map[twophase.BatchID]bool{}}
}

// Rows returns a copy of every committed row, in insertion order.
func (s *MemStore) Rows() []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rows)
}

// Prepared lists the prepared batches of every connector.
func (s *MemStore) Prepared() []twophase.BatchID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []twophase.BatchID
	for id := range s.prepared {
		out = append(out, id)
	}
	return out
}

func (s *MemStore) slot(connector, topic string, p int32) *slot {
	k := slotKey{connector, topic, p}
	sl := s.slots[k]
	if sl == nil {
		sl = &slot{next: offsets.Unset}
		s.slots[k] = sl
	}
	return sl
}

// insert appends rows with fresh sequence numbers; s.mu is held.
func (s *MemStore) insert(rows []Row) {
	for _, r := range rows {
		s.seq++
		r.Seq = s.seq
		s.rows = append(s.rows, r)
	}
}

// MemSink is an in-memory connectors.Sink, connectors.LocalWriter and
// twophase.Stager over a MemStore. Set its knobs (Hook, Bad, Tolerate)
// before the runtime uses it; they are read under its lock. It writes the
// converted records of a batch (the runtime's, or, for a batch the
// runtime did not convert, its own conversion through the default
// pipeline) and reports those Bad names to the batch's tolerance operator.
type MemSink struct {
	store     *MemStore
	connector string

	mu sync.Mutex
	// Hook, when set, is called at each Point with the batch concerned
	// (the zero BatchID with only Connector and Topic set in Acquire). A
	// non-nil error makes the method fail there; one wrapping ErrCrashed
	// also crashes the instance. Hook may block (honour ctx to be kind).
	Hook func(ctx context.Context, p Point, id twophase.BatchID) error
	// Bad maps a record's coordinates to the error the sink refuses it
	// with (as a database refuses a value): a bad record, reported to the
	// batch's tolerance operator (connectors.Converted.Reject).
	Bad map[Coord]error
	// Tolerate is errors.tolerance=all for the batches the instance
	// converts itself (those the runtime did not convert).
	Tolerate bool

	dead   bool
	fenced int
	staged map[twophase.BatchID][]Row
}

// Coord locates one record.
type Coord struct {
	Topic     string
	Partition int32
	Offset    int64
}

var (
	_ connectors.Sink        = (*MemSink)(nil)
	_ connectors.LocalWriter = (*MemSink)(nil)
	_ twophase.Stager        = (*MemSink)(nil)
	_ connectors.RoundWriter = (*MemSink)(nil)
)

// Open returns a new sink instance of connector over the store.
func (s *MemStore) Open(connector string) *MemSink {
	return &MemSink{store: s, connector: connector, staged: map[twophase.BatchID][]Row{}}
}

// Spec registers MemSinks under the name "memory": each connector opened
// gets a new instance over store, passed to configure (when not nil) so a
// test can set its knobs. errors.tolerance sets Tolerate.
func Spec(store *MemStore, configure func(*MemSink)) connectors.Spec {
	return connectors.Spec{
		Name: "memory", Class: "memory", Version: "test",
		New: func(_ context.Context, _ connectors.Env, c config.Connector, _ config.Values) (connectors.Sink, error) {
			m := store.Open(c.Name)
			m.Tolerate = c.ErrorsTolerance == "all"
			if configure != nil {
				configure(m)
			}
			return m, nil
		},
	}
}

// Crash makes the instance fail every later call with ErrCrashed; what it
// staged vanishes, what it prepared stays in the store.
func (m *MemSink) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = true
	clear(m.staged)
}

// Crashed reports whether the instance crashed.
func (m *MemSink) Crashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead
}

// at calls the hook at p (none for p == ""); it returns ErrCrashed when
// the instance is dead.
func (m *MemSink) at(ctx context.Context, p Point, id twophase.BatchID) error {
	m.mu.Lock()
	dead, hook := m.dead, m.Hook
	m.mu.Unlock()
	if dead {
		return ErrCrashed
	}
	if hook == nil || p == "" {
		return nil
	}
	if err := hook(ctx, p, id); err != nil {
		if errors.Is(err, ErrCrashed) {
			m.Crash()
		}
		return fmt.Errorf("sinktest: %s %s: %w", p, id, err)
	}
	if m.Crashed() {
		return ErrCrashed
	}
	return nil
}

// rowsOf maps a batch's converted records to rows. The records Bad names
// are reported to the batch's tolerance operator: the write fails with
// the first (errors.tolerance=none) or leaves them out as dead letters.
func (m *MemSink) rowsOf(ctx context.Context, b *twophase.Batch) ([]Row, error) {
	m.mu.Lock()
	tolerance, bad := "none", m.Bad
	if m.Tolerate {
		tolerance = "all"
	}
	m.mu.Unlock()
	c, err := connectors.NewRecordPipeline(nil, tolerance, false).Batch(ctx, b)
	if err != nil {
		return nil, err
	}
	var rows []Row
	var refused []*record.Error
	err = c.Each(ctx, func(rec *record.Record) error {
		r := rec.Raw
		if err := bad[Coord{r.Topic, r.Partition, r.Offset}]; err != nil {
			refused = append(refused, record.NewError(r, err))
			return nil
		}
		rows = append(rows, Row{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
		return nil
	})
	var re *record.Error
	if errors.As(err, &re) {
		// A record the pipeline could not convert (errors.tolerance=none):
		// the lowest of it and the refused ones fails the batch.
		refused, err = append(refused, re), nil
	}
	if err != nil {
		return nil, err
	}
	if err := c.Reject(refused); err != nil {
		return nil, err
	}
	return rows, nil
}

// Acquire bumps the fence of each partition and returns its position. It
// fails with offsets.ErrBusy while a prepared batch holds a partition, and
// then fences none.
func (m *MemSink) Acquire(ctx context.Context, topic string, partitions []int32) (map[int32]offsets.Position, error) {
	if err := m.at(ctx, InAcquire, twophase.BatchID{Connector: m.connector, Topic: topic}); err != nil {
		return nil, err
	}
	st := m.store
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range partitions {
		if sl := st.slot(m.connector, topic, p); sl.held != nil {
			return nil, fmt.Errorf("sinktest: %s[%d] held by prepared batch %s: %w", topic, p, sl.held, offsets.ErrBusy)
		}
	}
	out := map[int32]offsets.Position{}
	for _, p := range partitions {
		sl := st.slot(m.connector, topic, p)
		sl.fence++
		out[p] = offsets.Position{Topic: topic, Partition: p, Next: sl.next, Fence: sl.fence}
	}
	return out, nil
}

// Initialize stores next as the first position of a partition that has
// none, while fence is still the partition's fence.
func (m *MemSink) Initialize(ctx context.Context, topic string, partition int32, fence, next int64) error {
	if err := m.at(ctx, "", twophase.BatchID{}); err != nil {
		return err
	}
	st := m.store
	st.mu.Lock()
	defer st.mu.Unlock()
	sl := st.slot(m.connector, topic, partition)
	if sl.fence != fence {
		return &offsets.FencedError{Connector: m.connector, Topic: topic, Partition: partition, WantNext: offsets.Unset, Fence: fence, GotNext: sl.next, GotFenc: sl.fence}
	}
	if sl.next == offsets.Unset {
		sl.next = next
	}
	return nil
}

// Fenced counts the compare-and-sets this instance lost (Prepare and
// WriteLocal refused with twophase.ErrFenced).
func (m *MemSink) Fenced() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenced
}

// cas checks that b continues the stored position under its fence; st.mu
// is held.
func (m *MemSink) cas(b *twophase.Batch) (*slot, error) {
	sl := m.store.slot(b.ID.Connector, b.ID.Topic, b.ID.Partition)
	if sl.held != nil || sl.next != b.Prev || sl.fence != b.Fence {
		m.mu.Lock()
		m.fenced++
		m.mu.Unlock()
		return nil, &offsets.FencedError{Connector: b.ID.Connector, Topic: b.ID.Topic, Partition: b.ID.Partition, WantNext: b.Prev, Fence: b.Fence, GotNext: sl.next, GotFenc: sl.fence}
	}
	return sl, nil
}

// Prepare converts b (or takes what Stage converted), then, as one atomic
// step, checks the compare-and-set from b.Prev under b.Fence and keeps the
// batch prepared, holding its partition until Commit or Abort. A bad
// record or a fence conflict leaves nothing prepared.
func (m *MemSink) Prepare(ctx context.Context, b *twophase.Batch) error {
	if err := m.at(ctx, BeforePrepare, b.ID); err != nil {
		return fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
	}
	m.mu.Lock()
	rows, ok := m.staged[b.ID]
	delete(m.staged, b.ID)
	m.mu.Unlock()
	if !ok {
		var err error
		if rows, err = m.rowsOf(ctx, b); err != nil {
			return fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
		}
	}
	st := m.store
	st.mu.Lock()
	sl, err := m.cas(b)
	if err == nil {
		id := b.ID
		sl.held = &id
		st.prepared[b.ID] = &prepared{rows: rows}
	}
	st.mu.Unlock()
	if err != nil {
		return err
	}
	return m.at(ctx, AfterPrepare, b.ID)
}

// Commit makes a prepared batch's rows visible and stores its next offset.
// Committing a batch committed before returns nil; one neither prepared
// nor committed returns an error wrapping twophase.ErrNotPrepared.
func (m *MemSink) Commit(ctx context.Context, id twophase.BatchID) error {
	if err := m.at(ctx, BeforeCommit, id); err != nil {
		return err
	}
	st := m.store
	st.mu.Lock()
	pr, ok := st.prepared[id]
	switch {
	case ok:
		delete(st.prepared, id)
		st.insert(pr.rows)
		sl := st.slot(id.Connector, id.Topic, id.Partition)
		sl.next, sl.held = id.NextOffset(), nil
		st.committed[id] = true
	case !st.committed[id]:
		st.mu.Unlock()
		return fmt.Errorf("sinktest: commit %s: %w", id, twophase.ErrNotPrepared)
	}
	st.mu.Unlock()
	return m.at(ctx, AfterCommit, id)
}

// Abort discards a prepared batch and releases its partition; aborting a
// batch that is not prepared returns nil.
func (m *MemSink) Abort(ctx context.Context, id twophase.BatchID) error {
	if err := m.at(ctx, "", id); err != nil {
		return err
	}
	st := m.store
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.prepared[id]; ok {
		delete(st.prepared, id)
		st.slot(id.Connector, id.Topic, id.Partition).held = nil
	}
	return nil
}

// InDoubt lists the connector's prepared batches, whoever prepared them,
// in topic, partition and offset order.
func (m *MemSink) InDoubt(ctx context.Context, connector string) ([]twophase.BatchID, error) {
	if err := m.at(ctx, "", twophase.BatchID{}); err != nil {
		return nil, err
	}
	var out []twophase.BatchID
	for _, id := range m.store.Prepared() {
		if id.Connector == connector {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b twophase.BatchID) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.First - b.First)
	})
	return out, nil
}

// Stage converts b ahead of its Prepare. Staged rows are this instance's
// alone: nothing is durable, nothing is locked.
func (m *MemSink) Stage(ctx context.Context, b *twophase.Batch) error {
	if err := m.at(ctx, "", b.ID); err != nil {
		return err
	}
	rows, err := m.rowsOf(ctx, b)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.staged[b.ID] = rows
	return nil
}

// Discard forgets what was staged for ids.
func (m *MemSink) Discard(ids []twophase.BatchID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.staged, id)
	}
}

// Staged reports whether a batch is staged (for tests).
func (m *MemSink) Staged(id twophase.BatchID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.staged[id]
	return ok
}

// WriteLocal writes b without two-phase commit. With offsets.GuardCAS
// (order Atomic) the compare-and-set, rows and offset happen at once;
// with offsets.GuardNone the offset is written blindly and order says
// whether rows (RowsFirst) or the offset (OffsetFirst) come first, with
// the BetweenLocal hook point in between.
func (m *MemSink) WriteLocal(ctx context.Context, b *twophase.Batch, guard offsets.Guard, order connectors.Order) error {
	if err := m.at(ctx, BeforeLocalCommit, b.ID); err != nil {
		return err
	}
	rows, err := m.rowsOf(ctx, b)
	if err != nil {
		return err
	}
	st := m.store
	rowsStep := func() { st.mu.Lock(); st.insert(rows); st.mu.Unlock() }
	offStep := func() {
		st.mu.Lock()
		st.slot(b.ID.Connector, b.ID.Topic, b.ID.Partition).next = b.ID.NextOffset()
		st.mu.Unlock()
	}
	switch {
	case guard == offsets.GuardCAS || order == connectors.Atomic:
		st.mu.Lock()
		sl := st.slot(b.ID.Connector, b.ID.Topic, b.ID.Partition)
		if guard == offsets.GuardCAS {
			if sl, err = m.cas(b); err != nil {
				st.mu.Unlock()
				return err
			}
		}
		st.insert(rows)
		sl.next = b.ID.NextOffset()
		st.mu.Unlock()
	case order == connectors.RowsFirst:
		rowsStep()
		if err := m.at(ctx, BetweenLocal, b.ID); err != nil {
			return err
		}
		offStep()
	default: // OffsetFirst
		offStep()
		if err := m.at(ctx, BetweenLocal, b.ID); err != nil {
			return err
		}
		rowsStep()
	}
	return m.at(ctx, AfterLocalCommit, b.ID)
}

// WriteRound implements connectors.RoundWriter: every batch's
// compare-and-set, rows and offset at once (hooks BeforeLocalCommit and
// AfterLocalCommit, with the first batch).
func (m *MemSink) WriteRound(ctx context.Context, bs []*twophase.Batch, guard offsets.Guard) error {
	if len(bs) == 0 {
		return nil
	}
	if err := m.at(ctx, BeforeLocalCommit, bs[0].ID); err != nil {
		return err
	}
	rows := make([][]Row, len(bs))
	for i, b := range bs {
		var err error
		if rows[i], err = m.rowsOf(ctx, b); err != nil {
			return err
		}
	}
	st := m.store
	st.mu.Lock()
	slots := make([]*slot, len(bs))
	for i, b := range bs {
		sl := st.slot(b.ID.Connector, b.ID.Topic, b.ID.Partition)
		if guard == offsets.GuardCAS {
			var err error
			if sl, err = m.cas(b); err != nil {
				st.mu.Unlock()
				return err
			}
		}
		slots[i] = sl
	}
	for i, b := range bs {
		st.insert(rows[i])
		slots[i].next = b.ID.NextOffset()
	}
	st.mu.Unlock()
	return m.at(ctx, AfterLocalCommit, bs[0].ID)
}

// Positions returns every stored position of the connector.
func (m *MemSink) Positions(ctx context.Context) ([]offsets.Position, error) {
	if err := m.at(ctx, "", twophase.BatchID{}); err != nil {
		return nil, err
	}
	st := m.store
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []offsets.Position
	for k, sl := range st.slots {
		if k.connector == m.connector {
			out = append(out, offsets.Position{Topic: k.topic, Partition: k.partition, Next: sl.next, Fence: sl.fence})
		}
	}
	slices.SortFunc(out, func(a, b offsets.Position) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	return out, nil
}

// ResetOffsets sets the listed positions' next offsets (or, with all,
// clears every position of the connector), bumping their fences so that
// their owners are fenced.
func (m *MemSink) ResetOffsets(ctx context.Context, all bool, positions []offsets.Position) error {
	if err := m.at(ctx, "", twophase.BatchID{}); err != nil {
		return err
	}
	st := m.store
	st.mu.Lock()
	defer st.mu.Unlock()
	// A partition held by a prepared batch is not edited: its batch is
	// resolved first (as the PostgreSQL sink's row lock refuses it).
	for k, sl := range st.slots {
		if k.connector != m.connector || sl.held == nil {
			continue
		}
		held := all
		for _, p := range positions {
			held = held || (p.Topic == k.topic && p.Partition == k.partition)
		}
		if held {
			return fmt.Errorf("sinktest: %s[%d] held by prepared batch %s: %w", k.topic, k.partition, sl.held, offsets.ErrBusy)
		}
	}
	if all {
		for k, sl := range st.slots {
			if k.connector == m.connector {
				sl.next = offsets.Unset
				sl.fence++
			}
		}
	}
	for _, p := range positions {
		sl := st.slot(m.connector, p.Topic, p.Partition)
		sl.next = p.Next
		sl.fence++
	}
	return nil
}

// Guarantees declares every delivery guarantee.
func (m *MemSink) Guarantees() (connectors.Guarantees, error) { return connectors.AllGuarantees, nil }

// Preflight accepts every delivery guarantee.
func (m *MemSink) Preflight(ctx context.Context, g connectors.Guarantee) error {
	return m.at(ctx, "", twophase.BatchID{})
}

// Close does nothing: the store outlives its instances.
func (m *MemSink) Close() {}

// Record returns a record at the given coordinates, for tests.
func Record(topic string, partition int32, offset int64, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Value: []byte(value)}
}
