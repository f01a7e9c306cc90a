package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON.
func (r *ReplicaReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the human-readable report: one line per table, the
// lag, the verdict and the first differences.
func (r *ReplicaReport) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "txsink verify: source postgres %s → target %s %s, checked %s\n\n", r.Source, r.TargetKind, r.Target, r.CheckedAt.Format(time.RFC3339))
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SOURCE TABLE\tTARGET TABLE\tKEY\tSOURCE ROWS\tTARGET ROWS\tEQUAL\tMISSING\tEXTRA\tDIFFERENT\t")
	for _, t := range r.Tables {
		target := t.Target
		if !t.TargetExists {
			target += " (absent)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", t.Source, target, strings.Join(t.Key, ","),
			t.SourceRows, t.TargetRows, t.Equal, t.Missing, t.Extra, t.Different)
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.SourceRows, r.TargetRows, r.Equal, r.Missing, r.Extra, r.Different)
	tw.Flush()

	fmt.Fprintln(bw)
	for _, t := range r.Tables {
		if len(t.TargetLacks) > 0 {
			fmt.Fprintf(bw, "note: target %s lacks column(s) %s of %s (compared as NULL)\n", t.Target, strings.Join(t.TargetLacks, ", "), t.Source)
		}
		if len(t.Ignored) > 0 {
			fmt.Fprintf(bw, "note: %s: column(s) %s not compared (-ignore-columns)\n", t.Source, strings.Join(t.Ignored, ", "))
		}
	}
	for _, t := range r.Tables {
		if t.Read != "" {
			fmt.Fprintf(bw, "target %s read %s\n", t.Target, t.Read)
		}
	}
	fmt.Fprintf(bw, "lag: %s\n", r.Lag.describe())
	for _, n := range r.Notes {
		fmt.Fprintf(bw, "note: %s\n", n)
	}
	if r.OK() {
		fmt.Fprintf(bw, "\nresult: EQUAL — %d tables, %d rows, row for row\n", len(r.Tables), r.SourceRows)
	} else {
		fmt.Fprintf(bw, "\nresult: DIFFERENT — missing %d, extra %d, different %d (of %d source rows)\n", r.Missing, r.Extra, r.Different, r.SourceRows)
		fmt.Fprintln(bw, "\nfirst differences:")
		n := 0
		for _, t := range r.Tables {
			for _, d := range t.Examples {
				if n == 20 {
					fmt.Fprintln(bw, "  … more in -output json")
					return bw.err
				}
				n++
				fmt.Fprintf(bw, "  %-9s %s %s: %s\n", d.Kind, t.Source, d.Key, d.describe())
			}
		}
	}
	return bw.err
}

// describe writes an example's columns.
func (d RowDiff) describe() string {
	var parts []string
	for _, c := range d.Columns {
		switch d.Kind {
		case RowDifferent:
			parts = append(parts, fmt.Sprintf("%s: source %s, target %s", c.Column, showValue(c.Source), showValue(c.Target)))
		case RowMissing:
			parts = append(parts, c.Column+"="+showValue(c.Source))
		case RowExtra:
			parts = append(parts, c.Column+"="+showValue(c.Target))
		}
	}
	switch d.Kind {
	case RowMissing:
		return "only in the source (" + strings.Join(parts, ", ") + ")"
	case RowExtra:
		return "only in the target (" + strings.Join(parts, ", ") + ")"
	}
	return strings.Join(parts, "; ")
}

// describe writes the lag in one line.
func (l ReplicaLag) describe() string {
	parts := []string{"source WAL at " + l.SourceLSN}
	for _, s := range l.Slots {
		state := "inactive"
		if s.Active {
			state = "active"
		}
		behind := "?"
		if s.Behind != nil {
			behind = fmt.Sprintf("%d bytes behind", *s.Behind)
		}
		parts = append(parts, fmt.Sprintf("slot %s (%s, %s) confirmed %s, %s", s.Name, s.Plugin, state, s.Confirmed, behind))
	}
	if l.TargetLSN != "" && l.TargetBehind != nil {
		parts = append(parts, fmt.Sprintf("target's newest change at %s (%d bytes of WAL before the source's position)", l.TargetLSN, *l.TargetBehind))
	}
	switch {
	case l.KafkaError != "":
		parts = append(parts, "kafka lag unknown: "+l.KafkaError)
	case l.KafkaRecords >= 0:
		parts = append(parts, fmt.Sprintf("kafka: %d records behind over %d topics", l.KafkaRecords, len(l.Kafka)))
	}
	return strings.Join(parts, "; ")
}
