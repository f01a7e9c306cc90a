package twophase

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/")

// Transcripts (testdata/*.txt) are blocks of commands, a "----" line, and
// the expected output, ending at a blank line:
//
//	round p0 p1          new round machine over batches p0 and p1
//	recovery p0          new recovery machine over in-doubt batch p0
//	step Start           feed an event (per-batch events name a batch;
//	step PrepareOK p0    "px" is a batch the machine does not know)
//	status               print outcome and batch lists
//
// Lines starting with '#' between blocks are comments. Run
// `go test ./twophase -update` to rewrite the expected outputs.

// batch names: pN is testID(N); px is unknown to every machine.
func nameToID(name string) (BatchID, error) {
	if name == "px" {
		return testID(99), nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(name, "p"))
	if err != nil || !strings.HasPrefix(name, "p") {
		return BatchID{}, fmt.Errorf("bad batch name %q", name)
	}
	return testID(n), nil
}

func idName(id BatchID) string {
	if id == testID(99) {
		return "px"
	}
	return fmt.Sprintf("p%d", id.Partition)
}

func idNames(ids []BatchID) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = idName(id)
	}
	return "[" + strings.Join(names, " ") + "]"
}

func fmtEvent(ev Event) string {
	if ev.Type.perBatch() {
		return fmt.Sprintf("%s(%s)", ev.Type, idName(ev.ID))
	}
	return ev.Type.String()
}

func fmtAction(a Action) string {
	switch a.Type {
	case ActionBegin:
		return "Begin"
	case ActionDecide:
		return fmt.Sprintf("Decide(%t)", a.Commit)
	}
	return fmt.Sprintf("%s(%s)", a.Type, idName(a.ID))
}

func parseEventType(s string) (EventType, error) {
	for t := EventStart; t <= eventTypeMax; t++ {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown event %q", s)
}

// stepOutput feeds ev and formats the transition.
func stepOutput(m *Machine, ev Event) string {
	from := m.State()
	acts, err := m.Step(ev)
	var b strings.Builder
	if err != nil {
		var ie *IllegalEventError
		if !errors.As(err, &ie) || !errors.Is(err, ErrIllegalEvent) {
			return fmt.Sprintf("%s: unexpected error type: %v\n", fmtEvent(ev), err)
		}
		if m.State() != from {
			fmt.Fprintf(&b, "BUG: state changed on illegal event to %s\n", m.State())
		}
		fmt.Fprintf(&b, "%s: illegal in %s: %s\n", fmtEvent(ev), from, ie.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %s -> %s\n", fmtEvent(ev), from, m.State())
	for _, a := range acts {
		fmt.Fprintf(&b, "  %s\n", fmtAction(a))
	}
	return b.String()
}

func statusOutput(m *Machine) string {
	return fmt.Sprintf("state=%s outcome=%s committed=%s aborted=%s in-doubt=%s fenced=%s decide-failed=%t\n",
		m.State(), m.Outcome(), idNames(m.Committed()), idNames(m.Aborted()),
		idNames(m.InDoubt()), idNames(m.Fenced()), m.DecideFailed())
}

func runCommand(m **Machine, line string) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", nil
	}
	switch f[0] {
	case "round", "recovery":
		ids := make([]BatchID, 0, len(f)-1)
		for _, n := range f[1:] {
			id, err := nameToID(n)
			if err != nil {
				return "", err
			}
			ids = append(ids, id)
		}
		var err error
		if f[0] == "round" {
			*m, err = NewMachine(ids)
		} else {
			*m, err = NewRecoveryMachine(ids)
		}
		if err != nil {
			return fmt.Sprintf("error: %v\n", err), nil
		}
		return fmt.Sprintf("%s %s: %s\n", f[0], idNames(ids), (*m).State()), nil
	case "step":
		if *m == nil {
			return "", errors.New("step before round/recovery")
		}
		if len(f) < 2 {
			return "", errors.New("step needs an event")
		}
		t, err := parseEventType(f[1])
		if err != nil {
			return "", err
		}
		ev := Event{Type: t}
		if len(f) > 2 {
			if ev.ID, err = nameToID(f[2]); err != nil {
				return "", err
			}
		}
		return stepOutput(*m, ev), nil
	case "status":
		if *m == nil {
			return "", errors.New("status before round/recovery")
		}
		return statusOutput(*m), nil
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runTranscript(t, file) })
	}
}

