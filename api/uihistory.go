package api

// What /ui remembers between requests: each connector's stored-position
// advance and lag over the last minutes (a ring buffer of samples, drawn
// as small SVG charts) and each task's last known partitions, shown while
// the task is FAILED or PAUSED and its status has none.

import (
	"context"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// DefaultUIHistoryEvery and DefaultUIHistoryKeep: a sample every 5 s for
// the last 10 minutes.
const (
	DefaultUIHistoryEvery = 5 * time.Second
	DefaultUIHistoryKeep  = 10 * time.Minute
)

// UIHistory keeps, for the /ui page, samples of each connector's rate and
// lag and its tasks' last known positions, in memory. Run samples every
// connector's status at an interval; a page render adds a sample too.
// Safe for concurrent use.
type UIHistory struct {
	h     Herder
	every time.Duration
	keep  time.Duration
	log   *slog.Logger

	mu    sync.Mutex
	conns map[string]*uiConnHistory
}

// uiSample is one look at a connector.
type uiSample struct {
	At time.Time
	// Next is the sum of the owned partitions' stored next offsets; Parts
	// the partitions summed (a rate is only taken between samples of the
	// same partitions).
	Next  int64
	Parts string
	// Lag is the summed lag (-1 when a partition's is unknown); Rate the
	// stored positions' advance per second since the sample before (-1
	// for the first sample or after a change of partitions).
	Lag  int64
	Rate float64
}

type uiConnHistory struct {
	samples []uiSample // oldest first
	last    map[int]uiLastKnown
}

// uiLastKnown are a task's partitions as last seen with any.
type uiLastKnown struct {
	At         time.Time
	Partitions []engine.PartitionStatus
}

// NewUIHistory returns a history that samples h every interval (default
// DefaultUIHistoryEvery) and keeps keep of samples (default
// DefaultUIHistoryKeep).
func NewUIHistory(h Herder, every, keep time.Duration, log *slog.Logger) *UIHistory {
	if every <= 0 {
		every = DefaultUIHistoryEvery
	}
	if keep <= 0 {
		keep = DefaultUIHistoryKeep
	}
	if log == nil {
		log = slog.Default()
	}
	return &UIHistory{h: h, every: every, keep: keep, log: log, conns: map[string]*uiConnHistory{}}
}

// Run samples every connector's status each interval until ctx ends.
func (u *UIHistory) Run(ctx context.Context) {
	t := time.NewTicker(u.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.sampleAll(ctx)
		}
	}
}

func (u *UIHistory) sampleAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, u.every)
	defer cancel()
	names, err := u.h.Connectors(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, n := range names {
		live[n] = true
		st, err := u.h.Status(ctx, n)
		if err != nil {
			continue
		}
		u.observe(st, time.Now())
	}
	u.mu.Lock()
	for n := range u.conns {
		if !live[n] {
			delete(u.conns, n)
		}
	}
	u.mu.Unlock()
}

