package main

// How "txsink verify" shows its progress on standard error: a bar redrawn
// in place on a terminal, a line now and then otherwise (logs, CI).

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/txsink/txsink/internal/verify"
)

// verifyProgress renders verify.Progress reports.
type verifyProgress struct {
	out      io.Writer
	bar      bool          // redraw one line in place
	interval time.Duration // between lines when !bar
	start    time.Time

	mu       sync.Mutex
	phase    string
	lastLine time.Time
	drawn    bool // a bar is on screen, to be ended with a newline
}

// newVerifyProgress returns a renderer for mode: "auto" (a bar on a
// terminal, lines otherwise), "bar", "lines" or "none" (nil).
func newVerifyProgress(mode string, out io.Writer, interval time.Duration) (*verifyProgress, error) {
	p := &verifyProgress{out: out, interval: interval, start: time.Now()}
	switch mode {
	case "auto":
		p.bar = isTerminal(out)
	case "bar":
		p.bar = true
	case "lines":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("-progress: must be auto, bar, lines or none, got %q", mode)
	}
	return p, nil
}

// report is a verify.Config.Progress.
func (p *verifyProgress) report(pr verify.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	changed := pr.Phase != p.phase
	p.phase = pr.Phase
	if p.bar {
		fmt.Fprintf(p.out, "\r%s", progressBar(pr, now.Sub(p.start), 30))
		p.drawn = true
		if pr.Phase == "done" {
			fmt.Fprintln(p.out)
			p.drawn = false
		}
		return
	}
	if !changed && now.Sub(p.lastLine) < p.interval {
		return
	}
	p.lastLine = now
	fmt.Fprintln(p.out, progressLine(pr, now.Sub(p.start)))
}

// end finishes a bar left on screen (an audit that failed midway).
func (p *verifyProgress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.out)
		p.drawn = false
	}
}

// progressLine is the line form: "verify: scanning Kafka: 1200/5000
// offsets (24%), 1100 records, 3.2s".
func progressLine(pr verify.Progress, elapsed time.Duration) string {
	switch pr.Phase {
	case "sink":
		return "verify: reading the sink (rows, stored offsets, prepared transactions)"
	case "done":
		return fmt.Sprintf("verify: scanned Kafka: %d offsets, %d committed records, %s", pr.Total, pr.Records, elapsed.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("verify: scanning Kafka: %d/%d offsets (%d%%), %d records, %s", pr.Scanned, pr.Total, percent(pr), pr.Records, elapsed.Round(100*time.Millisecond))
}

// progressBar is the terminal form: "scan [#######.......]  45% 1200/5000 offsets 3.2s".
func progressBar(pr verify.Progress, elapsed time.Duration, width int) string {
	if pr.Phase == "sink" {
		return "verify: reading the sink…"
	}
	fill := 0
	if pr.Total > 0 {
		fill = int(int64(width) * min(pr.Scanned, pr.Total) / pr.Total)
	} else if pr.Phase == "done" {
		fill = width
	}
	return fmt.Sprintf("verify: [%s%s] %3d%% %d/%d offsets, %d records, %s   ",
		strings.Repeat("#", fill), strings.Repeat(".", width-fill), percent(pr), pr.Scanned, pr.Total, pr.Records, elapsed.Round(100*time.Millisecond))
}

func percent(pr verify.Progress) int64 {
	if pr.Total <= 0 {
		if pr.Phase == "done" {
			return 100
		}
		return 0
	}
	return 100 * min(pr.Scanned, pr.Total) / pr.Total
}
