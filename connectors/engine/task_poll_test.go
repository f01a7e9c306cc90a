package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
)

// fetches wraps n records of partition 0 as one poll's result.
func fetches(n int) kgo.Fetches {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Value: []byte("{}")}
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: []kgo.FetchPartition{{Records: recs}}}}}}
}

// TestPollLinger: a round lingers for more records after a trickle, and
// does not after a first poll that brings a backlog (a tenth of
// batch.max.records or more).
func TestPollLinger(t *testing.T) {
	for _, c := range []struct {
		first     int
		wantPolls int
		wantRecs  int
	}{
		{first: 3, wantPolls: 3, wantRecs: 3 + 5 + 5}, // trickle: polls until the linger ends (the third poll waits it out)
		{first: 10, wantPolls: 1, wantRecs: 10},       // backlog: no linger
		{first: 100, wantPolls: 1, wantRecs: 100},     // a full round
	} {
		tk := &Task{conn: config.Connector{BatchMaxRecords: 100, BatchMaxBytes: 1 << 20, BatchLinger: time.Hour}}
		polls := 0
		pollFn := func(ctx context.Context, n int) kgo.Fetches {
			polls++
			switch polls {
			case 1:
				return fetches(c.first)
			case 2, 3:
				return fetches(5)
			}
			t.Fatalf("first poll of %d: poll %d, want at most 3", c.first, polls)
			return nil
		}
		// The third poll's records reach no limit; a context that ends
		// then stands for the linger deadline.
		ctx, cancel := context.WithCancel(context.Background())
		wrapped := func(pctx context.Context, n int) kgo.Fetches {
			f := pollFn(pctx, n)
			if polls == 3 {
				cancel()
			}
			return f
		}
		recs, err := tk.poll(ctx, wrapped)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if polls != c.wantPolls || len(recs) != c.wantRecs {
			t.Errorf("first poll of %d records: %d polls, %d records; want %d polls, %d records", c.first, polls, len(recs), c.wantPolls, c.wantRecs)
		}
	}
}
