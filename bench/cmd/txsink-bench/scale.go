package main

// The scale rows (issue 29, item 5): how cost grows with the partitions of
// one connector, with the connectors of one worker, and with the workers
// of a cluster sharing one connector. See bench/README.md.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/integration/harness"
)

// Scale holds the scale rows.
type Scale struct {
	Mode string `json:"mode"`
	// Records is the records of a partition row, of a cluster row, and
	// of each batch of a connector row (split evenly over its
	// connectors).
	Records    int                   `json:"records"`
	Partitions []*Row                `json:"partitions"`
	Connectors []*ScaleConnectorsRow `json:"connectors"`
	Workers    []*ScaleWorkersRow    `json:"workers"`
	// MaxPrepared and MaxConnections are the scale rows' PostgreSQL's
	// max_prepared_transactions and max_connections (scalepg.go).
	MaxPrepared    int `json:"max_prepared_transactions,omitempty"`
	MaxConnections int `json:"max_connections,omitempty"`
	// Server, when set, says the rows ran on another server, and why.
	Server string `json:"server,omitempty"`
}

// ScaleConnectorsRow is one worker ("txsink serve", standalone) running
// Connectors connectors of 6 partitions each, created through the REST
// API, each on a topic and a table of its own.
type ScaleConnectorsRow struct {
	Connectors int `json:"connectors"`
	Partitions int `json:"partitions_each"`
	// Records is each batch's records over all connectors: batch A before
	// the connectors are created, batch B while they run (the worker is
	// killed during it).
	Records int `json:"records"`
	// UpSeconds: from the first create request to every connector's tasks
	// RUNNING (REST status) and its first committed round; RunningSeconds
	// to all RUNNING only.
	UpSeconds      float64 `json:"up_and_steady_s,omitempty"`
	RunningSeconds float64 `json:"all_running_s,omitempty"`
	// Drain of batch A over all connectors: records/s over the span from
	// the first committed round's start to the last's end.
	RPS               float64 `json:"records_per_s,omitempty"`
	DrainSeconds      float64 `json:"drain_s,omitempty"`
	MachineCPUSecPerM float64 `json:"machine_cpu_s_per_million,omitempty"`
	MachineBusy       float64 `json:"machine_busy_share,omitempty"`
	// Fence (start): per connector, from "connector running" to its
	// tasks' "partitions assigned and fenced" (group join, recovery and
	// fence bump); FenceBump: from the earliest fence bump in the offsets
	// table (the fence is the bump's time) to that line.
	AssignP50Ms    float64 `json:"assign_p50_ms,omitempty"`
	AssignMaxMs    float64 `json:"assign_max_ms,omitempty"`
	FenceBumpP50Ms float64 `json:"fence_bump_p50_ms,omitempty"`
	FenceBumpMaxMs float64 `json:"fence_bump_max_ms,omitempty"`
	// Recovery: the worker is SIGKILLed at the first committed round of
	// batch B and started again at once (same data directory and worker
	// id). RecoveredSeconds: from the SIGKILL to every connector's first
	// committed round after the restart; CaughtUpSeconds: to every
	// partition's stored offset at its end (all of A and B written).
	RecoveredSeconds float64 `json:"recovered_s,omitempty"`
	CaughtUpSeconds  float64 `json:"caught_up_s,omitempty"`
	// The fence figures of the restarted worker.
	RecAssignP50Ms    float64 `json:"recovery_assign_p50_ms,omitempty"`
	RecAssignMaxMs    float64 `json:"recovery_assign_max_ms,omitempty"`
	RecFenceBumpP50Ms float64 `json:"recovery_fence_bump_p50_ms,omitempty"`
	RecFenceBumpMaxMs float64 `json:"recovery_fence_bump_max_ms,omitempty"`
	// PeakRSSMB is the larger VmHWM of the two incarnations; per
	// connector, divided by Connectors.
	PeakRSSMB         float64 `json:"peak_rss_mb,omitempty"`
	RSSPerConnectorMB float64 `json:"rss_per_connector_mb,omitempty"`
	CPUSecPerM        float64 `json:"cpu_s_per_million,omitempty"`
	// PeakDBConnections is the most client connections the database
	// had during the row (pg_stat_activity, every 250 ms).
	PeakDBConnections int    `json:"peak_db_connections,omitempty"`
	Limit             string `json:"limit,omitempty"`
	Skipped           string `json:"skipped,omitempty"`
}

