package engine

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
)

// TestMemoryFetchShare: a task's fetch limit is its share of the budget
// (over the tasks running when its session starts) over fetchShareDiv,
// never above the default nor below minFetchBytes; no budget leaves the
// default.
func TestMemoryFetchShare(t *testing.T) {
	const def = 32 << 20
	var none *Memory
	if got := none.fetchBytes(def); got != def || none.roundBytes(def) != def {
		t.Errorf("no budget: fetch %d, round bytes %d; want %d", got, none.roundBytes(def), def)
	}
	m := &Memory{budget: 128 << 20, live: func() uint64 { return 0 }}
	if got, want := m.fetchBytes(def), 128<<20/fetchShareDiv; got != want {
		t.Errorf("no task counted: fetch %d, want %d", got, want)
	}
	leave := make([]func(), 0, 100)
	for _, c := range []struct {
		tasks int
		want  int
	}{
		{1, 128 << 20 / fetchShareDiv},
		{4, 128 << 20 / 4 / fetchShareDiv},
		{100, minFetchBytes},
	} {
		for len(leave) < c.tasks {
			leave = append(leave, m.join())
		}
		if got := m.fetchBytes(def); got != c.want {
			t.Errorf("%d tasks: fetch %d, want %d", c.tasks, got, c.want)
		}
		// A round's keys and values: batch.max.bytes within the share.
		if got := m.roundBytes(16 << 20); got != min(16<<20, c.want) {
			t.Errorf("%d tasks: round bytes %d, want %d", c.tasks, got, min(16<<20, c.want))
		}
		if got := m.roundBytes(1 << 10); got != 1<<10 {
			t.Errorf("%d tasks: round bytes %d, want batch.max.bytes 1024", c.tasks, got)
		}
	}
	big := &Memory{budget: 1 << 40}
	if got := big.fetchBytes(def); got != def {
		t.Errorf("a large budget: fetch %d, want the default %d", got, def)
	}
	for _, l := range leave {
		l()
	}
	if n := m.tasks.Load(); n != 0 {
		t.Errorf("%d tasks counted after all left", n)
	}
}

// TestPollCutUnderPressure: while the heap live after the last
// collection holds more than half the budget, a round takes its first
// poll and no more; without pressure the same polls make one round.
func TestPollCutUnderPressure(t *testing.T) {
	for _, c := range []struct {
		name              string
		live              uint64
		wantPolls, wantRn int
		wantCut           int64
	}{
		{"under half", 64<<20 - 1, 4, 30, 0}, // the fourth poll finds the backlog taken
		{"over half", 64<<20 + 1, 1, 10, 1},
	} {
		m := &Memory{budget: 128 << 20, live: func() uint64 { return c.live }}
		var logged bytes.Buffer
		tk := &Task{conn: config.Connector{BatchMaxRecords: 100, BatchMaxBytes: 1 << 20, BatchLinger: time.Hour}, opt: TaskOptions{Memory: m},
			log: slog.New(slog.NewTextHandler(&logged, nil))}
		polls := 0
		pollFn := func(_ context.Context, n int) kgo.Fetches {
			polls++
			if polls > 3 {
				return fetches(0) // the backlog is taken
			}
			return fetches(min(10, n))
		}
		recs, err := tk.poll(context.Background(), pollFn, nil)
		if err != nil {
			t.Fatal(err)
		}
		if polls != c.wantPolls || len(recs) != c.wantRn || m.cut.Load() != c.wantCut {
			t.Errorf("%s: %d polls, %d records, %d cut; want %d, %d, %d", c.name, polls, len(recs), m.cut.Load(), c.wantPolls, c.wantRn, c.wantCut)
		}
		// The first cut of a task is logged at info level, for the
		// operator; later ones at debug.
		if got := strings.Count(logged.String(), "level=INFO msg=\"round cut short: memory pressure"); got != int(c.wantCut) {
			t.Errorf("%s: %d info lines of a cut, want %d:\n%s", c.name, got, c.wantCut, logged.String())
		}
	}
}

