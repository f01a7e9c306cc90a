package api

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestScrubHandlerNonStringAttrs: a value from a config provider may be
// logged as a number (tasks.max) or a duration; the scrubber hides it
// whatever the attribute's kind, and keeps numbers that hold no secret.
func TestScrubHandlerNonStringAttrs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewScrubHandler(slog.NewTextHandler(&buf, nil), func() []string { return []string{"48213"} }))
	log.Info("connector running", "tasks", 48213, "limit", uint64(48213), "wait", 48213*time.Second, "ratio", 48213.5, "other", 7)
	log.With("tasks", 48213).Info("x")
	out := buf.String()
	if strings.Contains(out, "48213") {
		t.Errorf("a secret logged as a number: %s", out)
	}
	if !strings.Contains(out, "other=7") {
		t.Errorf("a number without a secret was changed: %s", out)
	}
}
