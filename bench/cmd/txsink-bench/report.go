package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Report is everything one run of the program measured; it is written as
// results.json and rendered as results.md.
type Report struct {
	Profile string     `json:"profile"`
	Command string     `json:"command"`
	Started time.Time  `json:"started"`
	Seconds float64    `json:"seconds"`
	Host    HostInfo   `json:"host"`
	Images  []string   `json:"images"`
	Rows    []*Row     `json:"rows"`
	Latency []*Latency `json:"latency"`
	Growth  []*Growth  `json:"growth"`
	// Scale is the scale rows (how cost grows), when run.
	Scale   *Scale   `json:"scale,omitempty"`
	Targets []Target `json:"targets"`
	Notes   []string `json:"notes"`
	// CPUProfile is the CPU profile of an in-process drain.
	CPUProfile *ProfileSummary `json:"cpu_profile,omitempty"`
	Workloads  []*workload     `json:"workloads"`
}

// ProfileSummary is a CPU profile of the connector runtime draining the
// main workload in-process.
type ProfileSummary struct {
	Mode    string  `json:"mode"`
	File    string  `json:"file,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Top     string  `json:"top,omitempty"`
	Cum     string  `json:"cum,omitempty"`
	Skipped string  `json:"skipped,omitempty"`
}

// HostInfo describes the machine while the benchmark ran.
type HostInfo struct {
	CPUs          int        `json:"cpus"`
	LoadAvgBefore [3]float64 `json:"load_avg_before"`
	LoadAvgAfter  [3]float64 `json:"load_avg_after"`
	GoVersion     string     `json:"go_version"`
}

// Row is one system on one workload, measured Runs times.
type Row struct {
	System     string  `json:"system"` // raw-copy, raw-consume, txsink, peer, clickhouse-raw, txsink-clickhouse
	Mode       string  `json:"mode,omitempty"`
	Workload   string  `json:"workload"`
	ValueBytes int     `json:"value_bytes"`
	Partitions int     `json:"partitions"`
	Records    int     `json:"records"`
	Runs       []Run   `json:"runs"`
	MedianRPS  float64 `json:"median_records_per_s"`
	// RatioCeiling is MedianRPS over the workload's raw ceiling (the best
	// raw COPY row, or the raw ClickHouse insert for ClickHouse rows).
	RatioCeiling float64 `json:"ratio_to_ceiling,omitempty"`
	// RatioPeer is MedianRPS over the peer's on the same workload.
	RatioPeer float64 `json:"ratio_to_peer,omitempty"`
	// CPUSecPerM is the sink process's CPU seconds per million records
	// (median over runs); PeakRSSMB its peak resident set (max over runs).
	CPUSecPerM float64 `json:"cpu_s_per_million,omitempty"`
	// MachineCPUSecPerM is the whole machine's busy CPU seconds per
	// million records (median of the runs).
	MachineCPUSecPerM float64 `json:"machine_cpu_s_per_million,omitempty"`
	PeakRSSMB         float64 `json:"peak_rss_mb,omitempty"`
	// Phases are per-round commit phase latencies over all runs' rounds.
	Phases map[string]Quantiles `json:"phases,omitempty"`
	Rounds int                  `json:"rounds,omitempty"`
	// InRoundShare: median share of the drain spent inside rounds.
	InRoundShare float64 `json:"in_round_share,omitempty"`
	Skipped      string  `json:"skipped,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// Run is one measurement.
type Run struct {
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"records_per_s"`
	CPUSeconds float64 `json:"cpu_s,omitempty"`
	// MachineCPUSeconds is the whole machine's busy CPU time over the
	// drain (/proc/stat): sink, broker, database and kernel together.
	MachineCPUSeconds float64 `json:"machine_cpu_s,omitempty"`
	PeakRSSMB         float64 `json:"peak_rss_mb,omitempty"`
	Rounds            int     `json:"rounds,omitempty"`
	// Records, when set, is how many records this run drained (the peer
	// may run on fewer than the row's Records).
	Records int `json:"records,omitempty"`
	// InRoundShare is the share of the drain window spent inside rounds
	// (prepare/decide/commit or the local write); the rest is polling and
	// linger between rounds.
	InRoundShare float64 `json:"in_round_share,omitempty"`
	// BusyShare is the machine's busy CPU over the span it was sampled
	// over, divided by that span and the cores (scale rows).
	BusyShare float64 `json:"machine_busy_share,omitempty"`
}

// Quantiles are in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Latency is one steady-rate run: produce timestamp to row visible.
type Latency struct {
	Mode       string  `json:"mode"`
	Workload   string  `json:"workload"`
	TargetRate float64 `json:"target_rate"`
	// RateOf names the mode whose maximum throughput TargetRate is half
	// of (the run's own mode unless it was not measured), or
	// "-latency-rate".
	RateOf      string    `json:"rate_of,omitempty"`
	OfferedRate float64   `json:"offered_rate"`
	Seconds     float64   `json:"seconds"`
	Records     int       `json:"records"`
	Quantiles   Quantiles `json:"latency"`
	// CDF holds (latency ms, fraction) points for the chart.
	CDF [][2]float64 `json:"cdf"`
	// Rounds is how many rounds txsink committed during the run, and
	// RoundRecords the median records per round; Phases are the rounds'
	// phase durations (where a record's latency goes).
	Rounds       int                  `json:"rounds,omitempty"`
	RoundRecords int                  `json:"round_records,omitempty"`
	Phases       map[string]Quantiles `json:"phases,omitempty"`
	Skipped      string               `json:"skipped,omitempty"`
}

// Growth is one point of the growth curve.
type Growth struct {
	Records     int     `json:"records"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"records_per_s"`
	CPUSecPerM  float64 `json:"cpu_s_per_million"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	SecondsPerM float64 `json:"seconds_per_million"`
	Skipped     string  `json:"skipped,omitempty"`
}

// Target is one of the targets and whether this run met it.
type Target struct {
	Name     string  `json:"name"`
	Want     string  `json:"want"`
	Got      string  `json:"got"`
	Met      *bool   `json:"met"` // nil: not measured
	Evidence string  `json:"evidence,omitempty"`
	Value    float64 `json:"value,omitempty"`
}

func quantiles(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = min(max(i, 0), len(s)-1)
		return float64(s[i]) / 1e6
	}
	return Quantiles{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: float64(s[len(s)-1]) / 1e6}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// finish computes the row's medians from its runs.
func (r *Row) finish() {
	var rps, cpu, mcpu []float64
	var share []float64
	for _, run := range r.Runs {
		rps = append(rps, run.RPS)
		n := r.Records
		if run.Records > 0 {
			n = run.Records
		}
		if run.CPUSeconds > 0 {
			cpu = append(cpu, run.CPUSeconds/float64(n)*1e6)
		}
		if run.MachineCPUSeconds > 0 {
			mcpu = append(mcpu, run.MachineCPUSeconds/float64(n)*1e6)
		}
		if run.InRoundShare > 0 {
			share = append(share, run.InRoundShare)
		}
		r.PeakRSSMB = max(r.PeakRSSMB, run.PeakRSSMB)
	}
	r.MedianRPS = median(rps)
	r.CPUSecPerM = median(cpu)
	r.MachineCPUSecPerM = median(mcpu)
	r.InRoundShare = median(share)
}

func (r *Row) label() string {
	switch r.System {
	case "raw-copy":
		return "raw COPY " + r.Mode
	case "raw-consume":
		return "raw consume (read_committed)"
	case "txsink":
		return "txsink " + r.Mode
	case "peer":
		return "Kafka Connect + Debezium JDBC"
	case "clickhouse-raw":
		return "raw clickhouse-go insert, " + r.Mode
	case "txsink-clickhouse":
		return "txsink ClickHouse " + r.Mode
	}
	return r.System + " " + r.Mode
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "—"
	}
	if x >= 10 {
		return fmt.Sprintf("%.0f×", x)
	}
	if x >= 1 {
		return fmt.Sprintf("%.2f×", x)
	}
	return fmt.Sprintf("%.0f %%", x*100)
}