// TestNewMemoryLimit: a budget sets Go's soft memory limit, unless
// GOMEMLIMIT set one; no budget sets nothing.
func TestNewMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "")
	if m := NewMemory(0, nil); m != nil || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("budget 0: %v, limit %d; want nil and no limit", m, debug.SetMemoryLimit(-1))
	}
	for _, c := range []struct{ budget, limit int64 }{
		{96 << 20, 84 << 20},      // less an eighth
		{1 << 30, 1<<30 - 16<<20}, // less the reserve for what Go does not manage
		{16 << 20, 14 << 20},
	} {
		m := NewMemory(c.budget, nil)
		if m.Budget() != c.budget || debug.SetMemoryLimit(-1) != c.limit {
			t.Errorf("budget %d: budget %d, Go's limit %d; want %d", c.budget, m.Budget(), debug.SetMemoryLimit(-1), c.limit)
		}
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	if m := NewMemory(96<<20, nil); m.Budget() != 96<<20 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT: limit %d, want it left alone", debug.SetMemoryLimit(-1))
	}
	runtime.GC()
	if live := liveHeap(); live == 0 {
		t.Error("the runtime reported no live heap (/gc/heap/live:bytes)")
	}
}

// TestFetchSizer: the fetch limit on the wire follows what a wire byte
// decodes into, so that a fetch of compressed records stays within the
// task's share in memory: the first fetch assumes firstFetchRatio,
// uncompressed batches get about the share, ten-fold compression about a
// twelfth of it (the records' own Go structure counts too), a change of
// less than a fifth is ignored, and the floor holds for any ratio.
func TestFetchSizer(t *testing.T) {
	cl, err := kgo.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var none *Memory
	if f, limit := none.newFetchSizer(32<<20, 16<<20); f != nil || limit != 32<<20 {
		t.Fatalf("no budget: sizer %v, limit %d; want none and the ceiling", f, limit)
	}
	none.newFetchSizer(0, 0) // no panic
	var nilSizer *fetchSizer
	nilSizer.adjust(cl)

	m := &Memory{budget: 128 << 20, live: func() uint64 { return 0 }}
	defer m.join()()
	share := int(m.share() / fetchShareDiv) // 16 MiB decoded
	f, first := m.newFetchSizer(32<<20, 16<<20)
	if first != share/firstFetchRatio {
		t.Fatalf("first limit %d, want the share over %d: %d", first, firstFetchRatio, share/firstFetchRatio)
	}
	tenfold := int(int64(share) * (2 << 20) / (20<<20 + 20_000*recordOverhead))
	for _, c := range []struct {
		name                  string
		fresh                 bool // a new sizer, else the previous case's
		wire, uncompressed, n int
		want                  int
	}{
		{"too little read to tell", true, share / firstFetchRatio / 2, sizerSample * 5, 10, share / firstFetchRatio},
		{"uncompressed, large records", true, 4 << 20, 4 << 20, 40, int(int64(share) * (4 << 20) / (4<<20 + 40*recordOverhead))},
		{"a small change is ignored", false, 4 << 20, 4<<20 + 1<<20, 40, int(int64(share) * (4 << 20) / (4<<20 + 40*recordOverhead))},
		// 2 MiB on the wire: 20 MiB decompressed + 20,000 × 200 bytes.
		{"ten-fold compression", true, 2 << 20, 20 << 20, 20_000, tenfold},
		{"a small change is ignored", false, 2 << 20, 21 << 20, 20_000, tenfold},
		{"back to uncompressed", false, 4 << 20, 4 << 20, 40, int(int64(share) * (4 << 20) / (4<<20 + 40*recordOverhead))},
		{"the floor", true, 1 << 20, 1 << 30, 10, minWireFetchBytes},
	} {
		if c.fresh {
			f, _ = m.newFetchSizer(32<<20, 16<<20)
		}
		f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: c.wire, UncompressedBytes: c.uncompressed, NumRecords: c.n})
		f.adjust(cl)
		if got := f.limit(); got != c.want {
			t.Errorf("%s: limit %d, want %d", c.name, got, c.want)
		}
	}
}

