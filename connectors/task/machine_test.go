package task

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/")

// Transcripts (testdata/*.txt) are blocks of commands, a "----" line and
// the expected output, ending at a blank line. Lines starting with '#'
// between blocks are comments. Commands:
//
//	machine [guarantee=exactly_once] [inflight=1] [paused]
//	                          a new machine for connector "c"
//	start                     EventStart
//	assign t/0=100@1 ...      EventAssigned: partition 0 of topic t at next
//	                          offset 100, fence 1
//	revoke N t/0 ... [lost]   EventRevoked, acknowledged as N
//	poll N t/0:100-104 ...    EventPolled for poll N: records 100..104 of
//	                          t/0 (t/0:100,102 lists single offsets)
//	staged R [partial]        EventStaged for round R (partial: a batch's
//	                          write-ahead failed)
//	written R                 EventWritten for round R
//	done R [result...]        EventRoundDone for round R: "committed" (every
//	                          batch), "committed=t/0,..." (those batches),
//	                          "indoubt=t/0,...", "fenced=t/0,...",
//	                          "ambiguous", "err=KIND" with KIND one of
//	                          fenced, unavailable, sink-unavailable, other,
//	                          terminal, bad@t/0:103, own@t/0
//	tick [N]                  N EventTicks (default 1)
//	pause, resume, stop       EventPause, EventResume, EventStop
//	status                    positions, rounds and clock
//
// Run `go test ./connectors/task -update` to rewrite the expected outputs.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTranscript(t, f) })
	}
}

func runTranscript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var rewritten strings.Builder
	h := &harness{}
	for i := 0; i < len(lines); {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			rewritten.WriteString(line + "\n")
			i++
			continue
		}
		start := i
		var cmds []string
		for i < len(lines) && lines[i] != "----" {
			cmds = append(cmds, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: block without ----", path, start+1)
		}
		i++ // ----
		var want []string
		for i < len(lines) && lines[i] != "" {
			want = append(want, lines[i])
			i++
		}
		var got strings.Builder
		for _, c := range cmds {
			out, err := h.run(c)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", path, start+1, c, err)
			}
			got.WriteString(out)
		}
		gotS := got.String()
		wantS := strings.Join(want, "\n")
		if len(want) > 0 {
			wantS += "\n"
		}
		if *update {
			rewritten.WriteString(strings.Join(cmds, "\n") + "\n----\n" + gotS)
		} else if gotS != wantS {
			t.Errorf("%s:%d: transcript differs\n--- got:\n%s--- want:\n%s", path, start+1, gotS, wantS)
		}
	}
	if *update {
		out := strings.TrimRight(rewritten.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type harness struct {
	m      *Machine
	rounds map[uint64]*Round
}

func (h *harness) run(line string) (string, error) {
	f := strings.Fields(line)
	if f[0] == "machine" {
		cfg := Config{Connector: "c", Guarantee: TwoPhase, InFlight: 1}
		for _, a := range f[1:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "guarantee":
				g, err := ParseGuarantee(v)
				if err != nil {
					return "", err
				}
				cfg.Guarantee = g
			case "inflight":
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				cfg.InFlight = n
			case "paused":
				cfg.Paused = true
			case "txn":
				// txn=TOPIC[,MAXRECORDS[,MAXWAITTICKS]]: source
				// transactions applied whole (txn.go).
				f := strings.Split(v, ",")
				tc := &TxnConfig{Topic: f[0], MaxRecords: 1000, MaxWaitTicks: 100}
				var err error
				if len(f) > 1 {
					tc.MaxRecords, err = strconv.Atoi(f[1])
				}
				if err == nil && len(f) > 2 {
					tc.MaxWaitTicks, err = strconv.ParseInt(f[2], 10, 64)
				}
				if err != nil {
					return "", fmt.Errorf("bad %q", a)
				}
				cfg.Txn = tc
			default:
				return "", fmt.Errorf("unknown machine argument %q", a)
			}
		}
		m, err := NewMachine(cfg)
		if err != nil {
			return fmt.Sprintf("machine: %v\n", err), nil
		}
		h.m, h.rounds = m, map[uint64]*Round{}
		if cfg.Txn != nil {
			return fmt.Sprintf("machine %s inflight=%d txn=%s max-records=%d max-wait=%d\n", cfg.Guarantee, cfg.InFlight, cfg.Txn.Topic, cfg.Txn.MaxRecords, cfg.Txn.MaxWaitTicks), nil
		}
		return fmt.Sprintf("machine %s inflight=%d\n", cfg.Guarantee, cfg.InFlight), nil
	}
	if h.m == nil {
		return "", errors.New("no machine")
	}
	if f[0] == "status" {
		return h.status(), nil
	}
	if f[0] == "tick" {
		n := 1
		if len(f) > 1 {
			var err error
			if n, err = strconv.Atoi(f[1]); err != nil {
				return "", err
			}
		}
		var b strings.Builder
		for range n {
			acts, err := h.m.Step(Event{Type: EventTick})
			if err != nil {
				return "", err
			}
			if len(acts) > 0 {
				fmt.Fprintf(&b, "> Tick (now %d)\n", h.m.Now())
				h.format(&b, acts)
			}
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "> %d ticks (now %d)\n", n, h.m.Now())
		}
		return b.String(), nil
	}
	ev, err := h.parse(f)
	if err != nil {
		return "", err
	}
	acts, err := h.m.Step(ev)
	var b strings.Builder
	fmt.Fprintf(&b, "> %s\n", line)
	if err != nil {
		fmt.Fprintf(&b, "  error: %v\n", err)
		return b.String(), nil
	}
	h.format(&b, acts)
	return b.String(), nil
}

