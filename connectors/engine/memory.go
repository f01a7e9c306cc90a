package engine

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Memory is a worker's memory budget (the worker setting
// memory.budget.bytes; README, Memory). One number bounds what the
// worker holds, three ways:
//
//   - Go's soft memory limit is the budget less what Go does not manage
//     (an eighth, at most nonGoReserve), unless GOMEMLIMIT sets one: the
//     collector works harder as the process nears it, instead of the
//     heap doubling over what is live;
//   - a task whose connector sets no fetch.max.bytes fetches at most its
//     share of the budget (the budget over the tasks running when its
//     Kafka session starts) divided by fetchShareDiv: fetched records
//     wait in memory until a round takes them; and a round holds at most
//     as many bytes of keys and values (batch.max.bytes, if lower);
//   - a round stops polling once the heap that survived the last
//     collection holds more than half the budget: under pressure rounds
//     come out smaller (and a pipelined round behind one in flight takes
//     what it has) instead of the process growing. A round always takes
//     its first poll, so a task never stops;
//   - and since that first poll is a whole fetch, a live heap that passes
//     three quarters of Go's soft limit halves the fetch and round shares
//     (squeeze), down to minFetchBytes, before the limit itself moves
//     (observe).
//
// A nil *Memory is no budget: every method is a no-op.
type Memory struct {
	budget int64
	tasks  atomic.Int64
	cut    atomic.Int64 // rounds cut short under pressure
	// live returns the heap bytes that survived the last collection,
	// and setLimit sets Go's soft memory limit (a test replaces them).
	live     func() uint64
	setLimit func(int64) int64
	log      *slog.Logger

	// base is Go's soft limit the budget sets (0: GOMEMLIMIT rules);
	// limit is the one set now (observe).
	base  int64
	mu    sync.Mutex
	limit atomic.Int64
	// squeeze halves the fetch and round shares squeeze times (observe).
	// polls counts the rounds started (roundStarted), steppedAt the count
	// at the last change of squeeze: a change shows in the live heap only
	// once the rounds polled before it have committed. squeezeLogged is
	// whether a squeeze was logged at info level.
	squeeze       atomic.Int32
	polls         atomic.Int64
	steppedAt     int64
	stepped       bool
	squeezeLogged bool
}

// Fractions of the budget (measured on the benchmark's main workload:
// docs/benchmarks.md, "Memory budget").
const (
	// fetchShareDiv: a task's fetch limit is its share over this.
	fetchShareDiv = 8
	// pressureNum/pressureDen of the budget live after a collection is
	// pressure.
	pressureNum, pressureDen = 1, 2
	// nonGoReserve: Go's soft memory limit is the budget less an eighth,
	// at most this, for the resident memory Go does not manage (the
	// program's code: about 20 MB of the resident set of txsink run).
	nonGoReserve = 16 << 20

	// minFetchBytes is the least share of a fetch in decoded bytes: below
	// it a round waits on fetch after fetch.
	minFetchBytes = 1 << 20
	// minWireFetchBytes is the least fetch limit in bytes on the wire (a
	// broker still sends at least one batch when that is larger).
	minWireFetchBytes = 64 << 10
	// recordOverhead is the Go memory of one decoded record besides its
	// key and value (kgo.Record and its share of the fetch's slices).
	recordOverhead = 200
	// sizerSample is the bytes read from the wire between two
	// adjustments of a task's fetch limit (or one fetch's limit, if
	// lower).
	sizerSample = 1 << 20
	// squeezeRounds is the rounds each task starts between two changes
	// of the shares under a live heap near Go's limit (observe): with
	// rounds.max.in.flight=2, by the third the rounds that were polled
	// before the change have committed.
	squeezeRounds = 3
	// firstFetchRatio is the bytes in memory a byte on the wire is taken
	// to become before the first fetch tells.
	firstFetchRatio = 16
)

// NewMemory returns the budget of budget bytes (0: none, nil) and sets
// Go's soft memory limit from it, unless the GOMEMLIMIT environment
// variable set one: then that stays, and is logged beside the budget.
func NewMemory(budget int64, log *slog.Logger) *Memory {
	if budget <= 0 {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	m := &Memory{budget: budget, live: liveHeap, log: log, setLimit: debug.SetMemoryLimit}
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("memory budget", "budget_bytes", budget, "go_memory_limit", env, "note", "GOMEMLIMIT is set: Go's soft memory limit stays as it says")
		return m
	}
	m.base = budget - min(budget/8, nonGoReserve)
	m.limit.Store(m.base)
	m.setLimit(m.base)
	log.Info("memory budget", "budget_bytes", budget, "go_memory_limit_bytes", m.base)
	return m
}