// TestMemoryLimitFollowsLiveHeap: with the fetch and round shares at
// their floor (a hundred tasks: minFetchBytes each), Go's soft limit
// stays the budget's while the live heap fits under three quarters of
// it; a live heap that outgrows that raises the limit to twice the live
// heap (instead of the collector running back to back) and says so;
// once the live heap falls under a quarter of the raised limit, the
// limit comes back down, never under the budget's.
func TestMemoryLimitFollowsLiveHeap(t *testing.T) {
	var logged bytes.Buffer
	var live uint64
	var set []int64
	m := &Memory{budget: 128 << 20, live: func() uint64 { return live }, log: slog.New(slog.NewTextHandler(&logged, nil)),
		setLimit: func(n int64) int64 { set = append(set, n); return 0 }}
	m.base = 112 << 20
	m.limit.Store(m.base)
	for range 100 {
		m.join()
	}
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{60 << 20, 112 << 20},  // fits
		{84 << 20, 112 << 20},  // three quarters exactly: fits
		{100 << 20, 200 << 20}, // outgrew: twice the live heap
		{120 << 20, 200 << 20}, // under three quarters of the raised limit
		{160 << 20, 320 << 20}, // outgrew again
		{90 << 20, 320 << 20},  // under three quarters, over a quarter
		{40 << 20, 112 << 20},  // under a quarter: down, to the budget's at least
	} {
		live = c.live
		m.observe()
		if got := m.limit.Load(); got != c.want {
			t.Errorf("live %d MiB: limit %d MiB, want %d MiB", c.live>>20, got>>20, c.want>>20)
		}
	}
	if want := []int64{200 << 20, 320 << 20, 112 << 20}; !slices.Equal(set, want) {
		t.Errorf("limits set %v, want %v", set, want)
	}
	if n := strings.Count(logged.String(), "level=WARN msg=\"the heap live after a collection outgrew the memory budget"); n != 2 {
		t.Errorf("%d warnings of a raised limit, want 2:\n%s", n, logged.String())
	}
	if sq := m.squeeze.Load(); sq != 0 {
		t.Errorf("shares at their floor halved %d times", sq)
	}
	// GOMEMLIMIT rules: observe only reads.
	g := &Memory{budget: 128 << 20, live: func() uint64 { return 1 << 30 }, setLimit: func(int64) int64 { t.Error("set a limit though GOMEMLIMIT rules"); return 0 }}
	if g.observe() != 1<<30 {
		t.Error("observe did not return the live heap")
	}
}

