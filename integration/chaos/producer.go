package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/verify"
)

// Producer is a lane's upstream: one transactional client writing
// multi-partition transactions at a steady rate, aborting some, and
// abandoning one mid-transaction when asked (ProducerKill, Abandon). Every
// transaction is logged with its outcome. Records are JSON objects
// {"id": "<lane>-<seq>", "seq": <seq>, "body": …}.
type Producer struct {
	lane       string
	bootstrap  string
	topic      string
	partitions int32
	rate       int // records per second
	maxTxn     int
	abortRatio float64
	rng        *rand.Rand
	log        *verify.LogWriter
	logf       func(string, ...any)

	kill atomic.Int32 // pending ProducerKill requests

	mu       sync.Mutex
	frontier map[int32]int64 // one past the highest acknowledged offset
	stats    ProducerStats
	failing  bool
}

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	// Lane prefixes the record ids and names the transactional id.
	Lane      string
	Bootstrap string
	Topic     string
	// Partitions of Topic the records are spread over.
	Partitions int32
	// Rate is records per second; MaxTxn the largest transaction;
	// AbortRatio the share of transactions aborted.
	Rate       int
	MaxTxn     int
	AbortRatio float64
	// Seed and Stream seed the producer's random choices (PCG).
	Seed, Stream uint64
	// Log receives every transaction with its outcome (nil: none).
	Log *verify.LogWriter
	// Logf prints progress (nil: discard).
	Logf func(format string, args ...any)
}

// NewProducer returns a producer; Run produces.
func NewProducer(o ProducerOptions) *Producer {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Log == nil {
		o.Log = verify.NewLogWriter(io.Discard)
	}
	return &Producer{
		lane: o.Lane, bootstrap: o.Bootstrap, topic: o.Topic, partitions: o.Partitions,
		rate: o.Rate, maxTxn: max(o.MaxTxn, 1), abortRatio: o.AbortRatio,
		rng: rand.New(rand.NewPCG(o.Seed, o.Stream)),
		log: o.Log, logf: o.Logf, frontier: map[int32]int64{},
	}
}

// Abandon makes the producer abandon its next transaction in the middle
// (never ended: the broker aborts it when the next client starts).
func (p *Producer) Abandon() { p.kill.Add(1) }

// ProducerStats count a producer's transactions by outcome.
type ProducerStats struct {
	Acknowledged, Failed, Unknown, Killed int
	AckRecords                            int
	Errors                                int
}

// Snapshot returns, per partition, one past the highest offset of an
// acknowledged (committed) record, and the transaction counts.
func (p *Producer) Snapshot() (map[int32]int64, ProducerStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := make(map[int32]int64, len(p.frontier))
	for k, v := range p.frontier {
		f[k] = v
	}
	return f, p.stats
}

func (p *Producer) newClient() (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(p.bootstrap),
		// A stable transactional id: a new client fences (and aborts) an
		// abandoned transaction of the previous one at once.
		kgo.TransactionalID("chaos-up-"+p.topic),
		kgo.TransactionTimeout(10*time.Second),
		kgo.DefaultProduceTopic(p.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.RetryTimeout(20*time.Second),
	)
}

// Run produces until ctx ends, finishing (committing or aborting) the
// transaction in progress first.
func (p *Producer) Run(ctx context.Context) {
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	body := strings.Repeat("x", 40)
	seq := 0
	txn := 0
	next := time.Now()
	for ctx.Err() == nil {
		if cl == nil {
			var err error
			if cl, err = p.newClient(); err != nil {
				p.logf("producer %s: client: %v", p.lane, err)
				sleep(ctx, time.Second)
				continue
			}
		}
		size := 1 + p.rng.IntN(p.maxTxn)
		abort := p.rng.Float64() < p.abortRatio
		// Pace: size records at rate per second.
		next = next.Add(time.Duration(size) * time.Second / time.Duration(max(p.rate, 1)))
		if d := time.Until(next); d > 0 {
			sleep(ctx, d)
		} else if d < -5*time.Second {
			next = time.Now() // behind after an outage: do not burst
		}
		txn++
		t := verify.Txn{ID: fmt.Sprintf("%s-t%d", p.lane, txn)}
		recs := make([]*kgo.Record, size)
		for i := range recs {
			seq++
			id := fmt.Sprintf("%s-%d", p.lane, seq)
			v, _ := json.Marshal(map[string]any{"id": id, "seq": seq, "body": body})
			recs[i] = &kgo.Record{Partition: p.rng.Int32N(p.partitions), Value: v}
			t.Records = append(t.Records, verify.TxnEntry{Topic: p.topic, Partition: recs[i].Partition, Offset: -1, ID: id})
		}
		if err := cl.BeginTransaction(); err != nil {
			p.note("begin", err)
			cl.Close()
			cl = nil
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		res := cl.ProduceSync(pctx, recs...)
		cancel()
		produceErr := res.FirstErr()
		// Results come in completion order: match them by record.
		failed := map[*kgo.Record]bool{}
		for _, r := range res {
			if r.Err != nil {
				failed[r.Record] = true
			}
		}
		for i, r := range recs {
			if !failed[r] {
				t.Records[i].Offset = r.Offset
			}
		}
		if p.kill.Load() > 0 && produceErr == nil {
			p.kill.Add(-1)
			// Abandon the transaction: no EndTxn is ever sent, so it
			// cannot commit; the next client's InitProducerID aborts it.
			cl.Close()
			cl = nil
			t.Outcome = verify.OutcomeFailed
			p.record(t, false, true)
			continue
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		commit := !abort && produceErr == nil
		endErr := cl.EndTransaction(ectx, kgo.TransactionEndTry(commit))
		cancel()
		switch {
		case !commit:
			t.Outcome = verify.OutcomeFailed
		case endErr == nil:
			t.Outcome = verify.OutcomeAcknowledged
		default:
			t.Outcome = verify.OutcomeUnknown
		}
		p.record(t, t.Outcome == verify.OutcomeAcknowledged, false)
		if produceErr != nil || endErr != nil {
			p.note("produce/commit", errors.Join(produceErr, endErr))
			cl.Close()
			cl = nil
			sleep(ctx, 500*time.Millisecond)
		}
	}
}

// note counts an error and logs the first of each streak.
func (p *Producer) note(what string, err error) {
	p.mu.Lock()
	p.stats.Errors++
	first := !p.failing
	p.failing = true
	p.mu.Unlock()
	if first {
		p.logf("producer %s: %s: %v (retrying; further errors are counted, not logged, until a transaction succeeds)", p.lane, what, err)
	}
}

func (p *Producer) record(t verify.Txn, acked, killed bool) {
	t.At = time.Now().UTC()
	if err := p.log.Write(t); err != nil {
		p.logf("producer %s: writing the producer log: %v", p.lane, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case killed:
		p.stats.Killed++
	case t.Outcome == verify.OutcomeAcknowledged:
		p.stats.Acknowledged++
	case t.Outcome == verify.OutcomeFailed:
		p.stats.Failed++
	default:
		p.stats.Unknown++
	}
	if acked {
		p.failing = false
		p.stats.AckRecords += len(t.Records)
		for _, r := range t.Records {
			if r.Offset+1 > p.frontier[r.Partition] {
				p.frontier[r.Partition] = r.Offset + 1
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
