package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/internal/pglocal"
)

// TestDemo runs "txsink demo" non-interactively, as a newcomer's first
// command does: in-process Kafka, a throwaway PostgreSQL, a producer that
// aborts a fifth of its transactions, the worker's REST API with the
// connector created over it, and the exactly-once verdict.
func TestDemo(t *testing.T) {
	if _, err := pglocal.FindBinaries(); err != nil {
		t.Skipf("PostgreSQL server binaries are needed for the demo: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	v, err := runDemo(ctx, demoOptions{records: 3000, partitions: 3, abortRatio: 0.2, nonInteractive: true}, &out)
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	if !v.exact() || v.committed < 3000 || v.aborted == 0 {
		t.Fatalf("verdict %+v, want exact with aborted records upstream\n%s", v, out.String())
	}
	for _, want := range []string{"verdict     EXACT", "POST http://127.0.0.1:", "201 Created", "stopped with it"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The services end with the demo: no commands to try on them (before
	// issue 27 it printed "look around" curl commands for a stopped server).
	for _, banned := range []string{"look around", "curl ", "txsink connectors -url"} {
		if strings.Contains(out.String(), banned) {
			t.Errorf("non-interactive output has %q:\n%s", banned, out.String())
		}
	}
	t.Logf("demo: %d committed, %d aborted, exact, in %v", v.committed, v.aborted, time.Since(start).Round(time.Millisecond))
}

// TestDemoEndsWhenOutputIsNotATerminal: "txsink demo | tee demo.log"
// ends after the verdict; only a run on a terminal waits for Ctrl-C.
func TestDemoEndsWhenOutputIsNotATerminal(t *testing.T) {
	if _, err := pglocal.FindBinaries(); err != nil {
		t.Skipf("PostgreSQL server binaries are needed for the demo: %v", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if isTerminal(pw) {
		t.Fatal("a pipe taken for a terminal")
	}
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(pr)
		out <- string(b)
	}()
	done := make(chan int)
	go func() {
		var stderr bytes.Buffer
		done <- cmdDemo([]string{"-records", "1000", "-partitions", "2"}, pw, &stderr)
		pw.Close()
	}()
	select {
	case code := <-done:
		log := <-out
		if code != exitOK || !strings.Contains(log, "verdict     EXACT") || strings.Contains(log, "press Ctrl-C") {
			t.Fatalf("exit %d, output:\n%s", code, log)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the demo did not end after its verdict with its output on a pipe")
	}
}
