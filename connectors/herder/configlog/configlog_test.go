package configlog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/engine"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func cluster(t *testing.T) (*kfake.Cluster, Options) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opt := Options{Topic: "configs", Bootstrap: c.ListenAddrs(), Log: quiet}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := EnsureTopic(context.Background(), kadm.NewClient(cl), TopicSpec{Name: "configs", Setting: "config.storage.topic", Partitions: 1, Exact: true, Replication: 1}); err != nil {
		t.Fatal(err)
	}
	return c, opt
}

func startLog(t *testing.T, opt Options) *ConfigLog {
	t.Helper()
	l, err := NewConfigLog(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); l.Close(); <-done })
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestConfigLogRoundTrip: what the leader writes is what every reader
// sees, a transaction whole; deletes leave nothing.
func TestConfigLogRoundTrip(t *testing.T) {
	_, opt := cluster(t)
	ctx := ctxT(t)
	changes := make(chan Change, 16)
	opt.OnChange = func(c Change) { changes <- c }
	l := startLog(t, opt)
	if _, err := l.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(ctx, opt, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cfg := map[string]string{"name": "a", "connection.password": "${file:/s.properties:pw}"}
	now := time.Now()
	recs := append([]Record{PutConnector("a", cfg, now, now), PutTarget("a", engine.TargetPaused)}, PutTasks("a", cfg, 3, 0)...)
	off, err := w.Write(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFor(ctx, off+1); err != nil {
		t.Fatal(err)
	}
	c, ok := l.Connector("a")
	if !ok || c.Target != engine.TargetPaused || c.Tasks != 3 || c.Config["connection.password"] != cfg["connection.password"] {
		t.Fatalf("connector a: %+v %v", c, ok)
	}
	if _, err := w.Write(ctx, PutTasks("a", cfg, 1, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, []Record{PutRestart("a", "r1", true, false)}); err != nil {
		t.Fatal(err)
	}
	off, err = w.Write(ctx, DeleteConnector("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.WaitFor(ctx, off+1)
	if _, ok := l.Connector("a"); ok || len(l.Connectors()) != 0 {
		t.Fatalf("deleted connector still there: %v", l.Connectors())
	}
	var restarts []Restart
	for len(restarts) == 0 {
		select {
		case ch := <-changes:
			restarts = append(restarts, ch.Restarts...)
		case <-ctx.Done():
			t.Fatal("no restart request seen")
		}
	}
	if restarts[0] != (Restart{Connector: "a", ID: "r1", IncludeTasks: true}) {
		t.Errorf("restart request %+v", restarts[0])
	}

	// A new reader replays the log: no connector, and the old restart
	// request is history, not a request.
	opt2 := opt
	seen := make(chan Change, 16)
	opt2.OnChange = func(c Change) { seen <- c }
	l2 := startLog(t, opt2)
	if _, err := l2.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	if len(l2.Connectors()) != 0 {
		t.Errorf("replay: %v", l2.Connectors())
	}
	for len(seen) > 0 {
		if ch := <-seen; len(ch.Restarts) > 0 {
			t.Errorf("replayed restart requests: %v", ch.Restarts)
		}
	}
}

// TestWriterFencing: a new leader's writer fences the old one, whose
// writes then fail with ErrFenced and never reach the topic.
func TestWriterFencing(t *testing.T) {
	_, opt := cluster(t)
	ctx := ctxT(t)
	l := startLog(t, opt)
	old, err := NewWriter(ctx, opt, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Write(ctx, []Record{PutTarget("x", engine.TargetRunning)}); err != nil {
		t.Fatal(err)
	}
	newer, err := NewWriter(ctx, opt, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if _, err := old.Write(ctx, []Record{PutConnector("zombie", map[string]string{"name": "zombie"}, time.Now(), time.Now())}); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed leader's write: %v, want ErrFenced", err)
	}
	off, err := newer.Write(ctx, []Record{PutConnector("b", map[string]string{"name": "b"}, time.Now(), time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFor(ctx, off+1); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Connector("zombie"); ok {
		t.Error("the deposed leader's write is visible")
	}
	if _, ok := l.Connector("b"); !ok {
		t.Error("the new leader's write is missing")
	}
}

// TestUnknownVersionRefused: a record of a newer version is left alone and
// reported; the records around it apply.
func TestUnknownVersionRefused(t *testing.T) {
	_, opt := cluster(t)
	ctx := ctxT(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(opt.Bootstrap...), kgo.DefaultProduceTopic(opt.Topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	good := PutConnector("a", map[string]string{"name": "a"}, time.Now(), time.Now())
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Key: []byte(good.Key), Value: good.Value},
		&kgo.Record{Key: []byte("target-state-a"), Value: []byte(`{"v":2,"state":"PAUSED","why":"v2 semantics"}`)},
		&kgo.Record{Key: []byte("connector-b"), Value: []byte(`{"config":{"name":"b"}}`)},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	l := startLog(t, opt)
	if _, err := l.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	if c, ok := l.Connector("a"); !ok || c.Target != engine.TargetRunning {
		t.Errorf("a: %+v %v (the v2 target state must not apply)", c, ok)
	}
	if _, ok := l.Connector("b"); ok {
		t.Error("a record without a version applied")
	}
	u := l.Unknown()
	if len(u) != 2 || !strings.Contains(u[0], "target-state-a at offset 1") || !strings.Contains(u[0], "version 2") {
		t.Errorf("unknown records: %q", u)
	}
}

// TestStatusGenerations: a status from a deposed owner (older generation,
// another worker) does not replace the new owner's.
func TestStatusGenerations(t *testing.T) {
	// One partition: the log applies its records in the order they were
	// written, so once a later record is applied every earlier one was
	// read (and applied or refused).
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	got := make(chan struct{}, 64)
	l, err := NewStatusLog(Options{Topic: "status", Bootstrap: c.ListenAddrs(), Log: quiet, OnChange: func(Change) { got <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(rctx) }()
	defer func() { cancel(); l.Close(); <-done }()
	wait := func(cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-got:
			case <-ctx.Done():
				t.Fatal("status not applied")
			}
		}
	}
	l.PutTask("c", 0, Status{State: engine.StateRunning, WorkerID: "b:8083", Generation: 6})
	wait(func() bool { s, ok := l.Task("c", 0); return ok && s.WorkerID == "b:8083" })
	l.PutTask("c", 0, Status{State: engine.StateFailed, Trace: "zombie", WorkerID: "a:8083", Generation: 5})
	l.PutTask("c", 1, Status{State: engine.StateRunning, WorkerID: "a:8083", Generation: 5})
	wait(func() bool { _, ok := l.Task("c", 1); return ok }) // written after the deposed owner's
	if s, _ := l.Task("c", 0); s.WorkerID != "b:8083" || s.State != engine.StateRunning {
		t.Errorf("task 0: %+v (a deposed owner's status applied)", s)
	}
	l.PutTask("c", 0, Status{State: engine.StatePaused, WorkerID: "b:8083", Generation: 6})
	wait(func() bool { s, _ := l.Task("c", 0); return s.State == engine.StatePaused })
	l.Delete("c", 2)
	wait(func() bool { _, ok0 := l.Task("c", 0); _, ok1 := l.Task("c", 1); return !ok0 && !ok1 })
}

// TestStatusTopics: active topic records (Connect's keys) accumulate per
// connector, and their tombstones report a reset.
func TestStatusTopics(t *testing.T) {
	// One partition: once a later record is applied, every earlier one
	// was (active topic records alone report no change).
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	changes := make(chan Change, 64)
	l, err := NewStatusLog(Options{Topic: "status", Bootstrap: c.ListenAddrs(), Log: quiet, OnChange: func(ch Change) { changes <- ch }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(rctx) }()
	defer func() { cancel(); l.Close(); <-done }()
	if k := StatusTopicKey("c-1", "orders.v2"); k != "status-topic-orders.v2:connector-c-1" {
		t.Errorf("key %q", k)
	}
	l.PutTopic("c-1", "orders.v2")
	l.PutTopic("c-1", "refunds")
	l.PutTopic("other", "orders.v2")
	l.PutTask("sentinel", 0, Status{State: engine.StateRunning, WorkerID: "a:8083", Generation: 1})
	for _, ok := l.Task("sentinel", 0); !ok; _, ok = l.Task("sentinel", 0) {
		select {
		case <-changes:
		case <-ctx.Done():
			t.Fatal("status not applied")
		}
	}
	if !slices.Equal(l.Topics("c-1"), []string{"orders.v2", "refunds"}) || len(l.Topics("other")) != 1 {
		t.Fatalf("topics %v %v", l.Topics("c-1"), l.Topics("other"))
	}
	l.DeleteTopics("c-1", l.Topics("c-1"))
	for len(l.Topics("c-1")) != 0 {
		select {
		case ch := <-changes:
			if len(ch.TopicsReset) > 0 && !slices.Equal(ch.TopicsReset, []string{"c-1"}) {
				t.Errorf("reset reported for %v", ch.TopicsReset)
			}
		case <-ctx.Done():
			t.Fatalf("topics after the reset %v", l.Topics("c-1"))
		}
	}
	if len(l.Topics("other")) != 1 {
		t.Error("the reset of c-1 touched another connector")
	}
}
