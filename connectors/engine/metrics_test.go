package engine

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestWrittenAheadCounted: the batches written ahead of committed rounds
// are counted beside the rounds' batches; those of a round that did not
// commit are not (its rows were rolled back), and a deleted connector's
// series goes.
func TestWrittenAheadCounted(t *testing.T) {
	m := newMetrics(&Engine{})
	reg := prometheus.NewPedanticRegistry()
	for _, c := range []prometheus.Collector{m.writtenAhead, m.batches} {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	// value returns the series of name labelled with connector c and,
	// when given, outcome o (-1: no such series).
	value := func(name, o string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, s := range mf.GetMetric() {
				match := true
				for _, l := range s.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() != o || l.GetName() == "connector" && l.GetValue() != "c" {
						match = false
					}
				}
				if match {
					return s.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	m.zero("c")
	if got := value("txsink_batches_written_ahead_total", ""); got != 0 {
		t.Fatalf("written ahead before any round = %v, want 0", got)
	}
	m.round("c", RoundStats{Outcome: "committed", Batches: 96, WrittenAhead: 90})
	m.round("c", RoundStats{Outcome: "aborted", Batches: 96, WrittenAhead: 96})
	m.round("c", RoundStats{Outcome: "committed", Batches: 4})
	if got := value("txsink_batches_written_ahead_total", ""); got != 90 {
		t.Errorf("written ahead = %v, want 90 (the committed rounds' only)", got)
	}
	if got := value("txsink_batches_total", "committed"); got != 100 {
		t.Errorf("committed batches = %v, want 100", got)
	}
	m.forget("c")
	if got := value("txsink_batches_written_ahead_total", ""); got != -1 {
		t.Errorf("after forget: written ahead = %v, want no series", got)
	}
}