func fmtNum(x float64) string {
	switch {
	case x == 0:
		return "—"
	case x >= 1e6:
		return fmt.Sprintf("%.2f M", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.0f k", x/1e3)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func rowNote(r *Row) string {
	n := r.Note
	if r.InRoundShare > 0 {
		if n != "" {
			n += "; "
		}
		n += fmt.Sprintf("%d rounds, %.0f %% of the drain inside rounds", r.Rounds/max(len(r.Runs), 1), r.InRoundShare*100)
	}
	return n
}

func fmtPhases(ph map[string]Quantiles) string {
	if len(ph) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range []string{"prepare", "decide", "commit", "total"} {
		if q, ok := ph[k]; ok && q.Max > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", k, q.P50, q.P99))
		}
	}
	return strings.Join(parts, ", ")
}

// markdown renders the report.
func (rep *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# txsink benchmark — profile %s\n\n", rep.Profile)
	fmt.Fprintf(&b, "- command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- started %s, took %.0f s; %d CPUs; load average before %.2f %.2f %.2f, after %.2f %.2f %.2f; %s\n",
		rep.Started.UTC().Format(time.RFC3339), rep.Seconds, rep.Host.CPUs,
		rep.Host.LoadAvgBefore[0], rep.Host.LoadAvgBefore[1], rep.Host.LoadAvgBefore[2],
		rep.Host.LoadAvgAfter[0], rep.Host.LoadAvgAfter[1], rep.Host.LoadAvgAfter[2], rep.Host.GoVersion)
	if len(rep.Images) > 0 {
		fmt.Fprintf(&b, "- services: %s\n", strings.Join(rep.Images, ", "))
	}
	b.WriteString("\n## Throughput (drain of pre-loaded records)\n\n")
	b.WriteString("records/s is the median of the runs; \"vs ceiling\" divides by the best raw COPY (PostgreSQL rows) or the raw batch insert (ClickHouse rows) on the same workload; CPU and RSS are the sink process's (txsink or the Connect JVM); machine CPU is the whole machine's busy time during the drain (/proc/stat: sink, broker, database, this program and the kernel); phases are per-round p50/p99 in ms.\n\n")
	b.WriteString("| workload | system | runs | records/s | vs ceiling | vs peer | CPU s / M rec | machine CPU s / M rec | peak RSS MB | commit phases p50/p99 ms | note |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %s | %s | 0 | skipped | | | | | | | %s |\n", r.Workload, r.label(), r.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Workload, r.label(), len(r.Runs),
			fmtNum(r.MedianRPS), fmtRatio(r.RatioCeiling), fmtRatio(r.RatioPeer), fmtNum(r.CPUSecPerM), fmtNum(r.MachineCPUSecPerM),
			fmtNum(r.PeakRSSMB), fmtPhases(r.Phases), rowNote(r))
	}
	if len(rep.Latency) > 0 {
		b.WriteString("\n## End-to-end latency at a steady rate (produce timestamp → row visible in PostgreSQL)\n\n")
		b.WriteString("| workload | mode | target rate/s (half of) | offered rate/s | records | p50 ms | p95 ms | p99 ms | max ms | rounds (median records) | round phases p50/p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range rep.Latency {
			if l.Skipped != "" {
				fmt.Fprintf(&b, "| %s | %s | | | | skipped: %s | | | | | |\n", l.Workload, l.Mode, l.Skipped)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s (%s) | %s | %d | %.0f | %.0f | %.0f | %.0f | %d (%d) | %s |\n", l.Workload, l.Mode, fmtNum(l.TargetRate), l.RateOf, fmtNum(l.OfferedRate), l.Records,
				l.Quantiles.P50, l.Quantiles.P95, l.Quantiles.P99, l.Quantiles.Max, l.Rounds, l.RoundRecords, fmtPhases(l.Phases))
		}
	}
	if len(rep.Growth) > 0 {
		b.WriteString("\n## Growth curve (txsink exactly_once, 100-byte values, 6 partitions, one run each)\n\n")
		b.WriteString("| records | drain s | records/s | s per M records | CPU s / M rec | peak RSS MB |\n|---|---|---|---|---|---|\n")
		for _, g := range rep.Growth {
			if g.Skipped != "" {
				fmt.Fprintf(&b, "| %d | skipped: %s | | | | |\n", g.Records, g.Skipped)
				continue
			}
			fmt.Fprintf(&b, "| %d | %.1f | %s | %.1f | %s | %s |\n", g.Records, g.Seconds, fmtNum(g.RPS), g.SecondsPerM, fmtNum(g.CPUSecPerM), fmtNum(g.PeakRSSMB))
		}
	}
	if rep.Scale != nil {
		rep.Scale.markdown(&b)
	}
	if len(rep.Targets) > 0 {
		b.WriteString("\n## Targets\n\n| target | want | got | met |\n|---|---|---|---|\n")
		for _, t := range rep.Targets {
			met := "not measured"
			if t.Met != nil {
				met = map[bool]string{true: "yes", false: "**no**"}[*t.Met]
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
	}
	if p := rep.CPUProfile; p != nil {
		fmt.Fprintf(&b, "\n## Where the time goes: CPU profile of an in-process %s drain\n\n", p.Mode)
		if p.Skipped != "" {
			fmt.Fprintf(&b, "%s\n", p.Skipped)
		} else {
			fmt.Fprintf(&b, "engine.Open + Start on the main workload under runtime/pprof, %.1f s wall; `%s` (read with `go tool pprof`). Flat top:\n\n```\n%s```\n", p.Seconds, p.File, trimTop(p.Top, 22))
		}
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// trimTop keeps the header and the first n entries of pprof -top output.
func trimTop(s string, n int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "flat ") {
			end := min(len(lines), i+1+n)
			return strings.Join(lines[:end], "\n") + "\n"
		}
	}
	return s
}

// write writes results.json and results.md into dir.
func (rep *Report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.markdown()), 0o644)
}

