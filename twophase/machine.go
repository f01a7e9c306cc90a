package twophase

import (
	"errors"
	"fmt"
	"slices"
)

// State is the phase a [Machine] is in.
type State uint8

// The states of a round machine ([NewMachine]) and of a recovery machine
// ([NewRecoveryMachine]). Committed, Aborted, InDoubt, Failed and Recovered
// are terminal: every event is illegal there.
const (
	// StateIdle is the state of a new machine, before EventStart.
	StateIdle State = iota
	// StateBeginning waits for the decider's Begin.
	StateBeginning
	// StatePreparing waits for every batch's prepare result.
	StatePreparing
	// StateDeciding waits for the commit decision (Decide(true)).
	StateDeciding
	// StateCommitting waits for every participant commit after a committed
	// decision.
	StateCommitting
	// StateAborting waits for the participant aborts and, when the round
	// decided to abort itself, for the abort decision (Decide(false)).
	StateAborting
	// StateCommitted is terminal: the decision committed. Batches whose
	// commit failed are in doubt (see [Machine.InDoubt]).
	StateCommitted
	// StateAborted is terminal: the round aborted. Batches whose abort or
	// prepare failed are in doubt.
	StateAborted
	// StateInDoubt is terminal: the decision's outcome is unknown; every
	// prepared batch stays prepared for recovery.
	StateInDoubt
	// StateFailed is terminal: Begin failed; nothing was prepared.
	StateFailed
	// StateRecovering waits for outcomes and commits or aborts of in-doubt
	// batches (recovery machines only).
	StateRecovering
	// StateRecovered is terminal for a recovery machine.
	StateRecovered
)

var stateNames = [...]string{
	StateIdle:       "Idle",
	StateBeginning:  "Beginning",
	StatePreparing:  "Preparing",
	StateDeciding:   "Deciding",
	StateCommitting: "Committing",
	StateAborting:   "Aborting",
	StateCommitted:  "Committed",
	StateAborted:    "Aborted",
	StateInDoubt:    "InDoubt",
	StateFailed:     "Failed",
	StateRecovering: "Recovering",
	StateRecovered:  "Recovered",
}

// String returns the state's name.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether no event is legal in s.
func (s State) Terminal() bool {
	switch s {
	case StateCommitted, StateAborted, StateInDoubt, StateFailed, StateRecovered:
		return true
	}
	return false
}

// EventType is what happened at the edge, fed to [Machine.Step].
type EventType uint8

// Event types. Per-batch events carry the batch in [Event.ID].
const (
	// EventStart starts the machine (round: Begin; recovery: query the
	// outcome of every in-doubt batch).
	EventStart EventType = iota + 1
	// EventBeginOK: Decider.Begin succeeded.
	EventBeginOK
	// EventBeginErr: Decider.Begin failed.
	EventBeginErr
	// EventPrepareOK: Participant.Prepare succeeded for ID.
	EventPrepareOK
	// EventPrepareFenced: Participant.Prepare returned ErrFenced for ID;
	// nothing of ID is prepared.
	EventPrepareFenced
	// EventPrepareErr: Participant.Prepare failed otherwise for ID; ID may
	// or may not be prepared.
	EventPrepareErr
	// EventDecideCommitted: Decide returned committed=true.
	EventDecideCommitted
	// EventDecideAborted: Decide returned committed=false without error.
	EventDecideAborted
	// EventDecideAmbiguous: Decide returned an error; the outcome is
	// unknown.
	EventDecideAmbiguous
	// EventCommitOK: Participant.Commit succeeded for ID.
	EventCommitOK
	// EventCommitErr: Participant.Commit failed for ID.
	EventCommitErr
	// EventAbortOK: Participant.Abort succeeded for ID.
	EventAbortOK
	// EventAbortErr: Participant.Abort failed for ID.
	EventAbortErr
	// EventOutcomeCommitted: Decider.Outcome reported ID committed
	// (recovery).
	EventOutcomeCommitted
	// EventOutcomeAborted: Decider.Outcome reported ID not committed
	// (recovery).
	EventOutcomeAborted
	// EventOutcomeErr: Decider.Outcome failed for ID (recovery); ID stays
	// in doubt, never guessed.
	EventOutcomeErr
	// EventPrepareRefused: Participant.Prepare failed before anything of
	// ID became durable (its error wraps [ErrNothingPrepared]: an
	// unavailable schema registry); nothing of ID is prepared, so it is
	// not in doubt.
	EventPrepareRefused
)

