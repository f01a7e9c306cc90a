package connectors

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/twophase"
)

func pipelineRecords() []*kgo.Record {
	var out []*kgo.Record
	for o := int64(0); o < 6; o++ {
		v := fmt.Appendf(nil, `{"id":%d}`, o)
		if o == 2 || o == 4 {
			v = []byte(`{"id":`) // cannot be decoded
		}
		out = append(out, &kgo.Record{Topic: "t", Partition: 1, Offset: o, Value: v})
	}
	return out
}

// TestRecordPipelineTolerance: the runtime's tolerance operator stops at
// exactly the first bad record with none and sets bad records aside with
// all; a sink's refusals go through the same operator.
func TestRecordPipelineTolerance(t *testing.T) {
	ctx := context.Background()
	recs := pipelineRecords()

	c, err := NewRecordPipeline(nil, "none", false).Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	err = c.Each(ctx, func(r *record.Record) error {
		seen = append(seen, r.Raw.Offset)
		return nil
	})
	if fmt.Sprint(seen) != "[0 1]" {
		t.Fatalf("none: the sink saw %v, want [0 1]", seen)
	}
	var rl RecordLocator
	if !errors.As(err, &rl) {
		t.Fatalf("none: %v, want a record error", err)
	}
	if _, p, off := rl.RecordCoordinates(); p != 1 || off != 2 {
		t.Fatalf("none: stopped at [%d]@%d, want [1]@2", p, off)
	}

	c, err = NewRecordPipeline(nil, "all", false).Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	// Twice: a write done again sets the conversion's dead letters afresh.
	for range 2 {
		seen = nil
		if err := c.Each(ctx, func(r *record.Record) error {
			seen = append(seen, r.Raw.Offset)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(seen) != "[0 1 3 5]" {
			t.Fatalf("all: the sink saw %v, want [0 1 3 5]", seen)
		}
		if got := offsetsOf(c.DeadLetters()); fmt.Sprint(got) != "[2 4]" {
			t.Fatalf("all: dead letters %v, want [2 4]", got)
		}
	}
	// The sink refuses offset 3 and, as an incompatible change, nothing
	// yet: dead letters 2, 3, 4 in offset order.
	if err := c.Reject([]*record.Error{record.NewError(recs[3], record.ErrCoerce)}); err != nil {
		t.Fatalf("all: Reject: %v", err)
	}
	if got := offsetsOf(c.DeadLetters()); fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("all: dead letters %v, want [2 3 4]", got)
	}
	// A redo reports again: the sink's set is replaced, not added to.
	if err := c.Reject([]*record.Error{record.NewError(recs[5], record.ErrCoerce)}); err != nil {
		t.Fatal(err)
	}
	if got := offsetsOf(c.DeadLetters()); fmt.Sprint(got) != "[2 4 5]" {
		t.Fatalf("all, after a redo: dead letters %v, want [2 4 5]", got)
	}
	// An incompatible change is never a dead letter.
	if err := c.Reject([]*record.Error{record.NewError(recs[1], record.ErrIncompatible)}); !errors.Is(err, record.ErrIncompatible) {
		t.Fatalf("all: Reject of an incompatible change: %v", err)
	}

	// none: the sink's refusals fail the write at the lowest offset.
	c, err = NewRecordPipeline(nil, "none", false).Convert(ctx, recs[:2])
	if err != nil {
		t.Fatal(err)
	}
	err = c.Reject([]*record.Error{record.NewError(recs[1], record.ErrCoerce), record.NewError(recs[0], record.ErrCoerce)})
	if !errors.As(err, &rl) {
		t.Fatalf("none: Reject: %v", err)
	}
	if _, _, off := rl.RecordCoordinates(); off != 0 {
		t.Fatalf("none: Reject located at %d, want 0", off)
	}
	if len(c.DeadLetters()) != 0 {
		t.Fatal("none: dead letters kept")
	}
}

// TestRecordPipelineOnce: a batch is converted once; what the runtime
// attached is what the sink gets.
func TestRecordPipelineOnce(t *testing.T) {
	ctx := context.Background()
	b := &twophase.Batch{Records: pipelineRecords()[:2]}
	p := NewRecordPipeline(nil, "none", false)
	c1, err := p.Batch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := p.Batch(ctx, b)
	if err != nil || c2 != c1 {
		t.Fatalf("second Batch converted again (%p, %p, %v)", c1, c2, err)
	}
	if got := offsetsOf(DeadLettersOf([]*twophase.Batch{b, {}})); len(got) != 0 {
		t.Fatalf("dead letters %v", got)
	}
}

func offsetsOf(ls []DeadLetter) []int64 {
	var out []int64
	for _, l := range ls {
		out = append(out, l.Record.Offset)
	}
	return out
}
