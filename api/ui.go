package api

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// The read-only status page at /ui: connectors, tasks, partitions with
// next_offset and lag (a FAILED or PAUSED task's last known ones, see
// UIHistory), charts of each connector's rate and lag over the last
// minutes (inline SVG drawn on the server), in-doubt batches and the last rounds' timings,
// rendered on the server from the same worker calls as the API. It has no
// scripts, no forms and no external assets (its style is inline; the
// Content-Security-Policy forbids anything else), refreshes itself every
// 5 seconds, and sits behind the API's authentication and Host checks.

//go:embed ui.html
var uiHTML string

var uiTemplate = template.Must(template.New("ui").Funcs(template.FuncMap{
	"ms": func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("15:04:05")
	},
	"lower":     strings.ToLower,
	"firstLine": func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l },
}).Parse(uiHTML))

type uiPage struct {
	Version, WorkerID, Generated string
	Connectors                   []uiConnector
}

type uiConnector struct {
	Status engine.ConnectorStatus
	Rounds []engine.RoundTiming
	Err    string
	// Partitions are the rows of the partitions table: each task's own,
	// or for a task without any (FAILED, PAUSED) its last known ones.
	Partitions []uiPartition
	Charts     []uiChart
}

// uiPartition is a row of the partitions table.
type uiPartition struct {
	Task                  string
	Topic                 string
	Partition             int32
	NextOffset, EndOffset int64
	Lag                   int64
	// LastKnown says where a row not owned now comes from ("" for an
	// owned partition).
	LastKnown string
}

// uiPartitions lists the connector's partitions, with the last known ones
// of tasks that own none now: remembered by the history, else the
// positions stored in the sink.
func (s *Server) uiPartitions(ctx context.Context, st engine.ConnectorStatus) []uiPartition {
	var rows []uiPartition
	missing := false
	for _, t := range st.Tasks {
		id := strconv.Itoa(t.ID)
		for _, p := range t.Partitions {
			rows = append(rows, uiPartition{Task: id, Topic: p.Topic, Partition: p.Partition, NextOffset: p.NextOffset, EndOffset: p.EndOffset, Lag: p.Lag})
		}
		if len(t.Partitions) > 0 {
			continue
		}
		l, ok := s.opt.UIHistory.lastKnown(st.Name, t.ID)
		if !ok {
			missing = true
			continue
		}
		note := fmt.Sprintf("last known at %s · task %s", l.At.UTC().Format("15:04:05"), strings.ToLower(string(t.State)))
		for _, p := range l.Partitions {
			rows = append(rows, uiPartition{Task: id, Topic: p.Topic, Partition: p.Partition, NextOffset: p.NextOffset, EndOffset: p.EndOffset, Lag: p.Lag, LastKnown: note})
		}
	}
	if len(rows) == 0 && (missing || len(st.Tasks) == 0) && st.Connector.State != engine.StateUnassigned {
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		pos, err := s.h.Offsets(octx, st.Name)
		cancel()
		if err == nil {
			for _, p := range pos {
				rows = append(rows, uiPartition{Task: "–", Topic: p.Topic, Partition: p.Partition, NextOffset: p.Next, EndOffset: -1, Lag: -1, LastKnown: "stored in the sink"})
			}
		}
	}
	return rows
}

// ui is GET /ui.
func (s *Server) ui(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	page := uiPage{Version: s.opt.Version, Generated: time.Now().UTC().Format(time.RFC3339)}
	names, err := s.h.Connectors(ctx)
	if err != nil {
		s.handleErr(w, err, nil)
		return
	}
	secs := s.h.Secrets()
	for _, name := range names {
		c := uiConnector{}
		st, err := s.h.Status(ctx, name)
		if err != nil {
			continue // deleted meanwhile
		}
		c.Status = s.scrubStatus(st, secs)
		now := time.Now()
		s.opt.UIHistory.observe(c.Status, now)
		c.Partitions = s.uiPartitions(ctx, c.Status)
		c.Charts = s.opt.UIHistory.charts(name, now)
		if page.WorkerID == "" {
			page.WorkerID = st.Connector.WorkerID
		}
		c.Rounds, _ = s.h.RecentRounds(ctx, name)
		page.Connectors = append(page.Connectors, c)
	}
	var buf bytes.Buffer
	if err := uiTemplate.Execute(&buf, page); err != nil {
		s.log.Error("rendering /ui", "err", err)
		writeError(w, http.StatusInternalServerError, "rendering the status page failed")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}