func (h *harness) parse(f []string) (Event, error) {
	switch f[0] {
	case "start":
		return Event{Type: EventStart}, nil
	case "pause":
		return Event{Type: EventPause}, nil
	case "resume":
		return Event{Type: EventResume}, nil
	case "stop":
		return Event{Type: EventStop}, nil
	case "assign":
		ev := Event{Type: EventAssigned}
		for _, a := range f[1:] {
			tpS, rest, ok := strings.Cut(a, "=")
			nextS, fenceS, ok2 := strings.Cut(rest, "@")
			tp, err := parseTP(tpS)
			if !ok || !ok2 || err != nil {
				return ev, fmt.Errorf("bad position %q", a)
			}
			next, err1 := strconv.ParseInt(nextS, 10, 64)
			fence, err2 := strconv.ParseInt(fenceS, 10, 64)
			if err1 != nil || err2 != nil {
				return ev, fmt.Errorf("bad position %q", a)
			}
			ev.Positions = append(ev.Positions, offsets.Position{Topic: tp.Topic, Partition: tp.Partition, Next: next, Fence: fence})
		}
		return ev, nil
	case "revoke":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return Event{}, err
		}
		ev := Event{Type: EventRevoked, Seq: seq}
		for _, a := range f[2:] {
			if a == "lost" {
				ev.Lost = true
				continue
			}
			tp, err := parseTP(a)
			if err != nil {
				return ev, err
			}
			ev.Partitions = append(ev.Partitions, tp)
		}
		return ev, nil
	case "poll":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return Event{}, err
		}
		ev := Event{Type: EventPolled, Seq: seq}
		for _, a := range f[2:] {
			tpS, offs, ok := strings.Cut(a, ":")
			tp, err := parseTP(tpS)
			if !ok || err != nil {
				return ev, fmt.Errorf("bad records %q", a)
			}
			// Source-transaction marks: t/0:10-12@T1 (change events of
			// T1), x/0:5+T1 (its BEGIN), x/0:6=T1#3 (its END, 3 events).
			var mark record.TxnMark
			if i := strings.IndexAny(offs, "@+="); i >= 0 {
				spec := offs[i+1:]
				switch offs[i] {
				case '@':
					mark = record.TxnMark{Kind: record.TxnEvent, ID: spec}
				case '+':
					mark = record.TxnMark{Kind: record.TxnBegin, ID: spec}
				case '=':
					id, n, _ := strings.Cut(spec, "#")
					cnt, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						return ev, fmt.Errorf("bad END %q", a)
					}
					mark = record.TxnMark{Kind: record.TxnEnd, ID: id, Count: cnt}
				}
				offs = offs[:i]
			}
			for _, part := range strings.Split(offs, ",") {
				lo, hi, isRange := strings.Cut(part, "-")
				from, err1 := strconv.ParseInt(lo, 10, 64)
				to := from
				var err2 error
				if isRange {
					to, err2 = strconv.ParseInt(hi, 10, 64)
				}
				if err1 != nil || err2 != nil {
					return ev, fmt.Errorf("bad records %q", a)
				}
				for o := from; o <= to; o++ {
					ev.Records = append(ev.Records, &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Offset: o})
					ev.Marks = append(ev.Marks, mark)
				}
			}
		}
		return ev, nil
	case "staged":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		// "staged R partial": some batch's write-ahead failed.
		return Event{Type: EventStaged, Seq: seq, StagedAll: len(f) < 3 || f[2] != "partial"}, err
	case "written":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		return Event{Type: EventWritten, Seq: seq}, err
	case "done":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return Event{}, err
		}
		res, err := h.result(seq, f[2:])
		return Event{Type: EventRoundDone, Seq: seq, Result: res}, err
	}
	return Event{}, fmt.Errorf("unknown command %q", f[0])
}

