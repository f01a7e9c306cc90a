package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// rawCopy writes the workload's rows straight into a fresh table with pgx
// CopyFrom, no Kafka involved: chunks of chunk rows, each COPY its own
// transaction (autocommit), parallel COPYs over as many connections. The
// rows are generated before the clock starts. It returns the elapsed time.
func rawCopy(ctx context.Context, pool *pgxpool.Pool, table string, w *workload, chunk, parallel int) (time.Duration, float64, error) {
	rows := make([][]any, w.Records)
	for i := range rows {
		r := makeRow(int64(i+1), w.ValueBytes)
		rows[i] = []any{r.ID, r.Seq, r.Body}
	}
	if err := createRowTable(ctx, pool, table); err != nil {
		return 0, 0, err
	}
	cols := []string{"id", "seq", "body"}
	busy := machineBusy()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for lo := 0; lo < len(rows); lo += chunk {
		part := rows[lo:min(lo+chunk, len(rows))]
		g.Go(func() error {
			_, err := pool.CopyFrom(gctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(part))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, fmt.Errorf("raw COPY: %w", err)
	}
	return time.Since(start), machineBusy() - busy, nil
}

// rawConsume drains the workload's topic with a franz-go read_committed
// consumer (no group, no sink) and returns the time from the first poll to
// the last record.
func rawConsume(ctx context.Context, bootstrap string, w *workload) (time.Duration, float64, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumeTopics(w.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(32<<20),
	)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	busy := machineBusy()
	start := time.Now()
	n := 0
	for n < w.Records {
		f := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("raw consume: %d of %d records: %w", n, w.Records, err)
		}
		if errs := f.Errors(); len(errs) > 0 {
			return 0, 0, fmt.Errorf("raw consume: %v", errs[0].Err)
		}
		n += f.NumRecords()
	}
	return time.Since(start), machineBusy() - busy, nil
}
