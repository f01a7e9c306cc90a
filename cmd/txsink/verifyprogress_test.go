package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/internal/verify"
)

// TestVerifyProgressLines: without a terminal, phase changes always print
// and scan reports at most once per interval.
func TestVerifyProgressLines(t *testing.T) {
	var out bytes.Buffer
	p, err := newVerifyProgress("auto", &out, time.Hour)
	if err != nil || p == nil || p.bar {
		t.Fatalf("auto on a buffer: %+v %v", p, err)
	}
	p.report(verify.Progress{Phase: "sink"})
	p.report(verify.Progress{Phase: "scan", Scanned: 0, Total: 200})
	p.report(verify.Progress{Phase: "scan", Scanned: 100, Total: 200, Records: 90}) // within the interval: not printed
	p.report(verify.Progress{Phase: "done", Scanned: 200, Total: 200, Records: 180})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "reading the sink") || !strings.Contains(lines[1], "0/200 offsets (0%)") ||
		!strings.Contains(lines[2], "200 offsets, 180 committed records") {
		t.Errorf("lines:\n%s", out.String())
	}
	if strings.Contains(out.String(), "\r") {
		t.Error("a bar drawn without a terminal")
	}
}

func TestVerifyProgressBar(t *testing.T) {
	var out bytes.Buffer
	p, _ := newVerifyProgress("bar", &out, time.Hour)
	p.report(verify.Progress{Phase: "scan", Scanned: 50, Total: 200, Records: 40})
	p.report(verify.Progress{Phase: "done", Scanned: 200, Total: 200, Records: 180})
	s := out.String()
	if !strings.Contains(s, "\rverify: [#######.......................]  25% 50/200 offsets") || !strings.HasSuffix(s, "\n") ||
		!strings.Contains(s, "[##############################] 100%") {
		t.Errorf("bar: %q", s)
	}
	if _, err := newVerifyProgress("loud", &out, 0); err == nil {
		t.Error("-progress loud accepted")
	}
}

func TestMissingCoordinates(t *testing.T) {
	o := verify.SinkOptions{TopicColumn: "__connect_topic", PartitionColumn: "__connect_partition", OffsetColumn: "__connect_offset"}
	err := fmt.Errorf("sink: read public.t: %w", &pgconn.PgError{Code: "42703", Message: `column "__connect_topic" does not exist`})
	h := missingCoordinates(err, o)
	for _, w := range []string{`no column "__connect_topic"`, "pk.mode=kafka", "-topic-column"} {
		if !strings.Contains(h, w) {
			t.Errorf("hint lacks %q: %s", w, h)
		}
	}
	if h := missingCoordinates(fmt.Errorf("x: %w", &pgconn.PgError{Code: "42703", Message: `column "body" does not exist`}), o); h != "" {
		t.Errorf("hint for another column: %s", h)
	}
}
