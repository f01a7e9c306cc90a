package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/offsets"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProgressLine: the progress line has the records of committed rounds
// only, and the lag of the positions the rounds stored.
func TestProgressLine(t *testing.T) {
	p := newRunProgress()
	p.Assigned(0, []offsets.Position{{Topic: "t", Partition: 0, Next: offsets.Unset}, {Topic: "t", Partition: 1, Next: 5}})
	p.Round(0, engine.RoundStats{Outcome: "committed", Records: 70, Positions: []offsets.Position{{Topic: "t", Partition: 0, Next: 70}}})
	p.Round(0, engine.RoundStats{Outcome: "aborted", Records: 1000})
	var buf lockedBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var mu sync.Mutex
	var asked []offsets.Position
	lag := func(_ context.Context, pos []offsets.Position) (int64, int) {
		mu.Lock()
		defer mu.Unlock()
		asked = pos
		return 12, len(pos)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); logProgress(ctx, log, p, lag, 10*time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "msg=progress") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	line, _, _ := strings.Cut(buf.String(), "\n")
	for _, w := range []string{"msg=progress", "records=70", "lag=12", "partitions=2", "rate_per_s="} {
		if !strings.Contains(line, w) {
			t.Errorf("progress line %q lacks %q", line, w)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 {
		t.Errorf("lag asked for %v", asked)
	}
}
