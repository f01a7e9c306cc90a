//go:build bench

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the smoke profile against real services (the same
// stand-in images as the integration tests) so the benchmark cannot rot:
//
//	go test -tags bench -count=1 -timeout 10m ./bench/...
//
// It checks that every step ran and produced a complete report, never how
// fast anything was: absolute timings depend on the machine and its load.
// Without a Docker engine it skips, unless TXSINK_TEST_REQUIRE_SERVICES is
// true.
func TestSmoke(t *testing.T) {
	o, err := profileOptions("smoke")
	if err != nil {
		t.Fatal(err)
	}
	o.Out = t.TempDir()
	o.Repo, err = findRepo()
	if err != nil {
		t.Fatal(err)
	}
	o.Command = "go test -tags bench ./bench/..."
	o.Timeout = 6 * time.Minute // the profile's own budget is 4 min; leave slack on a loaded machine
	var log bytes.Buffer
	rep, err := runBench(context.Background(), o, &log)
	t.Logf("bench log:\n%s", log.String())
	if err != nil {
		var st *stopError
		if errors.As(err, &st) && st.skip {
			t.Skip(st.msg)
		}
		t.Fatal(err)
	}
	if err := rep.write(o.Out); err != nil {
		t.Fatal(err)
	}
	if err := writeCharts(rep, o.Out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep.markdown())

	measured := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Skipped != "" {
			continue
		}
		if len(r.Runs) != o.Runs || r.MedianRPS <= 0 {
			t.Errorf("row %s on %s: %d runs, median %v records/s", r.label(), r.Workload, len(r.Runs), r.MedianRPS)
		}
		measured[r.System+" "+r.Mode] = true
		if w := rep.Workloads; len(w) > 0 && strings.HasPrefix(r.Workload, w[0].Name+" ") {
			measured["format"+strings.TrimPrefix(r.Workload, w[0].Name)] = true
		}
	}
	for _, f := range append([]string{"json"}, o.Formats...) {
		if !measured["format "+f] {
			t.Errorf("no measurement of the %s row (-formats)", f)
		}
	}
	if !slices.Contains(o.Formats, "avro") {
		t.Error("the smoke profile must measure the Avro row")
	}
	for _, want := range []string{"raw-copy ×1", "raw-copy ×4", "raw-consume ", "txsink exactly_once", "txsink exactly_once_sink", "txsink at_least_once",
		"txsink exactly_once_sink cdc record-at-a-time", "txsink exactly_once_sink cdc source.transactions=whole"} {
		if !measured[want] {
			t.Errorf("no measurement for %q", want)
		}
	}
	for _, l := range rep.Latency {
		if l.Skipped != "" || l.Records == 0 || l.Quantiles.P99 <= 0 {
			t.Errorf("latency %s: %+v", l.Mode, l)
		}
	}
	for _, g := range rep.Growth {
		if g.Skipped != "" || g.Seconds <= 0 {
			t.Errorf("growth %d: %+v", g.Records, g)
		}
	}
	checkScale(t, o, rep.Scale)
	for _, f := range []string{"results.json", "results.md", "throughput.png", "latency_cdf.png", "growth.png",
		"scale_partitions.png", "scale_connectors.png", "scale_workers.png"} {
		if st, err := os.Stat(filepath.Join(o.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// checkScale checks that every scale row of the profile was measured and
// carries its figures.
func checkScale(t *testing.T, o options, sc *Scale) {
	t.Helper()
	if sc == nil {
		t.Error("no scale rows")
		return
	}
	if len(sc.Partitions) != len(o.ScalePartitions) || len(sc.Connectors) != len(o.ScaleConnectors) || len(sc.Workers) != len(o.ScaleWorkers) {
		t.Errorf("scale rows: %d/%d/%d, want %d/%d/%d", len(sc.Partitions), len(sc.Connectors), len(sc.Workers),
			len(o.ScalePartitions), len(o.ScaleConnectors), len(o.ScaleWorkers))
	}
	for _, r := range sc.Partitions {
		if r.Skipped != "" || len(r.Runs) != o.Runs || r.MedianRPS <= 0 || r.PeakRSSMB <= 0 || r.Note == "" {
			t.Errorf("scale row of %d partitions: %+v", r.Partitions, r)
		}
	}
	for _, r := range sc.Connectors {
		if r.Skipped != "" || r.UpSeconds <= 0 || r.RPS <= 0 || r.RecoveredSeconds <= 0 || r.CaughtUpSeconds < r.RecoveredSeconds ||
			r.PeakRSSMB <= 0 || r.AssignMaxMs <= 0 || r.FenceBumpMaxMs <= 0 || r.RecAssignMaxMs <= 0 || r.PeakDBConnections <= 0 {
			t.Errorf("scale row of %d connectors: %+v", r.Connectors, r)
		}
	}
	for _, r := range sc.Workers {
		if r.Skipped != "" || len(r.Runs) != o.Runs || r.MedianRPS <= 0 || len(r.TasksPerWorker) != r.Workers || r.Limit == "" {
			t.Errorf("scale row of %d workers: %+v", r.Workers, r)
		}
	}
}
