package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test started (a txsink worker). Its
// methods are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts binary with args; env is added to the test's
// environment (later entries win), out receives stdout and stderr (nil:
// discarded). It does not stop the process: the caller does (Stop, Kill).
func StartProcess(binary string, args, env []string, out io.Writer) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return StartCommand(cmd, out)
}

// StartCommand starts cmd as prepared by the caller (arguments,
// environment, directory); out receives stdout and stderr (nil:
// discarded). The caller stops the process (Stop, Kill).
func StartCommand(cmd *exec.Cmd, out io.Writer) (*Process, error) {
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to d for the process to exit and reports whether it did.
func (p *Process) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// ExitCode returns the exit status of an exited process: -1 when a signal
// ended it (or while it runs).
func (p *Process) ExitCode() int {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig unless the process has exited.
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop continues the process (in case it is stopped), sends SIGTERM and
// waits up to d; then it kills it. It reports whether the process ended on
// its own.
func (p *Process) Stop(d time.Duration) bool {
	if p == nil || p.Exited() {
		return true
	}
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	if p.Wait(d) {
		return true
	}
	p.Kill()
	return false
}

// Kill continues and kills the process (SIGKILL) and waits for its end.
func (p *Process) Kill() {
	if p == nil || p.Exited() {
		return
	}
	p.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// State returns the process's state letter from /proc ("T": stopped,
// "S": sleeping, …; "" once gone).
func (p *Process) State() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
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

// EnvTxsinkBin names a txsink binary built from the code under test
// (CGO_ENABLED=0 go build ./cmd/txsink) that TxsinkBinary returns instead
// of building one: .ci/run builds it once for every test binary of every
// lane.
const EnvTxsinkBin = "TXSINK_TEST_TXSINK_BIN"

var (
	binMu   sync.Mutex
	binPath string
)

// TxsinkBinary builds cmd/txsink once per test binary and returns its path
// (with TXSINK_TEST_TXSINK_BIN set, that binary, never built here). The
// build is removed at the end of Main (without Main: when tb ends).
func TxsinkBinary(tb testing.TB) string {
	tb.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if binPath != "" {
		return binPath
	}
	if bin := os.Getenv(EnvTxsinkBin); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			tb.Fatalf("harness: %s: %v", EnvTxsinkBin, err)
		}
		binPath = bin
		return binPath
	}
	root, err := moduleRoot()
	if err != nil {
		tb.Fatalf("harness: %v", err)
	}
	dir, err := os.MkdirTemp("", "txsink-bin-")
	if err != nil {
		tb.Fatalf("harness: %v", err)
	}
	mainMu.Lock()
	sharedMode := mainRunning
	mainMu.Unlock()
	register(tb, sharedMode, resource{name: "txsink binary", terminate: func(context.Context) error {
		binMu.Lock()
		binPath = ""
		binMu.Unlock()
		return os.RemoveAll(dir)
	}})
	path := filepath.Join(dir, "txsink")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/txsink")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("harness: go build ./cmd/txsink: %v\n%s", err, out)
	}
	binPath = path
	return path
}

// moduleRoot returns the directory of the go.mod above the working
// directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Sleep waits d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
