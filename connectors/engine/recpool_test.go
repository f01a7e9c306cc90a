package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/twophase"
)

// TestRecordClass: a slice of n records comes from the smallest power of
// two that holds n (16 at least), and only slices of exactly a class's
// size go back.
func TestRecordClass(t *testing.T) {
	for _, c := range []struct{ n, class int }{{0, 4}, {1, 4}, {16, 4}, {17, 5}, {1000, 10}, {1024, 10}, {1025, 11}, {1 << 20, 20}} {
		got, ok := recordClass(c.n)
		if got != c.class || !ok {
			t.Errorf("recordClass(%d) = %d, %t; want %d, true", c.n, got, ok, c.class)
		}
		if s := (&recordPool{maxBytes: recordPoolBytes}).GetRecords(c.n); cap(s) < c.n || len(s) != 0 {
			t.Errorf("GetRecords(%d): len %d cap %d", c.n, len(s), cap(s))
		}
	}
	if _, ok := recordClass(1<<20 + 1); ok {
		t.Error("a slice above 2^20 records is pooled")
	}
	p := &recordPool{maxBytes: recordPoolBytes}
	p.PutRecords(make([]kgo.Record, 3, 100)) // grown by the client: not a class size
	p.PutRecords(make([]kgo.Record, 0, 64))
	if got := p.puts.Load(); got != 1 {
		t.Errorf("%d slices put back; want 1 (only the class-sized one)", got)
	}
	if s := p.GetRecords(40); cap(s) != 64 {
		t.Errorf("GetRecords(40) after a 64-slice was put back: cap %d", cap(s))
	}
	// The free slices stay within maxBytes: a slice that would pass it is
	// dropped.
	small := &recordPool{maxBytes: 100 * recordSize}
	a, b := make([]kgo.Record, 0, 64), make([]kgo.Record, 0, 64)
	small.PutRecords(a)
	small.PutRecords(b)
	if small.bytes != 64*recordSize {
		t.Errorf("free bytes %d after two 64-slices into a pool of 100 records; want one kept (%d)", small.bytes, 64*recordSize)
	}
	if got := small.GetRecords(64); &got[:1][0] != &a[:1][0] {
		t.Error("the slice kept is not the one handed out")
	}
	if got := small.GetRecords(64); &got[:1][0] == &b[:1][0] || small.bytes != 0 {
		t.Errorf("the dropped slice came back (free bytes %d)", small.bytes)
	}
}

// TestRecycleCommittedOnly: of a round's batches, recycle zeroes the
// records of those that committed and only those: a batch in doubt or
// not committed keeps its records (it may be run again with them), and a
// fetch's slice goes back to the pool once every record kept from it was
// recycled. The records come from a real client fetching from kfake.
func TestRecycleCommittedOnly(t *testing.T) {
	const parts, per = 4, 50
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "rp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("rp"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for p := range int32(parts) {
		var recs []*kgo.Record
		for i := range per {
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	pool := &recordPool{maxBytes: recordPoolBytes}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("rp"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithPools(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := map[int32][]*kgo.Record{}
	for n := 0; n < parts*per; {
		f := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		f.EachRecord(func(r *kgo.Record) {
			byPart[r.Partition] = append(byPart[r.Partition], r)
			n++
		})
	}
	var batches []*twophase.Batch
	for p := range int32(parts) {
		recs := byPart[p]
		batches = append(batches, &twophase.Batch{
			ID:      twophase.BatchID{Connector: "c", Topic: "rp", Partition: p, First: recs[0].Offset, Last: recs[len(recs)-1].Offset},
			Records: recs,
		})
	}
	id := func(p int) twophase.BatchID { return batches[p].ID }
	// p0 and p1 committed, p1 also in doubt, p2 failed, p3 committed.
	recycle(batches, []twophase.BatchID{id(0), id(1), id(3)}, []twophase.BatchID{id(1)})

	for p, b := range batches {
		zeroed := p == 0 || p == 3
		for i, r := range b.Records {
			want := fmt.Sprintf("p%d-%d", p, i)
			switch {
			case zeroed && (r.Value != nil || r.Topic != "" || r.Offset != 0):
				t.Fatalf("p%d record %d: committed but not recycled (%q at %d)", p, i, r.Value, r.Offset)
			case !zeroed && (string(r.Value) != want || r.Offset != int64(i) || r.Topic != "rp"):
				t.Fatalf("p%d record %d: %q at %d, want %q at %d: a batch that may run again was recycled", p, i, r.Value, r.Offset, want, i)
			}
		}
	}
	if pool.puts.Load() == 0 {
		t.Error("no slice went back to the pool after two partitions' records were all recycled")
	}
	puts := pool.puts.Load()
	recycle(batches, []twophase.BatchID{id(1), id(2)}, nil)
	if pool.puts.Load() <= puts {
		t.Error("recycling the rest put no slice back")
	}
}