// ScaleWorkersRow is Workers "txsink serve" workers in distributed mode
// sharing one connector of Tasks tasks on a topic of 6 partitions.
type ScaleWorkersRow struct {
	Workers int   `json:"workers"`
	Tasks   int   `json:"tasks"`
	Records int   `json:"records"`
	Runs    []Run `json:"runs"`
	// TasksPerWorker is how the tasks were spread (the last run).
	TasksPerWorker    []int   `json:"tasks_per_worker,omitempty"`
	MedianRPS         float64 `json:"median_records_per_s,omitempty"`
	RatioOne          float64 `json:"ratio_to_one_worker,omitempty"`
	CPUSecPerM        float64 `json:"cpu_s_per_million,omitempty"`
	MachineCPUSecPerM float64 `json:"machine_cpu_s_per_million,omitempty"`
	MachineBusy       float64 `json:"machine_busy_share,omitempty"`
	PeakRSSMB         float64 `json:"peak_rss_mb_per_worker,omitempty"`
	Limit             string  `json:"limit,omitempty"`
	Skipped           string  `json:"skipped,omitempty"`
}

// scale runs the scale rows the options ask for.
func (b *bench) scale(ctx context.Context) error {
	o := b.o
	if len(o.ScalePartitions)+len(o.ScaleConnectors)+len(o.ScaleWorkers) == 0 {
		return nil
	}
	sc := &Scale{Mode: o.ScaleMode, Records: o.ScaleRecords}
	b.rep.Scale = sc
	b.logf("scale rows: starting their PostgreSQL (max_connections=%d, max_prepared_transactions=%d)", scaleMaxConnections, scaleMaxPrepared)
	db, err := b.startScalePostgres(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// Services given by address and no Docker engine: the harness's
		// database, whose limits skip or fail the rows beyond them.
		b.logf("scale rows: %v; using the harness's database", err)
		db = &scaleDB{url: b.dbURL, pool: b.pool}
		var mp, mc string
		if err := b.pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions'), current_setting('max_connections')").Scan(&mp, &mc); err != nil {
			return err
		}
		_, _ = fmt.Sscan(mp, &db.maxPrepared)
		_, _ = fmt.Sscan(mc, &sc.MaxConnections)
		sc.Server = "the harness's PostgreSQL: the scale rows' own could not start (" + oneLine(err.Error()) + ")"
	} else {
		sc.MaxConnections = scaleMaxConnections
	}
	b.sdb = db
	sc.MaxPrepared = db.maxPrepared
	for _, p := range o.ScalePartitions {
		r, err := b.scalePartitions(ctx, p)
		if err != nil {
			return err
		}
		sc.Partitions = append(sc.Partitions, r)
	}
	var six *Row
	for _, r := range sc.Partitions {
		if r.Partitions == 6 && r.MedianRPS > 0 {
			six = r
		}
	}
	for _, r := range sc.Partitions {
		if six != nil && r.MedianRPS > 0 {
			r.RatioCeiling = r.MedianRPS / six.MedianRPS
			if r != six && six.MachineCPUSecPerM > 0 && r.MachineCPUSecPerM > 0 {
				r.Note += fmt.Sprintf("; machine CPU per record %.2f× the 6-partition row's", r.MachineCPUSecPerM/six.MachineCPUSecPerM)
			}
		}
	}
	for _, k := range o.ScaleConnectors {
		r, err := b.scaleConnectors(ctx, k)
		if err != nil {
			return err
		}
		sc.Connectors = append(sc.Connectors, r)
	}
	for _, w := range o.ScaleWorkers {
		r, err := b.scaleCluster(ctx, w)
		if err != nil {
			return err
		}
		sc.Workers = append(sc.Workers, r)
	}
	var one float64
	for _, r := range sc.Workers {
		if r.Workers == 1 {
			one = r.MedianRPS
		}
	}
	for _, r := range sc.Workers {
		if one > 0 && r.MedianRPS > 0 {
			r.RatioOne = r.MedianRPS / one
		}
	}
	return nil
}

// preparedFits reports why the scale mode cannot run partitions partitions
// on one worker, or "": exactly_once prepares one transaction per partition
// batch of a round, and PostgreSQL refuses more than
// max_prepared_transactions at once (the task then waits and retries
// without end).
func (b *bench) preparedFits(partitions int) string {
	g, _ := strings.CutSuffix(b.o.ScaleMode, "_serial")
	if g != "exactly_once" || b.rep.Scale.MaxPrepared == 0 || partitions <= b.rep.Scale.MaxPrepared {
		return ""
	}
	return fmt.Sprintf("not run: %s prepares a PostgreSQL transaction per partition batch of a round; %d partitions on one worker need max_prepared_transactions ≥ %d, the bench's server has %d (integration/harness)",
		b.o.ScaleMode, partitions, partitions, b.rep.Scale.MaxPrepared)
}

// busyShare is the machine's busy share over a span: busy CPU seconds over
// the span's seconds times the cores.
func busyShare(busySeconds, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return busySeconds / (seconds * float64(runtime.NumCPU()))
}

