package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is one audit.
type Config struct {
	// Bootstrap are the Kafka bootstrap servers; Topics the connector's
	// input topics.
	Bootstrap []string
	Topics    []string
	// KafkaOpts are extra franz-go options (TLS, SASL, tests).
	KafkaOpts []kgo.Opt
	// Sink says where the connector writes.
	Sink SinkOptions
	// IDField names the payload id in each record (see Extractor.IDField);
	// with Sink.IDColumn it enables duplicate-by-id and id mismatch
	// checks.
	IDField string
	// CompareFields are the record fields compared with
	// Sink.CompareColumns (same length; default: the column names).
	CompareFields []string
	// ProducerLog is the upstream producer's log (optional).
	ProducerLog []Txn
	// History are stored offsets sampled over time (optional).
	History []OffsetSample
	// PreparedGrace: younger prepared transactions of the connector are in
	// flight, not leftovers; default 1 minute, negative means 0.
	PreparedGrace time.Duration
	// CheckLag fails partitions with more than MaxLag undelivered
	// committed records (for a drained deployment: CheckLag, MaxLag 0).
	CheckLag bool
	MaxLag   int64
	// FromFirstRow: see Input.FromFirstRow.
	FromFirstRow bool
	// ScanIdle: see ScanOptions.Idle.
	ScanIdle time.Duration
	// MaxExamples: see Input.MaxExamples.
	MaxExamples int
	// Progress, when set, is told how far the audit got: once before the
	// sink is read, then as ScanOptions.Progress.
	Progress func(Progress)
}

// Validate names the first missing or inconsistent setting.
func (c *Config) Validate() error {
	switch {
	case len(c.Bootstrap) == 0:
		return errors.New("bootstrap: at least one Kafka server is required")
	case len(c.Topics) == 0:
		return errors.New("topics: at least one topic is required")
	case c.Sink.URL == "":
		return errors.New("sink-url: required")
	case c.Sink.Connector == "":
		return errors.New("connector: required")
	case len(c.CompareFields) > 0 && len(c.CompareFields) != len(c.Sink.CompareColumns):
		return fmt.Errorf("compare: %d record fields for %d columns", len(c.CompareFields), len(c.Sink.CompareColumns))
	case c.Sink.IDColumn != "" && c.IDField == "":
		return errors.New("id-field: required with id-column (the record field, or \"key\", that holds the payload id)")
	}
	return nil
}

