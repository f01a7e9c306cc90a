package main

// Progress of "txsink run": a log line every -progress-interval with the
// records stored so far, the rate since the last line and the lag (as the
// status counts it, see connectors/engine/lag.go).

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/offsets"
)

// defaultProgressInterval is how often "txsink run" logs its progress.
const defaultProgressInterval = 10 * time.Second

// progressKey names a partition.
type progressKey struct {
	topic     string
	partition int32
}

// runProgress is the engine.Observer of "txsink run": it counts the
// records of committed rounds and keeps each owned partition's stored
// position.
type runProgress struct {
	mu      sync.Mutex
	records int64
	pos     map[progressKey]offsets.Position
	waiting error
}

var _ engine.Observer = (*runProgress)(nil)

func newRunProgress() *runProgress {
	return &runProgress{pos: map[progressKey]offsets.Position{}}
}

// Assigned implements engine.Observer.
func (p *runProgress) Assigned(_ int, positions []offsets.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pos := range positions {
		p.pos[progressKey{pos.Topic, pos.Partition}] = pos
	}
}

// Revoked implements engine.Observer.
func (p *runProgress) Revoked(_ int, topic string, partitions []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range partitions {
		delete(p.pos, progressKey{topic, n})
	}
}

// Round implements engine.Observer.
func (p *runProgress) Round(_ int, r engine.RoundStats) {
	if r.Outcome != "committed" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records += int64(r.Records)
	for _, pos := range r.Positions {
		p.pos[progressKey{pos.Topic, pos.Partition}] = pos
	}
	p.waiting = nil
}

// FenceConflict implements engine.Observer.
func (p *runProgress) FenceConflict(int, error) {}

// Waiting implements engine.Observer.
func (p *runProgress) Waiting(_ int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting = err
}

// snapshot returns the records so far, the positions and the error the
// tasks wait on, if any.
func (p *runProgress) snapshot() (int64, []offsets.Position, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]offsets.Position, 0, len(p.pos))
	for _, pos := range p.pos {
		out = append(out, pos)
	}
	return p.records, out, p.waiting
}

// lagFunc returns the summed lag of positions and how many were counted.
type lagFunc func(ctx context.Context, positions []offsets.Position) (int64, int)

// logProgress logs a progress line every interval until ctx ends.
func logProgress(ctx context.Context, log *slog.Logger, p *runProgress, lag lagFunc, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last, lastAt := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			records, pos, waiting := p.snapshot()
			rate := float64(records-last) / now.Sub(lastAt).Seconds()
			last, lastAt = records, now
			attrs := []any{"records", records, "rate_per_s", int64(rate + 0.5), "partitions", len(pos)}
			lctx, cancel := context.WithTimeout(ctx, min(interval, 5*time.Second))
			n, known := lag(lctx, pos)
			cancel()
			switch {
			case known == len(pos) && len(pos) > 0:
				attrs = append(attrs, "lag", n)
			case known > 0:
				attrs = append(attrs, "lag", n, "lag_partitions_unknown", len(pos)-known)
			default:
				attrs = append(attrs, "lag", "unknown")
			}
			if waiting != nil && !errors.Is(waiting, context.Canceled) {
				attrs = append(attrs, "waiting", waiting.Error())
			}
			log.Info("progress", attrs...)
		}
	}
}
