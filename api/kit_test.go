package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// fakeSink is an in-memory sink: offsets with fences, rows counted. It
// implements connectors.Sink for the at_least_once and exactly_once_sink
// paths the API tests run against an in-memory Kafka (kfake).
type fakeSink struct {
	st   *fakeStore
	name string
}

// fakeStore is the "database" shared by every sink of one test.
type fakeStore struct {
	mu      sync.Mutex
	pos     map[string]map[string]map[int32]offsets.Position // connector → topic → partition
	rows    map[string]int
	inDoubt map[string][]twophase.BatchID
	fence   int64
	// failWrites makes the next WriteLocal calls fail with a terminal
	// error that quotes the canary password.
	failWrites int
}

func newFakeStore() *fakeStore {
	return &fakeStore{pos: map[string]map[string]map[int32]offsets.Position{}, rows: map[string]int{}, inDoubt: map[string][]twophase.BatchID{}}
}

func (s *fakeStore) part(conn, topic string) map[int32]offsets.Position {
	if s.pos[conn] == nil {
		s.pos[conn] = map[string]map[int32]offsets.Position{}
	}
	if s.pos[conn][topic] == nil {
		s.pos[conn][topic] = map[int32]offsets.Position{}
	}
	return s.pos[conn][topic]
}

var _ connectors.Sink = (*fakeSink)(nil)

func (f *fakeSink) Prepare(context.Context, *twophase.Batch) error        { return errors.New("fake: no 2PC") }
func (f *fakeSink) Commit(context.Context, twophase.BatchID) error        { return nil }
func (f *fakeSink) Abort(context.Context, twophase.BatchID) error         { return nil }
func (f *fakeSink) Preflight(context.Context, connectors.Guarantee) error { return nil }
func (f *fakeSink) Guarantees() (connectors.Guarantees, error)            { return connectors.AllGuarantees, nil }
func (f *fakeSink) Close()                                                {}

func (f *fakeSink) InDoubt(_ context.Context, connector string) ([]twophase.BatchID, error) {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	return append([]twophase.BatchID(nil), f.st.inDoubt[connector]...), nil
}

func (f *fakeSink) Acquire(_ context.Context, topic string, partitions []int32) (map[int32]offsets.Position, error) {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	out := map[int32]offsets.Position{}
	ps := f.st.part(f.name, topic)
	for _, p := range partitions {
		f.st.fence++
		pos, ok := ps[p]
		if !ok {
			pos = offsets.Position{Topic: topic, Partition: p, Next: offsets.Unset}
		}
		pos.Fence = f.st.fence
		ps[p] = pos
		out[p] = pos
	}
	return out, nil
}

func (f *fakeSink) Initialize(_ context.Context, topic string, partition int32, fence, next int64) error {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	ps := f.st.part(f.name, topic)
	pos := ps[partition]
	if pos.Fence != fence {
		return offsets.ErrFenced
	}
	pos.Next = next
	ps[partition] = pos
	return nil
}

func (f *fakeSink) WriteLocal(_ context.Context, b *twophase.Batch, guard offsets.Guard, _ connectors.Order) error {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	if f.st.failWrites > 0 {
		f.st.failWrites--
		return &connectors.Terminal{Err: errors.New("fake: table is gone (password " + canary + " rejected)")}
	}
	ps := f.st.part(f.name, b.ID.Topic)
	pos := ps[b.ID.Partition]
	if guard == offsets.GuardCAS && (pos.Fence != b.Fence || pos.Next != b.Prev) {
		return &offsets.FencedError{Connector: f.name, Topic: b.ID.Topic, Partition: b.ID.Partition, WantNext: b.Prev, Fence: b.Fence, GotNext: pos.Next, GotFenc: pos.Fence}
	}
	pos.Next = b.ID.NextOffset()
	ps[b.ID.Partition] = pos
	f.st.rows[f.name] += len(b.Records)
	return nil
}

