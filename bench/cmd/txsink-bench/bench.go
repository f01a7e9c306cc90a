package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/integration/harness"
)

// bench holds the services and state of one program run.
type bench struct {
	o         options
	log       io.Writer
	tb        *programTB
	bootstrap string
	dbURL     string
	pool      *pgxpool.Pool
	bin       string
	tmp       string
	peer      *peer
	peerErr   error
	deadline  time.Time
	seq       atomic.Int64
	rep       *Report
	// slowest is the slowest txsink median on the main workload (budget
	// estimates).
	slowest float64
	// mainWorkload is the 100-byte, 6-partition workload (or the first).
	mainWorkload *workload
	// formatTargets are the Avro-vs-JSON and Protobuf-vs-JSON targets,
	// when -formats measured them.
	formatTargets []Target
	// sdb is the scale rows' PostgreSQL (scalepg.go).
	sdb *scaleDB
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// name returns a unique lowercase identifier (table, connector, topic).
func (b *bench) name(kind string) string {
	return fmt.Sprintf("b%d_%s", b.seq.Add(1), strings.ReplaceAll(kind, "-", "_"))
}

// drainTimeout bounds one drain: generous, assuming at least minRate
// records/s, plus a minute of start-up.
func (b *bench) drainTimeout(n int, minRate float64) time.Duration {
	return time.Minute + time.Duration(float64(n)/minRate*float64(time.Second))
}

// budgetLeft reports whether there is time for a step expected to take
// about d; otherwise it returns the reason to skip it.
func (b *bench) budgetLeft(d time.Duration) string {
	if left := time.Until(b.deadline); left < d {
		return fmt.Sprintf("skipped: %s of the -timeout budget left, the step needs about %s", left.Round(time.Second), d.Round(time.Second))
	}
	return ""
}

func runBench(ctx context.Context, o options, log io.Writer) (*Report, error) {
	started := time.Now()
	rep := &Report{Profile: o.Profile, Command: o.Command, Started: started, Host: hostInfo()}
	b := &bench{o: o, log: log, tb: newProgramTB("bench"), rep: rep, deadline: started.Add(o.Timeout)}
	defer func() {
		rep.Seconds = time.Since(started).Seconds()
		rep.Host.LoadAvgAfter = loadAvg()
	}()
	defer b.tb.runCleanups()
	b.logf("profile %s, load average %.2f %.2f %.2f", o.Profile, rep.Host.LoadAvgBefore[0], rep.Host.LoadAvgBefore[1], rep.Host.LoadAvgBefore[2])

	var err error
	b.tmp, err = os.MkdirTemp("", "txsink-bench-")
	if err != nil {
		return rep, err
	}
	b.tb.Cleanup(func() { os.RemoveAll(b.tmp) })

	// The peer's class path resolves (Maven) while the containers start.
	peerDone := make(chan struct{})
	if o.Peer && !o.ScaleOnly {
		go func() {
			defer close(peerDone)
			b.peer, b.peerErr = preparePeer(ctx, o.Repo)
		}()
	} else {
		close(peerDone)
	}
	binDone := make(chan error, 1)
	go func() {
		var err error
		b.bin, err = buildTxsink(ctx, o.Repo, b.tmp)
		binDone <- err
	}()

	b.logf("starting Kafka and PostgreSQL (integration/harness)")
	// A broker as deployed: the image's JVM defaults, not the harness's
	// light options for test brokers.
	harness.KafkaJVMOptions = ""
	if err := catch(func() {
		k := harness.Kafka(b.tb)
		pg := harness.Postgres(b.tb)
		b.bootstrap = k.Bootstrap
		b.dbURL = pg.NewDatabase(b.tb)
	}); err != nil {
		<-peerDone
		<-binDone
		return rep, fmt.Errorf("services: %w", err)
	}
	rep.Images = []string{
		"kafka " + envOr(harness.EnvKafkaImage, harness.DefaultKafkaImage),
		"postgres " + envOr(harness.EnvPostgresImage, harness.DefaultPostgresImage),
	}
	if b.pool, err = pgxpool.New(ctx, b.dbURL); err != nil {
		return rep, err
	}
	b.tb.Cleanup(b.pool.Close)
	if err := <-binDone; err != nil {
		return rep, err
	}
	b.logf("services up (Kafka %s), txsink built", b.bootstrap)

	if !o.ScaleOnly {
		if err := b.steps(ctx, peerDone); err != nil {
			return rep, err
		}
	}
	if err := b.scale(ctx); err != nil {
		return rep, err
	}
	b.targets()
	return rep, nil
}

// steps runs every step but the scale rows.
func (b *bench) steps(ctx context.Context, peerDone <-chan struct{}) error {
	o, rep := b.o, b.rep
	specs := o.workloadSpecs()
	if err := b.throughput(ctx, specs[0], peerDone); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.System == "txsink" && r.MedianRPS > 0 && (b.slowest == 0 || r.MedianRPS < b.slowest) {
			b.slowest = r.MedianRPS
		}
	}
	if err := b.formats(ctx); err != nil {
		return err
	}
	if err := b.cdc(ctx); err != nil {
		return err
	}
	if o.Pprof {
		if err := b.profileInProcess(ctx, "exactly_once"); err != nil {
			return err
		}
	}
	if err := b.latency(ctx); err != nil {
		return err
	}
	if o.ClickHouse {
		if err := b.clickhouse(ctx); err != nil {
			return err
		}
	}
	for _, sp := range specs[1:] {
		if err := b.throughput(ctx, sp, peerDone); err != nil {
			return err
		}
	}
	if err := b.growth(ctx); err != nil {
		return err
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// loadWorkload creates and pre-loads a workload's topic(s).
func (b *bench) loadWorkload(ctx context.Context, valueBytes, partitions, n int, envelope bool) (*workload, error) {
	w := &workload{
		Name:       fmt.Sprintf("%dB×%dp", valueBytes, partitions),
		Records:    n,
		ValueBytes: valueBytes,
		Partitions: partitions,
	}
	if valueBytes >= 1000 {
		w.Name = fmt.Sprintf("%dKB×%dp", valueBytes/1000, partitions)
	}
	w.Topic = b.name(fmt.Sprintf("w%d_%d_%d", valueBytes, partitions, n))
	start := time.Now()
	if err := createTopic(ctx, b.bootstrap, w.Topic, partitions); err != nil {
		return nil, err
	}
	ends, err := preload(ctx, b.bootstrap, w.Topic, n, valueBytes, partitions, false)
	if err != nil {
		return nil, err
	}
	w.Ends = ends
	w.ProduceSeconds = time.Since(start).Seconds()
	b.logf("pre-loaded %s: %d records in %.1f s (%.0f/s)", w.Topic, n, w.ProduceSeconds, float64(n)/w.ProduceSeconds)
	if envelope {
		w.EnvelopeTopic = w.Topic + "_envelope"
		w.EnvelopeRecords = n
		if b.o.PeerRecords > 0 && b.o.PeerRecords < n {
			w.EnvelopeRecords = b.o.PeerRecords
		}
		if err := createTopic(ctx, b.bootstrap, w.EnvelopeTopic, partitions); err != nil {
			return nil, err
		}
		if w.EnvelopeEnds, err = preload(ctx, b.bootstrap, w.EnvelopeTopic, w.EnvelopeRecords, valueBytes, partitions, true); err != nil {
			return nil, err
		}
		b.logf("pre-loaded %s: the first %d records in Kafka Connect's JSON envelope", w.EnvelopeTopic, w.EnvelopeRecords)
	}
	b.rep.Workloads = append(b.rep.Workloads, w)
	return w, nil
}

// runTxsink drains w with "txsink run" in the given mode into a fresh
// table, and returns the run and its round lines.
func (b *bench) runTxsink(ctx context.Context, w *workload, mode string, extra map[string]string) (Run, []roundLine, error) {
	name := b.name(mode)
	if err := createRowTable(ctx, b.pool, name); err != nil {
		return Run{}, nil, err
	}
	defer dropTable(context.WithoutCancel(ctx), b.pool, name)
	settings := modeSettings(mode)
	settings["connector.class"] = "postgres"
	settings["connection.url"] = b.dbURL
	run, rounds, err := b.drain(ctx, w, name, settings, extra)
	if err != nil {
		return Run{}, rounds, fmt.Errorf("txsink %s on %s: %w", mode, w.Topic, err)
	}
	if err := checkRows(ctx, b.pool, name, w.Records); err != nil {
		return Run{}, rounds, fmt.Errorf("txsink %s: %w", mode, err)
	}
	return run, rounds, nil
}

// modeSettings are the connector settings of a measured mode: a delivery
// guarantee, or one with the suffix _serial (exactly_once_serial,
// exactly_once_sink_serial), which is that guarantee with
// rounds.max.in.flight=1 (one round at a time, as before pipelined
// rounds), kept as a row beside the pipelined default while both exist.
//
// The suffix _nobudget (exactly_once_nobudget, exactly_once_sink_nobudget)
// is the guarantee on a worker without a memory budget
// (memory.budget.bytes=0), the row the budget's cost is measured against.
func modeSettings(mode string) map[string]string {
	if g, ok := strings.CutSuffix(mode, "_serial"); ok {
		return map[string]string{"delivery.guarantee": g, "rounds.max.in.flight": "1"}
	}
	if g, ok := strings.CutSuffix(mode, "_nobudget"); ok {
		return map[string]string{"delivery.guarantee": g, workerSettingPrefix + "memory.budget.bytes": "0"}
	}
	return map[string]string{"delivery.guarantee": mode}
}

// workerSettingPrefix marks a setting of a run that is the worker's, not
// the connector's (-set worker:memory.budget.bytes=N): it reaches
// "txsink run" through its environment variable (TXSINK_<SETTING>).
const workerSettingPrefix = "worker:"

// splitWorkerSettings moves the worker settings out of cfg into the
// environment entries of the child.
func splitWorkerSettings(cfg map[string]string) []string {
	var env []string
	for k, v := range cfg {
		if s, ok := strings.CutPrefix(k, workerSettingPrefix); ok {
			env = append(env, config.EnvKey(s)+"="+v)
			delete(cfg, k)
		}
	}
	return env
}

// drain runs "txsink run" with a connector named after the table name
// that reads w's topic into that table, with the given settings, then
// -set's, then extra's, until all of w's records are committed; it returns
// the run's figures and round lines.
func (b *bench) drain(ctx context.Context, w *workload, name string, settings, extra map[string]string) (Run, []roundLine, error) {
	return b.drainWith(ctx, w, name, settings, extra, nil)
}

// drainWith is drain, calling seen (when not nil) with the process once
// the records are committed, before it stops.
func (b *bench) drainWith(ctx context.Context, w *workload, name string, settings, extra map[string]string, seen func(*process)) (Run, []roundLine, error) {
	cfg := map[string]string{
		"name":              strings.ReplaceAll(name, "_", "-"),
		"topics":            w.Topic,
		"table.name.format": name,
	}
	for _, m := range []map[string]string{settings, b.o.Settings, extra} {
		for k, v := range m {
			cfg[k] = v
		}
	}
	env := splitWorkerSettings(cfg)
	path, err := writeConnectorFile(b.tmp, cfg)
	if err != nil {
		return Run{}, nil, err
	}
	p, err := startTxsink(b.bin, b.bootstrap, path, "bench-"+name, env...)
	if err != nil {
		return Run{}, nil, err
	}
	err = p.waitFor(ctx, b.drainTimeout(w.Records, 2000), func() bool { return p.committedRecords() >= w.Records })
	if err == nil && seen != nil {
		seen(p)
	}
	u := p.stop()
	rounds := p.roundsSnapshot()
	if err != nil {
		return Run{}, rounds, err
	}
	return drainRun(w.Records, rounds, u), rounds, nil
}

// drainRun is a drain's figures from its round lines and the process's
// resource use.
func drainRun(records int, rounds []roundLine, u usage) Run {
	d := drainWindow(rounds)
	var inRounds time.Duration
	for _, r := range rounds {
		inRounds += r.Total
	}
	return Run{Seconds: d.Seconds(), RPS: float64(records) / d.Seconds(), CPUSeconds: u.CPUSeconds, PeakRSSMB: u.PeakRSSMB, Rounds: len(rounds),
		InRoundShare: inRounds.Seconds() / d.Seconds(), MachineCPUSeconds: u.MachineCPUSeconds}
}

// phases summarises the committed rounds' phase durations.
func phases(rounds []roundLine) map[string]Quantiles {
	var pre, dec, com, tot []time.Duration
	for _, r := range rounds {
		if r.Outcome != "committed" {
			continue
		}
		pre, dec, com, tot = append(pre, r.Prepare), append(dec, r.Decide), append(com, r.Commit), append(tot, r.Total)
	}
	out := map[string]Quantiles{}
	for k, v := range map[string][]time.Duration{"prepare": pre, "decide": dec, "commit": com, "total": tot} {
		if q := quantiles(v); q.Max > 0 {
			out[k] = q
		}
	}
	return out
}

// workloadSpec is one throughput workload.
type workloadSpec struct {
	bytes, parts, n int
	main            bool
}

// workloadSpecs lists the throughput workloads, the main one (100-byte
// values, 6 partitions, or the first count given) first.
func (o options) workloadSpecs() []workloadSpec {
	mainParts := o.Partitions[0]
	for _, p := range o.Partitions {
		if p == 6 {
			mainParts = 6
		}
	}
	specs := []workloadSpec{{100, mainParts, o.Records, true}}
	for _, p := range o.Partitions {
		if p == mainParts {
			continue
		}
		n := o.Records
		if o.SweepFactor > 0 {
			n = int(float64(o.Records) * o.SweepFactor)
		}
		specs = append(specs, workloadSpec{100, p, n, false})
	}
	if o.BigRecords > 0 {
		specs = append(specs, workloadSpec{1000, 6, o.BigRecords, false})
	}
	return specs
}

// estimate is the expected duration of measuring a workload of n records,
// from the slowest txsink rate seen so far (40k records/s before any).
func (b *bench) estimate(n int, peer bool) time.Duration {
	rate := b.slowest
	if rate == 0 {
		rate = 40_000
	}
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	perRun := sec(2*float64(n)/150_000 + float64(n)/300_000 + float64(len(b.o.Modes))*(float64(n)/rate+6))
	if peer {
		perRun += sec(float64(min(n, max(b.o.PeerRecords, 1)))/5_000 + 20)
	}
	return sec(float64(n)/100_000+5) + time.Duration(b.o.Runs)*perRun
}

// throughput measures every system on workload s, interleaving the systems
// within each run so that drift in the machine's load hits all of them
// alike. The main workload is always measured; the others only while the
// budget allows.
func (b *bench) throughput(ctx context.Context, s workloadSpec, peerDone <-chan struct{}) error {
	o := b.o
	if !s.main {
		if reason := b.budgetLeft(b.estimate(s.n, false)); reason != "" {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("workload %dB×%dp (%d records) %s", s.bytes, s.parts, s.n, reason))
			return nil
		}
	}
	{
		peerHere := s.main && o.Peer
		w, err := b.loadWorkload(ctx, s.bytes, s.parts, s.n, peerHere)
		if err != nil {
			return err
		}
		if s.main {
			b.mainWorkload = w
		}
		rows := map[string]*Row{}
		var order []string
		row := func(key, system, mode string) *Row {
			if r, ok := rows[key]; ok {
				return r
			}
			r := &Row{System: system, Mode: mode, Workload: w.Name, ValueBytes: w.ValueBytes, Partitions: w.Partitions, Records: w.Records}
			rows[key] = r
			order = append(order, key)
			return r
		}
		roundsBy := map[string][]roundLine{}
		for run := 0; run < o.Runs; run++ {
			for _, par := range []int{1, 4} {
				r := row(fmt.Sprintf("copy%d", par), "raw-copy", fmt.Sprintf("×%d", par))
				table := b.name("copy")
				d, mcpu, err := rawCopy(ctx, b.pool, table, w, 10_000, par)
				_ = dropTable(context.WithoutCancel(ctx), b.pool, table)
				if err != nil {
					return err
				}
				r.Runs = append(r.Runs, Run{Seconds: d.Seconds(), RPS: float64(w.Records) / d.Seconds(), MachineCPUSeconds: mcpu})
				b.logf("%s run %d: raw COPY ×%d %.0f rec/s", w.Name, run+1, par, float64(w.Records)/d.Seconds())
			}
			{
				r := row("consume", "raw-consume", "")
				d, mcpu, err := rawConsume(ctx, b.bootstrap, w)
				if err != nil {
					return err
				}
				r.Runs = append(r.Runs, Run{Seconds: d.Seconds(), RPS: float64(w.Records) / d.Seconds(), MachineCPUSeconds: mcpu})
				b.logf("%s run %d: raw consume %.0f rec/s", w.Name, run+1, float64(w.Records)/d.Seconds())
			}
			for _, mode := range o.Modes {
				r := row(mode, "txsink", mode)
				res, rounds, err := b.runTxsink(ctx, w, mode, nil)
				if err != nil {
					return err
				}
				r.Runs = append(r.Runs, res)
				roundsBy[mode] = append(roundsBy[mode], rounds...)
				b.logf("%s run %d: txsink %s %.0f rec/s, %.1f CPU s, %.0f MB", w.Name, run+1, mode, res.RPS, res.CPUSeconds, res.PeakRSSMB)
			}
			if peerHere {
				<-peerDone
				r := row("peer", "peer", "")
				if b.peerErr != nil {
					r.Skipped = "cannot run: " + oneLine(b.peerErr.Error())
					continue
				}
				if reason := b.budgetLeft(b.drainTimeout(w.Records, 20000)); reason != "" && run > 0 {
					r.Note = fmt.Sprintf("%d of %d runs: %s", len(r.Runs), o.Runs, reason)
					continue
				}
				res, err := b.runPeer(ctx, w)
				if w.EnvelopeRecords < w.Records {
					r.Note = fmt.Sprintf("measured on the first %d of the records (-peer-records)", w.EnvelopeRecords)
				}
				if err != nil {
					r.Skipped = "failed: " + oneLine(err.Error())
					b.logf("peer failed: %v", err)
					peerHere = false
					continue
				}
				r.Runs = append(r.Runs, res)
				b.logf("%s run %d: Kafka Connect + Debezium %.0f rec/s, %.1f CPU s, %.0f MB", w.Name, run+1, res.RPS, res.CPUSeconds, res.PeakRSSMB)
			}
		}
		if s.main && !o.Peer {
			r := row("peer", "peer", "")
			r.Skipped = "not run in this profile (-peer=false): the JVM start and Maven resolution do not fit the smoke budget; run -profile full"
		}
		var ceiling, peerRPS float64
		for _, k := range order {
			r := rows[k]
			r.finish()
			if mr, ok := roundsBy[r.Mode]; ok && r.System == "txsink" {
				r.Phases = phases(mr)
				r.Rounds = len(mr)
			}
			if r.System == "raw-copy" {
				ceiling = max(ceiling, r.MedianRPS)
			}
			if r.System == "peer" {
				peerRPS = r.MedianRPS
			}
		}
		for _, k := range order {
			r := rows[k]
			if r.Skipped != "" || r.System == "raw-consume" {
				b.rep.Rows = append(b.rep.Rows, r)
				continue
			}
			if ceiling > 0 {
				r.RatioCeiling = r.MedianRPS / ceiling
			}
			if peerRPS > 0 && r.System != "peer" {
				r.RatioPeer = r.MedianRPS / peerRPS
			}
			b.rep.Rows = append(b.rep.Rows, r)
		}
	}
	return nil
}

// oneLine folds an error into a table cell: its start and its end (where
// a process's last log lines are), cut at rune boundaries.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	r := []rune(s)
	if len(r) > 600 {
		s = string(r[:150]) + " … " + string(r[len(r)-450:])
	}
	return s
}

var errNoMain = errors.New("no main workload measured")