func (h *harness) result(seq uint64, args []string) (Result, error) {
	var res Result
	r := h.rounds[seq]
	ids := func(list string) ([]twophase.BatchID, error) {
		var out []twophase.BatchID
		for _, s := range strings.Split(list, ",") {
			tp, err := parseTP(s)
			if err != nil {
				return nil, err
			}
			found := false
			if r != nil {
				for _, b := range r.Batches {
					if b.ID.Topic == tp.Topic && b.ID.Partition == tp.Partition {
						out = append(out, b.ID)
						found = true
					}
				}
			}
			if !found {
				return nil, fmt.Errorf("round %d has no batch of %s", seq, s)
			}
		}
		return out, nil
	}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "committed":
			if v == "" {
				if r != nil {
					res.Committed = r.IDs()
				}
			} else {
				res.Committed, err = ids(v)
			}
		case "indoubt":
			res.InDoubt, err = ids(v)
		case "fenced":
			res.Fenced, err = ids(v)
		case "ambiguous":
			res.Ambiguous = true
		case "err":
			res.Err, err = testErr(v)
		default:
			err = fmt.Errorf("unknown result %q", a)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// badRecord is a record error with errors.tolerance=none.
type badRecord struct {
	topic  string
	p      int32
	offset int64
}

func (e badRecord) Error() string {
	return fmt.Sprintf("record %s[%d]@%d: cannot decode", e.topic, e.p, e.offset)
}
func (e badRecord) RecordCoordinates() (string, int32, int64) { return e.topic, e.p, e.offset }

var _ connectors.RecordLocator = badRecord{}

func testErr(kind string) (error, error) {
	switch {
	case kind == "fenced":
		return fmt.Errorf("compare-and-set: %w", offsets.ErrFenced), nil
	case kind == "unavailable":
		return fmt.Errorf("schema registry: %w", record.ErrUnavailable), nil
	case kind == "sink-unavailable":
		return fmt.Errorf("disk full: %w", connectors.ErrSinkUnavailable), nil
	case kind == "other":
		return errors.New("connection reset"), nil
	case kind == "terminal":
		return &connectors.Terminal{Err: errors.New("column type not supported")}, nil
	case strings.HasPrefix(kind, "bad@"):
		tpS, offS, _ := strings.Cut(strings.TrimPrefix(kind, "bad@"), ":")
		tp, err := parseTP(tpS)
		if err != nil {
			return nil, err
		}
		off, err := strconv.ParseInt(offS, 10, 64)
		return badRecord{tp.Topic, tp.Partition, off}, err
	case strings.HasPrefix(kind, "own@"):
		tp, err := parseTP(strings.TrimPrefix(kind, "own@"))
		return &twophase.OwnRoundError{ID: twophase.BatchID{Connector: "c", Topic: tp.Topic, Partition: tp.Partition}, Err: errors.New("ALTER TABLE needs an exclusive lock")}, err
	}
	return nil, fmt.Errorf("unknown error kind %q", kind)
}

func parseTP(s string) (TP, error) {
	topic, p, ok := strings.Cut(s, "/")
	n, err := strconv.ParseInt(p, 10, 32)
	if !ok || err != nil {
		return TP{}, fmt.Errorf("bad partition %q", s)
	}
	return TP{topic, int32(n)}, nil
}

func (h *harness) format(b *strings.Builder, acts []Action) {
	for _, a := range acts {
		switch a.Type {
		case ActionPoll, ActionCancelPoll, ActionHurryPoll, ActionAckRevoke:
			fmt.Fprintf(b, "  %s #%d\n", a.Type, a.Seq)
		case ActionStage, ActionRun:
			h.rounds[a.Round.ID] = a.Round
			fmt.Fprintf(b, "  %s r%d %s\n", a.Type, a.Round.ID, fmtBatches(a.Round.Batches))
		case ActionDiscard:
			fmt.Fprintf(b, "  Discard %s\n", fmtIDs(a.IDs))
		case ActionSeek:
			fmt.Fprintf(b, "  Seek %s\n", fmtPositions(a.Positions, false))
		case ActionRestart, ActionFail:
			fmt.Fprintf(b, "  %s: %v\n", a.Type, a.Err)
		case ActionReport:
			fmt.Fprintf(b, "  report %s\n", fmtReport(a.Report))
		default:
			fmt.Fprintf(b, "  %s\n", a.Type)
		}
	}
}

func fmtBatches(bs []*twophase.Batch) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		s := fmt.Sprintf("%s/%d@%d-%d", b.ID.Topic, b.ID.Partition, b.ID.First, b.ID.Last)
		if b.Prev != b.ID.First {
			s += fmt.Sprintf("(prev %d)", b.Prev)
		}
		if b.Fence != 1 {
			s += fmt.Sprintf("(fence %d)", b.Fence)
		}
		if b.Alone {
			s += "(alone)"
		}
		parts[i] = s
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtIDs(ids []twophase.BatchID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s/%d@%d-%d", id.Topic, id.Partition, id.First, id.Last)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtPositions(ps []offsets.Position, fence bool) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s/%d=%d", p.Topic, p.Partition, p.Next)
		if fence {
			parts[i] += fmt.Sprintf("@%d", p.Fence)
		}
	}
	return strings.Join(parts, " ")
}