// observe reads the heap live after the last collection and keeps it
// within Go's soft limit. A limit below what is live only burns CPU: the
// collector runs back to back and frees nothing (it gives up at half the
// CPU). When the live heap passes three quarters of the limit, the fetch
// and round shares halve (one step each squeezeRounds rounds of each
// task, so that a step shows before the next is taken), down to
// minFetchBytes: the first poll of every round is a whole fetch, so
// cutting rounds short does not bound what a task holds, and the rounds
// in flight with a fetch buffered behind them can hold several fetches.
// A live heap under half that mark (a doubled share then still fits)
// doubles them back, one step at a time. Only when the shares are at
// their floor and the live heap still outgrows three quarters of the
// limit (the connectors' live memory does not fit the budget) does the
// limit rise, to twice the live heap, with a warning; it comes back
// down, to the budget's at least, once the live heap falls under a
// quarter of it. With GOMEMLIMIT set the shares still follow the live
// heap, against three quarters of the budget, and the limit stays.
func (m *Memory) observe() (live uint64) {
	if m == nil {
		return 0
	}
	live = m.live()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log == nil {
		m.log = slog.Default()
	}
	cur := m.limit.Load()
	if m.base == 0 {
		cur = m.budget
	}
	sq := m.squeeze.Load()
	// A change of squeeze waits for squeezeRounds rounds of each task.
	settled := !m.stepped || m.polls.Load()-m.steppedAt >= squeezeRounds*max(m.tasks.Load(), 1)
	switch l := int64(live); {
	case l > cur/4*3 && m.canSqueeze(sq):
		if !settled {
			break // the last step has not shown yet
		}
		m.squeeze.Store(sq + 1)
		m.steppedAt, m.stepped = m.polls.Load(), true
		lvl := slog.LevelDebug
		if !m.squeezeLogged {
			lvl, m.squeezeLogged = slog.LevelInfo, true
		}
		m.log.Log(context.Background(), lvl, "the heap live after a collection neared Go's soft memory limit: the fetch and round shares of the memory budget halve (later changes are logged at debug level)",
			"live_heap_bytes", live, "go_memory_limit_bytes", cur, "fetch_share_bytes", m.fetchShare())
	case l > cur/4*3 && m.base != 0:
		next := 2 * l
		m.limit.Store(next)
		m.setLimit(next)
		m.log.Warn("the heap live after a collection outgrew the memory budget, with fetches and rounds at their least: Go's soft memory limit rises to twice it rather than the collector running back to back (raise memory.budget.bytes, or run fewer connectors on this worker)",
			"live_heap_bytes", live, "budget_bytes", m.budget, "go_memory_limit_bytes", next)
	case l < cur/4 && cur > m.base && m.base != 0:
		next := max(2*l, m.base)
		m.limit.Store(next)
		m.setLimit(next)
		m.log.Info("the live heap fits the memory budget again: Go's soft memory limit comes back down", "live_heap_bytes", live, "go_memory_limit_bytes", next)
	case l < cur/8*3 && sq > 0 && (cur == m.base || m.base == 0) && settled:
		m.squeeze.Store(sq - 1)
		m.steppedAt, m.stepped = m.polls.Load(), true
		m.log.Debug("the live heap has room again: the fetch and round shares of the memory budget double", "live_heap_bytes", live, "fetch_share_bytes", m.fetchShare())
	}
	return live
}

// roundStarted counts a round's poll and observes the live heap.
func (m *Memory) roundStarted() {
	if m == nil {
		return
	}
	m.polls.Add(1)
	m.observe()
}

// canSqueeze reports whether the shares can halve once more (squeeze is
// sq now) and stay at minFetchBytes or above.
func (m *Memory) canSqueeze(sq int32) bool {
	return m.share()/fetchShareDiv>>(sq+1) >= minFetchBytes
}

// fetchShare is the bytes in memory a task's fetch, and its round's keys
// and values, are held to now: its share over fetchShareDiv, halved
// squeeze times, and minFetchBytes at least.
func (m *Memory) fetchShare() int64 {
	return max(m.share()/fetchShareDiv>>m.squeeze.Load(), minFetchBytes)
}

// Budget returns the budget in bytes (0: none).
func (m *Memory) Budget() int64 {
	if m == nil {
		return 0
	}
	return m.budget
}

// join counts a running task; the returned func uncounts it.
func (m *Memory) join() func() {
	if m == nil {
		return func() {}
	}
	m.tasks.Add(1)
	return func() { m.tasks.Add(-1) }
}

// fetchBytes is the fetch limit of a task whose connector sets none:
// def (the default without a budget) bounded by the task's share.
func (m *Memory) fetchBytes(def int) int {
	if m == nil {
		return def
	}
	return int(max(min(int64(def), m.fetchShare()), minFetchBytes))
}

// roundBytes bounds the keys and values of one round: batch.max.bytes
// (set) bounded by the task's share, as a fetch is.
func (m *Memory) roundBytes(set int) int {
	if m == nil {
		return set
	}
	return int(min(int64(set), m.fetchShare()))
}

// share is one running task's part of the budget.
func (m *Memory) share() int64 {
	return m.budget / max(m.tasks.Load(), 1)
}

