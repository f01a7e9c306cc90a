package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// growth drains 100-byte, 6-partition workloads of increasing size with
// txsink exactly_once, one run each, to show the cost per record stays flat.
func (b *bench) growth(ctx context.Context) error {
	for _, n := range b.o.Growth {
		g := &Growth{Records: n}
		b.rep.Growth = append(b.rep.Growth, g)
		// Pre-load at ~150k/s plus a drain at ≥ 30k/s, plus the check.
		need := time.Duration(float64(n)/150_000*float64(time.Second)) + time.Duration(float64(n)/30_000*float64(time.Second)) + 20*time.Second
		if reason := b.budgetLeft(need); reason != "" {
			g.Skipped = reason
			continue
		}
		w := b.mainWorkload
		if w == nil || w.Records != n || w.Partitions != 6 || w.ValueBytes != 100 {
			var err error
			if w, err = b.loadWorkload(ctx, 100, 6, n, false); err != nil {
				return err
			}
		}
		run, _, err := b.runTxsink(ctx, w, "exactly_once", nil)
		if err != nil {
			return fmt.Errorf("growth %d: %w", n, err)
		}
		g.Seconds, g.RPS, g.PeakRSSMB = run.Seconds, run.RPS, run.PeakRSSMB
		g.CPUSecPerM = run.CPUSeconds / float64(n) * 1e6
		g.SecondsPerM = run.Seconds / float64(n) * 1e6
		b.logf("growth %d: %.1f s (%.0f rec/s)", n, g.Seconds, g.RPS)
	}
	// Linearity: the slope of log(time) over log(records) between the
	// smallest and largest measured points (1.0 is linear).
	var lo, hi *Growth
	for _, g := range b.rep.Growth {
		if g.Skipped != "" || g.Seconds == 0 {
			continue
		}
		if lo == nil || g.Records < lo.Records {
			lo = g
		}
		if hi == nil || g.Records > hi.Records {
			hi = g
		}
	}
	if lo != nil && hi != nil && hi.Records > lo.Records {
		slope := math.Log(hi.Seconds/lo.Seconds) / math.Log(float64(hi.Records)/float64(lo.Records))
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("growth: drain time grows as records^%.2f between %d and %d records (1.00 is linear; start-up of the first round weighs on small counts); seconds per million records %.1f → %.1f",
			slope, lo.Records, hi.Records, lo.SecondsPerM, hi.SecondsPerM))
	}
	return nil
}