func fmtTPs(ts []TP) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s/%d", t.Topic, t.Partition)
	}
	return strings.Join(parts, " ")
}

func fmtReport(r Report) string {
	switch r.Type {
	case ReportAssigned:
		return "assigned " + fmtPositions(r.Positions, true)
	case ReportRevoked:
		return "revoked " + fmtTPs(r.Partitions)
	case ReportRound:
		s := r.Stats
		return fmt.Sprintf("round %s records=%d batches=%d positions=[%s]", s.Outcome, s.Records, s.Batches, fmtPositions(s.Positions, false))
	case ReportWaiting:
		return fmt.Sprintf("waiting attempt=%d ticks=%d: %v", r.Attempt, r.Ticks, r.Err)
	case ReportAvailable:
		return "available"
	case ReportRetry:
		if r.Err == nil {
			return "retry at once (aborted by the decision)"
		}
		return fmt.Sprintf("retry ticks=%d: %v", r.Ticks, r.Err)
	case ReportFenced:
		return fmt.Sprintf("fenced: %v", r.Err)
	case ReportBadRecord, ReportOwnRound:
		return fmt.Sprintf("%s %s: %v", r.Type, fmtTPs(r.Partitions), r.Err)
	case ReportStale:
		return "stale " + fmtIDs(r.IDs)
	case ReportReread:
		return fmt.Sprintf("reread: %v", r.Err)
	case ReportTxnSplit:
		return fmt.Sprintf("txn-split %s: %v", r.TxnID, r.Err)
	}
	return r.Type.String()
}

func (h *harness) status() string {
	m := h.m
	var rs []string
	for _, r := range m.rounds {
		st := "cut"
		switch {
		case r.running:
			st = "running"
		case r.staging:
			st = "staging"
		case r.staged:
			st = "staged"
		}
		rs = append(rs, fmt.Sprintf("r%d:%s", r.ID, st))
	}
	var stops []string
	keys := make([]TP, 0, len(m.parts))
	for k := range m.parts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Partition < keys[j].Partition || keys[i].Topic < keys[j].Topic })
	for _, k := range keys {
		if c := m.parts[k]; c.stopAt >= 0 {
			stops = append(stops, fmt.Sprintf("%s/%d@%d", k.Topic, k.Partition, c.stopAt))
		}
	}
	restart := ""
	if m.phase == phaseRestarting {
		restart = fmt.Sprintf(" session-at=%d", m.sessionAt)
	}
	if m.txn != nil {
		restart += fmt.Sprintf(" held=%d", m.txn.n)
	}
	return fmt.Sprintf("status positions=[%s] rounds=[%s] stops=[%s] polling=%t now=%d wait-until=%d%s done=%t\n",
		fmtPositions(m.Positions(), true), strings.Join(rs, " "), strings.Join(stops, " "), m.polling, m.now, m.waitUntil, restart, m.Done())
}