// limitOf names the limit a row hit from what it measured: the machine's
// CPU when it was nearly all busy, else where the drain waited.
func limitOf(busy, inRounds float64, ph map[string]Quantiles) string {
	switch {
	case busy >= 0.85:
		return fmt.Sprintf("machine CPU: %.0f %% of %d cores busy", busy*100, runtime.NumCPU())
	case busy > 0:
		s := fmt.Sprintf("not the CPU (%.0f %% of %d cores busy)", busy*100, runtime.NumCPU())
		if inRounds > 0 {
			s += fmt.Sprintf(": %.0f %% of the drain inside rounds", inRounds*100)
		}
		if q, ok := ph["total"]; ok {
			s += fmt.Sprintf(", a round %.0f ms at p50 (%s)", q.P50, fmtPhases(ph))
		}
		return s
	}
	return ""
}

// scalePartitions drains ScaleRecords records of one topic of partitions
// partitions with one connector ("txsink run", one task), -runs times.
func (b *bench) scalePartitions(ctx context.Context, partitions int) (*Row, error) {
	n := b.o.ScaleRecords
	r := &Row{System: "txsink-scale", Mode: b.o.ScaleMode, Workload: fmt.Sprintf("100B×%dp", partitions), ValueBytes: 100, Partitions: partitions, Records: n}
	if why := b.preparedFits(partitions); why != "" {
		r.Skipped = why
		return r, nil
	}
	// Pre-load at ~100k/s (~15k/s over hundreds of partitions), then per
	// run start-up and a drain at ~100k/s.
	load := 100_000.0
	if partitions >= 500 {
		load = 15_000
	}
	need := time.Duration((float64(n)/load+float64(b.o.Runs)*(float64(n)/100_000+8))*float64(time.Second)) + 20*time.Second
	if reason := b.budgetLeft(need); reason != "" {
		r.Skipped = reason
		return r, nil
	}
	w, err := b.loadWorkload(ctx, 100, partitions, n, false)
	if err != nil {
		return nil, err
	}
	var rounds []roundLine
	var fence []float64
	for run := 0; run < b.o.Runs; run++ {
		res, rs, f, err := b.runScaleDrain(ctx, w)
		if err != nil {
			r.Skipped = "failed: " + oneLine(err.Error())
			b.logf("scale %d partitions: %v", partitions, err)
			return r, nil
		}
		r.Runs = append(r.Runs, res)
		rounds = append(rounds, rs...)
		fence = append(fence, f)
		b.logf("scale %d partitions run %d: %.0f rec/s, %.1f CPU s, %.0f MB, fence bump %.0f ms", partitions, run+1, res.RPS, res.CPUSeconds, res.PeakRSSMB, f)
	}
	r.finish()
	r.Phases = phases(rounds)
	r.Rounds = len(rounds)
	var busy []float64
	for _, run := range r.Runs {
		busy = append(busy, run.BusyShare)
	}
	p50, mx := quantilesOf(fence)
	r.Note = limitOf(median(busy), r.InRoundShare, r.Phases)
	var batches, ahead []float64
	for _, rl := range rounds {
		if rl.Outcome == "committed" {
			batches = append(batches, float64(rl.Batches))
			ahead = append(ahead, float64(rl.WrittenAhead))
		}
	}
	r.Note += fmt.Sprintf("; %.0f partition batches per round (median), %.0f of them written ahead", median(batches), median(ahead))
	if p50 > 0 {
		r.Note += fmt.Sprintf("; fence bump %.0f ms (max %.0f)", p50, mx)
	}
	return r, nil
}

// runScaleDrain is runTxsink in the scale mode, also returning the fence
// bump of the task's partitions in milliseconds.
func (b *bench) runScaleDrain(ctx context.Context, w *workload) (Run, []roundLine, float64, error) {
	name := b.name("scale")
	if err := createRowTable(ctx, b.sdb.pool, name); err != nil {
		return Run{}, nil, 0, err
	}
	defer dropTable(context.WithoutCancel(ctx), b.sdb.pool, name)
	settings := modeSettings(b.o.ScaleMode)
	settings["connector.class"] = "postgres"
	settings["connection.url"] = b.sdb.url
	var fence float64
	var assigned time.Time
	run, rounds, err := b.drainWith(ctx, w, name, settings, nil, func(p *process) {
		f := p.fence()
		if !f.firstBump.IsZero() {
			fence = float64(f.at.Sub(f.firstBump)) / 1e6
		}
		assigned = f.at
	})
	if err != nil {
		return Run{}, rounds, 0, err
	}
	// The machine's busy CPU is sampled from the assignment to the last
	// committed round: its busy share is over that span.
	var last time.Time
	for _, rl := range rounds {
		last = later(last, rl.Time)
	}
	if !assigned.IsZero() && last.After(assigned) {
		run.BusyShare = busyShare(run.MachineCPUSeconds, last.Sub(assigned).Seconds())
	}
	if err := checkRows(ctx, b.sdb.pool, name, w.Records); err != nil {
		return Run{}, rounds, 0, err
	}
	return run, rounds, fence, nil
}

