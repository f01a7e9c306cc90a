package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txsink/txsink/integration/harness"
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
	cur         *harness.Process
	held        bool
	incarnation int
	exits       map[string]int // unexpected exits by code
	notFired    int            // armed failpoints that did not fire in time
	started     time.Time      // of the current incarnation
}

// start starts a new incarnation and returns it; failpointSpec arms
// TXSINK_FAILPOINT ("" for none).
func (w *worker) start(failpointSpec string) (*harness.Process, error) {
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
	// A new incarnation starts with nothing armed in place (see arm).
	if err := os.WriteFile(w.failpointFile(), nil, 0o644); err != nil {
		out.Close()
		return err
	}
	// An empty TXSINK_FAILPOINT disarms one the test's environment may set.
	p, err := harness.StartProcess(w.binary, w.args, []string{failpoint.Env + "=" + failpointSpec, failpoint.FileEnv + "=" + w.failpointFile()}, out)
	if err != nil {
		out.Close()
		return err
	}
	go func() {
		<-p.Done()
		out.Close()
	}()
	w.cur = p
	w.started = time.Now()
	return nil
}

func (w *worker) failpointFile() string { return filepath.Join(w.logDir, w.logName+".failpoint") }

// arm re-arms the running incarnation in place with spec ("" disarms):
// it writes the worker's failpoint file and sends SIGUSR1, which the
// failpoint package answers by arming from the file.
func (w *worker) arm(p *harness.Process, spec string) error {
	if err := os.WriteFile(w.failpointFile(), []byte(spec), 0o644); err != nil {
		return err
	}
	if out, err := os.OpenFile(filepath.Join(w.logDir, w.logName+".log"), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintf(out, "\n=== %s armed in place: failpoint=%q\n", time.Now().UTC().Format(time.RFC3339Nano), spec)
		out.Close()
	}
	p.Signal(syscall.SIGUSR1)
	return nil
}

// owned returns the partitions the current incarnation holds, from its
// log: those of its "partitions assigned and fenced" lines less those of
// its "partitions revoked" lines. Read it while the process is stopped.
func (w *worker) owned() (map[int32]bool, error) {
	b, err := os.ReadFile(filepath.Join(w.logDir, w.logName+".log"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	if i := strings.LastIndex(s, "\n=== incarnation "); i >= 0 {
		s = s[i:]
	}
	owned := map[int32]bool{}
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.Contains(line, `msg="partitions assigned and fenced"`):
			for _, m := range assignedPartRE.FindAllStringSubmatch(line, -1) {
				if p, err := strconv.ParseInt(m[1], 10, 32); err == nil {
					owned[int32(p)] = true
				}
			}
		case strings.Contains(line, `msg="partitions revoked"`):
			if m := revokedPartsRE.FindStringSubmatch(line); m != nil {
				for _, f := range strings.Fields(m[1]) {
					if p, err := strconv.ParseInt(f, 10, 32); err == nil {
						delete(owned, int32(p))
					}
				}
			}
		}
	}
	return owned, nil
}

var (
	assignedPartRE = regexp.MustCompile(`\[(\d+)\]=`)
	revokedPartsRE = regexp.MustCompile(`partitions="?\[([\d ]*)\]`)
)

// uptime is how long the current incarnation has run.
func (w *worker) uptime() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.started)
}

// hold stops supervision and returns the current incarnation.
func (w *worker) hold() *harness.Process {
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
	if w.held || w.cur == nil || !w.cur.Exited() || time.Since(w.started) < time.Second {
		return // at most one restart a second, like a service manager's back-off
	}
	code := w.cur.ExitCode()
	w.exits[fmt.Sprint(code)]++
	_ = w.startLocked("")
}

// signal sends sig to the current incarnation.
func (w *worker) signal(sig syscall.Signal) {
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		p.Signal(sig)
	}
}

// sleep waits d, or until ctx ends.
var sleep = harness.Sleep
