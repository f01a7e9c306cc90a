package connectors

// The record pipeline of the runtime, as Kafka Connect's WorkerSinkTask
// runs it before put(): every record of a batch is converted (key and
// value converters), transformed (SMTs) and unwrapped (change events)
// once, before the sink sees it, and a record that fails is handled by
// one tolerance operator (errors.tolerance). A sink receives the
// converted records of a batch (Converted) and reports the records it
// cannot write itself (a value the database refuses) to the same
// operator (Converted.Reject), as a Connect sink reports to its
// ErrantRecordReporter.

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/twophase"
)

// Converted is one batch's records as the runtime's pipeline makes
// them, and the batch's errant records. The records are converted as the
// sink reads them (Each), one at a time into buffers reused from one
// record to the next: a batch never holds a decoded value per record.
type Converted struct {
	raw []*kgo.Record
	p   *RecordPipeline

	tolerant bool
	mu       sync.Mutex
	dropped  int          // of the last complete pass
	errant   []DeadLetter // the pipeline's (conversion, transforms), of the last complete pass
	rejected []DeadLetter // the sink's (Reject)
}

// scratches are the pipeline's buffers, reused from one pass to the next.
var scratches = sync.Pool{New: func() any { return new(convert.Scratch) }}

// Each converts the batch's records in offset order, one at a time, and
// calls fn with each record to write. The record (and what it refers to)
// is valid only during the call: its buffers are reused for the next
// (fn copies what it keeps). Records a transform or the change-event
// stage drops are not given to fn (Dropped counts them). A record that
// fails to convert goes to the tolerance operator: with
// errors.tolerance=all it is a dead letter of the batch and fn does not
// see it; with none, or when its error wraps record.ErrIncompatible, Each
// stops and returns its *record.Error (a RecordLocator: the runtime stops
// the partition exactly there). An error that is not a record's fault
// (an unavailable schema registry, wrapping record.ErrUnavailable), and
// an error of fn, stop Each and are returned as they are. Each may be
// called again (a write done again); every complete pass sets the
// batch's dropped count and conversion dead letters afresh.
func (c *Converted) Each(ctx context.Context, fn func(*record.Record) error) error {
	sc := scratches.Get().(*convert.Scratch)
	defer scratches.Put(sc)
	var errant []DeadLetter
	dropped := 0
	for _, r := range c.raw {
		if r.Topic == c.p.skip && c.p.skip != "" {
			dropped++ // the source's transaction topic: offsets, not rows
			continue
		}
		rec, err := c.p.pipe.Convert(ctx, r, sc, c.p.withKey)
		if err != nil {
			if !record.IsCause(err) {
				return err
			}
			re := record.Locate(r, err)
			if !c.tolerant || errors.Is(re, record.ErrIncompatible) {
				return re
			}
			errant = append(errant, DeadLetter{Record: r, Err: re})
			continue
		}
		if rec == nil {
			dropped++
			continue
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.errant, c.dropped = errant, dropped
	c.mu.Unlock()
	return nil
}

// Dropped counts the records a transform or the change-event stage
// dropped in the last complete pass of Each.
func (c *Converted) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Tolerant reports whether errors.tolerance=all: bad records become dead
// letters; otherwise the first stops its partition.
func (c *Converted) Tolerant() bool { return c.tolerant }

// Reject is the errant record reporter of the batch: the sink reports the
// records it could not write (bad holds their errors; each names its
// record's coordinates, which must be among the batch's). With
// errors.tolerance=none, or for a record whose error wraps
// record.ErrIncompatible (a change the sink cannot make, never
// dead-lettered), Reject returns the error of the lowest such offset: the
// sink fails the write with it and the runtime stops the partition there.
// With errors.tolerance=all it returns nil: the records are the batch's
// dead letters, which the sink leaves out of its write (and writes to its
// dead-letter table, if it has one, in the same transaction) and the
// runtime produces to the dead-letter topic once the batch commits. Each
// call replaces what the sink reported before for the batch (a write
// done again after a failed attempt reports again).
func (c *Converted) Reject(bad []*record.Error) error {
	if len(bad) == 0 {
		c.mu.Lock()
		c.rejected = nil
		c.mu.Unlock()
		return nil
	}
	bad = slices.Clone(bad)
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].Offset < bad[j].Offset })
	// A record that failed twice (two rows of one record) is one letter.
	bad = slices.CompactFunc(bad, func(a, b *record.Error) bool { return a.Offset == b.Offset })
	for _, e := range bad {
		if !c.tolerant || errors.Is(e, record.ErrIncompatible) {
			return e
		}
	}
	byOffset := make(map[int64]*kgo.Record, len(c.raw))
	for _, r := range c.raw {
		byOffset[r.Offset] = r
	}
	letters := make([]DeadLetter, 0, len(bad))
	for _, e := range bad {
		r := byOffset[e.Offset]
		if r == nil {
			r = &kgo.Record{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset}
		}
		letters = append(letters, DeadLetter{Record: r, Err: e})
	}
	c.mu.Lock()
	c.rejected = letters
	c.mu.Unlock()
	return nil
}

