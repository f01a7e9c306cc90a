// Command txsink-bench measures txsink side by side with the raw ceilings
// and the Kafka Connect + Debezium JDBC sink peer, in one run, on the same
// data and the same servers. See bench/README.md.
//
//	go run ./bench/cmd/txsink-bench -profile smoke   # ≤ 4 minutes, CI
//	go run ./bench/cmd/txsink-bench -profile full    # ≤ 38 minutes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// options select what one run measures. A profile sets the defaults;
// flags override them.
type options struct {
	Profile     string
	Records     int   // records of the main workload (100-byte values)
	Partitions  []int // partition counts of the 100-byte workloads
	SweepFactor float64
	BigRecords  int // records of the 1 KB workload (0: none)
	Runs        int
	Modes       []string
	Peer        bool
	PeerRecords int // 0: as the main workload
	LatencySecs int
	LatModes    []string
	LatencyRate int // records/s of the latency runs; 0: half of each mode's own drain rate
	Growth      []int
	ClickHouse  bool
	// Formats are the Schema Registry formats (avro, protobuf) measured
	// on the main workload's rows beside JSON.
	Formats []string
	// CDCTxns is the source transactions of the CDC rows (0: none).
	CDCTxns int
	// The scale rows (scale.go): partition counts of one connector,
	// connector counts of one worker, worker counts of a cluster (empty:
	// none), their records and delivery guarantee. ScaleOnly skips every
	// other step.
	ScalePartitions []int
	ScaleConnectors []int
	ScaleWorkers    []int
	ScaleRecords    int
	ScaleMode       string
	ScaleOnly       bool
	Out             string
	Repo            string
	Timeout         time.Duration
	Charts          bool
	Pprof           bool
	Command         string
	// Settings are connector settings added to every txsink run (-set).
	Settings map[string]string
}

func profileOptions(name string) (options, error) {
	o := options{
		Profile:   name,
		Modes:     []string{"exactly_once", "exactly_once_sink", "at_least_once"},
		LatModes:  []string{"exactly_once", "exactly_once_sink"},
		Formats:   []string{"avro", "protobuf"},
		Charts:    true,
		ScaleMode: "exactly_once",
	}
	switch name {
	case "smoke":
		o.Records = 20_000
		o.Partitions = []int{6}
		o.Runs = 1
		o.Peer = false
		o.LatencySecs = 5
		o.LatModes = []string{"exactly_once"}
		o.Growth = []int{10_000, 40_000}
		o.ClickHouse = false
		o.CDCTxns = 300
		o.ScalePartitions = []int{1, 100}
		o.ScaleConnectors = []int{3}
		o.ScaleWorkers = []int{2}
		o.ScaleRecords = 10_000
		o.Timeout = 4 * time.Minute
	case "full":
		// The path before pipelined rounds, beside the default.
		o.Modes = []string{"exactly_once", "exactly_once_serial", "exactly_once_sink", "exactly_once_sink_serial", "exactly_once_nobudget", "exactly_once_sink_nobudget", "at_least_once"}
		o.Records = 2_000_000
		o.Partitions = []int{1, 6, 24}
		o.SweepFactor = 0.25
		o.BigRecords = 250_000
		o.Runs = 3
		o.Peer = true
		o.PeerRecords = 250_000
		o.LatencySecs = 30
		o.Growth = []int{100_000, 1_000_000, 10_000_000}
		o.ClickHouse = true
		o.Pprof = true
		o.CDCTxns = 30_000
		o.ScalePartitions = []int{1, 6, 100, 1000}
		o.ScaleConnectors = []int{1, 10, 100}
		o.ScaleWorkers = []int{1, 2, 3}
		o.ScaleRecords = 500_000
		o.Timeout = 38 * time.Minute
	default:
		return o, fmt.Errorf("-profile: must be smoke or full, got %q", name)
	}
	return o, nil
}

