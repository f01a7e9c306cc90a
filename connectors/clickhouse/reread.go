package clickhouse

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/twophase"
)

// readRange re-reads exactly the records of id from Kafka with
// read_committed isolation: a direct partition consumer (no group) from
// id.First, stopping after id.Last. The result is the batch the owner
// prepared (invariant 6); it fails with ErrRangeUnreadable when the range
// no longer starts at First or ends at Last (retention or compaction).
// Cancelling ctx stops the read.
func readRange(ctx context.Context, bootstrap []string, opts []kgo.Opt, id twophase.BatchID) ([]*kgo.Record, error) {
	if len(bootstrap) == 0 {
		return nil, fmt.Errorf("clickhouse: re-read %s: no Kafka bootstrap servers", id)
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(bootstrap...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{id.Topic: {id.Partition: kgo.NewOffset().At(id.First)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ClientID("txsink-redo"),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: re-read %s: %w", id, err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		f := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("clickhouse: re-read %s: %w", id, err)
		}
		var ferr error
		f.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("clickhouse: re-read %s: %w", id, ferr)
		}
		done := false
		f.EachRecord(func(r *kgo.Record) {
			if done || r.Offset < id.First {
				return
			}
			if r.Offset > id.Last {
				done = true
				return
			}
			out = append(out, r)
			if r.Offset == id.Last {
				done = true
			}
		})
		if done {
			break
		}
	}
	if len(out) == 0 || out[0].Offset != id.First || out[len(out)-1].Offset != id.Last {
		got := "nothing"
		if len(out) > 0 {
			got = fmt.Sprintf("%d..%d", out[0].Offset, out[len(out)-1].Offset)
		}
		return nil, fmt.Errorf("clickhouse: re-read %s: got %s: %w", id, got, ErrRangeUnreadable)
	}
	return out, nil
}
