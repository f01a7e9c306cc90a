package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txsink/txsink/internal/failpoint"
)

// worker is one process slot of a lane ("txsink run"), or of the cluster
// of a cluster profile ("txsink serve"): the runner starts, signals and
// restarts its incarnations. While the fault executor holds it, the
// supervisor leaves it alone; otherwise an incarnation that exits is
// restarted (as a service manager would) and the exit is counted.
type worker struct {
	logName string // <logName>.log in logDir
	idx     int
	id      string // -worker-id
	binary  string
	args    []string
	logDir  string

	mu          sync.Mutex
	cur         *process
	held        bool
	incarnation int
	exits       map[string]int // unexpected exits by code
	notFired    int            // armed failpoints that did not fire in time
	started     time.Time      // of the current incarnation
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *os.File
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func (p *process) exitCode() int {
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode() // -1 when killed by a signal
}

// start starts a new incarnation and returns it; failpointSpec arms
// TXSINK_FAILPOINT ("" for none).
func (w *worker) start(failpointSpec string) (*process, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.startLocked(failpointSpec); err != nil {
		return nil, err
	}
	return w.cur, nil
}

func (w *worker) startLocked(failpointSpec string) error {
	w.incarnation++
	logPath := filepath.Join(w.logDir, w.logName+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n=== incarnation %d %s failpoint=%q\n", w.incarnation, time.Now().UTC().Format(time.RFC3339Nano), failpointSpec)
	cmd := exec.Command(w.binary, w.args...)
	cmd.Stdout, cmd.Stderr = out, out
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, failpoint.Env+"=") {
			env = append(env, kv)
		}
	}
	if failpointSpec != "" {
		env = append(env, failpoint.Env+"="+failpointSpec)
	}
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	w.cur = p
	w.started = time.Now()
	return nil
}

// hold stops supervision and returns the current incarnation.
func (w *worker) hold() *process {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = true
	return w.cur
}

func (w *worker) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = false
}

// supervise restarts an unheld worker whose process exited.
func (w *worker) supervise() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held || w.cur == nil || !w.cur.exited() || time.Since(w.started) < time.Second {
		return // at most one restart a second, like a service manager's back-off
	}
	code := w.cur.exitCode()
	w.exits[fmt.Sprint(code)]++
	_ = w.startLocked("")
}

// signal sends sig to the current incarnation.
func (w *worker) signal(sig syscall.Signal) {
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p != nil && !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stopGracefully sends SIGCONT and SIGTERM and waits up to d, then SIGKILLs.
// It returns true when the process ended on its own.
func stopGracefully(p *process, d time.Duration) bool {
	if p == nil || p.exited() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.wait(d) {
		return true
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return false
}

func kill(p *process) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// procState reads a process's state letter from /proc (T: stopped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
