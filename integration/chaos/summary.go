package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txsink/txsink/integration/upstream"
	"github.com/txsink/txsink/internal/verify"
)

// Summary is the outcome of a run.
type Summary struct {
	Profile string
	Seed    uint64
	Workers int
	// Cluster: the workers were one cluster shared by every lane
	// (Profile.Cluster); per-lane worker counts are the cluster's.
	Cluster    bool
	Partitions int32
	Plan       []Fault
	// Injected counts the faults applied, Faults the same by kind.
	Injected int
	Faults   map[Kind]int
	// Skipped counts planned faults not applied because Profile.Duration
	// ran out (faults take time; the plan is a bound).
	Skipped int
	// FaultErrors lists faults whose injection or healing reported an
	// error (the run went on).
	FaultErrors  []string
	ScheduleTime time.Duration
	Wall         time.Duration
	Lanes        []LaneSummary
}

// LaneSummary is one lane's result.
type LaneSummary struct {
	Name, Delivery string
	Unsafe         bool
	// Drained is true when the sink reached every committed record.
	Drained bool
	// Producer are the upstream's transaction counts.
	Producer upstream.Stats
	// MaxLag is the largest sampled lag in offsets (acknowledged upstream,
	// not yet stored in the sink), over all partitions.
	MaxLag int64
	// Recovery is, per fault kind, the time from the fault's end until
	// the sink held everything acknowledged upstream at that moment.
	Recovery map[Kind]*Recovery
	// Exits counts worker exits the runner did not cause, by exit code.
	Exits map[string]int
	// FailpointsNotFired counts armed failpoints that did not fire within
	// the wait (the worker was restarted clean).
	FailpointsNotFired int
	// VerifyExit is the exit status of "txsink verify" (0 OK, 1 sink
	// fault); Report its JSON report.
	VerifyExit int
	Report     *verify.Report
}

// Anomalies returns the report's counts (nil without a report).
func (l *LaneSummary) Anomalies() map[verify.Kind]int {
	if l.Report == nil {
		return nil
	}
	return l.Report.Counts
}

// Lane returns the named lane's summary.
func (s *Summary) Lane(name string) *LaneSummary {
	for i := range s.Lanes {
		if s.Lanes[i].Name == name {
			return &s.Lanes[i]
		}
	}
	return nil
}

// Kinds returns the number of distinct fault kinds injected.
func (s *Summary) Kinds() int {
	n := 0
	for _, c := range s.Faults {
		if c > 0 {
			n++
		}
	}
	return n
}

// Recovery collects recovery times of one fault kind.
type Recovery struct {
	Times        []time.Duration
	NotRecovered int
	// Overlapped counts recoveries that were still running when the next
	// fault started (their times include it).
	Overlapped int
}

func (r *Recovery) add(d time.Duration) { r.Times = append(r.Times, d) }

// Median and Max of the recovery times (0 when none).
func (r *Recovery) Median() time.Duration {
	if len(r.Times) == 0 {
		return 0
	}
	t := append([]time.Duration(nil), r.Times...)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return t[len(t)/2]
}

func (r *Recovery) Max() time.Duration {
	var m time.Duration
	for _, d := range r.Times {
		m = max(m, d)
	}
	return m
}

// WriteText prints the summary tables.
func (s *Summary) WriteText(w io.Writer) {
	workers := fmt.Sprintf("%d workers/lane", s.Workers)
	if s.Cluster {
		workers = fmt.Sprintf("a cluster of %d workers shared by the lanes", s.Workers)
	}
	fmt.Fprintf(w, "chaos summary: profile %s, seed %d, %s, %d partitions, %d faults of %d kinds in %v (wall %v)\n\n",
		s.Profile, s.Seed, workers, s.Partitions, s.Injected, s.Kinds(), s.ScheduleTime.Round(time.Second), s.Wall.Round(time.Second))
	if s.Skipped > 0 {
		fmt.Fprintf(w, "(%d more planned faults did not fit in the duration)\n\n", s.Skipped)
	}

	var kinds []Kind
	for k := range s.Faults {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := "FAULT\tINJECTED"
	for _, l := range s.Lanes {
		hdr += fmt.Sprintf("\t%s RECOVER MEDIAN\t%s MAX", l.Name, l.Name)
	}
	fmt.Fprintln(tw, hdr)
	for _, k := range kinds {
		line := fmt.Sprintf("%s\t%d", k, s.Faults[k])
		for _, l := range s.Lanes {
			r := l.Recovery[k]
			if r == nil {
				line += "\t-\t-"
				continue
			}
			mx := r.Max().Round(100 * time.Millisecond).String()
			if r.Overlapped > 0 {
				mx += fmt.Sprintf(" (%d/%d overlapped)", r.Overlapped, len(r.Times))
			}
			if r.NotRecovered > 0 {
				mx += fmt.Sprintf(" (%d never)", r.NotRecovered)
			}
			line += fmt.Sprintf("\t%v\t%s", r.Median().Round(100*time.Millisecond), mx)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tDELIVERY\tRECORDS IN\tRECORDS OUT\tTXNS ACK/FAILED/KILLED/UNKNOWN\tMAX LAG\tDRAINED\tWORKER EXITS\tVERIFY\tANOMALIES")
	for _, l := range s.Lanes {
		mode := l.Delivery
		if l.Unsafe {
			mode += " (fencing off)"
		}
		in, out := 0, 0
		verdict := "-"
		anomalies := "-"
		if l.Report != nil {
			in, out = l.Report.Committed, l.Report.Rows
			verdict = "OK"
			if l.VerifyExit != 0 {
				verdict = fmt.Sprintf("FAIL (exit %d)", l.VerifyExit)
			}
			anomalies = countList(l.Report.Counts)
		}
		exits := "none"
		if len(l.Exits) > 0 {
			var parts []string
			for c, n := range l.Exits {
				parts = append(parts, fmt.Sprintf("code %s: %d", c, n))
			}
			sort.Strings(parts)
			exits = strings.Join(parts, ", ")
		}
		p := l.Producer
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d/%d/%d\t%d\t%v\t%s\t%s\t%s\n", l.Name, mode, in, out,
			p.Acknowledged, p.Failed, p.Killed, p.Unknown, l.MaxLag, l.Drained, exits, verdict, anomalies)
	}
	tw.Flush()
	if len(s.FaultErrors) > 0 {
		fmt.Fprintf(w, "\nfaults that reported errors (%d):\n", len(s.FaultErrors))
		for _, e := range s.FaultErrors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	for _, l := range s.Lanes {
		if l.FailpointsNotFired > 0 {
			fmt.Fprintf(w, "lane %s: %d armed failpoints did not fire in time\n", l.Name, l.FailpointsNotFired)
		}
	}
}

func countList(c map[verify.Kind]int) string {
	var parts []string
	for _, k := range append(append([]verify.Kind{}, verify.SinkKinds...), verify.UpstreamKinds...) {
		if c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