// pressed reports whether the heap live after the last collection
// (live) holds more than half the budget.
func (m *Memory) pressed() (live uint64, ok bool) {
	if m == nil {
		return 0, false
	}
	live = m.observe()
	return live, int64(live) > m.budget*pressureNum/pressureDen
}

// liveHeap reads the heap bytes marked live by the last collection.
func liveHeap() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// memoryMetrics exports the budget and the rounds it cut short.
type memoryMetrics struct{ m *Memory }

var (
	memoryBudgetDesc = prometheus.NewDesc("txsink_memory_budget_bytes", "The worker's memory budget (memory.budget.bytes; 0: none).", nil, nil)
	memoryCutDesc    = prometheus.NewDesc("txsink_memory_rounds_cut_total", "Rounds that stopped polling early because the heap live after the last collection held more than half the memory budget.", nil, nil)
	memoryShareDesc  = prometheus.NewDesc("txsink_memory_fetch_share_bytes", "The bytes in memory one task's fetch, and its round's keys and values, are held to now: its share of the memory budget over 8, halved while the live heap nears Go's soft limit (0: no budget).", nil, nil)
	memoryLimitDesc  = prometheus.NewDesc("txsink_memory_go_limit_bytes", "Go's soft memory limit the budget set (above the budget's while the live heap outgrows it; 0: none, or GOMEMLIMIT rules).", nil, nil)
)

func (memoryMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoryBudgetDesc
	ch <- memoryCutDesc
	ch <- memoryLimitDesc
	ch <- memoryShareDesc
}

func (mm memoryMetrics) Collect(ch chan<- prometheus.Metric) {
	var cut, limit, share int64
	if mm.m != nil {
		cut, limit, share = mm.m.cut.Load(), mm.m.limit.Load(), mm.m.fetchShare()
	}
	ch <- prometheus.MustNewConstMetric(memoryShareDesc, prometheus.GaugeValue, float64(share))
	ch <- prometheus.MustNewConstMetric(memoryLimitDesc, prometheus.GaugeValue, float64(limit))
	ch <- prometheus.MustNewConstMetric(memoryBudgetDesc, prometheus.GaugeValue, float64(mm.m.Budget()))
	ch <- prometheus.MustNewConstMetric(memoryCutDesc, prometheus.CounterValue, float64(cut))
}

// fetchSizer keeps one task's fetches within its share of the budget in
// memory. Kafka's fetch limits count bytes on the wire, which may be
// compressed, while a fetch waits in memory decoded: decompressed, and
// recordOverhead bytes of kgo.Record per record. The sizer learns how
// many bytes of memory a byte on the wire becomes from the batches the
// client reads (kgo.HookFetchBatchRead), and sets the client's limits
// (UpdateFetchMaxBytes) so that a fetch decodes into at most
// fetchBytes' share, between minWireFetchBytes and the limit without a
// budget.
type fetchSizer struct {
	m       *Memory
	ceiling int // wire limit without a budget (twice batch.max.bytes)
	partMax int // batch.max.bytes

	wire, decoded atomic.Int64 // read since the last adjustment

	mu  sync.Mutex
	cur int // the client's fetch limit now
}

// newFetchSizer returns the sizer of a task whose connector sets no
// fetch.max.bytes (nil without a budget), and its first fetch limit.
func (m *Memory) newFetchSizer(ceiling, partMax int) (*fetchSizer, int) {
	if m == nil {
		return nil, ceiling
	}
	f := &fetchSizer{m: m, ceiling: ceiling, partMax: partMax}
	// Until the first fetch tells, a wire byte is taken for
	// firstFetchRatio bytes in memory (compressed records).
	f.cur = max(m.fetchBytes(ceiling)/firstFetchRatio, minWireFetchBytes)
	return f, f.cur
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (f *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, fm kgo.FetchBatchMetrics) {
	f.wire.Add(int64(fm.CompressedBytes))
	f.decoded.Add(int64(fm.UncompressedBytes) + int64(fm.NumRecords)*recordOverhead)
}

// adjust sets cl's fetch limits from what the batches read since the
// last adjustment decoded into, once they are sizerSample bytes or more.
func (f *fetchSizer) adjust(cl *kgo.Client) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wire.Load() < int64(min(sizerSample, f.cur)) {
		return // not a fetch's worth yet
	}
	wire, decoded := f.wire.Swap(0), f.decoded.Swap(0)
	if wire <= 0 || decoded <= 0 {
		return
	}
	want := f.m.fetchShare() * wire / decoded
	limit := int(max(min(want, int64(f.ceiling)), minWireFetchBytes))
	// Only a change of a fifth or more: the ratio moves a little with
	// every sample.
	if d := limit - f.cur; d*5 > f.cur || -d*5 > f.cur {
		f.cur = limit
		cl.UpdateFetchMaxBytes(int32(limit), int32(min(limit, f.partMax)))
	}
}

// limit returns the fetch limit set last.
func (f *fetchSizer) limit() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}
