package main

// "txsink serve" as a child of the bench, for the scale rows: a standalone
// worker holding many connectors, or one worker of a cluster. Connectors
// are created through its REST API; its JSON log lines are parsed as they
// come, per connector.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// serveLine is the part of a log line of "txsink serve" the bench reads.
type serveLine struct {
	roundLine
	Connector  string  `json:"connector"`
	Task       int     `json:"task"`
	Positions  string  `json:"positions"`
	Partitions []int32 `json:"partitions"`
}

// connLog is what one worker's log says about one connector.
type connLog struct {
	// running is the first "connector running" line (the sink opened and
	// the tasks started).
	running time.Time
	// fences are the "partitions assigned and fenced" lines of its tasks;
	// owned is what each task owns by those and the "partitions revoked"
	// lines, and lastChange the latest of either.
	fences     []fenceLine
	owned      map[int]map[int32]bool
	lastChange time.Time
	// rounds are the round lines; committed counts the records of the
	// committed ones, and firstCommit is the end of the first committed
	// round with records.
	rounds      []roundLine
	committed   int
	firstCommit time.Time
}

// fenceLine is one "partitions assigned and fenced" line: when it was
// logged, its partitions, and the earliest fence bump among them.
type fenceLine struct {
	at         time.Time
	firstBump  time.Time
	partitions []int32
}

// fenceRE matches one position of the line: topic[p]=next(fence F). The
// PostgreSQL offsets store makes a fence the bump's clock_timestamp() in
// milliseconds (offsets/postgres.go, fenceNow), so F dates the bump.
var fenceRE = regexp.MustCompile(`\[(\d+)\]=(-?\d+)\(fence (\d+)\)`)

func parseFence(at time.Time, positions string) fenceLine {
	f := fenceLine{at: at}
	for _, m := range fenceRE.FindAllStringSubmatch(positions, -1) {
		if p, err := strconv.ParseInt(m[1], 10, 32); err == nil {
			f.partitions = append(f.partitions, int32(p))
		}
		ms, err := strconv.ParseInt(m[3], 10, 64)
		if err != nil {
			continue
		}
		// A fence far from now is a counter (fence + 1 within one
		// millisecond), not a time.
		if t := time.UnixMilli(ms); t.Sub(at).Abs() < time.Hour && (f.firstBump.IsZero() || t.Before(f.firstBump)) {
			f.firstBump = t
		}
	}
	return f
}

// serveProc is a running "txsink serve".
type serveProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time
	url     string // http://host:port

	mu    sync.Mutex
	conns map[string]*connLog
	// busyLast and lastCommit: the machine's busy CPU (machineBusy) at the
	// latest committed round, and when.
	busyLast   float64
	lastCommit time.Time
	tail       []string
	notify     chan struct{}
}

// startServe runs "txsink serve" with args (debug level, JSON logs) and
// env added to the bench's environment; url is where its API listens.
func startServe(bin, url string, args, env []string) (*serveProc, error) {
	cmd := exec.Command(bin, append([]string{"serve", "-log-level", "debug", "-log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &serveProc{cmd: cmd, done: make(chan struct{}), url: url, conns: map[string]*connLog{}, notify: make(chan struct{}, 1)}
	p.started = time.Now()
	if err := startScanned(cmd, 4<<20, p.line, func() { close(p.done); p.poke() }); err != nil {
		return nil, err
	}
	return p, nil
}

// allCommitted reports whether every one of conns has committed a round.
func (p *serveProc) allCommitted(conns []string) bool {
	all := true
	p.view(func(m map[string]*connLog) {
		for _, n := range conns {
			if c := m[n]; c == nil || c.firstCommit.IsZero() {
				all = false
				return
			}
		}
	})
	return all
}

func (p *serveProc) poke() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *serveProc) conn(name string) *connLog {
	c := p.conns[name]
	if c == nil {
		c = &connLog{owned: map[int]map[int32]bool{}}
		p.conns[name] = c
	}
	return c
}

func (p *serveProc) line(b []byte) {
	var l serveLine
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, string(b))
	if len(p.tail) > 20 {
		p.tail = p.tail[1:]
	}
	if json.Unmarshal(b, &l) != nil || l.Connector == "" {
		return
	}
	switch l.Msg {
	case "round":
		c := p.conn(l.Connector)
		c.rounds = append(c.rounds, l.roundLine)
		if l.Outcome == "committed" {
			c.committed += l.Records
			if c.firstCommit.IsZero() && l.Records > 0 {
				c.firstCommit = l.Time
			}
			p.busyLast, p.lastCommit = machineBusy(), l.Time
		}
		p.poke()
	case "partitions assigned and fenced":
		c := p.conn(l.Connector)
		f := parseFence(l.Time, l.Positions)
		c.fences = append(c.fences, f)
		if c.owned[l.Task] == nil {
			c.owned[l.Task] = map[int32]bool{}
		}
		for _, pt := range f.partitions {
			c.owned[l.Task][pt] = true
		}
		c.lastChange = l.Time
		p.poke()
	case "partitions revoked":
		c := p.conn(l.Connector)
		for _, pt := range l.Partitions {
			delete(c.owned[l.Task], pt)
		}
		c.lastChange = l.Time
		p.poke()
	case "connector running":
		if c := p.conn(l.Connector); c.running.IsZero() {
			c.running = l.Time
		}
		p.poke()
	}
}

// view runs f with the connectors' logs locked.
func (p *serveProc) view(f func(map[string]*connLog)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.conns)
}

