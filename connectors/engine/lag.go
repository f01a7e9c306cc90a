package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Lag, as txsink reports it in the task status, the CLI, /ui and
// txsink_partition_lag, is the number of records a read_committed consumer
// could still read from a partition and the sink has not stored: the
// committed and non-transactional records at offsets from the stored
// next_offset up to the partition's last stable offset. Transaction
// markers and aborted records do not count, nor records of transactions
// still open. It is 0 once the sink has stored everything readable, even
// when aborted transactions and markers follow at the log's end (the end
// offset, the high watermark, counts them). txsink verify counts the same
// (committed records at or past next_offset).
//
// It is exact when the range from next_offset to the last stable offset
// spans at most exactLagWindow offsets: those are read (read_committed)
// and counted, once per (next_offset, last stable offset) of a partition.
// A longer range is reported as its length, which may count a few markers
// and aborted records: a backlog that size is a backlog either way.
const exactLagWindow = 10000

// lagFetchBytes bounds one fetch of the count.
const lagFetchBytes = 1 << 20

// lagCache remembers the last exact count of each partition, keyed by the
// range it counted; a partition that does not move is read once.
type lagCache struct {
	mu sync.Mutex
	m  map[lagAt]lagCount
}

// lagAt is a partition at a stored position (connectors consuming the
// same topic each have theirs).
type lagAt struct {
	tp
	next int64
}

type lagCount struct{ lso, n int64 }

// lagCacheMax bounds the cache; past it, it starts again.
const lagCacheMax = 4096

func (c *lagCache) get(at lagAt, lso int64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[at]
	if !ok || e.lso != lso {
		return 0, false
	}
	return e.n, true
}

func (c *lagCache) put(at lagAt, lso, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= lagCacheMax {
		c.m = map[lagAt]lagCount{}
	}
	c.m[at] = lagCount{lso, n}
}

// partitionLags returns the end offset (high watermark) of the partitions
// of at and the lag (see exactLagWindow) at each position. What Kafka does
// not answer for in time is left out.
func (e *Engine) partitionLags(ctx context.Context, at []lagAt) (ends map[tp]int64, lags map[lagAt]int64) {
	if len(at) == 0 {
		return nil, nil
	}
	adm, err := e.adminClient()
	if err != nil {
		return nil, nil
	}
	e.adminMu.Lock()
	cl := e.adminCl
	e.adminMu.Unlock()
	if cl == nil {
		return nil, nil
	}
	topicSet := map[string]bool{}
	for _, p := range at {
		topicSet[p.topic] = true
	}
	var topics []string
	for t := range topicSet {
		topics = append(topics, t)
	}
	hwm, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil
	}
	lso, err := adm.ListCommittedOffsets(ctx, topics...) // last stable offsets
	if err != nil {
		return nil, nil
	}
	ends, lags = map[tp]int64{}, map[lagAt]int64{}
	hwm.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			ends[tp{o.Topic, o.Partition}] = o.Offset
		}
	})
	var md *kadm.Metadata
	for _, p := range at {
		n := p.next
		o, ok := lso.Lookup(p.topic, p.partition)
		if !ok || o.Err != nil {
			continue
		}
		stable := o.Offset
		switch {
		case n >= stable:
			lags[p] = 0
		case stable-n > exactLagWindow:
			lags[p] = stable - n
		default:
			if c, ok := e.lagCache.get(p, stable); ok {
				lags[p] = c
				continue
			}
			if md == nil {
				m, err := adm.Metadata(ctx, topics...)
				if err != nil {
					continue
				}
				md = &m
			}
			c, err := countReadable(ctx, cl, md, p.tp, n, stable)
			if err != nil {
				e.opt.Log.Debug("counting a partition's lag", "topic", p.topic, "partition", p.partition, "err", err)
				continue
			}
			e.lagCache.put(p, stable, c)
			lags[p] = c
		}
	}
	return ends, lags
}

// countReadable counts the records a read_committed consumer reads from
// partition p at offsets [from, lso): it fetches the range from the
// partition's leader and filters it as the consumer does (aborted
// transactions and control records left out).
func countReadable(ctx context.Context, cl *kgo.Client, md *kadm.Metadata, p tp, from, lso int64) (int64, error) {
	td, ok := md.Topics[p.topic]
	if !ok || td.Err != nil {
		return 0, fmt.Errorf("no metadata for topic %s", p.topic)
	}
	pd, ok := td.Partitions[p.partition]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return 0, fmt.Errorf("no leader for %s[%d]", p.topic, p.partition)
	}
	var n int64
	for off := from; off < lso; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = lagFetchBytes
		req.IsolationLevel = 1 // read_committed
		req.SessionEpoch = -1  // no fetch session
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = p.topic, td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.partition
		rp.FetchOffset = off
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = lagFetchBytes
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(pd.Leader)))
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, errors.New("fetch answered without the partition")
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: off, IsolationLevel: kgo.ReadCommitted(), Topic: p.topic, Partition: p.partition,
		}, &resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return 0, fp.Err
		}
		for _, r := range fp.Records {
			if r.Offset >= off && r.Offset < lso {
				n++
			}
		}
		if next <= off {
			return 0, fmt.Errorf("fetch at offset %d of %s[%d] made no progress", off, p.topic, p.partition)
		}
		off = next
	}
	return n, nil
}
