package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/offsets"
)

// roundCounter is an engine.Observer counting committed records.
type roundCounter struct{ committed atomic.Int64 }

func (*roundCounter) Assigned(int, []offsets.Position) {}
func (*roundCounter) Revoked(int, string, []int32)     {}
func (*roundCounter) FenceConflict(int, error)         {}
func (*roundCounter) Waiting(int, error)               {}
func (c *roundCounter) Round(_ int, r engine.RoundStats) {
	if r.Outcome == "committed" {
		c.committed.Add(int64(r.Records))
	}
}

var _ engine.Observer = (*roundCounter)(nil)

// profileInProcess drains the main workload once more with the connector
// runtime inside this process (engine.Open and Start, the code "txsink
// run" calls) under the CPU profiler, and writes cpu_<mode>.pprof plus
// `go tool pprof -top` summaries into the output directory, and the heap
// profile taken at the drain's largest heap (heap_<mode>.pprof and its
// in-use top). The profiles also hold this program's own (idle)
// goroutines and memory.
func (b *bench) profileInProcess(ctx context.Context, mode string) error {
	w := b.mainWorkload
	if w == nil {
		return nil
	}
	if reason := b.budgetLeft(b.drainTimeout(w.Records, 30_000) - 30*time.Second); reason != "" {
		b.rep.CPUProfile = &ProfileSummary{Mode: mode, Skipped: reason}
		return nil
	}
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		return err
	}
	name := b.name("pprof")
	if err := createRowTable(ctx, b.pool, name); err != nil {
		return err
	}
	defer dropTable(context.WithoutCancel(ctx), b.pool, name)
	if err := os.MkdirAll(b.o.Out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(b.o.Out, "cpu_"+mode+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	obs := &roundCounter{}
	raw := map[string]string{
		"name":               strings.ReplaceAll(name, "_", "-"),
		"connector.class":    "postgres",
		"topics":             w.Topic,
		"connection.url":     b.dbURL,
		"delivery.guarantee": mode,
		"table.name.format":  name,
	}
	start := time.Now()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	c, err := engine.Open(ctx, reg, raw, engine.TaskOptions{
		Bootstrap:  []string{b.bootstrap},
		InstanceID: name,
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer:   obs,
	})
	if err != nil {
		pprof.StopCPUProfile()
		return err
	}
	c.Start(func(int, error) {})
	deadline := time.Now().Add(b.drainTimeout(w.Records, 2000))
	var heap peakHeap
	for obs.committed.Load() < int64(w.Records) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		heap.sample()
	}
	c.Stop()
	werr := c.Wait()
	pprof.StopCPUProfile()
	elapsed := time.Since(start)
	if got := obs.committed.Load(); got < int64(w.Records) {
		return fmt.Errorf("in-process %s drained %d of %d records (stop error: %v)", mode, got, w.Records, werr)
	}
	if err := checkRows(ctx, b.pool, name, w.Records); err != nil {
		return err
	}
	ps := &ProfileSummary{Mode: mode, File: filepath.Base(path), Seconds: elapsed.Seconds()}
	for _, v := range []struct {
		args []string
		dst  *string
		file string
	}{
		{[]string{"-top", "-nodecount=25"}, &ps.Top, "cpu_" + mode + "_top.txt"},
		{[]string{"-top", "-cum", "-nodecount=40"}, &ps.Cum, "cpu_" + mode + "_cum.txt"},
	} {
		out, err := exec.CommandContext(ctx, "go", append(append([]string{"tool", "pprof"}, v.args...), path)...).CombinedOutput()
		if err != nil {
			ps.Top = fmt.Sprintf("go tool pprof failed: %v\n%s", err, out)
			break
		}
		*v.dst = string(out)
		_ = os.WriteFile(filepath.Join(b.o.Out, v.file), out, 0o644)
	}
	b.rep.CPUProfile = ps
	b.logf("in-process %s profile: %s (%.1f s)", mode, path, elapsed.Seconds())
	if heap.prof.Len() > 0 {
		hpath := filepath.Join(b.o.Out, "heap_"+mode+".pprof")
		if err := os.WriteFile(hpath, heap.prof.Bytes(), 0o644); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-sample_index=inuse_space", "-top", "-nodecount=25", hpath).CombinedOutput()
		if err == nil {
			_ = os.WriteFile(filepath.Join(b.o.Out, "heap_"+mode+"_top.txt"), out, 0o644)
		}
		b.logf("in-process %s heap at its peak (%d MB in use): %s", mode, heap.peak>>20, hpath)
	}
	return nil
}

// peakHeap keeps the heap profile taken when the heap in use was largest,
// for what holds the memory of a drain (the profile's in-use figures are
// those of the last garbage collection before it).
type peakHeap struct {
	peak uint64
	prof bytes.Buffer
}

func (h *peakHeap) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse <= h.peak+h.peak/10 {
		return
	}
	h.peak = ms.HeapInuse
	h.prof.Reset()
	_ = pprof.Lookup("heap").WriteTo(&h.prof, 0)
}
