package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/offsets"
)

func uiStatus(state engine.State, next, lag int64) engine.ConnectorStatus {
	t := engine.TaskStatus{ID: 0, StateInfo: engine.StateInfo{State: state}}
	if next >= 0 {
		t.Partitions = []engine.PartitionStatus{{Topic: "orders", Partition: 0, NextOffset: next, EndOffset: next + lag, Lag: lag}}
	}
	return engine.ConnectorStatus{Name: "c", Tasks: []engine.TaskStatus{t}}
}

// TestUIHistory: samples give a rate between samples of the same
// partitions and the summed lag; a task that loses its partitions keeps
// its last known ones; old samples go.
func TestUIHistory(t *testing.T) {
	u := NewUIHistory(nil, 5*time.Second, time.Minute, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	u.observe(uiStatus(engine.StateRunning, 100, 50), t0)
	u.observe(uiStatus(engine.StateRunning, 100, 50), t0.Add(100*time.Millisecond)) // merged
	u.observe(uiStatus(engine.StateRunning, 150, 20), t0.Add(5*time.Second))
	u.observe(uiStatus(engine.StateFailed, -1, 0), t0.Add(10*time.Second))
	s := u.samples("c")
	if len(s) != 3 || s[0].Rate != -1 || s[1].Rate != 10 || s[1].Lag != 20 || s[2].Lag != -1 {
		t.Fatalf("samples %+v", s)
	}
	l, ok := u.lastKnown("c", 0)
	if !ok || len(l.Partitions) != 1 || l.Partitions[0].NextOffset != 150 || !l.At.Equal(t0.Add(5*time.Second)) {
		t.Errorf("last known %+v %v", l, ok)
	}
	ch := u.charts("c", t0.Add(10*time.Second))
	if len(ch) != 2 || ch[0].Points != 1 || ch[1].Points != 2 || !strings.Contains(string(ch[1].SVG), "<polyline") || ch[1].Max != "50" {
		t.Errorf("charts %+v", ch)
	}
	u.observe(uiStatus(engine.StateRunning, 200, 0), t0.Add(2*time.Minute))
	if s := u.samples("c"); len(s) != 1 {
		t.Errorf("%d samples kept after a minute, want 1", len(s))
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 0, 0.3: 0.5, 1: 1, 7: 10, 12: 20, 430: 500, 5000: 5000} {
		if got := niceCeil(in); got < want*0.999 || got > want*1.001 {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

// uiHerder answers what /ui asks with a status the test sets.
type uiHerder struct {
	Herder // nil: the page calls nothing else
	mu     sync.Mutex
	st     engine.ConnectorStatus
}

func (h *uiHerder) set(st engine.ConnectorStatus) { h.mu.Lock(); h.st = st; h.mu.Unlock() }
func (h *uiHerder) Secrets() []string             { return nil }
func (h *uiHerder) Connectors(context.Context) ([]string, error) {
	return []string{"c"}, nil
}
func (h *uiHerder) Status(context.Context, string) (engine.ConnectorStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st, nil
}
func (h *uiHerder) RecentRounds(context.Context, string) ([]engine.RoundTiming, error) {
	return nil, nil
}
func (h *uiHerder) Offsets(context.Context, string) ([]offsets.Position, error) {
	return []offsets.Position{{Topic: "orders", Partition: 0, Next: 99}}, nil
}

// TestStatusPageKeepsLastPositions: a FAILED or PAUSED task without
// partitions keeps its last known ones on /ui (before issue 27: "No
// partitions assigned"); never seen, the positions stored in the sink
// stand in. The page draws an SVG chart per series.
func TestStatusPageKeepsLastPositions(t *testing.T) {
	h := &uiHerder{}
	srv := httptest.NewServer(New(Options{Herder: h, Listen: "127.0.0.1:0"}))
	defer srv.Close()
	get := func() string {
		req, _ := http.NewRequest("GET", srv.URL+"/ui", nil)
		req.Host = "127.0.0.1"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("/ui: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	h.set(uiStatus(engine.StateFailed, -1, 0))
	if page := get(); !strings.Contains(page, "<td class=\"num\">99</td>") || !strings.Contains(page, "stored in the sink") {
		t.Errorf("/ui of a FAILED task never seen with partitions lacks the stored position:\n%s", page)
	}
	h.set(uiStatus(engine.StateRunning, 1234, 5))
	if page := get(); !strings.Contains(page, "<td class=\"num\">1234</td>") || strings.Contains(page, "last known") {
		t.Errorf("/ui of a RUNNING task:\n%s", page)
	}
	for _, state := range []engine.State{engine.StatePaused, engine.StateFailed} {
		h.set(uiStatus(state, -1, 0))
		page := get()
		if !strings.Contains(page, "<td class=\"num\">1234</td>") || !strings.Contains(page, "last known at ") || !strings.Contains(page, "task "+strings.ToLower(string(state))) ||
			strings.Contains(page, "No partitions assigned") {
			t.Errorf("/ui of a %s task:\n%s", state, page)
		}
		if n := strings.Count(page, `<svg class="chart"`); n != 2 {
			t.Errorf("%d charts, want 2", n)
		}
	}
}
