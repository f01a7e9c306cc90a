package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latency runs each latency mode at half of that mode's own maximum
// throughput on the main workload (its drain's median), or, for a mode
// whose throughput was not measured, half of exactly_once's; RateOf says
// which.
func (b *bench) latency(ctx context.Context) error {
	if b.o.LatencySecs <= 0 {
		return nil
	}
	w := b.mainWorkload
	maxOf := func(mode string) float64 {
		for _, r := range b.rep.Rows {
			if w != nil && r.Workload == w.Name && r.System == "txsink" && r.Mode == mode {
				return r.MedianRPS
			}
		}
		return 0
	}
	for _, mode := range b.o.LatModes {
		l := &Latency{Mode: mode, Workload: "100B×6p", RateOf: mode}
		b.rep.Latency = append(b.rep.Latency, l)
		maxRPS := maxOf(mode)
		if maxRPS == 0 {
			maxRPS, l.RateOf = maxOf("exactly_once"), "exactly_once"
		}
		if maxRPS == 0 && b.o.LatencyRate <= 0 {
			l.Skipped = "no throughput on the main workload to take half of"
			continue
		}
		if reason := b.budgetLeft(time.Duration(b.o.LatencySecs+30) * time.Second); reason != "" {
			l.Skipped = reason
			continue
		}
		l.TargetRate = maxRPS / 2
		if b.o.LatencyRate > 0 {
			l.TargetRate, l.RateOf = float64(b.o.LatencyRate), "-latency-rate"
		}
		if err := b.latencyRun(ctx, l, 6, time.Duration(b.o.LatencySecs)*time.Second); err != nil {
			return fmt.Errorf("latency %s: %w", mode, err)
		}
		b.logf("latency %s at %.0f rec/s: p50 %.0f ms, p95 %.0f ms, p99 %.0f ms", mode, l.OfferedRate, l.Quantiles.P50, l.Quantiles.P95, l.Quantiles.P99)
	}
	return nil
}

// produced is one record of the steady-rate producer.
type produced struct {
	offset int64
	at     time.Time
}

// observation is a stored next_offset first seen at a time.
type observation struct {
	at   time.Time
	next int64
}

// latencyRun starts txsink on an empty topic, produces at l.TargetRate in
// transactions every 50 ms for d, and measures, per record, from its
// produce timestamp to the moment its partition's stored next_offset (which
// commits in the same PostgreSQL transaction as the rows) passes it.
func (b *bench) latencyRun(ctx context.Context, l *Latency, partitions int, d time.Duration) error {
	topic := b.name("lat_" + l.Mode)
	if err := createTopic(ctx, b.bootstrap, topic, partitions); err != nil {
		return err
	}
	table := topic
	if err := createRowTable(ctx, b.pool, table); err != nil {
		return err
	}
	defer dropTable(context.WithoutCancel(ctx), b.pool, table)
	connName := "lat-" + topic
	cfg := modeSettings(l.Mode)
	cfg["name"] = connName
	cfg["connector.class"] = "postgres"
	cfg["topics"] = topic
	cfg["connection.url"] = b.dbURL
	cfg["table.name.format"] = table
	for k, v := range b.o.Settings {
		cfg[k] = v
	}
	env := splitWorkerSettings(cfg)
	path, err := writeConnectorFile(b.tmp, cfg)
	if err != nil {
		return err
	}
	p, err := startTxsink(b.bin, b.bootstrap, path, "bench-"+topic, env...)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.waitFor(ctx, 2*time.Minute, p.isAssigned); err != nil {
		return err
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.bootstrap),
		kgo.TransactionalID("bench-lat-"+topic),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	var mu sync.Mutex
	prod := map[int32][]produced{}
	obs := map[int32][]observation{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	pollDone := make(chan error, 1)
	go func() { pollDone <- b.pollOffsets(pollCtx, connName, topic, &mu, obs) }()

	start := time.Now()
	seq := 0
	tick := time.NewTicker(50 * time.Millisecond)
	for time.Since(start) < d {
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-tick.C:
		}
		want := int(l.TargetRate * time.Since(start).Seconds())
		if want <= seq {
			continue
		}
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		recs := make([]*kgo.Record, 0, want-seq)
		for ; seq < want; seq++ {
			r := makeRow(int64(seq+1), 100)
			recs = append(recs, &kgo.Record{Partition: int32(seq % partitions), Value: r.json(), Timestamp: time.Now()})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
		mu.Lock()
		for _, r := range recs {
			prod[r.Partition] = append(prod[r.Partition], produced{r.Offset, r.Timestamp})
		}
		mu.Unlock()
	}
	tick.Stop()
	elapsed := time.Since(start)
	// Wait until everything produced is visible.
	err = p.waitFor(ctx, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for part, ps := range prod {
			ob := obs[part]
			if len(ps) > 0 && (len(ob) == 0 || ob[len(ob)-1].next <= ps[len(ps)-1].offset) {
				return false
			}
		}
		return true
	})
	stopPoll()
	rounds := p.roundsSnapshot()
	if perr := <-pollDone; perr != nil && err == nil && ctx.Err() == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	var lats []time.Duration
	mu.Lock()
	for part, ps := range prod {
		ob := obs[part]
		for _, r := range ps {
			i := sort.Search(len(ob), func(i int) bool { return ob[i].next > r.offset })
			if i == len(ob) {
				mu.Unlock()
				return fmt.Errorf("partition %d offset %d never became visible", part, r.offset)
			}
			lats = append(lats, max(ob[i].at.Sub(r.at), 0))
		}
	}
	mu.Unlock()
	if err := checkRows(ctx, b.pool, table, seq); err != nil {
		return err
	}
	l.Records = seq
	l.Seconds = elapsed.Seconds()
	l.OfferedRate = float64(seq) / elapsed.Seconds()
	l.Quantiles = quantiles(lats)
	l.Phases = phases(rounds)
	var sizes []int
	for _, r := range rounds {
		if r.Outcome == "committed" {
			sizes = append(sizes, r.Records)
		}
	}
	if len(sizes) > 0 {
		slices.Sort(sizes)
		l.Rounds, l.RoundRecords = len(sizes), sizes[len(sizes)/2]
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	const points = 200
	for i := 0; i < points && len(lats) > 0; i++ {
		k := min(len(lats)-1, (i+1)*len(lats)/points)
		l.CDF = append(l.CDF, [2]float64{float64(lats[k]) / 1e6, float64(k+1) / float64(len(lats))})
	}
	return nil
}

// pollOffsets records every change of the connector's stored next offsets,
// every 5 ms.
func (b *bench) pollOffsets(ctx context.Context, connector, topic string, mu *sync.Mutex, obs map[int32][]observation) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		rows, err := b.pool.Query(ctx, `SELECT partition, next_offset FROM txsink_offsets WHERE connector = $1 AND topic = $2 AND next_offset IS NOT NULL`, connector, topic)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		mu.Lock()
		for rows.Next() {
			var p int32
			var next int64
			if err := rows.Scan(&p, &next); err != nil {
				mu.Unlock()
				rows.Close()
				return err
			}
			ob := obs[p]
			if len(ob) == 0 || ob[len(ob)-1].next != next {
				obs[p] = append(ob, observation{now, next})
			}
		}
		mu.Unlock()
		rows.Close()
		if err := rows.Err(); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