// eventTypeMax is the largest EventType, for tests and fuzzing.
const eventTypeMax = EventPrepareRefused

var eventNames = [...]string{
	EventStart:            "Start",
	EventBeginOK:          "BeginOK",
	EventBeginErr:         "BeginErr",
	EventPrepareOK:        "PrepareOK",
	EventPrepareFenced:    "PrepareFenced",
	EventPrepareErr:       "PrepareErr",
	EventDecideCommitted:  "DecideCommitted",
	EventDecideAborted:    "DecideAborted",
	EventDecideAmbiguous:  "DecideAmbiguous",
	EventCommitOK:         "CommitOK",
	EventCommitErr:        "CommitErr",
	EventAbortOK:          "AbortOK",
	EventAbortErr:         "AbortErr",
	EventOutcomeCommitted: "OutcomeCommitted",
	EventOutcomeAborted:   "OutcomeAborted",
	EventOutcomeErr:       "OutcomeErr",
	EventPrepareRefused:   "PrepareRefused",
}

// String returns the event type's name.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// perBatch reports whether events of type t name a batch.
func (t EventType) perBatch() bool {
	switch t {
	case EventStart, EventBeginOK, EventBeginErr,
		EventDecideCommitted, EventDecideAborted, EventDecideAmbiguous:
		return false
	}
	return true
}

// Event is one input to [Machine.Step].
type Event struct {
	// Type is what happened.
	Type EventType
	// ID names the batch of a per-batch event; it is ignored otherwise.
	ID BatchID
}

// String formats the event for transcripts and errors.
func (e Event) String() string {
	if e.Type.perBatch() {
		return fmt.Sprintf("%s(%s)", e.Type, e.ID)
	}
	return e.Type.String()
}

// ActionType is I/O the machine asks its driver to perform.
type ActionType uint8

// Action types.
const (
	// ActionBegin: call Decider.Begin and feed EventBeginOK/EventBeginErr.
	ActionBegin ActionType = iota + 1
	// ActionPrepare: call Participant.Prepare for ID and feed
	// EventPrepareOK/Fenced/Err.
	ActionPrepare
	// ActionDecide: call Decider.Decide(Commit) and feed
	// EventDecideCommitted/Aborted/Ambiguous.
	ActionDecide
	// ActionCommit: call Participant.Commit for ID and feed
	// EventCommitOK/Err.
	ActionCommit
	// ActionAbort: call Participant.Abort for ID and feed EventAbortOK/Err.
	ActionAbort
	// ActionReportFenced: no I/O; tell the runtime that ID's partition is
	// owned by someone else and must be dropped.
	ActionReportFenced
	// ActionQueryOutcome: call Decider.Outcome for ID and feed
	// EventOutcomeCommitted/Aborted/Err (recovery).
	ActionQueryOutcome
)

var actionNames = [...]string{
	ActionBegin:        "Begin",
	ActionPrepare:      "Prepare",
	ActionDecide:       "Decide",
	ActionCommit:       "Commit",
	ActionAbort:        "Abort",
	ActionReportFenced: "ReportFenced",
	ActionQueryOutcome: "QueryOutcome",
}

// String returns the action type's name.
func (t ActionType) String() string {
	if int(t) < len(actionNames) && actionNames[t] != "" {
		return actionNames[t]
	}
	return fmt.Sprintf("ActionType(%d)", uint8(t))
}

// Action is one output of [Machine.Step].
type Action struct {
	// Type is what to do.
	Type ActionType
	// ID names the batch of a per-batch action.
	ID BatchID
	// Commit is the decision of an ActionDecide.
	Commit bool
}

// String formats the action for transcripts.
func (a Action) String() string {
	switch a.Type {
	case ActionBegin:
		return a.Type.String()
	case ActionDecide:
		return fmt.Sprintf("Decide(%t)", a.Commit)
	}
	return fmt.Sprintf("%s(%s)", a.Type, a.ID)
}

// ErrIllegalEvent is wrapped by every error [Machine.Step] returns.
var ErrIllegalEvent = errors.New("twophase: illegal event")

// IllegalEventError is the error of an event that is not legal in the
// machine's state (or names a batch in the wrong phase, or an unknown
// batch). The machine is left unchanged.
type IllegalEventError struct {
	State State
	Event Event
	// Reason says why, for example "unknown batch".
	Reason string
}