// TestMemorySqueeze: a task's first poll of a round is a whole fetch, so
// what bounds its live heap is the fetch share. A live heap over three
// quarters of Go's limit halves the fetch and round shares, one step
// each squeezeRounds rounds of each task (a step shows in the live heap
// only once the rounds polled before it commit), down to minFetchBytes;
// only then does the limit rise, with the warning. A live heap under
// three eighths of the limit doubles the shares back, one step at a time,
// once a raised limit has come back down. Under GOMEMLIMIT the shares
// follow three quarters of the budget and no limit is set.
func TestMemorySqueeze(t *testing.T) {
	var logged bytes.Buffer
	var live uint64
	var set []int64
	m := &Memory{budget: 128 << 20, live: func() uint64 { return live }, log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		setLimit: func(n int64) int64 { set = append(set, n); return 0 }}
	m.base = 112 << 20
	m.limit.Store(m.base)
	defer m.join()()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(memoryMetrics{m})
	check := func(step string, wantShare, wantLimit int64) {
		t.Helper()
		if got := gauge(t, reg, "txsink_memory_fetch_share_bytes"); got != float64(wantShare) {
			t.Errorf("%s: txsink_memory_fetch_share_bytes %v, want %d", step, got, wantShare)
		}
		if got := gauge(t, reg, "txsink_memory_go_limit_bytes"); got != float64(wantLimit) {
			t.Errorf("%s: txsink_memory_go_limit_bytes %v, want %d", step, got, wantLimit)
		}
		if got := m.fetchShare(); got != wantShare {
			t.Errorf("%s: fetch share %d MiB, want %d MiB", step, got>>20, wantShare>>20)
		}
		if got := m.fetchBytes(32 << 20); int64(got) != wantShare {
			t.Errorf("%s: fetch bytes %d MiB, want %d MiB", step, got>>20, wantShare>>20)
		}
		if got := m.roundBytes(64 << 20); int64(got) != wantShare {
			t.Errorf("%s: round bytes %d MiB, want %d MiB", step, got>>20, wantShare>>20)
		}
		if got := m.limit.Load(); got != wantLimit {
			t.Errorf("%s: limit %d MiB, want %d MiB", step, got>>20, wantLimit>>20)
		}
	}
	rounds := func(n int) {
		for range n {
			m.roundStarted()
		}
	}
	live = 84 << 20 // three quarters of the limit exactly: fits
	rounds(5)
	check("fits", 16<<20, 112<<20)

	live = 90 << 20
	m.observe()
	check("first step", 8<<20, 112<<20)
	rounds(squeezeRounds - 1)
	check("the step has not shown yet", 8<<20, 112<<20)
	rounds(1)
	check("second step", 4<<20, 112<<20)
	rounds(squeezeRounds)
	check("third step", 2<<20, 112<<20)
	rounds(squeezeRounds)
	check("at the floor", 1<<20, 112<<20)
	if len(set) != 0 {
		t.Errorf("limits set %v before the shares reached their floor", set)
	}
	rounds(1)
	check("the floor holds: the limit rises", 1<<20, 180<<20)

	live = 40 << 20
	m.observe()
	check("the limit comes back down", 1<<20, 112<<20)
	rounds(squeezeRounds - 1) // one round since the last step was the limit's rise
	check("room again: the shares double", 2<<20, 112<<20)
	rounds(squeezeRounds - 1)
	check("one step at a time", 2<<20, 112<<20)
	live = 50 << 20 // over three eighths, under three quarters: stays
	rounds(3 * squeezeRounds)
	check("between the marks", 2<<20, 112<<20)
	live = 10 << 20
	rounds(3 * squeezeRounds)
	check("back up", 16<<20, 112<<20)
	rounds(3 * squeezeRounds)
	check("never above the budget's share", 16<<20, 112<<20)

	if want := []int64{180 << 20, 112 << 20}; !slices.Equal(set, want) {
		t.Errorf("limits set %v, want %v", set, want)
	}
	out := logged.String()
	if n := strings.Count(out, "level=INFO msg=\"the heap live after a collection neared Go's soft memory limit"); n != 1 {
		t.Errorf("%d info lines of a halving, want 1 (later ones at debug):\n%s", n, out)
	}
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 (the limit rose once):\n%s", n, out)
	}

	// GOMEMLIMIT rules: the shares follow three quarters of the budget
	// (96 MiB); no limit is set.
	g := &Memory{budget: 128 << 20, live: func() uint64 { return live }, log: slog.New(slog.NewTextHandler(&logged, nil)),
		setLimit: func(int64) int64 { t.Error("set a limit though GOMEMLIMIT rules"); return 0 }}
	defer g.join()()
	live = 90 << 20
	g.roundStarted()
	if got := g.fetchShare(); got != 16<<20 {
		t.Errorf("GOMEMLIMIT, live 90 MiB: share %d MiB, want 16", got>>20)
	}
	live = 100 << 20
	for range 20 {
		g.roundStarted()
	}
	if got := g.fetchShare(); got != 1<<20 {
		t.Errorf("GOMEMLIMIT, live 100 MiB: share %d MiB, want the floor", got>>20)
	}
}

// gauge returns the value of the gauge name that reg gathers.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s gathered", name)
	return 0
}
