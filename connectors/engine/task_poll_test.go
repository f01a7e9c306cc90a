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

// TestPollLinger: a round lingers for more records after a trickle. After
// a first poll that brings a backlog (a tenth of batch.max.records or
// more) it does not wait for new records, but takes the fetches that come
// at once (a backlog larger than one fetch) until a poll brings nothing.
func TestPollLinger(t *testing.T) {
	for _, c := range []struct {
		name      string
		polls     []int // records each poll brings; -1 ends the linger (the context)
		wantPolls int
		wantRecs  int
	}{
		{"trickle", []int{3, 5, 5, -1}, 3, 3 + 5 + 5}, // polls until the linger ends (the third poll waits it out)
		{"backlog", []int{10, 0, 5}, 2, 10},           // no new records come at once: no linger
		{"backlog over fetches", []int{10, 40, 30, 0, 5}, 4, 80},
		{"backlog to the limit", []int{10, 40, 30, 40}, 4, 100}, // the last poll is asked for 20
		{"full round", []int{100}, 1, 100},
	} {
		tk := &Task{conn: config.Connector{BatchMaxRecords: 100, BatchMaxBytes: 1 << 20, BatchLinger: time.Hour}}
		ctx, cancel := context.WithCancel(context.Background())
		polls := 0
		pollFn := func(_ context.Context, n int) kgo.Fetches {
			polls++
			if polls > len(c.polls) {
				t.Fatalf("%s: poll %d, want at most %d", c.name, polls, len(c.polls))
			}
			k := c.polls[polls-1]
			if polls < len(c.polls) && c.polls[polls] == -1 {
				// The records reach no limit; a context that ends now
				// stands for the linger deadline.
				cancel()
			}
			return fetches(min(k, n))
		}
		recs, err := tk.poll(ctx, pollFn, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if polls != c.wantPolls || len(recs) != c.wantRecs {
			t.Errorf("%s: %d polls, %d records; want %d polls, %d records", c.name, polls, len(recs), c.wantPolls, c.wantRecs)
		}
	}
}
