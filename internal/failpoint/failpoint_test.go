package failpoint

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// count reports the hits counted for a point, as arm keyed it.
func count(name, connector string) int {
	mu.Lock()
	defer mu.Unlock()
	return counts[key{name, connector}]
}

func TestArmParsesScopeCountAndStop(t *testing.T) {
	defer arm("")
	arm(" after-poll@conn-a:3:stop, after-write:2 ,,in-fence")
	want := map[key]point{
		{AfterPoll, "conn-a"}: {n: 3, stop: true},
		{AfterWrite, ""}:      {n: 2},
		{InFence, ""}:         {n: 1},
	}
	if len(armed) != len(want) {
		t.Fatalf("armed %v, want %v", armed, want)
	}
	for k, p := range want {
		if armed[k] != p {
			t.Errorf("%v: %+v, want %+v", k, armed[k], p)
		}
	}
	if !Armed(AfterPoll) || Armed(AfterCommit) {
		t.Errorf("Armed: after-poll %v (want true), after-commit %v (want false)", Armed(AfterPoll), Armed(AfterCommit))
	}
}

// A scoped point counts its connector's passes only; an unscoped one
// counts every pass, from sites that know their connector or not. The
// points are armed past the test's hits, so nothing fires.
func TestHitCountsByScope(t *testing.T) {
	defer arm("")
	arm("after-write@a:100,after-poll:100")
	HitIn("a", AfterWrite)
	HitIn("b", AfterWrite)
	Hit(AfterWrite)
	HitIn("a", AfterPoll)
	HitIn("b", AfterPoll)
	Hit(AfterPoll)
	for _, c := range []struct {
		name, connector string
		want            int
	}{{AfterWrite, "a", 1}, {AfterWrite, "", 0}, {AfterPoll, "", 3}, {AfterPoll, "a", 0}} {
		if got := count(c.name, c.connector); got != c.want {
			t.Errorf("%s@%q counted %d, want %d", c.name, c.connector, got, c.want)
		}
	}
	arm("after-write@a:100")
	if got := count(AfterWrite, "a"); got != 0 {
		t.Errorf("re-armed: count %d, want 0", got)
	}
}

// TestSignalRearms runs this test binary as a child with FileEnv set and
// nothing armed; SIGUSR1 arms it from the file with a scoped kill point,
// which the child then passes: it must die of SIGKILL there.
func TestSignalRearms(t *testing.T) {
	if os.Getenv("TXSINK_FAILPOINT_CHILD") == "1" {
		child()
		return
	}
	file := filepath.Join(t.TempDir(), "spec")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalRearms$")
	cmd.Env = append(os.Environ(), "TXSINK_FAILPOINT_CHILD=1", FileEnv+"="+file, Env+"=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "unarmed\n" {
		t.Fatalf("child said %q, want unarmed", line)
	}
	if err := os.WriteFile(file, []byte("after-commit@conn-x:2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (%v), want killed by SIGKILL at its second conn-x pass", err, cmd.ProcessState)
	}
}

// child passes after-commit in other connectors until it is armed, then
// twice in conn-x: the second pass must kill it.
func child() {
	fmt.Println("unarmed")
	deadline := time.Now().Add(20 * time.Second)
	for !Armed(AfterCommit) && time.Now().Before(deadline) {
		HitIn("conn-y", AfterCommit)
		time.Sleep(10 * time.Millisecond)
	}
	HitIn("conn-y", AfterCommit)
	HitIn("conn-x", AfterCommit)
	HitIn("conn-x", AfterCommit)
	os.Exit(3) // not killed
}

// TestStopHoldsCallerUntilContinued: a stop point returns only after the
// SIGCONT that ends the freeze. The child creates a file right after the
// point; it must not be there while the child is stopped, and must be once
// the child, continued, exits.
func TestStopHoldsCallerUntilContinued(t *testing.T) {
	if file := os.Getenv("TXSINK_FAILPOINT_AFTER"); file != "" {
		// Hit from a goroutine of its own while the test's goroutine
		// (locked to its thread) waits: as in the runtime, the thread
		// that hits the point is seldom the one the kernel stops first.
		runtime.LockOSThread()
		code := make(chan int)
		go func() {
			HitIn("conn-s", BeforeWrite)
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				code <- 2
			}
			code <- 0
		}()
		os.Exit(<-code)
	}
	after := filepath.Join(t.TempDir(), "after")
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopHoldsCallerUntilContinued$")
	cmd.Env = append(os.Environ(), "TXSINK_FAILPOINT_AFTER="+after, Env+"="+BeforeWrite+"@conn-s:1:stop")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	stat := fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Skipf("no %s: %v", stat, err)
		}
		// "pid (comm) state ...": the state follows the last ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop at its point within a minute")
		}
	}
	if _, err := os.Stat(after); err == nil {
		t.Fatal("the child ran past its stop point before it was continued")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("the continued child ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the child did not carry on within a minute of SIGCONT")
	}
	if _, err := os.Stat(after); err != nil {
		t.Fatalf("the continued child did not carry on past its point: %v", err)
	}
}
