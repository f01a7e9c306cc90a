package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Cluster is a cluster of "txsink serve" workers in distributed mode
// (group.id), for tests: each worker has a fixed address on 127.0.0.1 (its
// id, kept across restarts), JSON logs in Dir, and can be killed, stopped
// gracefully, frozen (SIGSTOP) and started again. Every worker is killed
// when the test ends.
type Cluster struct {
	tb  testing.TB
	opt ClusterOptions

	mu      sync.Mutex
	workers []*Worker
}

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Bootstrap is the Kafka broker's address.
	Bootstrap string
	// Settings are worker settings for every worker (the worker file);
	// group.id and the topics default to names unique to the test.
	Settings map[string]string
	// Env is extra environment for every worker; Args are extra flags
	// of "txsink serve".
	Env  []string
	Args []string
	// Dir receives the worker files and logs (default: a temporary
	// directory of the test).
	Dir string
}

// NewCluster returns a cluster with no worker yet; Add starts them.
func NewCluster(tb testing.TB, opt ClusterOptions) *Cluster {
	tb.Helper()
	if opt.Dir == "" {
		opt.Dir = tb.TempDir()
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	name := uniqueName(tb)
	s := map[string]string{
		"group.id":                          name,
		"config.storage.topic":              name + "-configs",
		"status.storage.topic":              name + "-status",
		"config.storage.replication.factor": "1",
		"status.storage.replication.factor": "1",
		"status.storage.partitions":         "3",
		"log.format":                        "json",
		"task.restart.backoff.initial.ms":   "200",
		"task.restart.backoff.max.ms":       "2000",
	}
	for k, v := range opt.Settings {
		s[k] = v
	}
	opt.Settings = s
	c := &Cluster{tb: tb, opt: opt}
	tb.Cleanup(func() {
		for _, w := range c.Workers() {
			w.Kill()
			if tb.Failed() {
				tb.Logf("worker %s log (tail):\n%s", w.ID, lastBytes(w.Logs(), 4000))
			}
		}
	})
	return c
}

// GroupID returns the cluster's group.id.
func (c *Cluster) GroupID() string { return c.opt.Settings["group.id"] }

// Setting returns a worker setting of the cluster.
func (c *Cluster) Setting(k string) string { return c.opt.Settings[k] }

// Workers returns the workers added so far, in order.
func (c *Cluster) Workers() []*Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Worker(nil), c.workers...)
}

// Add starts a new worker on a free port and waits until it is healthy
// (it read the config topic to its end).
func (c *Cluster) Add(ctx context.Context) *Worker {
	c.tb.Helper()
	port, err := freePort()
	if err != nil {
		c.tb.Fatal(err)
	}
	c.mu.Lock()
	w := &Worker{c: c, Index: len(c.workers), ID: fmt.Sprintf("127.0.0.1:%d", port)}
	w.URL = "http://" + w.ID
	c.workers = append(c.workers, w)
	c.mu.Unlock()
	w.file = filepath.Join(c.opt.Dir, fmt.Sprintf("worker-%d.properties", w.Index))
	keys := make([]string, 0, len(c.opt.Settings))
	for k := range c.opt.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, c.opt.Settings[k])
	}
	fmt.Fprintf(&b, "listen=%s\nbootstrap.servers=%s\n", w.ID, c.opt.Bootstrap)
	if err := os.WriteFile(w.file, []byte(b.String()), 0o600); err != nil {
		c.tb.Fatal(err)
	}
	if err := w.Start(""); err != nil {
		c.tb.Fatal(err)
	}
	if err := w.WaitHealthy(ctx); err != nil {
		c.tb.Fatalf("worker %s: %v\n%s", w.ID, err, lastBytes(w.Logs(), 3000))
	}
	return w
}

