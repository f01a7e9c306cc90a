package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txsink/txsink/internal/failpoint"
)

// PointIntentsCleanup is hit after the intents cleanup submitted its
// deletion to the server and before it records it: a crash there leaves
// the deletion running (or done) on the server.
const PointIntentsCleanup = "ch-intents-cleanup"

// cleanupPeriod is how often the background cleanup runs for a retention
// r: twice per retention, at least every second and at most every hour.
func cleanupPeriod(r time.Duration) time.Duration {
	return min(max(r/2, time.Second), time.Hour)
}

// startCleanup starts the background intents cleanup when a retention is
// set; its first run is one period after the start, so a sink opened
// briefly (to read offsets) never runs it. Close stops it.
func (s *Sink) startCleanup() {
	if s.cfg.IntentRetention <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopCleanup = func() {
		cancel()
		<-done
	}
	period := cleanupPeriod(s.cfg.IntentRetention)
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := s.CleanIntents(ctx, time.Now()); err != nil && ctx.Err() == nil {
				s.log.Warn("intents cleanup failed; it runs again later", "table", s.st.intents, "err", err)
			}
		}
	}()
}

// CleanIntents deletes the connector's intents that intents.retention.ms
// lets go, as of now, and returns how many (batch, fence) intents it asked
// the server to delete. What it deletes is resolved and needed by nobody:
//
//   - only intents prepared before now minus the retention;
//   - never one prepared at or after the oldest intent still pending (in
//     doubt): that one, and everything a redo of it measures its
//     de-duplication window with (the blocks inserted since it), stay;
//     every intent prepared earlier is resolved (done, aborted or fenced);
//   - never the latest batch of a partition (greatest prepared_at, then
//     last offset).
//
// The rows of one (batch, fence) share their prepared_at, so an intent
// goes whole, never its resolution without its pending row. The deletion
// is an ALTER TABLE … DELETE (a mutation, run by the server in the
// background); while an earlier one on the table is unfinished, the
// cleanup waits for the next period. Cancelling ctx stops it between
// statements; a mutation already submitted completes on the server.
func (s *Sink) CleanIntents(ctx context.Context, now time.Time) (int, error) {
	if s.cfg.IntentRetention <= 0 {
		return 0, nil
	}
	cut := now.Add(-s.cfg.IntentRetention).UTC().Truncate(time.Second)
	if oldest, ok, err := s.st.oldestPending(ctx, s.cfg.Connector); err != nil {
		return 0, err
	} else if ok && oldest.Before(cut) {
		cut = oldest.UTC()
	}
	latest, err := s.st.latestBatches(ctx, s.cfg.Connector)
	if err != nil {
		return 0, err
	}
	where, args := expiredWhere(s.cfg.Connector, cut, latest)
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM (SELECT 1 FROM "+s.st.intents+" WHERE "+where+
		" GROUP BY topic, `partition`, first, last, fence)", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("clickhouse: intents cleanup: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if busy, err := s.mutationRunning(ctx); err != nil || busy {
		return 0, err
	}
	if err := s.conn.Exec(ctx, "ALTER TABLE "+s.st.intents+" DELETE WHERE "+where, args...); err != nil {
		return 0, fmt.Errorf("clickhouse: intents cleanup: %w", err)
	}
	failpoint.Hit(PointIntentsCleanup)
	s.stats.cleaned.Add(n)
	s.log.Info("intents cleanup: deleting resolved intents", "intents", n, "prepared_before", cut.Format(time.RFC3339),
		"retention", s.cfg.IntentRetention.String(), "kept_latest", len(latest))
	return int(n), nil
}

// expiredWhere is the condition of the intents CleanIntents deletes:
// the connector's, prepared before cut, not one of the latest batches.
func expiredWhere(connector string, cut time.Time, latest []batchKey) (string, []any) {
	var b strings.Builder
	b.WriteString("connector = ? AND prepared_at < ?")
	args := []any{connector, cut}
	for _, k := range latest {
		b.WriteString(" AND NOT (topic = ? AND `partition` = ? AND first = ? AND last = ?)")
		args = append(args, k.Topic, k.Partition, k.First, k.Last)
	}
	return b.String(), args
}

// mutationRunning reports whether a mutation of the intents table is
// unfinished (a cleanup of this or another worker).
func (s *Sink) mutationRunning(ctx context.Context) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0",
		s.cfg.Database, s.cfg.IntentsTable).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("clickhouse: intents cleanup: system.mutations: %w", err)
	}
	return n > 0, nil
}