func runTranscript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	var m *Machine
	changed := false
	for i := 0; i < len(lines); {
		line := lines[i]
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			i++
			continue
		}
		start := i + 1 // 1-based line of the block
		var cmds []string
		for i < len(lines) && lines[i] != "----" {
			if lines[i] == "" {
				t.Fatalf("%s:%d: block without ----", file, start)
			}
			cmds = append(cmds, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: block without ----", file, start)
		}
		i++ // skip ----
		var want []string
		for i < len(lines) && lines[i] != "" {
			want = append(want, lines[i])
			i++
		}
		var got strings.Builder
		for _, c := range cmds {
			s, err := runCommand(&m, c)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", file, start, c, err)
			}
			got.WriteString(s)
		}
		gotS := strings.TrimRight(got.String(), "\n")
		wantS := strings.Join(want, "\n")
		if gotS != wantS {
			changed = true
			if !*update {
				t.Errorf("%s:%d: output differs\n--- commands\n%s\n--- got\n%s\n--- want\n%s",
					file, start, strings.Join(cmds, "\n"), gotS, wantS)
			}
		}
		out.WriteString(strings.Join(cmds, "\n") + "\n----\n" + gotS + "\n")
	}
	if *update && changed {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// matrixStates reaches every state (and the sub-cases that matter) of a
// machine over batches p0 and p1 by a canonical path of events.
var matrixStates = []struct {
	name     string
	recovery bool
	path     []Event
}{
	{name: "Idle", path: nil},
	{name: "Beginning", path: evs("Start")},
	{name: "Preparing", path: evs("Start", "BeginOK")},
	{name: "Preparing/p0-prepared", path: evs("Start", "BeginOK", "PrepareOK p0")},
	{name: "Deciding", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1")},
	{name: "Committing", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1", "DecideCommitted")},
	{name: "Committing/p0-committed", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1", "DecideCommitted", "CommitOK p0")},
	{name: "Aborting/decided", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1", "DecideAborted")},
	{name: "Aborting/decide-pending", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareErr p1")},
	{name: "Aborting/p0-aborted-decide-pending", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareFenced p1", "AbortOK p0")},
	{name: "Committed", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1", "DecideCommitted", "CommitOK p0", "CommitErr p1")},
	{name: "Aborted", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareFenced p1", "AbortOK p0", "DecideAborted")},
	{name: "InDoubt", path: evs("Start", "BeginOK", "PrepareOK p0", "PrepareOK p1", "DecideAmbiguous")},
	{name: "Failed", path: evs("Start", "BeginErr")},
	{name: "recovery/Idle", recovery: true, path: nil},
	{name: "recovery/Recovering", recovery: true, path: evs("Start")},
	{name: "recovery/Recovering/p0-committing", recovery: true, path: evs("Start", "OutcomeCommitted p0")},
	{name: "recovery/Recovering/p0-aborting", recovery: true, path: evs("Start", "OutcomeAborted p0")},
	{name: "recovery/Recovered", recovery: true, path: evs("Start", "OutcomeCommitted p0", "OutcomeAborted p1", "CommitOK p0", "AbortErr p1")},
}

func evs(specs ...string) []Event {
	out := make([]Event, 0, len(specs))
	for _, s := range specs {
		f := strings.Fields(s)
		t, err := parseEventType(f[0])
		if err != nil {
			panic(err) // test table bug
		}
		ev := Event{Type: t}
		if len(f) > 1 {
			ev.ID, err = nameToID(f[1])
			if err != nil {
				panic(err)
			}
		}
		out = append(out, ev)
	}
	return out
}

// TestMatrix applies every event type (per-batch ones to p0, plus one to
// an unknown batch) in every state and compares with testdata/matrix.golden.
func TestMatrix(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Every state x every event, over batches p0 p1. Generated by TestMatrix;\n")
	b.WriteString("# rewrite with go test ./twophase -update.\n")
	ids := []BatchID{testID(0), testID(1)}
	for _, st := range matrixStates {
		fmt.Fprintf(&b, "\n## %s\n", st.name)
		events := make([]Event, 0, int(eventTypeMax)+1)
		for et := EventStart; et <= eventTypeMax; et++ {
			events = append(events, Event{Type: et, ID: testID(0)})
		}
		events = append(events, Event{Type: EventPrepareOK, ID: testID(99)})
		for _, ev := range events {
			var m *Machine
			var err error
			if st.recovery {
				m, err = NewRecoveryMachine(ids)
			} else {
				m, err = NewMachine(ids)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, pe := range st.path {
				if _, err := m.Step(pe); err != nil {
					t.Fatalf("%s: path event %s: %v", st.name, fmtEvent(pe), err)
				}
			}
			b.WriteString(stepOutput(m, ev))
		}
	}
	golden := filepath.Join("testdata", "matrix.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./twophase -update)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("matrix differs from %s; run with -update and review the diff\n%s", golden, got)
	}
}

func TestNewMachineDuplicate(t *testing.T) {
	if _, err := NewMachine([]BatchID{testID(0), testID(0)}); err == nil {
		t.Fatal("duplicate batch accepted")
	}
	if _, err := NewRecoveryMachine([]BatchID{testID(1), testID(1)}); err == nil {
		t.Fatal("duplicate batch accepted")
	}
}

func TestStringers(t *testing.T) {
	for _, s := range []fmt.Stringer{State(200), EventType(200), ActionType(200), Outcome(200)} {
		if !strings.Contains(s.String(), "200") {
			t.Errorf("%T(200).String() = %q", s, s)
		}
	}
	if got := (Action{Type: ActionDecide, Commit: true}).String(); got != "Decide(true)" {
		t.Errorf("got %q", got)
	}
	if got := (Event{Type: EventCommitOK, ID: testID(1)}).String(); got != "CommitOK(c/t[1]@10-19)" {
		t.Errorf("got %q", got)
	}
}

// checker verifies the machine's safety invariants over a run.
type checker struct {
	decidedCommit  bool // a DecideCommitted followed a Decide(true)
	decideAsked    map[bool]bool
	outcomeCommit  map[BatchID]bool
	outcomeAbort   map[BatchID]bool
	prepareOK      map[BatchID]bool
	committedAsked map[BatchID]bool
	abortedAsked   map[BatchID]bool
	lastDecide     *bool
}

func newChecker() *checker {
	return &checker{
		decideAsked:    map[bool]bool{},
		outcomeCommit:  map[BatchID]bool{},
		outcomeAbort:   map[BatchID]bool{},
		prepareOK:      map[BatchID]bool{},
		committedAsked: map[BatchID]bool{},
		abortedAsked:   map[BatchID]bool{},
	}
}

// observe checks one accepted step.
func (c *checker) observe(m *Machine, ev Event, before State, acts []Action) error {
	switch ev.Type {
	case EventPrepareOK:
		c.prepareOK[ev.ID] = true
	case EventDecideCommitted:
		if c.lastDecide == nil || !*c.lastDecide {
			return fmt.Errorf("DecideCommitted accepted without a Decide(true) in flight")
		}
		c.decidedCommit = true
	case EventOutcomeCommitted:
		c.outcomeCommit[ev.ID] = true
	case EventOutcomeAborted:
		c.outcomeAbort[ev.ID] = true
	}
	if before == StateInDoubt || before.Terminal() {
		return fmt.Errorf("event accepted in terminal state %s", before)
	}
	for _, a := range acts {
		if m.State() == StateInDoubt && a.Type != ActionReportFenced {
			return fmt.Errorf("action %s on entering InDoubt", a)
		}
		switch a.Type {
		case ActionDecide:
			if c.lastDecide != nil {
				return fmt.Errorf("second Decide")
			}
			d := a.Commit
			c.lastDecide = &d
			c.decideAsked[a.Commit] = true
		case ActionCommit:
			if c.committedAsked[a.ID] {
				return fmt.Errorf("Commit(%s) twice", a.ID)
			}
			c.committedAsked[a.ID] = true
			if m.recovery {
				if !c.outcomeCommit[a.ID] {
					return fmt.Errorf("recovery Commit(%s) without a committed outcome", a.ID)
				}
				continue
			}
			if c.decideAsked[false] {
				return fmt.Errorf("Commit(%s) after Decide(false)", a.ID)
			}
			if !c.decidedCommit {
				return fmt.Errorf("Commit(%s) without a committed decision", a.ID)
			}
		case ActionAbort:
			if c.abortedAsked[a.ID] {
				return fmt.Errorf("Abort(%s) twice", a.ID)
			}
			c.abortedAsked[a.ID] = true
			if m.recovery {
				if !c.outcomeAbort[a.ID] {
					return fmt.Errorf("recovery Abort(%s) without an aborted outcome", a.ID)
				}
				continue
			}
			if c.decidedCommit {
				return fmt.Errorf("Abort(%s) after a committed decision", a.ID)
			}
			if !c.prepareOK[a.ID] {
				return fmt.Errorf("Abort(%s) of a batch we did not prepare", a.ID)
			}
		}
	}
	if m.State() == StateCommitted && c.decideAsked[false] {
		return fmt.Errorf("Committed after Decide(false)")
	}
	return nil
}

// FuzzMachine feeds random event sequences to round and recovery machines
// and checks the safety invariants: no Commit after Decide(false) or
// without a committed decision, no Abort after a committed decision, no
// participant action once InDoubt, no accepted event in a terminal state,
// illegal events change nothing, and Step never panics.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{2, 0, 1, 0, 2, 0, 4, 0, 4, 1, 7, 0, 10, 0, 10, 1})
	f.Add([]byte{2, 0, 1, 0, 2, 0, 4, 0, 5, 1, 12, 0, 8, 0})
	f.Add([]byte{2, 0, 1, 0, 2, 0, 4, 0, 4, 1, 9, 0, 10, 0})
	f.Add([]byte{130, 0, 1, 0, 14, 0, 15, 1, 10, 0, 12, 1})
	f.Add([]byte{1, 0, 1, 0, 2, 0, 6, 0, 8, 0, 9, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		n := int(data[0]&0x3) + 1
		recovery := data[0]&0x80 != 0
		ids := make([]BatchID, n)
		for i := range ids {
			ids[i] = testID(i)
		}
		var m *Machine
		var err error
		if recovery {
			m, err = NewRecoveryMachine(ids)
		} else {
			m, err = NewMachine(ids)
		}
		if err != nil {
			t.Fatal(err)
		}
		c := newChecker()
		for i := 1; i+1 < len(data); i += 2 {
			et := EventType(data[i] % byte(eventTypeMax+1))
			idx := int(data[i+1]) % (n + 1)
			id := testID(99)
			if idx < n {
				id = ids[idx]
			}
			ev := Event{Type: et, ID: id}
			before := m.State()
			snapshot := fmt.Sprintf("%+v", *m)
			acts, err := m.Step(ev)
			if err != nil {
				if !errors.Is(err, ErrIllegalEvent) {
					t.Fatalf("step %s: error not wrapping ErrIllegalEvent: %v", ev, err)
				}
				if got := fmt.Sprintf("%+v", *m); got != snapshot {
					t.Fatalf("illegal %s changed the machine:\n%s\n%s", ev, snapshot, got)
				}
				continue
			}
			if err := c.observe(m, ev, before, acts); err != nil {
				t.Fatalf("step %s in %s: %v", ev, before, err)
			}
		}
	})
}
