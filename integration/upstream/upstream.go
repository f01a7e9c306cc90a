// Package upstream is the tests' upstream: a transactional Kafka producer
// that writes multi-partition transactions of JSON records at a steady
// rate, aborts a share of them, can abandon one in the middle (a killed
// producer), and logs every transaction with its outcome in the producer
// log format of internal/verify, which "txsink verify -producer-log"
// reads to tell broker anomalies from sink faults.
//
// Each record's value is {"id": "<name>-<seq>", "seq": <seq>, "body": …}.
package upstream

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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

// Options shape a Producer.
type Options struct {
	// Name prefixes record ids and transaction names (short, unique in
	// the topic's test).
	Name string
	// Bootstrap is the Kafka bootstrap list, comma-separated; KafkaOpts
	// are more client options (TLS, SASL, a dialer).
	Bootstrap string
	KafkaOpts []kgo.Opt
	// Topic and Partitions: records are spread over partitions
	// 0..Partitions-1 at random.
	Topic      string
	Partitions int32
	// Rate is records per second (default 100); MaxTxn the largest
	// transaction (default 30); AbortRatio the share of transactions
	// aborted.
	Rate       int
	MaxTxn     int
	AbortRatio float64
	// BodyBytes is the size of each record's body (default 40).
	BodyBytes int
	// Records stops the producer once this many records were
	// acknowledged (0: until Run's context ends).
	Records int
	// Seed seeds the transaction sizes, aborts and partitions.
	Seed uint64
	// TransactionalID is the producer's (default "up-<topic>"): stable,
	// so a new client fences an abandoned transaction of the previous one.
	TransactionalID string
	// Log receives the producer log (JSON lines); nil: none.
	Log io.Writer
	// Logf prints errors (nil: discard).
	Logf func(format string, args ...any)
}

// Producer is one transactional client writing to a topic. Run it once.
type Producer struct {
	o   Options
	rng *rand.Rand
	log *verify.LogWriter

	kill atomic.Int32 // pending Kill requests

	mu       sync.Mutex
	frontier map[int32]int64 // one past the highest acknowledged offset
	stats    Stats
	failing  bool
}

// Stats counts a producer's transactions by outcome.
type Stats struct {
	Acknowledged, Failed, Unknown, Killed int
	// AckRecords counts the records of acknowledged transactions.
	AckRecords int
	// Errors counts produce, commit and client errors.
	Errors int
}

// New returns a producer; Run starts it.
func New(o Options) *Producer {
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.MaxTxn <= 0 {
		o.MaxTxn = 30
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = 40
	}
	if o.TransactionalID == "" {
		o.TransactionalID = "up-" + o.Topic
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	p := &Producer{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x7570)), frontier: map[int32]int64{}}
	if o.Log != nil {
		p.log = verify.NewLogWriter(o.Log)
	}
	return p
}

// Kill makes the producer abandon its next transaction after producing it:
// its client is closed without EndTxn, so the transaction cannot commit;
// the next client's InitProducerID aborts it.
func (p *Producer) Kill() { p.kill.Add(1) }

// Snapshot returns, per partition, one past the highest acknowledged
// offset, and the counts so far.
func (p *Producer) Snapshot() (map[int32]int64, Stats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := make(map[int32]int64, len(p.frontier))
	for k, v := range p.frontier {
		f[k] = v
	}
	return f, p.stats
}

func (p *Producer) newClient() (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(p.o.Bootstrap, ",")...),
		kgo.TransactionalID(p.o.TransactionalID),
		kgo.TransactionTimeout(10 * time.Second),
		kgo.DefaultProduceTopic(p.o.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.RecordDeliveryTimeout(20 * time.Second),
		kgo.RetryTimeout(20 * time.Second),
	}, p.o.KafkaOpts...)...)
}

func (p *Producer) done() bool {
	if p.o.Records <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats.AckRecords >= p.o.Records
}

// Run produces until ctx ends (or Options.Records were acknowledged),
// finishing (committing or aborting) the transaction in progress first.
func (p *Producer) Run(ctx context.Context) {
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	body := strings.Repeat("x", p.o.BodyBytes)
	seq := 0
	txn := 0
	next := time.Now()
	for ctx.Err() == nil && !p.done() {
		if cl == nil {
			var err error
			if cl, err = p.newClient(); err != nil {
				p.o.Logf("producer %s: client: %v", p.o.Name, err)
				harness.Sleep(ctx, time.Second)
				continue
			}
		}
		size := 1 + p.rng.IntN(p.o.MaxTxn)
		abort := p.rng.Float64() < p.o.AbortRatio
		// Pace: size records at rate per second.
		next = next.Add(time.Duration(size) * time.Second / time.Duration(p.o.Rate))
		if d := time.Until(next); d > 0 {
			harness.Sleep(ctx, d)
		} else if d < -5*time.Second {
			next = time.Now() // behind after an outage: do not burst
		}
		txn++
		t := verify.Txn{ID: fmt.Sprintf("%s-t%d", p.o.Name, txn)}
		recs := make([]*kgo.Record, size)
		for i := range recs {
			seq++
			id := fmt.Sprintf("%s-%d", p.o.Name, seq)
			v, _ := json.Marshal(map[string]any{"id": id, "seq": seq, "body": body})
			recs[i] = &kgo.Record{Partition: p.rng.Int32N(p.o.Partitions), Value: v}
			t.Records = append(t.Records, verify.TxnEntry{Topic: p.o.Topic, Partition: recs[i].Partition, Offset: -1, ID: id})
		}
		if err := cl.BeginTransaction(); err != nil {
			p.note("begin", err)
			cl.Close()
			cl = nil
			harness.Sleep(ctx, 500*time.Millisecond)
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
			harness.Sleep(ctx, 500*time.Millisecond)
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
		p.o.Logf("producer %s: %s: %v (retrying; further errors are counted, not logged, until a transaction succeeds)", p.o.Name, what, err)
	}
}

func (p *Producer) record(t verify.Txn, acked, killed bool) {
	t.At = time.Now().UTC()
	if p.log != nil {
		if err := p.log.Write(t); err != nil {
			p.o.Logf("producer %s: writing the producer log: %v", p.o.Name, err)
		}
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

// CommittedEnds waits up to stableWait until no transaction is open on
// topic (every partition's last stable offset equals its high watermark),
// then scans it with read_committed and returns, per partition that has
// one, one past its last committed record: what a sink holds once it has
// caught up.
func CommittedEnds(ctx context.Context, bootstrap string, opts []kgo.Opt, topic string, stableWait time.Duration) (map[int32]int64, error) {
	seeds := strings.Split(bootstrap, ",")
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(stableWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lso, err1 := adm.ListCommittedOffsets(lctx, topic)
		hwm, err2 := adm.ListEndOffsets(lctx, topic)
		cancel()
		if err1 == nil && err2 == nil && lso.Error() == nil && hwm.Error() == nil {
			stable := true
			lso.Each(func(o kadm.ListedOffset) {
				if h, ok := hwm.Lookup(o.Topic, o.Partition); !ok || h.Offset != o.Offset {
					stable = false
				}
			})
			if stable {
				break
			}
		}
		harness.Sleep(ctx, 500*time.Millisecond)
	}
	truth, err := verify.Scan(ctx, verify.ScanOptions{Bootstrap: seeds, KafkaOpts: opts, Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("upstream: scanning %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, t := range truth {
		if n := len(t.Records); n > 0 {
			out[t.Partition] = t.Records[n-1].Offset + 1
		}
	}
	return out, nil
}