// Worker is one "txsink serve" process slot of a Cluster.
type Worker struct {
	c *Cluster
	// Index numbers the workers from 0; ID is the worker's address and
	// id (host:port), URL its REST URL.
	Index   int
	ID, URL string
	file    string

	mu    sync.Mutex
	proc  *Process    // the current incarnation (nil before Start)
	exits []time.Time // when each incarnation ended
}

// Exits returns when each incarnation that ended so far ended, in order.
func (w *Worker) Exits() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.exits...)
}

// LogPath is the worker's log file (every incarnation, JSON lines).
func (w *Worker) LogPath() string {
	return filepath.Join(w.c.opt.Dir, fmt.Sprintf("worker-%d.log", w.Index))
}

// Logs returns the worker's log.
func (w *Worker) Logs() string {
	b, _ := os.ReadFile(w.LogPath())
	return string(b)
}

// Start starts an incarnation (TXSINK_FAILPOINT=failpoint when not "").
func (w *Worker) Start(failpoint string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proc != nil && !w.proc.Exited() {
		return fmt.Errorf("worker %s is running", w.ID)
	}
	out, err := os.OpenFile(w.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	env := append(append([]string(nil), w.c.opt.Env...), "TXSINK_FAILPOINT="+failpoint)
	p, err := StartProcess(TxsinkBinary(w.c.tb), append([]string{"serve", "-config", w.file}, w.c.opt.Args...), env, out)
	if err != nil {
		out.Close()
		return err
	}
	go func() {
		<-p.Done()
		w.mu.Lock()
		w.exits = append(w.exits, time.Now())
		w.mu.Unlock()
		out.Close()
	}()
	w.proc = p
	return nil
}

// current returns the current incarnation (nil before Start).
func (w *Worker) current() *Process {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc
}

// Running reports whether the current incarnation is alive.
func (w *Worker) Running() bool {
	p := w.current()
	return p != nil && !p.Exited()
}

// PID returns the current incarnation's process id (0 when none).
func (w *Worker) PID() int {
	if p := w.current(); p != nil {
		return p.Pid()
	}
	return 0
}

// Signal sends sig to the current incarnation.
func (w *Worker) Signal(sig syscall.Signal) {
	if p := w.current(); p != nil {
		p.Signal(sig)
	}
}

// Kill SIGKILLs the current incarnation and waits for it.
func (w *Worker) Kill() { w.current().Kill() }

// Stop stops the current incarnation with SIGTERM and waits up to d for
// it (then kills it); it reports whether it ended on its own.
func (w *Worker) Stop(d time.Duration) bool { return w.current().Stop(d) }

// Wait waits up to d for the current incarnation to exit.
func (w *Worker) Wait(d time.Duration) bool {
	p := w.current()
	return p == nil || p.Wait(d)
}

// Stopped reports whether the current incarnation is stopped (SIGSTOP,
// or a failpoint that froze it).
func (w *Worker) Stopped() bool {
	p := w.current()
	return p != nil && !p.Exited() && p.State() == "T"
}

// WaitHealthy waits until GET /health answers 200.
func (w *Worker) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if !w.Running() {
			return fmt.Errorf("worker %s exited", w.ID)
		}
		code, _, err := w.Do(ctx, http.MethodGet, "/health", nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker %s not healthy: %v (last: %d %v)", w.ID, ctx.Err(), code, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Minute}

// Do sends a request to the worker's API and returns the status code and
// body; body may be nil, a string (sent as is) or a value (JSON).
func (w *Worker) Do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// ConnectOffsets is the body of GET and PATCH /connectors/{name}/offsets
// (and of "txsink offsets -output json"), in Kafka Connect's shape
// (KIP-875).
type ConnectOffsets struct {
	Offsets []struct {
		Partition struct {
			Topic     string `json:"kafka_topic"`
			Partition int32  `json:"kafka_partition"`
		} `json:"partition"`
		Offset struct {
			Offset int64 `json:"kafka_offset"`
		} `json:"offset"`
	} `json:"offsets"`
}
