package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The cluster profile (Profile.Cluster): the lanes' connectors run on one
// cluster of "txsink serve" workers in distributed mode (docs/cluster.md),
// created through the REST API, each with tasks.max = Workers. A worker
// fault hits one worker, so every lane's tasks on it; WorkerJoin adds a
// worker and WorkerLeave stops (SIGTERM) the last one added. The workers
// keep the connectors' passwords out of Kafka as the file config provider
// references them.

// cluster is the shared workers of a cluster run.
type cluster struct {
	p       *Profile
	dir     string
	base    map[string]string // worker settings shared by every worker
	args    []string
	secrets string // directory of the password files

	mu      sync.Mutex
	workers []*worker // base workers, then joined ones
	left    map[*worker]bool
	urls    map[*worker]string
}

func (c *cluster) all() []*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*worker(nil), c.workers...)
}

// active returns the workers that should be running (supervised).
func (c *cluster) active() []*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*worker
	for _, w := range c.workers {
		if !c.left[w] {
			out = append(out, w)
		}
	}
	return out
}

func newCluster(p *Profile, nonce uint32) (*cluster, error) {
	dir := filepath.Join(p.Env.Dir, "cluster")
	c := &cluster{p: p, dir: dir, secrets: filepath.Join(dir, "secrets"), left: map[*worker]bool{}, urls: map[*worker]string{}}
	if err := os.MkdirAll(c.secrets, 0o700); err != nil {
		return nil, err
	}
	group := fmt.Sprintf("chaos-%s-%d-%08x", p.Name, p.Seed, nonce)
	bootstrap := p.Env.Bootstrap
	if p.Env.KafkaCluster != nil && p.Env.ProxiedBootstrap != "" {
		bootstrap = p.Env.ProxiedBootstrap // the network faults reach the workers' Kafka clients too
	}
	c.base = map[string]string{
		"bootstrap.servers":    bootstrap,
		"group.id":             group,
		"config.storage.topic": group + "-configs",
		"status.storage.topic": group + "-status",
		// The broker's default: 3 on the harness's Kafka cluster (so
		// a broker fault leaves the workers' topics available), 1 on
		// a lone broker.
		"config.storage.replication.factor":         "-1",
		"status.storage.replication.factor":         "-1",
		"status.storage.partitions":                 "3",
		"session.timeout.ms":                        fmt.Sprint(p.SessionTimeout.Milliseconds()),
		"heartbeat.interval.ms":                     fmt.Sprint(max(p.SessionTimeout.Milliseconds()/6, 100)),
		"rebalance.timeout.ms":                      "30000",
		"scheduled.rebalance.max.delay.ms":          "0",
		"config.providers":                          "file",
		"config.providers.file.param.allowed.paths": c.secrets,
		"log.level":                                 "info",
	}
	for _, l := range p.Lanes {
		if l.UnsafeNoFencing || l.UnsafeNoRecovery {
			c.args = []string{"-allow-unsafe-test-settings"} // txsink refuses the switches otherwise
		}
	}
	for range p.Workers {
		if _, err := c.add(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// add prepares a worker on a free port (not started).
func (c *cluster) add() (*worker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	c.mu.Lock()
	idx := len(c.workers)
	c.mu.Unlock()
	id := fmt.Sprintf("w%d", idx+1)
	file := filepath.Join(c.dir, id+".properties")
	keys := make([]string, 0, len(c.base))
	for k := range c.base {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, c.base[k])
	}
	fmt.Fprintf(&b, "listen=%s\n", addr)
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	w := &worker{logName: "cluster-" + id, idx: idx, id: id, binary: c.p.Env.Binary, logDir: c.p.Env.Dir, exits: map[string]int{},
		args: append([]string{"serve", "-config", file}, c.args...)}
	c.mu.Lock()
	c.workers = append(c.workers, w)
	c.urls[w] = "http://" + addr
	c.mu.Unlock()
	return w, nil
}

// start starts every base worker and waits until each is healthy.
func (c *cluster) start(ctx context.Context) error {
	for _, w := range c.all() {
		if _, err := w.start(""); err != nil {
			return fmt.Errorf("start %s: %w", w.id, err)
		}
	}
	for _, w := range c.all() {
		if err := c.healthy(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// healthy waits until the worker answers GET /health with 200.
func (c *cluster) healthy(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		code, _, err := c.call(ctx, w, http.MethodGet, "/health", nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker %s not healthy: %v (%d %v)", w.id, ctx.Err(), code, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var clusterHTTP = &http.Client{Timeout: time.Minute}

func (c *cluster) call(ctx context.Context, w *worker, method, path string, body any) (int, []byte, error) {
	c.mu.Lock()
	base := c.urls[w]
	c.mu.Unlock()
	return callJSON(ctx, method, base+path, body)
}

// restURLs returns the REST base URLs of the workers that should be
// running.
func (c *cluster) restURLs() []string {
	var out []string
	for _, w := range c.active() {
		c.mu.Lock()
		out = append(out, c.urls[w])
		c.mu.Unlock()
	}
	return out
}

// callJSON sends body (nil: none) as JSON and returns the status and the
// answer's body.
func callJSON(ctx context.Context, method, u string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := clusterHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// createConnector creates a lane's connector through the first worker,
// retrying while the cluster rebalances. Its passwords go to a file that
// the configuration references.
func (c *cluster) createConnector(ctx context.Context, l *lane, conf map[string]string) error {
	conf, err := c.referenceSecrets(l.Name, conf)
	if err != nil {
		return err
	}
	conf["tasks.max"] = fmt.Sprint(c.p.Workers)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body, err := c.call(ctx, c.all()[0], http.MethodPost, "/connectors", map[string]any{"name": l.connector, "config": conf})
		if err == nil && (code == http.StatusCreated || code == http.StatusConflict && strings.Contains(string(body), "already exists")) {
			return nil
		}
		if err == nil && code != http.StatusConflict {
			return fmt.Errorf("creating connector %s: %d %s", l.connector, code, body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating connector %s: %d %s %v", l.connector, code, body, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// referenceSecrets moves a configuration's passwords (connection.password,
// the password of connection.url) to a properties file and references it.
func (c *cluster) referenceSecrets(lane string, conf map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range conf {
		out[k] = v
	}
	pw := conf["connection.password"]
	if u, err := url.Parse(conf["connection.url"]); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			pw = p
			u.User = url.User(u.User.Username())
			out["connection.url"] = u.String()
		}
	}
	if pw == "" {
		delete(out, "connection.password")
		return out, nil
	}
	file := filepath.Join(c.secrets, lane+".properties")
	if err := os.WriteFile(file, []byte("password="+pw+"\n"), 0o600); err != nil {
		return nil, err
	}
	out["connection.password"] = "${file:" + file + ":password}"
	return out, nil
}

// join starts one more worker and waits until it is healthy.
func (c *cluster) join(ctx context.Context) error {
	w, err := c.add()
	if err != nil {
		return err
	}
	if _, err := w.start(""); err != nil {
		return err
	}
	return c.healthy(ctx, w)
}

// leave stops the last worker added by a join (SIGTERM: it finishes its
// rounds and leaves the group), for good. With none, it stops nothing.
func (c *cluster) leave() error {
	c.mu.Lock()
	var last *worker
	for _, w := range c.workers[c.p.Workers:] {
		if !c.left[w] {
			last = w
		}
	}
	if last != nil {
		c.left[last] = true
	}
	c.mu.Unlock()
	if last == nil {
		return errNothingToLeave
	}
	cur := last.hold()
	if !cur.Stop(termWait) {
		return fmt.Errorf("%s did not stop within %v of SIGTERM (killed)", last.id, termWait)
	}
	return nil
}

// errNothingToLeave: a WorkerLeave with no joined worker up.
var errNothingToLeave = errors.New("no joined worker to leave")

// taskWorkers returns the active workers the connector's status shows
// running a task of it, first the one with the lowest task id.
func (c *cluster) taskWorkers(ctx context.Context, connector string) ([]*worker, error) {
	var st struct {
		Tasks []struct {
			ID       int    `json:"id"`
			State    string `json:"state"`
			WorkerID string `json:"worker_id"`
		} `json:"tasks"`
	}
	var lastErr error
	for _, w := range c.active() {
		code, body, err := c.call(ctx, w, http.MethodGet, "/connectors/"+url.PathEscape(connector)+"/status", nil)
		if err != nil || code != http.StatusOK {
			lastErr = fmt.Errorf("status of %s from %s: %d %v", connector, w.id, code, err)
			continue
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return nil, fmt.Errorf("status of %s: %w", connector, err)
		}
		sort.Slice(st.Tasks, func(i, j int) bool { return st.Tasks[i].ID < st.Tasks[j].ID })
		var out []*worker
		for _, t := range st.Tasks {
			if t.State != "RUNNING" {
				continue
			}
			for _, w := range c.active() {
				c.mu.Lock()
				u := c.urls[w]
				c.mu.Unlock()
				if strings.TrimPrefix(u, "http://") == t.WorkerID && !slices.Contains(out, w) {
					out = append(out, w)
				}
			}
		}
		return out, nil
	}
	return nil, lastErr
}