func cli(args []string, stdout, stderr io.Writer) int {
	profile := "smoke"
	for i, a := range args { // the profile sets the defaults of the other flags
		if v, ok := strings.CutPrefix(a, "-profile="); ok {
			profile = v
		} else if (a == "-profile" || a == "--profile") && i+1 < len(args) {
			profile = args[i+1]
		}
	}
	o, err := profileOptions(profile)
	if err != nil {
		fmt.Fprintln(stderr, "txsink-bench:", err)
		return 2
	}
	fs := flag.NewFlagSet("txsink-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Profile, "profile", o.Profile, "smoke (≤ 4 min, CI) or full (≤ 38 min); sets the defaults below")
	fs.IntVar(&o.Records, "records", o.Records, "records of the main workload (100-byte JSON values, 6 partitions)")
	parts := fs.String("partitions", joinInts(o.Partitions), "partition counts of the 100-byte workloads (the main one is 6 when listed, else the first)")
	fs.Float64Var(&o.SweepFactor, "sweep-factor", o.SweepFactor, "records of the other partition counts as a fraction of -records (0: same)")
	fs.IntVar(&o.BigRecords, "big-records", o.BigRecords, "records of the 1 KB workload (6 partitions); 0 skips it")
	fs.IntVar(&o.CDCTxns, "cdc-txns", o.CDCTxns, "source transactions of the CDC rows (record at a time, and source.transactions=whole); 0 skips them")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per row (the median is reported)")
	modes := fs.String("modes", strings.Join(o.Modes, ","), "txsink delivery guarantees to measure; a guarantee with the suffix _serial is it with rounds.max.in.flight=1, with _nobudget it on a worker without memory budget (memory.budget.bytes=0)")
	fs.BoolVar(&o.Peer, "peer", o.Peer, "measure Kafka Connect + Debezium JDBC sink (needs java and mvn)")
	fs.IntVar(&o.PeerRecords, "peer-records", o.PeerRecords, "records for the peer (0: as -records)")
	fs.IntVar(&o.LatencySecs, "latency-seconds", o.LatencySecs, "length of each steady-rate latency run; 0 skips latency")
	fs.IntVar(&o.LatencyRate, "latency-rate", 0, "records/s of the steady-rate runs (0: half of each mode's own measured throughput, as the target asks; exactly_once's for a mode not measured)")
	latModes := fs.String("latency-modes", strings.Join(o.LatModes, ","), "modes measured at a steady rate")
	growth := fs.String("growth", joinInts(o.Growth), "record counts of the growth curve (empty: none)")
	fs.BoolVar(&o.ClickHouse, "clickhouse", o.ClickHouse, "measure ClickHouse (raw insert, and txsink's sink if registered)")
	formats := fs.String("formats", strings.Join(o.Formats, ","), "Schema Registry formats (avro, protobuf) whose converters are measured on the main workload's rows beside JSON; empty: none")
	scaleParts := fs.String("scale-partitions", joinInts(o.ScalePartitions), "scale rows: partition counts of one connector (empty: none)")
	scaleConns := fs.String("scale-connectors", joinInts(o.ScaleConnectors), "scale rows: connectors of 6 partitions on one worker, with start-up, SIGKILL and recovery (empty: none)")
	scaleWorkers := fs.String("scale-workers", joinInts(o.ScaleWorkers), "scale rows: workers of a cluster sharing one connector of 6 tasks (empty: none)")
	fs.IntVar(&o.ScaleRecords, "scale-records", o.ScaleRecords, "scale rows: records of a partition row, of each of a connector row's two batches (split over its connectors), and a quarter of a cluster row's")
	fs.StringVar(&o.ScaleMode, "scale-mode", o.ScaleMode, "scale rows: delivery guarantee (exactly_once needs max_prepared_transactions ≥ the partitions of one worker; rows that need more are skipped with the reason)")
	fs.BoolVar(&o.ScaleOnly, "scale-only", false, "run only the scale rows (skip throughput, formats, CDC, profile, latency, ClickHouse and growth)")
	fs.StringVar(&o.Out, "out", "", "output directory (default bench/results/<profile>)")
	fs.StringVar(&o.Repo, "repo", "", "repository root (default: found from the working directory)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "overall budget; remaining steps are skipped with the reason once it is spent")
	fs.BoolVar(&o.Charts, "charts", o.Charts, "write PNG charts")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "profile one in-process exactly_once drain of the main workload (cpu_exactly_once.pprof)")
	set := fs.String("set", "", "connector settings added to every txsink run, k=v,k=v (e.g. batch.max.records=50000)")
	render := fs.String("render", "", "only re-render results.md and the charts from DIR/results.json, measuring nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *render != "" {
		if err := rerender(*render); err != nil {
			fmt.Fprintln(stderr, "txsink-bench:", err)
			return 1
		}
		return 0
	}
	for _, p := range []struct {
		s   string
		dst *[]int
	}{{*parts, &o.Partitions}, {*growth, &o.Growth}, {*scaleParts, &o.ScalePartitions}, {*scaleConns, &o.ScaleConnectors}, {*scaleWorkers, &o.ScaleWorkers}} {
		v, err := parseInts(p.s)
		if err != nil {
			fmt.Fprintln(stderr, "txsink-bench:", err)
			return 2
		}
		*p.dst = v
	}
	settings, err := parseSettings(*set)
	if err != nil {
		fmt.Fprintln(stderr, "txsink-bench:", err)
		return 2
	}
	o.Settings = settings
	o.Modes = splitList(*modes)
	o.Formats = splitList(*formats)
	o.LatModes = splitList(*latModes)
	o.Command = "go run ./bench/cmd/txsink-bench " + strings.Join(args, " ")
	if err := o.validate(); err != nil {
		fmt.Fprintln(stderr, "txsink-bench:", err)
		return 2
	}
	if o.Repo == "" {
		r, err := findRepo()
		if err != nil {
			fmt.Fprintln(stderr, "txsink-bench:", err)
			return 2
		}
		o.Repo = r
	}
	if o.Out == "" {
		o.Out = filepath.Join(o.Repo, "bench", "results", o.Profile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := runBench(ctx, o, stderr)
	if rep != nil {
		if werr := rep.write(o.Out); werr != nil && err == nil {
			err = werr
		}
		if o.Charts {
			if cerr := writeCharts(rep, o.Out); cerr != nil {
				fmt.Fprintln(stderr, "txsink-bench: charts:", cerr)
			}
		}
		fmt.Fprint(stdout, rep.markdown())
		fmt.Fprintf(stdout, "\nwritten to %s\n", o.Out)
	}
	if err != nil {
		fmt.Fprintln(stderr, "txsink-bench:", err)
		return 1
	}
	return 0
}

// parseSettings reads "k=v,k=v".
func parseSettings(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("-set: want key=value, got %q", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// rerender rewrites results.md and the charts of an earlier run.
func rerender(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s/results.json: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.markdown()), 0o644); err != nil {
		return err
	}
	return writeCharts(&rep, dir)
}

func (o options) validate() error {
	switch {
	case o.Records < 1:
		return fmt.Errorf("-records: must be at least 1, got %d", o.Records)
	case o.Runs < 1:
		return fmt.Errorf("-runs: must be at least 1, got %d", o.Runs)
	case len(o.Partitions) == 0:
		return errors.New("-partitions: at least one partition count is needed")
	case o.SweepFactor < 0 || o.SweepFactor > 1:
		return fmt.Errorf("-sweep-factor: must be between 0 and 1, got %g", o.SweepFactor)
	}
	if len(o.ScalePartitions)+len(o.ScaleConnectors)+len(o.ScaleWorkers) > 0 && o.ScaleRecords < 1 {
		return fmt.Errorf("-scale-records: must be at least 1, got %d", o.ScaleRecords)
	}
	for _, p := range o.ScalePartitions {
		if p > 10000 {
			return fmt.Errorf("-scale-partitions: must be at most 10000, got %d", p)
		}
	}
	for _, m := range append(append([]string{o.ScaleMode}, o.Modes...), o.LatModes...) {
		g, _ := strings.CutSuffix(m, "_serial")
		g, _ = strings.CutSuffix(g, "_nobudget")
		switch g {
		case "exactly_once", "exactly_once_sink", "at_least_once", "at_most_once":
		default:
			return fmt.Errorf("-modes/-latency-modes: unknown delivery guarantee %q (or a guarantee with the suffix _serial: rounds.max.in.flight=1; or _nobudget: a worker without memory budget)", m)
		}
	}
	for _, f := range o.Formats {
		if _, ok := formatConverters[f]; !ok {
			return fmt.Errorf("-formats: unknown format %q (want avro or protobuf)", f)
		}
	}
	for _, p := range o.Partitions {
		if p < 1 || p > 1000 {
			return fmt.Errorf("-partitions: must be between 1 and 1000, got %d", p)
		}
	}
	return nil
}

func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/txsink/txsink\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the txsink repository (use -repo)")
		}
		dir = parent
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.ParseFloat(f, 64) // accepts 1e6
		if err != nil || n < 1 || n != float64(int(n)) {
			return nil, fmt.Errorf("not a positive integer: %q", f)
		}
		out = append(out, int(n))
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

func hostInfo() HostInfo {
	return HostInfo{CPUs: runtime.NumCPU(), LoadAvgBefore: loadAvg(), GoVersion: runtime.Version()}
}
