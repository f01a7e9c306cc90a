package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildTxsink builds cmd/txsink (as "make build" does, without the version
// stamp) into dir and returns the binary's path.
func buildTxsink(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "txsink")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/txsink")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/txsink: %v\n%s", err, out)
	}
	return bin, nil
}

// roundLine is one debug "round" log line of a task (JSON log format;
// durations are nanoseconds).
type roundLine struct {
	Time    time.Time     `json:"time"`
	Msg     string        `json:"msg"`
	Outcome string        `json:"outcome"`
	Records int           `json:"records"`
	Batches int           `json:"batches"`
	Prepare time.Duration `json:"prepare"`
	Decide  time.Duration `json:"decide"`
	Commit  time.Duration `json:"commit"`
	Total   time.Duration `json:"total"`
	// WrittenAhead is the round's batches written ahead while the round
	// before it ran (pipelined rounds).
	WrittenAhead int `json:"written_ahead"`
	// Positions is the "partitions assigned and fenced" line's.
	Positions string `json:"positions"`
}

// process is a running "txsink run" (or any child whose stderr carries
// txsink's JSON log).
type process struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu        sync.Mutex
	rounds    []roundLine
	committed int // records of committed rounds
	assigned  bool
	// busy0 and busyLast sample the machine's busy CPU (machineBusy) at
	// the assignment and at the latest committed round: the drain's
	// whole-machine cost.
	busy0, busyLast float64
	// fenced is the first "partitions assigned and fenced" line.
	fenced fenceLine
	tail   []string // last log lines, for errors
	notify chan struct{}
}

// startTxsink runs "txsink run" with the connector file at debug level and
// JSON logs, with env added to its environment, parsing the round lines
// as they come.
func startTxsink(bin, bootstrap, cfgPath, workerID string, env ...string) (*process, error) {
	cmd := exec.Command(bin, "run", "-bootstrap", bootstrap, "-config", cfgPath,
		"-worker-id", workerID, "-log-level", "debug", "-log-format", "json")
	cmd.Env = append(os.Environ(), env...)
	p := &process{cmd: cmd, done: make(chan struct{}), notify: make(chan struct{}, 1)}
	if err := startScanned(cmd, 1<<20, p.line, func() { close(p.done); p.poke() }); err != nil {
		return nil, err
	}
	return p, nil
}

// startScanned starts cmd, hands each line of its stderr (up to max
// bytes) to line, and calls exited once the output ended and the process
// was waited for. Its stdout is discarded.
func startScanned(cmd *exec.Cmd, max int, line func([]byte), exited func()) error {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, max), max)
		for sc.Scan() {
			line(sc.Bytes())
		}
		_ = cmd.Wait()
		exited()
	}()
	return nil
}

func (p *process) poke() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *process) line(b []byte) {
	var r roundLine
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, string(b))
	if len(p.tail) > 20 {
		p.tail = p.tail[1:]
	}
	if json.Unmarshal(b, &r) != nil {
		return
	}
	switch r.Msg {
	case "round":
		p.rounds = append(p.rounds, r)
		if r.Outcome == "committed" {
			p.committed += r.Records
			p.busyLast = machineBusy()
		}
		p.poke()
	case "partitions assigned and fenced":
		if !p.assigned {
			p.busy0 = machineBusy()
			p.fenced = parseFence(r.Time, r.Positions)
		}
		p.assigned = true
		p.poke()
	}
}

func (p *process) committedRecords() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed
}

// fence returns the first "partitions assigned and fenced" line.
func (p *process) fence() fenceLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced
}

func (p *process) isAssigned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.assigned
}

func (p *process) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ""
	for _, l := range p.tail {
		s += l + "\n"
	}
	return s
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until cond holds, the process exits, or timeout.
func (p *process) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if p.exited() {
			return fmt.Errorf("txsink exited early:\n%s", p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("timed out after %v; last log lines:\n%s", timeout, p.logTail())
		case <-p.notify:
		case <-tick.C:
		}
	}
	return nil
}

// usage is the resource use of a finished child process.
type usage struct {
	CPUSeconds float64
	PeakRSSMB  float64
	// MachineCPUSeconds is the machine's busy CPU from the assignment to
	// the last committed round.
	MachineCPUSeconds float64
}

// stop sends SIGTERM, waits (killing after 30 s) and returns the child's
// CPU time and peak RSS from its rusage.
func (p *process) stop() usage {
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
	p.mu.Lock()
	if p.busy0 > 0 && p.busyLast > p.busy0 {
		u.MachineCPUSeconds = p.busyLast - p.busy0
	}
	p.mu.Unlock()
	return u
}

// peakRSS reads the process's peak resident set (VmHWM) from /proc while
// it runs. (rusage's ru_maxrss is no use here: Linux keeps it across
// execve, so a child reports at least the parent's resident set at fork
// time, and this program holds the rows of the raw ceilings in memory.)
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func rusageOf(cmd *exec.Cmd) usage {
	if cmd.ProcessState == nil {
		return usage{}
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return usage{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return usage{CPUSeconds: tv(ru.Utime) + tv(ru.Stime)}
}

// roundsSnapshot returns a copy of the rounds seen so far.
func (p *process) roundsSnapshot() []roundLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]roundLine(nil), p.rounds...)
}

// drainWindow returns the span from the start of the first committed round
// to the end of the last one.
func drainWindow(rounds []roundLine) time.Duration {
	var first, last time.Time
	for _, r := range rounds {
		if r.Outcome != "committed" {
			continue
		}
		start := r.Time.Add(-r.Total)
		if first.IsZero() || start.Before(first) {
			first = start
		}
		if r.Time.After(last) {
			last = r.Time
		}
	}
	return last.Sub(first)
}

// writeConnectorFile writes cfg as a Kafka Connect create body.
func writeConnectorFile(dir string, cfg map[string]string) (string, error) {
	b, err := json.MarshalIndent(map[string]any{"name": cfg["name"], "config": cfg}, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, cfg["name"]+".json")
	return path, os.WriteFile(path, b, 0o600)
}