func (f *fakeSink) Positions(context.Context) ([]offsets.Position, error) {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	var out []offsets.Position
	for _, ps := range f.st.pos[f.name] {
		for _, p := range ps {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fakeSink) ResetOffsets(_ context.Context, all bool, positions []offsets.Position) error {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	if all {
		delete(f.st.pos, f.name)
	}
	for _, p := range positions {
		ps := f.st.part(f.name, p.Topic)
		f.st.fence++
		ps[p.Partition] = offsets.Position{Topic: p.Topic, Partition: p.Partition, Next: p.Next, Fence: f.st.fence}
	}
	return nil
}

// fakeSpec registers the fake sink: "fake" / io.txsink.test.FakeSink, with
// a required fake.url (whose password is hidden) and a PASSWORD setting.
func fakeSpec(st *fakeStore) connectors.Spec {
	return connectors.Spec{
		Name: "fake", Class: "io.txsink.test.FakeSink", Version: "0.1",
		Defs: config.Defs{
			{Name: "fake.url", Type: config.String, Required: true, Group: "Connection", Doc: "Where the fake writes."},
			{Name: "fake.secret", Type: config.Password, Group: "Connection", Doc: "A password."},
			{Name: "fake.mode", Type: config.String, Default: "ok", Enum: []string{"ok", "strict"}, Group: "Mapping", Doc: "Mode."},
		},
		Validate: func(v config.Values, _ connectors.Policy) config.Errors {
			if v["fake.mode"] == "strict" && v[config.KeyDelivery] == config.AtMostOnce {
				return config.Errors{{Name: "fake.mode", Msg: "strict mode needs a delivery guarantee other than at_most_once"}}
			}
			return nil
		},
		// The secret is bound to the user and host of fake.url.
		Identity: func(v config.Values) (string, error) {
			u, err := url.Parse(v["fake.url"])
			if err != nil {
				return "", err
			}
			return u.User.Username() + "@" + u.Host, nil
		},
		New: func(_ context.Context, _ connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
			if u, err := url.Parse(v["fake.url"]); err == nil && u.Hostname() == fakeDownHost {
				return nil, fmt.Errorf("fake: cannot connect to %s: connection refused", u.Host)
			}
			return &fakeSink{st: st, name: c.Name}, nil
		},
	}
}

// fakeDownHost in fake.url makes the fake sink fail to open, as a sink
// whose database is down.
const fakeDownHost = "down.invalid"

// env is one API under test: a real worker with the fake sink, on an
// in-memory Kafka cluster.
type env struct {
	t      *testing.T
	srv    *httptest.Server
	worker *herder.Standalone
	store  *fakeStore
	kafka  *kfake.Cluster
	logs   *syncBuffer
	dir    string
	// restartInitial is the first restart delay of a failed task (50 ms
	// when zero), set before a restart of the env.
	restartInitial time.Duration
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type envOpt func(*Options)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"), kfake.ClusterID("kfake-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	e := &env{t: t, store: newFakeStore(), kafka: kc, logs: &syncBuffer{}, dir: t.TempDir()}
	e.start(opts...)
	return e
}

func (e *env) start(opts ...envOpt) {
	t := e.t
	reg := &connectors.Registry{}
	if err := reg.Register(fakeSpec(e.store)); err != nil {
		t.Fatal(err)
	}
	var w *herder.Standalone
	base := NewScrubHandler(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: LevelTrace}), func() []string {
		if w == nil {
			return nil
		}
		return w.Secrets()
	})
	levels := NewLevels(slog.LevelDebug)
	promReg := prometheus.NewRegistry()
	initial := 50 * time.Millisecond
	if e.restartInitial > 0 {
		initial = e.restartInitial
	}
	var err error
	w, err = herder.NewStandalone(reg, herder.StandaloneOptions{DataDir: e.dir, Engine: engine.Options{
		WorkerID: "worker-1", AdvertisedID: "127.0.0.1:8083", Bootstrap: e.kafka.ListenAddrs(),
		Log:          levels.Logger(base, "txsink.worker"),
		ConnectorLog: func(n string) *slog.Logger { return levels.Logger(base, "txsink.connectors."+n) },
		Restart:      engine.RestartPolicy{Enabled: true, Initial: initial, Max: max(initial, time.Second)},
		Registerer:   promReg,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	o := Options{Herder: w, Levels: levels, Metrics: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}), Log: levels.Logger(base, "txsink.api"), Version: "1.2.3", Commit: "abc123", MaxBodyBytes: 64 << 10}
	for _, f := range opts {
		f(&o)
	}
	e.worker = w
	e.srv = httptest.NewServer(New(o))
	t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.srv != nil {
		e.srv.Close()
		e.worker.Close()
		e.srv = nil
	}
}

// restart stops the worker and starts a new one on the same data dir.
func (e *env) restart(opts ...envOpt) {
	e.stop()
	e.start(opts...)
}

type resp struct {
	code int
	body []byte
	hdr  http.Header
}

func (r resp) json(t *testing.T) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.body)
	}
	return v
}

// do sends a request; body may be a string (sent as is) or a value
// (encoded as JSON).
func (e *env) do(method, path string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.send(req)
}

// send sends req and reads the response.
func (e *env) send(req *http.Request) resp {
	e.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, body: b, hdr: res.Header}
}

// must checks the status code.
func (e *env) must(code int, method, path string, body any) resp {
	e.t.Helper()
	r := e.do(method, path, body)
	if r.code != code {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.code, code, r.body)
	}
	return r
}

// waitState polls the status until the connector and its tasks are in
// state (or fails).
func (e *env) waitState(name string, state engine.State, tasks int) engine.ConnectorStatus {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := e.worker.Status(context.Background(), name)
		ok := err == nil && st.Connector.State == state && len(st.Tasks) == tasks
		for _, ts := range st.Tasks {
			ok = ok && ts.State == state
		}
		if ok {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("connector %s not %s with %d tasks: %+v (err %v)", name, state, tasks, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fakeConfig(name string) map[string]string {
	return map[string]string{
		"connector.class":    "io.txsink.test.FakeSink",
		"topics":             "orders",
		"tasks.max":          "1",
		"delivery.guarantee": "exactly_once_sink",
		"fake.url":           "fake://writer:" + canary + "@127.0.0.1/db",
		"fake.secret":        canary,
		"session.timeout.ms": "6000",
		"batch.linger.ms":    "5",
		"name":               name,
	}
}

// canary is a password that must never appear in a response, a log line
// or a metric.
const canary = "Canary-Pw-9f3e1c"

// waitLag waits until the status counts want records of lag over the
// partitions of the connector's task 0 (every one known): the task has
// seen that many records it has not written. It is what a check that
// nothing was written waits for: a task that was not held would have had
// them in hand.
func (e *env) waitLag(name string, want int64) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := e.worker.Status(context.Background(), name)
		lag, known := int64(0), err == nil && len(st.Tasks) > 0 && len(st.Tasks[0].Partitions) > 0
		if known {
			for _, p := range st.Tasks[0].Partitions {
				known = known && p.Lag >= 0
				lag += p.Lag
			}
		}
		if known && lag == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task 0 of %s: lag %d (every partition known: %v), want %d: %+v (err %v)", name, lag, known, want, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPartitions waits until the connector's task 0 owns n partitions.
func (e *env) waitPartitions(name string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := e.worker.Status(context.Background(), name)
		if err == nil && len(st.Tasks) > 0 && len(st.Tasks[0].Partitions) == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task 0 of %s does not own %d partitions: %+v (err %v)", name, n, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
