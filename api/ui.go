package api

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// The read-only status page at /ui: connectors, tasks, partitions with
// next_offset and lag, in-doubt batches and the last rounds' timings,
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