func (p *serveProc) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ""
	for _, l := range p.tail {
		s += l + "\n"
	}
	return s
}

func (p *serveProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until cond holds (checked on every parsed line and every
// 100 ms), the process exits, or timeout.
func (p *serveProc) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if p.exited() {
			return fmt.Errorf("%s: txsink serve exited early:\n%s", what, p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s: timed out after %v; last log lines:\n%s", what, timeout, p.logTail())
		case <-p.notify:
		case <-tick.C:
		}
	}
	return nil
}

// waitHealthy waits until GET /health answers 200.
func (p *serveProc) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ok := false
	check := func() bool {
		if !ok {
			code, _, err := p.do(ctx, http.MethodGet, "/health", nil)
			ok = err == nil && code == http.StatusOK
		}
		return ok
	}
	return p.waitFor(ctx, timeout, "worker healthy", check)
}

// kill SIGKILLs the process and returns its resource use; the peak RSS is
// read just before the signal.
func (p *serveProc) kill() usage {
	hwm := peakRSS(p.cmd.Process.Pid)
	_ = p.cmd.Process.Kill()
	<-p.done
	u := rusageOf(p.cmd)
	u.PeakRSSMB = hwm
	return u
}

// stop sends SIGTERM, waits (killing after 30 s) and returns the process's
// resource use.
func (p *serveProc) stop() usage {
	hwm := peakRSS(p.cmd.Process.Pid)
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	u := rusageOf(p.cmd)
	u.PeakRSSMB = hwm
	return u
}

var restClient = &http.Client{Timeout: 2 * time.Minute}

// do sends a request to the worker's API: body is nil or a value sent as
// JSON.
func (p *serveProc) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := restClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// createConnector POSTs /connectors, retrying the 409 a rebalance answers
// (as Kafka Connect's clients do).
func (p *serveProc) createConnector(ctx context.Context, name string, cfg map[string]string, initial string) error {
	body := map[string]any{"name": name, "config": cfg}
	if initial != "" {
		body["initial_state"] = initial
	}
	code, out, err := p.doRetry(ctx, http.MethodPost, "/connectors", body)
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		return fmt.Errorf("POST /connectors %s: %d %s", name, code, out)
	}
	return nil
}

// doRetry is do, retrying for up to 20 s the 409 a worker answers while
// the cluster rebalances (as Kafka Connect's clients do).
func (p *serveProc) doRetry(ctx context.Context, method, path string, body any) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		code, out, err := p.do(ctx, method, path, body)
		if err != nil || code != http.StatusConflict || attempt >= 100 {
			return code, out, err
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// taskState is a task's part of Kafka Connect's status body.
type taskState struct {
	ID       int    `json:"id"`
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace"`
}

// statuses returns every connector's task states (GET
// /connectors?expand=status).
func (p *serveProc) statuses(ctx context.Context) (map[string][]taskState, error) {
	code, out, err := p.do(ctx, http.MethodGet, "/connectors?expand=status", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /connectors?expand=status: %d %s", code, out)
	}
	var body map[string]struct {
		Status struct {
			Tasks []taskState `json:"tasks"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &body); err != nil {
		return nil, err
	}
	res := map[string][]taskState{}
	for name, s := range body {
		res[name] = s.Status.Tasks
	}
	return res, nil
}

// allInState reports whether each of names has at least one task and all
// its tasks are in state; otherwise it returns the first that is not (and
// its tasks).
func allInState(st map[string][]taskState, names []string, state string) (bool, string) {
	for _, n := range names {
		ts := st[n]
		if len(ts) == 0 {
			return false, n + ": no task yet"
		}
		for _, t := range ts {
			if t.State != state {
				return false, fmt.Sprintf("%s: task %d %s %s", n, t.ID, t.State, oneLine(t.Trace))
			}
		}
	}
	return true, ""
}

// quantilesOf returns the p50 and max of xs (seconds), or zeros.
func quantilesOf(xs []float64) (p50, maxv float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return median(s), s[len(s)-1]
}

// counter returns the value of a Prometheus counter of the connector from
// GET /metrics (0 when the worker has none).
func (p *serveProc) counter(ctx context.Context, metric, connector string) (float64, error) {
	code, out, err := p.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d", code)
	}
	prefix := metric + `{connector="` + connector + `"} `
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}