// DeadLetters returns the batch's dead letters in offset order: the
// pipeline's and those the sink reported (errors.tolerance=all).
func (c *Converted) DeadLetters() []DeadLetter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.rejected) == 0 {
		return slices.Clone(c.errant)
	}
	out := append(slices.Clone(c.errant), c.rejected...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Record.Offset < out[j].Record.Offset })
	return out
}

// RecordPipeline is the runtime's record pipeline of one connector: its
// converters, transforms and change-event stage, and errors.tolerance.
// It is safe for concurrent use.
type RecordPipeline struct {
	pipe     *convert.Pipeline
	tolerant bool
	withKey  bool
	skip     string // a topic whose records are never rows
}

// Skipping returns the pipeline with every record of topic dropped (the
// source's transaction topic, source.transactions.topic: its offsets are
// stored, its records are not rows).
func (p *RecordPipeline) Skipping(topic string) *RecordPipeline {
	q := *p
	q.skip = topic
	return &q
}

// TxnMarks reads what each record tells about its source transaction
// (convert.Pipeline.SourceTxn), with txnTopic the source's transaction
// topic. Its error is one that is not a record's fault (an unavailable
// registry): the records are to be read again later.
func (p *RecordPipeline) TxnMarks(ctx context.Context, recs []*kgo.Record, txnTopic string) ([]record.TxnMark, error) {
	sc := scratches.Get().(*convert.Scratch)
	defer scratches.Put(sc)
	out := make([]record.TxnMark, len(recs))
	for i, r := range recs {
		m, err := p.pipe.SourceTxn(ctx, r, txnTopic, sc)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// KeyReader is implemented by sinks that need every record's key
// converted (a primary key taken from the record key, tombstones applied
// as deletes); other records' keys are converted only when a transform or
// a change event needs them.
type KeyReader interface {
	ReadsKeys() bool
}

// NewRecordPipeline returns the pipeline that converts records through
// pipe (nil: txsink's default JSON converter) with errors.tolerance
// tolerance ("all" or "none"); withKey converts every key.
func NewRecordPipeline(pipe *convert.Pipeline, tolerance string, withKey bool) *RecordPipeline {
	if pipe == nil {
		pipe = convert.DefaultPipeline()
	}
	return &RecordPipeline{pipe: pipe, tolerant: tolerance == "all", withKey: withKey}
}

// PipelineFor returns the record pipeline of a sink: it converts keys
// when the sink is a KeyReader that reads them.
func PipelineFor(pipe *convert.Pipeline, tolerance string, sink any) *RecordPipeline {
	kr, ok := sink.(KeyReader)
	return NewRecordPipeline(pipe, tolerance, ok && kr.ReadsKeys())
}

// Convert returns the batch of recs (one partition's, in offset order)
// as its sink reads it: converted record by record as the sink goes
// through it (Converted.Each), where a record that fails meets the
// tolerance operator. The error is always nil (kept for callers that
// convert eagerly).
func (p *RecordPipeline) Convert(ctx context.Context, recs []*kgo.Record) (*Converted, error) {
	return p.converted(recs), nil
}

// Batch returns b's converted records: those the runtime attached, or,
// for a batch the runtime did not convert (recovery re-reading a range, a
// test calling the sink directly), b's records converted now and
// attached. The error is always nil.
func (p *RecordPipeline) Batch(ctx context.Context, b *twophase.Batch) (*Converted, error) {
	return p.attach(b), nil
}

// Attach attaches the pipeline to every batch not attached yet. The
// records are converted as the sink reads them (Converted.Each), so this
// does no conversion and cannot fail.
func (p *RecordPipeline) Attach(batches []*twophase.Batch) {
	for _, b := range batches {
		p.attach(b)
	}
}

// attach returns b's converted records, attaching them first if b has
// none.
func (p *RecordPipeline) attach(b *twophase.Batch) *Converted {
	if c, ok := b.Converted.(*Converted); ok && c != nil {
		return c
	}
	c := p.converted(b.Records)
	b.Converted = c
	return c
}

// converted is recs (one partition's, in offset order) with the pipeline
// attached, converted as the sink reads them.
func (p *RecordPipeline) converted(recs []*kgo.Record) *Converted {
	return &Converted{raw: recs, p: p, tolerant: p.tolerant}
}

// DeadLettersOf returns the dead letters of batches in batch and offset
// order (none for a batch that was not converted).
func DeadLettersOf(batches []*twophase.Batch) []DeadLetter {
	var out []DeadLetter
	for _, b := range batches {
		if c, ok := b.Converted.(*Converted); ok && c != nil {
			out = append(out, c.DeadLetters()...)
		}
	}
	return out
}