// scaleNames are the topics, tables and connector names of a row of k
// connectors.
func (b *bench) scaleNames(kind string, k int) (topics, tables, conns []string) {
	prefix := b.name(kind)
	for i := 0; i < k; i++ {
		t := fmt.Sprintf("%s_%03d", prefix, i)
		topics = append(topics, t)
		tables = append(tables, t)
		conns = append(conns, strings.ReplaceAll(t, "_", "-"))
	}
	return
}

// scaleConnectors runs k connectors of 6 partitions on one standalone
// worker: start-up to steady state, a drain, SIGKILL and recovery.
func (b *bench) scaleConnectors(ctx context.Context, k int) (*ScaleConnectorsRow, error) {
	const parts = 6
	per := max(b.o.ScaleRecords/k, 1)
	r := &ScaleConnectorsRow{Connectors: k, Partitions: parts, Records: per * k}
	if why := b.preparedFits(k * parts); why != "" {
		r.Skipped = why
		return r, nil
	}
	// Two batches pre-loaded and drained at ~100k/s, creating the
	// connectors, and a recovery of at least the session timeout.
	need := time.Duration((4*float64(r.Records)/100_000+float64(k)*0.3+40)*float64(time.Second)) + 20*time.Second
	if reason := b.budgetLeft(need); reason != "" {
		r.Skipped = reason
		return r, nil
	}
	fail := func(err error) (*ScaleConnectorsRow, error) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.Skipped = "failed: " + oneLine(err.Error())
		b.logf("scale %d connectors: %v", k, err)
		return r, nil
	}
	topics, tables, conns := b.scaleNames(fmt.Sprintf("sc%d", k), k)
	if err := createTopics(ctx, b.bootstrap, topics, parts); err != nil {
		return nil, err
	}
	for _, t := range tables {
		if err := createRowTable(ctx, b.sdb.pool, t); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, t := range tables {
			_ = dropTable(context.WithoutCancel(ctx), b.sdb.pool, t)
		}
	}()
	start := time.Now()
	if _, err := preloadTopics(ctx, b.bootstrap, topics, 1, per, parts); err != nil {
		return nil, err
	}
	b.logf("scale %d connectors: pre-loaded %d records each in %.1f s", k, per, time.Since(start).Seconds())

	dir, err := os.MkdirTemp(b.tmp, "serve-")
	if err != nil {
		return nil, err
	}
	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-bootstrap", b.bootstrap, "-worker-id", "bench-" + conns[0], "-data-dir", filepath.Join(dir, "data")}
	w1, err := startServe(b.bin, url, args, nil)
	if err != nil {
		return nil, err
	}
	alive := w1
	defer func() {
		if alive != nil && !alive.exited() {
			alive.kill()
		}
	}()
	if err := w1.waitHealthy(ctx, time.Minute); err != nil {
		return fail(err)
	}

	conns0 := b.sdb.sampleConns(ctx)
	defer func() {
		if conns0 != nil {
			conns0.stop()
		}
	}()
	// Up and steady.
	busy0 := machineBusy()
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(10) // a client creating many connectors at once
	for i, name := range conns {
		cfg := modeSettings(b.o.ScaleMode)
		for k, v := range map[string]string{"connector.class": "postgres", "connection.url": b.sdb.url, "topics": topics[i], "table.name.format": tables[i]} {
			cfg[k] = v
		}
		for k, v := range b.o.Settings {
			cfg[k] = v
		}
		g.Go(func() error { return w1.createConnector(gctx, name, cfg, "") })
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	createdIn := time.Since(t0)
	var runningAt time.Time
	var lastState string
	upTimeout := 90*time.Second + time.Duration(k)*500*time.Millisecond
	var polled time.Time
	err = w1.waitFor(ctx, upTimeout, "connectors up", func() bool {
		if runningAt.IsZero() && time.Since(polled) >= 200*time.Millisecond {
			polled = time.Now()
			st, err := w1.statuses(ctx)
			if err != nil {
				lastState = err.Error()
				return false
			}
			ok, why := allInState(st, conns, "RUNNING")
			if !ok {
				lastState = why
				return false
			}
			runningAt = time.Now()
		}
		if runningAt.IsZero() {
			return false
		}
		return w1.allCommitted(conns)
	})
	if err != nil {
		return fail(fmt.Errorf("%w (last status: %s)", err, lastState))
	}
	var upAt time.Time
	w1.view(func(m map[string]*connLog) {
		for _, n := range conns {
			if c := m[n]; c.firstCommit.After(upAt) {
				upAt = c.firstCommit
			}
		}
	})
	upAt = later(upAt, runningAt)
	r.UpSeconds, r.RunningSeconds = upAt.Sub(t0).Seconds(), runningAt.Sub(t0).Seconds()
	b.logf("scale %d connectors: created in %.1f s, all RUNNING after %.1f s, up and steady after %.1f s", k, createdIn.Seconds(), r.RunningSeconds, r.UpSeconds)

	// The drain of batch A.
	err = w1.waitFor(ctx, b.drainTimeout(r.Records, 2000), "drain", func() bool {
		done := true
		w1.view(func(m map[string]*connLog) {
			for _, n := range conns {
				if c := m[n]; c == nil || c.committed < per {
					done = false
					return
				}
			}
		})
		return done
	})
	if err != nil {
		return fail(err)
	}
	var rounds []roundLine
	var assign, bump []float64
	w1.view(func(m map[string]*connLog) {
		for _, n := range conns {
			c := m[n]
			rounds = append(rounds, c.rounds...)
			a, f := fenceTimes(c)
			assign, bump = append(assign, a...), append(bump, f...)
		}
		if w1.busyLast > busy0 {
			r.MachineCPUSecPerM = (w1.busyLast - busy0) / float64(r.Records) * 1e6
			r.MachineBusy = busyShare(w1.busyLast-busy0, w1.lastCommit.Sub(t0).Seconds())
		}
	})
	d := drainWindow(rounds)
	r.DrainSeconds = d.Seconds()
	r.RPS = float64(r.Records) / d.Seconds()
	r.AssignP50Ms, r.AssignMaxMs = quantilesOf(assign)
	r.FenceBumpP50Ms, r.FenceBumpMaxMs = quantilesOf(bump)
	b.logf("scale %d connectors: drained %d records at %.0f rec/s; assignment p50 %.0f ms, fence bump p50 %.0f ms", k, r.Records, r.RPS, r.AssignP50Ms, r.FenceBumpP50Ms)

	// Batch B, and a SIGKILL at its first committed round.
	preB := make(chan error, 1)
	go func() {
		_, err := preloadTopics(ctx, b.bootstrap, topics, per+1, 2*per, parts)
		preB <- err
	}()
	total := func(p *serveProc) int {
		s := 0
		p.view(func(m map[string]*connLog) {
			for _, c := range m {
				s += c.committed
			}
		})
		return s
	}
	if err := w1.waitFor(ctx, 5*time.Minute, "a round of batch B", func() bool { return total(w1) > r.Records }); err != nil {
		<-preB
		return fail(err)
	}
	u1 := w1.kill()
	killAt := time.Now()
	w2, err := startServe(b.bin, url, args, nil)
	if err != nil {
		<-preB
		return nil, err
	}
	alive = w2
	b.logf("scale %d connectors: SIGKILL at the first round of batch B, restarted", k)
	// Batch C, produced once B is, so that every connector has records
	// to write after the restart (B may be written whole before the
	// kill).
	if err := <-preB; err != nil {
		return nil, err
	}
	extra := max(per/10, parts)
	if _, err := preloadTopics(ctx, b.bootstrap, topics, 2*per+1, 2*per+extra, parts); err != nil {
		return nil, err
	}
	err = w2.waitFor(ctx, 3*time.Minute+time.Duration(k)*time.Second, "recovery", func() bool {
		return w2.allCommitted(conns)
	})
	if err != nil {
		return fail(err)
	}
	var recAt time.Time
	assign, bump = nil, nil
	w2.view(func(m map[string]*connLog) {
		for _, n := range conns {
			c := m[n]
			recAt = later(recAt, c.firstCommit)
			a, f := fenceTimes(c)
			assign, bump = append(assign, a...), append(bump, f...)
		}
	})
	r.RecoveredSeconds = recAt.Sub(killAt).Seconds()
	r.RecAssignP50Ms, r.RecAssignMaxMs = quantilesOf(assign)
	r.RecFenceBumpP50Ms, r.RecFenceBumpMaxMs = quantilesOf(bump)
	ends, err := endOffsets(ctx, b.bootstrap, topics)
	if err != nil {
		return nil, err
	}
	caught := false
	err = w2.waitFor(ctx, b.drainTimeout(r.Records, 2000), "catching up", func() bool {
		if !caught {
			caught, _ = b.offsetsAtEnds(ctx, conns, topics, ends)
		}
		return caught
	})
	if err != nil {
		return fail(err)
	}
	r.CaughtUpSeconds = time.Since(killAt).Seconds()
	u2 := w2.stop()
	alive = nil
	for i, t := range tables {
		if err := checkRows(ctx, b.sdb.pool, t, 2*per+extra); err != nil {
			return fail(fmt.Errorf("connector %s: %w", conns[i], err))
		}
	}
	r.PeakDBConnections = conns0.stop()
	conns0 = nil
	r.PeakRSSMB = max(u1.PeakRSSMB, u2.PeakRSSMB)
	r.RSSPerConnectorMB = r.PeakRSSMB / float64(k)
	r.CPUSecPerM = (u1.CPUSeconds + u2.CPUSeconds) / float64(k*(2*per+extra)) * 1e6
	r.Limit = limitOf(r.MachineBusy, 0, phases(rounds))
	b.logf("scale %d connectors: recovered %.1f s after the SIGKILL, caught up after %.1f s; peak RSS %.0f MB (%.1f MB per connector)",
		k, r.RecoveredSeconds, r.CaughtUpSeconds, r.PeakRSSMB, r.RSSPerConnectorMB)
	return r, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// fenceTimes returns, for the connector's first "partitions assigned and
// fenced" line, the time from "connector running" to it and from its
// earliest fence bump to it, in milliseconds.
func fenceTimes(c *connLog) (assign, bump []float64) {
	if len(c.fences) == 0 {
		return nil, nil
	}
	f := c.fences[0]
	if !c.running.IsZero() {
		assign = append(assign, float64(f.at.Sub(c.running))/1e6)
	}
	if !f.firstBump.IsZero() {
		bump = append(bump, float64(f.at.Sub(f.firstBump))/1e6)
	}
	return
}

// offsetsAtEnds reports whether every partition of the connectors' topics
// has its stored next offset at the end (connector i reads topic i).
func (b *bench) offsetsAtEnds(ctx context.Context, conns, topics []string, ends map[string]map[int32]int64) (bool, error) {
	rows, err := b.sdb.pool.Query(ctx, `SELECT connector, topic, partition, coalesce(next_offset, -1) FROM txsink_offsets WHERE connector = ANY($1)`, conns)
	if err != nil {
		return false, err
	}
	got := map[string]map[int32]int64{}
	for rows.Next() {
		var c, t string
		var p int32
		var next int64
		if err := rows.Scan(&c, &t, &p, &next); err != nil {
			return false, err
		}
		if got[t] == nil {
			got[t] = map[int32]int64{}
		}
		got[t][p] = next
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, t := range topics {
		for p, end := range ends[t] {
			if got[t][p] < end {
				return false, nil
			}
		}
	}
	return true, nil
}

// scaleCluster runs workers "txsink serve" workers in distributed mode and
// one connector of 6 tasks on a 6-partition topic: created paused, resumed
// once its tasks are spread and their partitions fenced, then drained;
// -runs times on the same workers, a fresh connector each time.
func (b *bench) scaleCluster(ctx context.Context, workers int) (*ScaleWorkersRow, error) {
	const parts, tasks = 6, 6
	// Six tasks drain in parallel: four times the records keep the drain
	// long enough to time.
	n := 4 * b.o.ScaleRecords
	r := &ScaleWorkersRow{Workers: workers, Tasks: tasks, Records: n}
	if why := b.preparedFits(parts); why != "" {
		r.Skipped = why
		return r, nil
	}
	need := time.Duration((float64(n)/100_000+float64(workers)*5+float64(b.o.Runs)*(float64(n)/100_000+15))*float64(time.Second)) + 20*time.Second
	if reason := b.budgetLeft(need); reason != "" {
		r.Skipped = reason
		return r, nil
	}
	fail := func(err error) (*ScaleWorkersRow, error) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.Skipped = "failed: " + oneLine(err.Error())
		b.logf("scale %d workers: %v", workers, err)
		return r, nil
	}
	w, err := b.loadWorkload(ctx, 100, parts, n, false)
	if err != nil {
		return nil, err
	}
	group := b.name(fmt.Sprintf("cluster%d", workers))
	props := fmt.Sprintf("group.id=%s\nconfig.storage.topic=%s-configs\nstatus.storage.topic=%s-status\n"+
		"config.storage.replication.factor=1\nstatus.storage.replication.factor=1\nstatus.storage.partitions=3\n"+
		"config.providers=env\n", group, group, group)
	file := filepath.Join(b.tmp, group+".properties")
	if err := os.WriteFile(file, []byte(props), 0o600); err != nil {
		return nil, err
	}
	// A password inside connection.url is refused in distributed mode
	// (configurations live in Kafka): the workers resolve it from their
	// environment.
	env := []string{"BENCH_PG_URL=" + b.sdb.url}
	var procs []*serveProc
	defer func() {
		for _, p := range procs {
			if !p.exited() {
				p.kill()
			}
		}
	}()
	for i := 0; i < workers; i++ {
		port, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		p, err := startServe(b.bin, url, []string{"-config", file, "-listen", fmt.Sprintf("127.0.0.1:%d", port), "-bootstrap", b.bootstrap}, env)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.waitHealthy(ctx, 2*time.Minute); err != nil {
			return fail(err)
		}
	}
	var rounds []roundLine
	for run := 0; run < b.o.Runs; run++ {
		res, rs, spread, err := b.clusterDrain(ctx, procs, w, tasks)
		if err != nil {
			return fail(err)
		}
		r.Runs = append(r.Runs, res)
		r.TasksPerWorker = spread
		rounds = append(rounds, rs...)
		b.logf("scale %d workers run %d: %.0f rec/s, tasks per worker %v", workers, run+1, res.RPS, spread)
	}
	var cpu float64
	for _, p := range procs {
		u := p.stop()
		cpu += u.CPUSeconds
		r.PeakRSSMB = max(r.PeakRSSMB, u.PeakRSSMB)
	}
	var rps, mcpu, busy []float64
	for _, run := range r.Runs {
		rps = append(rps, run.RPS)
		if run.MachineCPUSeconds > 0 {
			mcpu = append(mcpu, run.MachineCPUSeconds/float64(n)*1e6)
			busy = append(busy, run.BusyShare)
		}
	}
	r.MedianRPS, r.MachineCPUSecPerM, r.MachineBusy = median(rps), median(mcpu), median(busy)
	r.CPUSecPerM = cpu / float64(n*len(r.Runs)) * 1e6
	var share []float64
	for _, run := range r.Runs {
		share = append(share, run.InRoundShare)
	}
	r.Limit = limitOf(r.MachineBusy, median(share), phases(rounds))
	return r, nil
}

// clusterDrain creates a paused connector of tasks tasks on the cluster,
// waits until its tasks are spread over every worker and all partitions
// are fenced, resumes it and waits until w is drained; it returns the run
// and the tasks per worker.
func (b *bench) clusterDrain(ctx context.Context, procs []*serveProc, w *workload, tasks int) (Run, []roundLine, []int, error) {
	table := b.name("cluster")
	name := strings.ReplaceAll(table, "_", "-")
	if err := createRowTable(ctx, b.sdb.pool, table); err != nil {
		return Run{}, nil, nil, err
	}
	defer dropTable(context.WithoutCancel(ctx), b.sdb.pool, table)
	cfg := modeSettings(b.o.ScaleMode)
	for k, v := range map[string]string{"connector.class": "postgres", "connection.url": "${env:BENCH_PG_URL}", "topics": w.Topic,
		"table.name.format": table, "tasks.max": fmt.Sprint(tasks)} {
		cfg[k] = v
	}
	for k, v := range b.o.Settings {
		cfg[k] = v
	}
	if err := procs[0].createConnector(ctx, name, cfg, "PAUSED"); err != nil {
		return Run{}, nil, nil, err
	}
	// Spread and fenced: every worker runs a task, all tasks are PAUSED
	// (started), and the partitions fenced add up to the topic's, with no
	// new assignment for a second.
	ids := map[string]int{}
	for i, p := range procs {
		ids[strings.TrimPrefix(p.url, "http://")] = i
	}
	var spread []int
	var lastFence time.Time
	var state string
	settled := func() bool {
		st, err := procs[0].statuses(ctx)
		if err != nil {
			state = err.Error()
			return false
		}
		ts := st[name]
		if len(ts) != tasks {
			state = fmt.Sprintf("%d tasks", len(ts))
			return false
		}
		spread = make([]int, len(procs))
		for _, t := range ts {
			i, ok := ids[t.WorkerID]
			if !ok || t.State != "PAUSED" {
				state = fmt.Sprintf("task %d %s on %q", t.ID, t.State, t.WorkerID)
				return false
			}
			spread[i]++
		}
		for i, c := range spread {
			if c == 0 {
				state = fmt.Sprintf("worker %d runs no task", i)
				return false
			}
		}
		// The partitions the tasks own where the status says they run,
		// unchanged for a second.
		owned := map[int32]bool{}
		var last time.Time
		for _, t := range ts {
			procs[ids[t.WorkerID]].view(func(m map[string]*connLog) {
				if c := m[name]; c != nil {
					for p := range c.owned[t.ID] {
						owned[p] = true
					}
					last = later(last, c.lastChange)
				}
			})
		}
		if len(owned) < w.Partitions {
			state = fmt.Sprintf("%d of %d partitions fenced", len(owned), w.Partitions)
			return false
		}
		if !last.Equal(lastFence) {
			lastFence = last
			return false
		}
		return time.Since(last) > time.Second
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !settled() {
		if time.Now().After(deadline) {
			return Run{}, nil, nil, fmt.Errorf("connector %s not spread and fenced after 2 min: %s", name, state)
		}
		select {
		case <-ctx.Done():
			return Run{}, nil, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	// Nor does it poll: records polled before the resume would be
	// drained without their fetch in the window.
	polled := 0.0
	for _, p := range procs {
		v, err := p.counter(ctx, "txsink_records_consumed_total", name)
		if err != nil {
			return Run{}, nil, nil, err
		}
		polled += v
	}
	if polled > 0 {
		return Run{}, nil, nil, fmt.Errorf("connector %s polled %.0f records while paused", name, polled)
	}
	busy0, resumed := machineBusy(), time.Now()
	code, out, err := procs[0].doRetry(ctx, http.MethodPut, "/connectors/"+name+"/resume", nil)
	if err != nil || code != http.StatusAccepted {
		return Run{}, nil, nil, fmt.Errorf("resume %s: %d %s %v", name, code, out, err)
	}
	committed := func() int {
		s := 0
		for _, p := range procs {
			p.view(func(m map[string]*connLog) {
				if c := m[name]; c != nil {
					s += c.committed
				}
			})
		}
		return s
	}
	err = procs[0].waitFor(ctx, b.drainTimeout(w.Records, 2000), "cluster drain", func() bool { return committed() >= w.Records })
	if err != nil {
		return Run{}, nil, nil, err
	}
	var rounds []roundLine
	var busyLast float64
	var lastAt time.Time
	for _, p := range procs {
		p.view(func(m map[string]*connLog) {
			if c := m[name]; c != nil {
				rounds = append(rounds, c.rounds...)
			}
			if p.lastCommit.After(lastAt) {
				lastAt, busyLast = p.lastCommit, p.busyLast
			}
		})
	}
	// A paused connector writes nothing: a round begun before the resume
	// would make the drain look faster than it was.
	early := 0
	for _, rl := range rounds {
		if rl.Outcome == "committed" && rl.Time.Add(-rl.Total).Before(resumed) {
			early += rl.Records
		}
	}
	if early > 0 {
		return Run{}, rounds, nil, fmt.Errorf("connector %s committed %d records in rounds begun before its resume", name, early)
	}
	if err := checkRows(ctx, b.sdb.pool, table, w.Records); err != nil {
		return Run{}, rounds, nil, err
	}
	code, out, err = procs[0].doRetry(ctx, http.MethodDelete, "/connectors/"+name, nil)
	if err != nil || code >= 300 {
		return Run{}, rounds, nil, fmt.Errorf("delete %s: %d %s %v", name, code, out, err)
	}
	// The drain from the resume to the last committed round: with six
	// tasks each may drain its share in one round, and a window of
	// rounds alone would leave their first fetches out.
	run := drainRun(w.Records, rounds, usage{})
	run.InRoundShare /= float64(tasks) // the tasks' rounds overlap
	if lastAt.After(resumed) {
		run.Seconds = lastAt.Sub(resumed).Seconds()
		run.RPS = float64(w.Records) / run.Seconds
	}
	if busyLast > busy0 {
		run.MachineCPUSeconds = busyLast - busy0
		run.BusyShare = busyShare(run.MachineCPUSeconds, lastAt.Sub(resumed).Seconds())
	}
	return run, rounds, spread, nil
}

// createTopics creates topics of partitions partitions each (replication
// 1) in one request.
func createTopics(ctx context.Context, bootstrap string, topics []string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return err
	}
	defer cl.Close()
	mb := "16777216"
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(partitions), 1, map[string]*string{"max.message.bytes": &mb}, topics...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	return nil
}

// preloadTopics writes records from..to of the 100-byte workload into each
// of topics with one transactional producer, record seq into partition
// (seq-1) % partitions, the topics interleaved so that every topic grows
// in every transaction. It returns the end offsets.
func preloadTopics(ctx context.Context, bootstrap string, topics []string, from, to, partitions int) (map[string]map[int32]int64, error) {
	cl, err := preloadClient(bootstrap, fmt.Sprintf("bench-preload-%s-%d", topics[0], from))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const txnRecords = 20_000
	var mu sync.Mutex
	var perr error
	inTxn := 0
	for seq := from; seq <= to; seq++ {
		v := makeRow(int64(seq), 100).json()
		for _, t := range topics {
			if inTxn == 0 {
				if err := cl.BeginTransaction(); err != nil {
					return nil, err
				}
			}
			cl.Produce(ctx, &kgo.Record{Topic: t, Partition: int32((seq - 1) % partitions), Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					perr = err
					mu.Unlock()
				}
			})
			if inTxn++; inTxn == txnRecords {
				if err := endTxn(ctx, cl, &mu, &perr); err != nil {
					return nil, err
				}
				inTxn = 0
			}
		}
	}
	if inTxn > 0 {
		if err := endTxn(ctx, cl, &mu, &perr); err != nil {
			return nil, err
		}
	}
	return endOffsets(ctx, bootstrap, topics)
}

func endTxn(ctx context.Context, cl *kgo.Client, mu *sync.Mutex, perr *error) error {
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	err := *perr
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("pre-load: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("pre-load: commit: %w", err)
	}
	return nil
}

// endOffsets returns the offset of each partition's last record (the high
// watermark less the final commit marker), as preload does.
func endOffsets(ctx context.Context, bootstrap string, topics []string) (map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	lo, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends := map[string]map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) {
		if ends[o.Topic] == nil {
			ends[o.Topic] = map[int32]int64{}
		}
		if o.Offset > 0 {
			ends[o.Topic][o.Partition] = o.Offset - 1
		}
	})
	return ends, nil
}
