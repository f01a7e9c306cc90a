package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// programTB lets the program use integration/harness, whose functions take
// a testing.TB, outside "go test". Fatalf and Skipf panic with a
// *stopError that runProgram recovers; Cleanup functions run, newest first,
// when runCleanups is called (at the end, or on SIGINT/SIGTERM).
//
// Only the methods the harness calls are implemented; the embedded nil
// interface makes any other call panic, which is a programming error here.
type programTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	dirs     []string
}

// stopError is what Fatalf and Skipf panic with.
type stopError struct {
	skip bool
	msg  string
}

func (e *stopError) Error() string { return e.msg }

func newProgramTB(name string) *programTB { return &programTB{name: name} }

func (t *programTB) Helper()      {}
func (t *programTB) Name() string { return t.name }
func (t *programTB) Failed() bool { return false }

func (t *programTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
}

func (t *programTB) Fatalf(format string, args ...any) {
	panic(&stopError{msg: fmt.Sprintf(format, args...)})
}

func (t *programTB) Fatal(args ...any) { panic(&stopError{msg: fmt.Sprint(args...)}) }

func (t *programTB) Skipf(format string, args ...any) {
	panic(&stopError{skip: true, msg: fmt.Sprintf(format, args...)})
}

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *programTB) TempDir() string {
	d, err := os.MkdirTemp("", "txsink-bench-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// runCleanups runs the registered cleanups, newest first, once.
func (t *programTB) runCleanups() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// catch runs f and turns a harness Fatalf/Skipf into an error.
func catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if se, ok := r.(*stopError); ok {
				err = se
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}