// markdown renders the scale rows.
func (sc *Scale) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## How cost grows (txsink %s; 100-byte JSON values)\n\n", sc.Mode)
	if sc.Server != "" {
		fmt.Fprintf(b, "On %s, max_connections=%d and max_prepared_transactions=%d.\n", sc.Server, sc.MaxConnections, sc.MaxPrepared)
	} else {
		fmt.Fprintf(b, "On a PostgreSQL of their own: the harness's image with max_connections=%d and max_prepared_transactions=%d (the harness's 200 and 64 refuse 100 connectors at the default connection.pool.size and exactly_once on more than 64 partitions of one worker).\n", sc.MaxConnections, sc.MaxPrepared)
	}
	if len(sc.Partitions) > 0 {
		fmt.Fprintf(b, "\n### One connector (`txsink run`, one task), by partitions of its topic\n\n")
		b.WriteString("records/s over the drain (median of the runs); \"vs 6 partitions\" divides by the 6-partition row; machine busy is the machine's busy CPU over the drain over its cores; fence bump: from the first partition's fence bump in the offsets table to the task's \"partitions assigned and fenced\".\n\n")
		b.WriteString("| partitions | records | runs | records/s | vs 6 partitions | CPU s / M rec | machine CPU s / M rec | peak RSS MB | round phases p50/p99 ms | limit hit |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range sc.Partitions {
			if r.Skipped != "" {
				fmt.Fprintf(b, "| %d | %d | 0 | — | | | | | | %s |\n", r.Partitions, r.Records, r.Skipped)
				continue
			}
			fmt.Fprintf(b, "| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.Partitions, r.Records, len(r.Runs), fmtNum(r.MedianRPS),
				fmtRatio(r.RatioCeiling), fmtNum(r.CPUSecPerM), fmtNum(r.MachineCPUSecPerM), fmtNum(r.PeakRSSMB), fmtPhases(r.Phases), r.Note)
		}
	}
	if len(sc.Connectors) > 0 {
		fmt.Fprintf(b, "\n### Connectors of 6 partitions on one worker (`txsink serve`, created through the REST API, 10 requests at a time)\n\n")
		b.WriteString("up and steady: from the first create request to every connector's task RUNNING and its first committed round; records/s over the drain of the first batch (first committed round's start to the last's end), machine CPU from the first create request to the drain's end (start-up included). Assignment: per connector, from \"connector running\" to \"partitions assigned and fenced\" (group join, recovery of in-doubt batches, fence bump); fence bump: from the first partition's bump in the offsets table to that line; p50/max over the connectors. Recovery: the worker is SIGKILLed at the first committed round of a second batch and started again at once; recovered is every connector's first committed round after the restart, caught up every partition's stored offset at its end (a third batch of a tenth, produced after the restart, gives every connector records to write; then each table is checked exact). RSS: the larger VmHWM of the two incarnations.\n\n")
		b.WriteString("| connectors | records per batch | up and steady s | all RUNNING s | records/s | machine CPU s / M rec | assignment p50/max ms | fence bump p50/max ms | SIGKILL → recovered s | SIGKILL → caught up s | after restart: assignment p50/max ms, fence bump p50/max ms | peak RSS MB | RSS per connector MB | peak DB connections | limit hit |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range sc.Connectors {
			if r.Skipped != "" {
				fmt.Fprintf(b, "| %d | %d | %s | | | | | | | | | | | | |\n", r.Connectors, r.Records, r.Skipped)
				continue
			}
			fmt.Fprintf(b, "| %d | %d | %.1f | %.1f | %s | %s | %.0f/%.0f | %.0f/%.0f | %.1f | %.1f | %.0f/%.0f, %.0f/%.0f | %s | %.1f | %d | %s |\n",
				r.Connectors, r.Records, r.UpSeconds, r.RunningSeconds, fmtNum(r.RPS), fmtNum(r.MachineCPUSecPerM),
				r.AssignP50Ms, r.AssignMaxMs, r.FenceBumpP50Ms, r.FenceBumpMaxMs, r.RecoveredSeconds, r.CaughtUpSeconds,
				r.RecAssignP50Ms, r.RecAssignMaxMs, r.RecFenceBumpP50Ms, r.RecFenceBumpMaxMs, fmtNum(r.PeakRSSMB), r.RSSPerConnectorMB, r.PeakDBConnections, r.Limit)
		}
	}
	if len(sc.Workers) > 0 {
		fmt.Fprintf(b, "\n### Workers of a cluster sharing one connector (`txsink serve`, distributed mode, on this one machine)\n\n")
		b.WriteString("One connector of 6 tasks on a 6-partition topic, created paused and resumed once its tasks are spread over the workers and every partition is fenced; records/s from the resume to the last committed round (median of the runs); CPU is the workers' together, from start to stop; peak RSS the largest worker's.\n\n")
		b.WriteString("| workers | tasks per worker | records | runs | records/s | vs 1 worker | workers' CPU s / M rec | machine CPU s / M rec | peak RSS MB per worker | limit hit |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range sc.Workers {
			if r.Skipped != "" {
				fmt.Fprintf(b, "| %d | | %d | 0 | — | | | | | %s |\n", r.Workers, r.Records, r.Skipped)
				continue
			}
			fmt.Fprintf(b, "| %d | %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", r.Workers, joinInts(r.TasksPerWorker), r.Records, len(r.Runs),
				fmtNum(r.MedianRPS), fmtRatio(r.RatioOne), fmtNum(r.CPUSecPerM), fmtNum(r.MachineCPUSecPerM), fmtNum(r.PeakRSSMB), r.Limit)
		}
	}
}