// observe adds a sample of st and remembers its tasks' partitions. Two
// observations closer than a fifth of the interval (a page render right
// after the sampler) make one sample.
func (u *UIHistory) observe(st engine.ConnectorStatus, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.conns[st.Name]
	if c == nil {
		c = &uiConnHistory{last: map[int]uiLastKnown{}}
		u.conns[st.Name] = c
	}
	s := uiSample{At: now, Lag: 0, Rate: -1}
	var parts []string
	for _, t := range st.Tasks {
		if len(t.Partitions) > 0 {
			c.last[t.ID] = uiLastKnown{At: now, Partitions: append([]engine.PartitionStatus(nil), t.Partitions...)}
		}
		for _, p := range t.Partitions {
			s.Next += max(p.NextOffset, 0)
			parts = append(parts, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
			if p.Lag < 0 || s.Lag < 0 {
				s.Lag = -1
			} else {
				s.Lag += p.Lag
			}
		}
	}
	if len(parts) == 0 {
		s.Lag = -1 // nothing owned: no lag to draw, not 0
	}
	s.Parts = strings.Join(parts, ",")
	if n := len(c.samples); n > 0 {
		prev := c.samples[n-1]
		if now.Sub(prev.At) < u.every/5 {
			return
		}
		if prev.Parts == s.Parts && s.Parts != "" {
			s.Rate = max(float64(s.Next-prev.Next)/now.Sub(prev.At).Seconds(), 0)
		}
	}
	c.samples = append(c.samples, s)
	cut := 0
	for cut < len(c.samples) && now.Sub(c.samples[cut].At) > u.keep {
		cut++
	}
	c.samples = c.samples[cut:]
}

// lastKnown returns the task's last known partitions, if any.
func (u *UIHistory) lastKnown(name string, task int) (uiLastKnown, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.conns[name]
	if c == nil {
		return uiLastKnown{}, false
	}
	l, ok := c.last[task]
	return l, ok
}

// samples returns a copy of the connector's samples, oldest first.
func (u *UIHistory) samples(name string) []uiSample {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.conns[name]
	if c == nil {
		return nil
	}
	return append([]uiSample(nil), c.samples...)
}

// uiChart is one small chart of a series.
type uiChart struct {
	Title  string
	Latest string // the last value, formatted
	Max    string // the top of the scale
	Span   string // the time the chart covers
	SVG    template.HTML
	Points int
}

// charts draws the connector's rate and lag.
func (u *UIHistory) charts(name string, now time.Time) []uiChart {
	s := u.samples(name)
	rate := make([]chartPoint, 0, len(s))
	lag := make([]chartPoint, 0, len(s))
	for _, x := range s {
		if x.Rate >= 0 {
			rate = append(rate, chartPoint{x.At, x.Rate})
		}
		if x.Lag >= 0 {
			lag = append(lag, chartPoint{x.At, float64(x.Lag)})
		}
	}
	// The charts cover the samples kept: from a minute (a worker that
	// just started) up to the whole history.
	span := time.Minute
	if len(s) > 0 {
		span = min(max(now.Sub(s[0].At), span), u.keep)
	}
	return []uiChart{
		drawChart("rate (offsets stored per second)", rate, now, span, "#2f6fdf"),
		drawChart("lag (records)", lag, now, span, "#c2571a"),
	}
}

type chartPoint struct {
	At time.Time
	V  float64
}

// Chart geometry (SVG user units).
const (
	chartW, chartH = 320, 90
	chartPad       = 4
)

// drawChart draws points over the span ending at now as an inline SVG
// polyline: x is time, y the value from 0 to the largest one. Only
// numbers go into the markup.
func drawChart(title string, pts []chartPoint, now time.Time, span time.Duration, color string) uiChart {
	c := uiChart{Title: title, Span: spanText(span), Points: len(pts), Latest: "–", Max: "0"}
	top := 0.0
	for _, p := range pts {
		top = math.Max(top, p.V)
	}
	if len(pts) > 0 {
		c.Latest = formatValue(pts[len(pts)-1].V)
	}
	scale := niceCeil(top)
	c.Max = formatValue(scale)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fbfcfd" stroke="#dde1e8"/>`, chartW, chartH)
	for i := 1; i < 4; i++ {
		y := chartPad + (chartH-2*chartPad)*i/4
		fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#eef0f4"/>`, y, chartW, y)
	}
	if len(pts) > 0 {
		var coords []string
		var lastX, lastY float64
		for _, p := range pts {
			age := now.Sub(p.At).Seconds() / span.Seconds()
			x := chartPad + (1-math.Min(math.Max(age, 0), 1))*(chartW-2*chartPad)
			y := float64(chartH - chartPad)
			if scale > 0 {
				y -= p.V / scale * (chartH - 2*chartPad)
			}
			coords = append(coords, fmt.Sprintf("%.1f,%.1f", x, y))
			lastX, lastY = x, y
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`, color, strings.Join(coords, " "))
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, lastX, lastY, color)
	} else {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#6b7486" font-size="12">no samples yet</text>`, chartW/2, chartH/2)
	}
	b.WriteString(`</svg>`)
	c.SVG = template.HTML(b.String()) // #nosec: built from numbers and an escaped title
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (0 stays 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func spanText(d time.Duration) string {
	return fmt.Sprintf("last %d min", int((d+30*time.Second)/time.Minute))
}