// Error implements error.
func (e *IllegalEventError) Error() string {
	return fmt.Sprintf("twophase: illegal event %s in state %s: %s", e.Event, e.State, e.Reason)
}

// Unwrap returns ErrIllegalEvent.
func (e *IllegalEventError) Unwrap() error { return ErrIllegalEvent }

// phase is where one batch is.
type phase uint8

const (
	phaseNew        phase = iota // not yet asked to prepare
	phasePreparing               // Prepare in flight
	phasePrepared                // prepared, waiting for the decision
	phaseFenced                  // prepare fenced: nothing prepared
	phasePrepareErr              // prepare failed: maybe prepared (in doubt)
	phaseRefused                 // prepare failed before anything was durable: nothing prepared
	phaseCommitting              // Commit in flight
	phaseCommitted               // committed
	phaseAborting                // Abort in flight
	phaseAborted                 // aborted
	phaseInDoubt                 // left prepared (or maybe prepared) for recovery
	phaseQuerying                // Outcome in flight (recovery)
)

// Outcome is how a round ended.
type Outcome uint8

// Outcomes.
const (
	// OutcomePending: the round has not ended.
	OutcomePending Outcome = iota
	// OutcomeCommitted: the decision committed. Batches whose participant
	// commit failed are in doubt; recovery commits them.
	OutcomeCommitted
	// OutcomeAborted: the round aborted (or never began). Batches whose
	// prepare or abort failed are in doubt; recovery aborts them.
	OutcomeAborted
	// OutcomeInDoubt: the decision's outcome is unknown; every prepared
	// batch is in doubt.
	OutcomeInDoubt
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomePending:
		return "Pending"
	case OutcomeCommitted:
		return "Committed"
	case OutcomeAborted:
		return "Aborted"
	case OutcomeInDoubt:
		return "InDoubt"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Machine is the deterministic state machine of one two-phase commit round,
// or of one recovery pass. It performs no I/O: [Machine.Step] takes what
// happened ([Event]) and returns what to do next ([Action]); a driver (the
// [Coordinator], [Recover], or a test) performs the actions and feeds their
// results back. Per-batch actions of one step may run concurrently; their
// results may be fed in any order.
//
// Rules it enforces:
//   - a batch is committed only after a committed decision (round) or a
//     committed outcome (recovery); a batch is never aborted after one;
//   - any prepare failure (fenced or not) aborts the round: the decision
//     is Decide(false) and every batch that reported PrepareOK is aborted;
//   - a batch whose Prepare failed other than by fencing may be prepared,
//     and may share its identity with another owner's batch, so it is not
//     aborted here but left in doubt for recovery;
//   - an ambiguous commit decision ends the round in StateInDoubt with no
//     participant action at all;
//   - a failed participant commit after a committed decision leaves that
//     batch in doubt, never aborted.
//
// A Machine is not safe for concurrent use.
type Machine struct {
	recovery bool
	state    State
	order    []BatchID
	phases   map[BatchID]phase
	// decidePending: an abort decision (Decide(false)) is in flight while
	// aborting.
	decidePending bool
	// decideFailed: the abort decision returned an error (the round is
	// still aborted: commit was never requested).
	decideFailed bool
}

// NewMachine returns a round machine in StateIdle for the given batches. It
// fails if an identity repeats.
func NewMachine(ids []BatchID) (*Machine, error) {
	return newMachine(ids, false)
}

// NewRecoveryMachine returns a recovery machine in StateIdle for the given
// in-doubt batches. It fails if an identity repeats.
func NewRecoveryMachine(ids []BatchID) (*Machine, error) {
	return newMachine(ids, true)
}

func newMachine(ids []BatchID, recovery bool) (*Machine, error) {
	m := &Machine{
		recovery: recovery,
		order:    slices.Clone(ids),
		phases:   make(map[BatchID]phase, len(ids)),
	}
	for _, id := range ids {
		if _, dup := m.phases[id]; dup {
			return nil, fmt.Errorf("twophase: batch %s appears twice", id)
		}
		m.phases[id] = phaseNew
	}
	return m, nil
}

// State returns the machine's state.
func (m *Machine) State() State { return m.state }

// Outcome returns the round's outcome; OutcomePending until the machine is
// in a terminal state. A recovery machine has no single outcome: it always
// reports OutcomePending (see [Machine.Committed], [Machine.Aborted] and
// [Machine.InDoubt]).
func (m *Machine) Outcome() Outcome {
	if m.recovery {
		return OutcomePending
	}
	switch m.state {
	case StateCommitted:
		return OutcomeCommitted
	case StateAborted, StateFailed:
		return OutcomeAborted
	case StateInDoubt:
		return OutcomeInDoubt
	}
	return OutcomePending
}

// DecideFailed reports whether the round's abort decision returned an error.
// The round is aborted all the same (commit was never requested), but the
// decider may need to be replaced.
func (m *Machine) DecideFailed() bool { return m.decideFailed }

func (m *Machine) inPhase(ps ...phase) []BatchID {
	var out []BatchID
	for _, id := range m.order {
		if slices.Contains(ps, m.phases[id]) {
			out = append(out, id)
		}
	}
	return out
}

// InDoubt returns, in input order, the batches left prepared or maybe
// prepared: Recover must resolve them before new work on their partitions.
func (m *Machine) InDoubt() []BatchID { return m.inPhase(phaseInDoubt, phasePrepareErr) }

// Fenced returns, in input order, the batches whose prepare was fenced.
func (m *Machine) Fenced() []BatchID { return m.inPhase(phaseFenced) }

// Committed returns, in input order, the batches committed in their
// participant.
func (m *Machine) Committed() []BatchID { return m.inPhase(phaseCommitted) }

// Aborted returns, in input order, the batches aborted in their participant.
func (m *Machine) Aborted() []BatchID { return m.inPhase(phaseAborted) }

// Step applies one event and returns the actions it calls for. An event
// that is illegal in the current state returns an error wrapping
// [ErrIllegalEvent] and leaves the machine unchanged. Step never panics.
func (m *Machine) Step(ev Event) ([]Action, error) {
	illegal := func(reason string) ([]Action, error) {
		return nil, &IllegalEventError{State: m.state, Event: ev, Reason: reason}
	}
	if m.state.Terminal() {
		return illegal("terminal state")
	}
	// Per-batch events must name a known batch in the right phase.
	var cur phase
	if ev.Type.perBatch() {
		p, ok := m.phases[ev.ID]
		if !ok {
			return illegal("unknown batch")
		}
		cur = p
	}
	if m.recovery {
		return m.stepRecovery(ev, cur, illegal)
	}

	switch m.state {
	case StateIdle:
		if ev.Type != EventStart {
			return illegal("not started")
		}
		m.state = StateBeginning
		return []Action{{Type: ActionBegin}}, nil

	case StateBeginning:
		switch ev.Type {
		case EventBeginOK:
			if len(m.order) == 0 {
				m.state = StateDeciding
				return []Action{{Type: ActionDecide, Commit: true}}, nil
			}
			m.state = StatePreparing
			acts := make([]Action, 0, len(m.order))
			for _, id := range m.order {
				m.phases[id] = phasePreparing
				acts = append(acts, Action{Type: ActionPrepare, ID: id})
			}
			return acts, nil
		case EventBeginErr:
			m.state = StateFailed
			return nil, nil
		}
		return illegal("waiting for Begin")

	case StatePreparing:
		var acts []Action
		switch ev.Type {
		case EventPrepareOK, EventPrepareFenced, EventPrepareErr, EventPrepareRefused:
			if cur != phasePreparing {
				return illegal("batch is not being prepared")
			}
		default:
			return illegal("waiting for prepares")
		}
		switch ev.Type {
		case EventPrepareOK:
			m.phases[ev.ID] = phasePrepared
		case EventPrepareFenced:
			m.phases[ev.ID] = phaseFenced
			acts = append(acts, Action{Type: ActionReportFenced, ID: ev.ID})
		case EventPrepareErr:
			m.phases[ev.ID] = phasePrepareErr
		case EventPrepareRefused:
			m.phases[ev.ID] = phaseRefused
		}
		if len(m.inPhase(phasePreparing)) > 0 {
			return acts, nil
		}
		prepared := m.inPhase(phasePrepared)
		if len(prepared) == len(m.order) {
			m.state = StateDeciding
			return append(acts, Action{Type: ActionDecide, Commit: true}), nil
		}
		// Some prepare failed: decide abort and abort what we prepared.
		m.state = StateAborting
		m.decidePending = true
		acts = append(acts, Action{Type: ActionDecide, Commit: false})
		return append(acts, m.abortAll(prepared)...), nil

	case StateDeciding:
		prepared := m.inPhase(phasePrepared)
		switch ev.Type {
		case EventDecideCommitted:
			if len(prepared) == 0 {
				m.state = StateCommitted
				return nil, nil
			}
			m.state = StateCommitting
			acts := make([]Action, 0, len(prepared))
			for _, id := range prepared {
				m.phases[id] = phaseCommitting
				acts = append(acts, Action{Type: ActionCommit, ID: id})
			}
			return acts, nil
		case EventDecideAborted:
			if len(prepared) == 0 {
				m.state = StateAborted
				return nil, nil
			}
			m.state = StateAborting
			return m.abortAll(prepared), nil
		case EventDecideAmbiguous:
			for _, id := range prepared {
				m.phases[id] = phaseInDoubt
			}
			m.state = StateInDoubt
			return nil, nil
		}
		return illegal("waiting for the decision")

	case StateCommitting:
		switch ev.Type {
		case EventCommitOK, EventCommitErr:
			if cur != phaseCommitting {
				return illegal("batch is not being committed")
			}
			if ev.Type == EventCommitOK {
				m.phases[ev.ID] = phaseCommitted
			} else {
				m.phases[ev.ID] = phaseInDoubt
			}
			if len(m.inPhase(phaseCommitting)) == 0 {
				m.state = StateCommitted
			}
			return nil, nil
		}
		return illegal("waiting for commits")

	case StateAborting:
		switch ev.Type {
		case EventAbortOK, EventAbortErr:
			if cur != phaseAborting {
				return illegal("batch is not being aborted")
			}
			if ev.Type == EventAbortOK {
				m.phases[ev.ID] = phaseAborted
			} else {
				m.phases[ev.ID] = phaseInDoubt
			}
		case EventDecideCommitted:
			return illegal("an abort decision cannot commit")
		case EventDecideAborted, EventDecideAmbiguous:
			if !m.decidePending {
				return illegal("no abort decision in flight")
			}
			m.decidePending = false
			m.decideFailed = ev.Type == EventDecideAmbiguous
		default:
			return illegal("waiting for aborts")
		}
		if !m.decidePending && len(m.inPhase(phaseAborting)) == 0 {
			m.state = StateAborted
		}
		return nil, nil
	}
	return illegal("unexpected state")
}

func (m *Machine) abortAll(ids []BatchID) []Action {
	acts := make([]Action, 0, len(ids))
	for _, id := range ids {
		m.phases[id] = phaseAborting
		acts = append(acts, Action{Type: ActionAbort, ID: id})
	}
	return acts
}

func (m *Machine) stepRecovery(ev Event, cur phase, illegal func(string) ([]Action, error)) ([]Action, error) {
	switch m.state {
	case StateIdle:
		if ev.Type != EventStart {
			return illegal("not started")
		}
		if len(m.order) == 0 {
			m.state = StateRecovered
			return nil, nil
		}
		m.state = StateRecovering
		acts := make([]Action, 0, len(m.order))
		for _, id := range m.order {
			m.phases[id] = phaseQuerying
			acts = append(acts, Action{Type: ActionQueryOutcome, ID: id})
		}
		return acts, nil

	case StateRecovering:
		var acts []Action
		switch ev.Type {
		case EventOutcomeCommitted, EventOutcomeAborted, EventOutcomeErr:
			if cur != phaseQuerying {
				return illegal("outcome of batch not queried")
			}
			switch ev.Type {
			case EventOutcomeCommitted:
				m.phases[ev.ID] = phaseCommitting
				acts = []Action{{Type: ActionCommit, ID: ev.ID}}
			case EventOutcomeAborted:
				m.phases[ev.ID] = phaseAborting
				acts = []Action{{Type: ActionAbort, ID: ev.ID}}
			default:
				m.phases[ev.ID] = phaseInDoubt
			}
		case EventCommitOK, EventCommitErr:
			if cur != phaseCommitting {
				return illegal("batch is not being committed")
			}
			if ev.Type == EventCommitOK {
				m.phases[ev.ID] = phaseCommitted
			} else {
				m.phases[ev.ID] = phaseInDoubt
			}
		case EventAbortOK, EventAbortErr:
			if cur != phaseAborting {
				return illegal("batch is not being aborted")
			}
			if ev.Type == EventAbortOK {
				m.phases[ev.ID] = phaseAborted
			} else {
				m.phases[ev.ID] = phaseInDoubt
			}
		default:
			return illegal("recovering")
		}
		if len(m.inPhase(phaseQuerying, phaseCommitting, phaseAborting)) == 0 {
			m.state = StateRecovered
		}
		return acts, nil
	}
	return illegal("unexpected state")
}
