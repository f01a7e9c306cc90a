package configlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrFenced is wrapped by Writer errors once a newer leader's writer
// exists: this worker is no longer the leader and must not write.
var ErrFenced = errors.New("config topic writer fenced by a newer leader")

// Writer is the leader's writer of the config topic: a transactional
// producer whose id is the cluster's (one per group.id), so a new leader's
// writer fences every earlier one when it starts (KIP-618's approach): a
// deposed leader's open transaction is aborted and its later writes fail
// with ErrFenced. Each Write is one transaction, so a change made of
// several records (a configuration and its task count) is read by every
// worker whole or not at all. Its methods are safe for concurrent use.
type Writer struct {
	topic string
	keys  *Keyring
	mu    sync.Mutex
	cl    *kgo.Client
}

// TransactionalID is the id of a cluster's config topic writer.
func TransactionalID(groupID string) string { return "txsink-cluster-" + groupID + "-configs" }

// NewWriter starts the leader's writer and fences every earlier one before
// it returns. Cancelling ctx abandons the start.
func NewWriter(ctx context.Context, opt Options, groupID string) (*Writer, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opt.Bootstrap...),
		kgo.TransactionalID(TransactionalID(groupID)),
		kgo.TransactionTimeout(30 * time.Second),
		kgo.DefaultProduceTopic(opt.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ClientID("txsink-cluster-leader"),
	}, opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	// InitProducerID: bumps the id's epoch, aborting a previous leader's
	// open transaction and fencing its producer.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("starting the config topic writer: %w", fenced(err))
	}
	return &Writer{topic: opt.Topic, cl: cl, keys: opt.Keys}, nil
}

// Write writes recs in one transaction, signed with opt.Keys' key once it
// is known, and returns the offset of the last
// one. An error wrapping ErrFenced means a newer leader exists; after any
// error the records may or may not have been written (read the topic to
// know). Cancelling ctx aborts the transaction when it is not yet
// committed.
func (w *Writer) Write(ctx context.Context, recs []Record) (int64, error) {
	if len(recs) == 0 {
		return -1, errors.New("configlog: nothing to write")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.cl.BeginTransaction(); err != nil {
		return -1, fenced(err)
	}
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: w.topic, Partition: 0, Key: []byte(r.Key), Value: r.Value}
		w.keys.sign(krs[i]) // once the cluster's key is known (opt.Keys)
	}
	res := w.cl.ProduceSync(ctx, krs...)
	if err := res.FirstErr(); err != nil {
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.cl.EndTransaction(abortCtx, kgo.TryAbort)
		return -1, fenced(err)
	}
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return -1, fenced(err)
	}
	var last int64 = -1
	for _, r := range res {
		last = max(last, r.Record.Offset)
	}
	return last, nil
}

// Close closes the writer (an open transaction is aborted by the broker).
func (w *Writer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cl.Close()
}

// fenced wraps ErrFenced around the errors that say a newer producer of
// the same transactional id exists.
func fenced(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