// Check audits the sink: it reads the sink first (one snapshot), then scans
// Kafka, then compares. An error means the audit could not be done; faults
// found are in the report (Report.OK).
func Check(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Progress != nil {
		c.Progress(Progress{Phase: "sink"})
	}
	sink, prepared, err := ReadSink(ctx, c.Sink, c.Topics)
	if err != nil {
		return nil, err
	}
	fields := c.CompareFields
	if len(fields) == 0 {
		for _, col := range c.Sink.CompareColumns {
			f := col
			if _, after, ok := strings.Cut(col, "->"); ok {
				f = strings.TrimSpace(after)
			}
			fields = append(fields, f)
		}
	}
	idField := c.IDField
	if c.Sink.IDColumn == "" {
		idField = "" // nothing to compare with: skip extracting
	}
	truth, err := Scan(ctx, ScanOptions{
		Bootstrap: c.Bootstrap,
		Topics:    c.Topics,
		Extractor: Extractor{IDField: idField, Fields: fields},
		Idle:      c.ScanIdle,
		KafkaOpts: c.KafkaOpts,
		Progress:  c.Progress,
	})
	if err != nil {
		return nil, err
	}
	grace := c.PreparedGrace
	if grace == 0 {
		grace = time.Minute
	} else if grace < 0 {
		grace = 0
	}
	r := Analyze(Input{
		Connector:     c.Sink.Connector,
		Truth:         truth,
		Sink:          sink,
		Prepared:      prepared,
		ProducerLog:   c.ProducerLog,
		History:       c.History,
		PreparedGrace: grace,
		CheckLag:      c.CheckLag,
		MaxLag:        c.MaxLag,
		FromFirstRow:  c.FromFirstRow,
		MaxExamples:   c.MaxExamples,
	})
	r.Sink = "postgres"
	if IsClickHouseURL(c.Sink.URL) {
		r.Sink = "clickhouse"
	}
	r.Config = map[string]string{
		"topics":  strings.Join(c.Topics, ","),
		"table":   c.Sink.Table,
		"schema":  c.Sink.Schema,
		"offsets": c.Sink.OffsetsTable,
	}
	if c.Sink.IDColumn != "" {
		r.Config["id"] = c.Sink.IDColumn + " = " + c.IDField
	}
	return r, nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// short names of the kinds for the table's columns.
var columnNames = map[Kind]string{
	Loss: "LOSS", Duplicate: "DUP", DuplicateID: "DUP_ID", AbortedRead: "ABORTED", ValueMismatch: "MISMATCH",
	BeyondOffset: "BEYOND", OffsetAhead: "AHEAD", OffsetBackwards: "BACKWARDS",
}

// WriteText writes the human-readable report: one line per partition, the
// prepared transactions, the upstream summary, the verdict and the first
// anomalies.
func (r *Report) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "txsink verify: connector %q, %d partitions, checked %s\n\n", r.Connector, len(r.Partitions), r.CheckedAt.Format(time.RFC3339))
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []Kind{Loss, Duplicate, DuplicateID, AbortedRead, ValueMismatch, BeyondOffset, OffsetAhead, OffsetBackwards}
	hdr := "TOPIC\tPART\tLOG START\tSTABLE END\tCOMMITTED\tROWS\tNEXT OFFSET\tLAG"
	for _, k := range cols {
		hdr += "\t" + columnNames[k]
	}
	fmt.Fprintln(tw, hdr+"\t")
	for _, p := range r.Partitions {
		next := "-"
		if p.NextOffset >= 0 {
			next = fmt.Sprint(p.NextOffset)
		}
		line := fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d", p.Topic, p.Partition, p.LogStart, p.StableEnd, p.Committed, p.Rows, next, p.Lag)
		for _, k := range cols {
			line += fmt.Sprintf("\t%d", p.Counts[k])
		}
		if p.Incomplete {
			line += "\t(scan incomplete)"
		}
		fmt.Fprintln(tw, line+"\t")
	}
	fmt.Fprintf(tw, "total\t\t\t\t%d\t%d\t\t%d", r.Committed, r.Rows, r.Lag)
	for _, k := range cols {
		fmt.Fprintf(tw, "\t%d", r.Counts[k])
	}
	fmt.Fprintln(tw, "\t")
	tw.Flush()

	ours, intents := 0, 0
	for _, p := range r.Prepared {
		if p.Intent {
			intents++
		} else if p.Ours {
			ours++
		}
	}
	if r.Sink == "clickhouse" {
		fmt.Fprintf(bw, "\nunfinished intents of this connector: %d (left over: %d)\n", intents, r.Counts[IntentLeft])
	} else {
		fmt.Fprintf(bw, "\nprepared transactions of this connector: %d (left over: %d)\n", ours, r.Counts[PreparedLeft])
	}
	if u := r.Upstream; u != nil {
		fmt.Fprintf(bw, "upstream producer log: %d transactions (acknowledged %d, failed %d, unknown %d: %d committed, %d aborted), %d records\n",
			u.Transactions, u.Acknowledged, u.Failed, u.Unknown, u.UnknownCommitted, u.UnknownAborted, u.Records)
	}
	if r.UpstreamAnomalies > 0 {
		fmt.Fprintf(bw, "upstream anomalies (not the sink's fault): %s\n", kindList(r.Counts, UpstreamKinds))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(bw, "note: %s\n", n)
	}
	if r.OK() {
		fmt.Fprintf(bw, "\nresult: OK — no sink fault (%d committed records, %d rows, lag %d)\n", r.Committed, r.Rows, r.Lag)
	} else {
		fmt.Fprintf(bw, "\nresult: FAIL — %d sink faults: %s\n", r.SinkFaults, kindList(r.Counts, SinkKinds))
	}
	if len(r.Examples) > 0 {
		ex := append([]Anomaly(nil), r.Examples...)
		sort.SliceStable(ex, func(i, j int) bool { return ex[i].Kind.IsSinkFault() && !ex[j].Kind.IsSinkFault() })
		fmt.Fprintln(bw, "\nfirst anomalies:")
		for i, a := range ex {
			if i == 20 {
				fmt.Fprintf(bw, "  … %d more in --output json\n", len(ex)-20)
				break
			}
			where := ""
			if a.Topic != "" {
				where = fmt.Sprintf(" %s[%d]@%d", a.Topic, a.Partition, a.Offset)
			}
			id := ""
			if a.ID != "" {
				id = " id=" + a.ID
			}
			fmt.Fprintf(bw, "  %-24s%s%s: %s\n", a.Kind, where, id, a.Detail)
		}
	}
	return bw.err
}

func kindList(counts map[Kind]int, kinds []Kind) string {
	var parts []string
	for _, k := range kinds {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}
