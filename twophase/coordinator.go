package twophase

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Hook points passed to the function given to [WithHook].
const (
	// HookAfterBegin: Decider.Begin succeeded; nothing is prepared.
	HookAfterBegin = "after-begin"
	// HookAfterPrepare: every Prepare returned; no decision yet.
	HookAfterPrepare = "after-prepare"
	// HookBeforeDecide: Decide is about to be called (every batch
	// prepared, or the round aborting); nothing is decided yet. Begin has
	// returned and End has not been called: a Kafka session may be
	// polled between HookAfterBegin and HookBeforeDecide.
	HookBeforeDecide = "before-decide"
	// HookAfterDecide: Decide returned (commit or abort decision, or an
	// error); no participant was committed yet.
	HookAfterDecide = "after-decide"
	// HookAfterCommit: every participant Commit of a committed round
	// returned.
	HookAfterCommit = "after-commit"
)

// defaultConcurrency is the default bound on concurrent participant calls.
const defaultConcurrency = 4

// Option configures a [Coordinator].
type Option func(*Coordinator)

// WithPrepareConcurrency bounds the number of concurrent Prepare calls of a
// round (default 4). Values below 1 mean 1.
func WithPrepareConcurrency(n int) Option {
	return func(c *Coordinator) { c.prepareConc = max(n, 1) }
}

// WithCommitConcurrency bounds the number of concurrent Commit or Abort
// calls of a round (default 4). Values below 1 mean 1.
func WithCommitConcurrency(n int) Option {
	return func(c *Coordinator) { c.commitConc = max(n, 1) }
}

// WithCallTimeout bounds each participant call (Prepare, Commit, Abort)
// to d; d <= 0 means no bound (the default). A call still running after d
// has its context cancelled: a prepare that did not finish is refused
// (the round aborts), and a commit or abort that did not finish leaves its
// batch in doubt for Recover, exactly as a lost connection would. It keeps
// a participant whose server vanished without closing the connection (a
// dead host behind a proxy, a half-open connection) from holding a round
// forever. Decider calls are not bounded: cancelling one leaves a Kafka
// session unusable.
func WithCallTimeout(d time.Duration) Option {
	return func(c *Coordinator) { c.callTimeout = d }
}

// WithHook installs fn, called synchronously from Round at the named points
// [HookAfterBegin], [HookAfterPrepare], [HookBeforeDecide],
// [HookAfterDecide] and [HookAfterCommit]. It exists for fault injection
// (crash tests), where a hook that never returns, or ends its goroutine,
// simulates a crash at that point, and for runtimes that use the round's
// windows (pipelined rounds poll the next round between HookAfterBegin and
// HookBeforeDecide). fn must not call back into the Coordinator.
func WithHook(fn func(point string)) Option {
	return func(c *Coordinator) { c.hook = fn }
}

// PhaseTimings are the wall-clock durations of a round's phases.
type PhaseTimings struct {
	Begin   time.Duration // Decider.Begin
	Prepare time.Duration // all Prepare calls
	Decide  time.Duration // Decider.Decide
	Commit  time.Duration // all Commit calls, or all Abort calls of an aborted round
}

// RoundResult describes how a round ended. It is filled even when Round
// returns an error.
type RoundResult struct {
	// Outcome is OutcomeCommitted, OutcomeAborted or OutcomeInDoubt.
	Outcome Outcome
	// Fenced lists the batches whose prepare was fenced: another owner has
	// their partitions, which the runtime must drop (never retry).
	Fenced []BatchID
	// InDoubt lists the batches that may still be prepared: Recover must
	// resolve them before any new work on their partitions (invariant 7).
	InDoubt []BatchID
	// Phases are the durations of the round's phases.
	Phases PhaseTimings
}

// Coordinator runs two-phase commit rounds: it drives a [Machine] and
// performs its I/O against one [Participant] and one [Decider]. A
// Coordinator runs one round at a time (the Decider is one Kafka
// transaction at a time): concurrent calls to Round wait for each other.
type Coordinator struct {
	mu          sync.Mutex // serializes rounds
	p           Participant
	d           Decider
	prepareConc int
	commitConc  int
	callTimeout time.Duration
	hook        func(string)
}

// NewCoordinator returns a Coordinator that prepares, commits and aborts
// batches in p and records decisions in d.
func NewCoordinator(p Participant, d Decider, opts ...Option) *Coordinator {
	c := &Coordinator{p: p, d: d, prepareConc: defaultConcurrency, commitConc: defaultConcurrency}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Round runs one round of two-phase commit over batches (one per
// partition, distinct identities): Begin, Prepare every batch (at most
// WithPrepareConcurrency at once), Decide, then Commit every batch (or
// Abort every prepared batch when any prepare failed or the decision
// aborted).
//
// A round with zero batches still begins and decides (commit): with a
// [KafkaDecider] that is an offsets-only Kafka transaction, which keeps the
// session's transaction lifecycle uniform; it prepares and commits nothing.
//
// The error is nil exactly when the round committed cleanly, or aborted
// cleanly because the decider aborted (a rebalance fenced the group
// generation). Otherwise it joins every cause: a Begin error (nothing
// happened), prepare errors (errors.Is(err, ErrFenced) when a batch was
// fenced; see RoundResult.Fenced), the decide error, commit and abort
// errors, and [ErrInDoubt] whenever RoundResult.InDoubt is not empty.
// res.Outcome is OutcomeInDoubt only when the decision itself is unknown;
// a committed round whose participant commit failed is OutcomeCommitted
// with that batch in RoundResult.InDoubt.
//
// Cancelling ctx, by phase:
//   - before Round starts: nothing happens; Round returns ctx's error;
//   - during PREPARE: prepares fail; the round decides abort and aborts
//     what was prepared, with the cancelled ctx, so those calls likely
//     fail too: every batch not known aborted is left in doubt;
//   - during DECIDE: the decision is ambiguous; every batch stays
//     prepared (OutcomeInDoubt). With a KafkaDecider, the session should
//     then be closed (franz-go: cancelling End is for shutting down);
//   - during COMMIT: the round is committed; batches not yet committed are
//     left in doubt.
//
// In short: cancelling after PREPARE leaves the batches in doubt; [Recover]
// resolves them. Cancel only to shut down.
func (c *Coordinator) Round(ctx context.Context, batches []*Batch) (RoundResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := RoundResult{Outcome: OutcomeAborted}
	byID := make(map[BatchID]*Batch, len(batches))
	ids := make([]BatchID, 0, len(batches))
	for i, b := range batches {
		if b == nil {
			return res, fmt.Errorf("twophase: round: batch %d is nil", i)
		}
		byID[b.ID] = b
		ids = append(ids, b.ID)
	}
	m, err := NewMachine(ids)
	if err != nil {
		return res, fmt.Errorf("twophase: round: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("twophase: round not started: %w", err)
	}
	dr := &driver{
		ctx:         ctx,
		m:           m,
		p:           c.p,
		d:           c.d,
		byID:        byID,
		prepareConc: c.prepareConc,
		commitConc:  c.commitConc,
		callTimeout: c.callTimeout,
		hook:        c.hook,
	}
	dr.run()

	res.Outcome = m.Outcome()
	res.Fenced = dr.fenced
	res.InDoubt = m.InDoubt()
	res.Phases = dr.timings
	errs := dr.errs
	if len(res.InDoubt) > 0 || res.Outcome == OutcomeInDoubt {
		errs = append(errs, inDoubtError(res.InDoubt))
	}
	return res, errors.Join(errs...)
}

func inDoubtError(ids []BatchID) error {
	return fmt.Errorf("%w: %v", ErrInDoubt, ids)
}

// RecoveryReport lists what [Recover] did.
type RecoveryReport struct {
	// Committed lists the in-doubt batches found committed and committed.
	Committed []BatchID
	// Aborted lists the in-doubt batches found not committed and aborted.
	Aborted []BatchID
	// InDoubt lists the batches still in doubt: their outcome could not be
	// read, or their commit or abort failed. Recover returns an error
	// wrapping ErrInDoubt when it is not empty.
	InDoubt []BatchID
}

// Recover resolves the connector's in-doubt batches: it lists
// p.InDoubt(connector), keeps those whose partition owns accepts (nil owns
// keeps all), asks o.Outcome for each, commits those whose round committed
// and aborts the rest. Run it on start and on every assignment, before any
// new work on the assigned partitions, and pass an owns that accepts only
// partitions this process owns: a batch of a partition owned by someone
// else is theirs to resolve.
//
// An Outcome error leaves its batch in doubt (it is never guessed) and is
// returned; so are commit and abort errors. The error wraps ErrInDoubt when
// any batch is left in doubt; running Recover again is safe (every step is
// idempotent). Cancelling ctx leaves the remaining batches in doubt.
//
// Of opts, WithCallTimeout bounds each Commit and Abort; the others do not
// apply.
func Recover(ctx context.Context, p Participant, o OutcomeReader, connector string, owns func(topic string, partition int32) bool, opts ...Option) (RecoveryReport, error) {
	var c Coordinator
	for _, o := range opts {
		o(&c)
	}
	var rep RecoveryReport
	all, err := p.InDoubt(ctx, connector)
	if err != nil {
		return rep, fmt.Errorf("twophase: recover %s: list in-doubt batches: %w", connector, err)
	}
	ids := make([]BatchID, 0, len(all))
	for _, id := range all {
		if owns == nil || owns(id.Topic, id.Partition) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareIDs)
	ids = slices.Compact(ids)
	m, err := NewRecoveryMachine(ids)
	if err != nil {
		return rep, fmt.Errorf("twophase: recover %s: %w", connector, err)
	}
	dr := &driver{
		ctx:         ctx,
		m:           m,
		p:           p,
		o:           o,
		prepareConc: defaultConcurrency,
		commitConc:  defaultConcurrency,
		callTimeout: c.callTimeout,
	}
	dr.run()
	rep.Committed = m.Committed()
	rep.Aborted = m.Aborted()
	rep.InDoubt = m.InDoubt()
	errs := dr.errs
	if len(rep.InDoubt) > 0 {
		errs = append(errs, inDoubtError(rep.InDoubt))
	}
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("twophase: recover %s: %w", connector, err)
	}
	return rep, nil
}

func compareIDs(a, b BatchID) int {
	return cmp.Or(
		cmp.Compare(a.Connector, b.Connector),
		cmp.Compare(a.Topic, b.Topic),
		cmp.Compare(a.Partition, b.Partition),
		cmp.Compare(a.First, b.First),
		cmp.Compare(a.Last, b.Last),
	)
}

// driver performs a Machine's actions. Only its run goroutine steps the
// machine; participant calls run on bounded worker pools and report back
// through a channel.
type driver struct {
	ctx         context.Context
	m           *Machine
	p           Participant
	d           Decider       // rounds
	o           OutcomeReader // recovery
	byID        map[BatchID]*Batch
	prepareConc int
	commitConc  int
	callTimeout time.Duration
	hook        func(string)

	fenced  []BatchID
	errs    []error
	timings PhaseTimings
}

func (dr *driver) callHook(point string) {
	if dr.hook != nil {
		dr.hook(point)
	}
}

// step feeds ev to the machine. An illegal event is a bug in a driver or a
// contract violation by a participant or decider; it is recorded and the
// machine is left as it is.
func (dr *driver) step(ev Event) []Action {
	acts, err := dr.m.Step(ev)
	if err != nil {
		dr.errs = append(dr.errs, err)
	}
	return acts
}

func fanOutable(t ActionType) bool {
	switch t {
	case ActionPrepare, ActionCommit, ActionAbort, ActionQueryOutcome:
		return true
	}
	return false
}

func (dr *driver) run() {
	queue := dr.step(Event{Type: EventStart})
	for len(queue) > 0 {
		a := queue[0]
		if !fanOutable(a.Type) {
			rest := slices.Clone(queue[1:])
			queue = append(rest, dr.single(a)...)
			continue
		}
		j := 1
		for j < len(queue) && fanOutable(queue[j].Type) {
			j++
		}
		group, rest := queue[:j], slices.Clone(queue[j:])
		queue = append(rest, dr.fanOut(group)...)
	}
}

// single performs an action that is not a participant call.
func (dr *driver) single(a Action) []Action {
	switch a.Type {
	case ActionBegin:
		start := time.Now()
		err := dr.d.Begin(dr.ctx)
		dr.timings.Begin = time.Since(start)
		if err != nil {
			dr.errs = append(dr.errs, fmt.Errorf("twophase: begin: %w", err))
			return dr.step(Event{Type: EventBeginErr})
		}
		dr.callHook(HookAfterBegin)
		return dr.step(Event{Type: EventBeginOK})

	case ActionDecide:
		dr.callHook(HookBeforeDecide)
		start := time.Now()
		committed, err := dr.d.Decide(dr.ctx, a.Commit)
		dr.timings.Decide = time.Since(start)
		ev := Event{Type: EventDecideAborted}
		switch {
		case err != nil:
			dr.errs = append(dr.errs, fmt.Errorf("twophase: decide (commit=%t): %w", a.Commit, err))
			ev.Type = EventDecideAmbiguous
		case committed && !a.Commit:
			// Contract violation: an abort request cannot commit. Do
			// not believe either answer; recovery reads durable records.
			dr.errs = append(dr.errs, errors.New("twophase: decide: decider reported a commit for an abort decision"))
			ev.Type = EventDecideAmbiguous
		case committed:
			ev.Type = EventDecideCommitted
		}
		dr.callHook(HookAfterDecide)
		return dr.step(ev)

	case ActionReportFenced:
		dr.fenced = append(dr.fenced, a.ID)
		return nil
	}
	dr.errs = append(dr.errs, fmt.Errorf("twophase: driver: unexpected action %s", a))
	return nil
}

// fanOut performs participant calls on a bounded pool, feeding each result
// to the machine as it arrives, and returns the actions the results called
// for once every call has returned. With a [RoundParticipant], the group's
// prepares are one PrepareRound call and its commits one CommitRound call.
func (dr *driver) fanOut(group []Action) []Action {
	conc := dr.commitConc
	prepare := group[0].Type == ActionPrepare
	if prepare {
		conc = dr.prepareConc
	}
	jobs := dr.jobs(group)
	conc = min(conc, len(jobs))
	start := time.Now()

	queue := make(chan []Action)
	results := make(chan result, len(group))
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for job := range queue {
				for _, r := range dr.callJob(job) {
					results <- r
				}
			}
		})
	}
	go func() {
		for _, job := range jobs {
			queue <- job
		}
		close(queue)
	}()

	var next []Action
	hasCommit := false
	for _, a := range group {
		hasCommit = hasCommit || a.Type == ActionCommit
	}
	for range group {
		r := <-results
		if r.err != nil {
			dr.errs = append(dr.errs, r.err)
		}
		next = append(next, dr.step(r.ev)...)
	}
	wg.Wait()

	elapsed := time.Since(start)
	switch {
	case prepare:
		dr.timings.Prepare += elapsed
		dr.callHook(HookAfterPrepare)
	default:
		dr.timings.Commit += elapsed
		if hasCommit && !dr.m.recovery {
			dr.callHook(HookAfterCommit)
		}
	}
	return next
}

// jobs splits a group of actions into pool jobs: one action each, except
// that a RoundParticipant gets the group's prepares as one job and its
// commits as another.
func (dr *driver) jobs(group []Action) [][]Action {
	_, rounds := dr.p.(RoundParticipant)
	var jobs [][]Action
	var prepares, commits []Action
	for _, a := range group {
		switch {
		case rounds && a.Type == ActionPrepare:
			prepares = append(prepares, a)
		case rounds && a.Type == ActionCommit:
			commits = append(commits, a)
		default:
			jobs = append(jobs, []Action{a})
		}
	}
	for _, g := range [][]Action{prepares, commits} {
		if len(g) > 0 {
			jobs = append(jobs, g)
		}
	}
	return jobs
}

// callJob performs one pool job: a single action, or a RoundParticipant's
// group of prepares or commits.
func (dr *driver) callJob(job []Action) []result {
	rp, ok := dr.p.(RoundParticipant)
	if !ok || (job[0].Type != ActionPrepare && job[0].Type != ActionCommit) {
		return []result{dr.call(job[0])}
	}
	ctx, cancel := dr.callCtx()
	defer cancel()
	var errs []error
	if job[0].Type == ActionPrepare {
		batches := make([]*Batch, len(job))
		for i, a := range job {
			batches[i] = dr.byID[a.ID]
		}
		errs = rp.PrepareRound(ctx, batches)
	} else {
		ids := make([]BatchID, len(job))
		for i, a := range job {
			ids[i] = a.ID
		}
		errs = rp.CommitRound(ctx, ids)
	}
	out := make([]result, len(job))
	for i, a := range job {
		var err error
		if i < len(errs) {
			err = errs[i]
		} else {
			err = fmt.Errorf("participant returned %d results for %d batches", len(errs), len(job))
		}
		out[i] = dr.outcome(a, err)
	}
	return out
}

// result is what one pool call reports back to the run goroutine.
type result struct {
	ev  Event
	err error
}

// call performs one participant action. It runs on a pool goroutine and
// touches neither the machine nor the driver's fields.
func (dr *driver) call(a Action) result {
	ctx, cancel := dr.callCtx()
	defer cancel()
	switch a.Type {
	case ActionPrepare:
		return dr.outcome(a, dr.p.Prepare(ctx, dr.byID[a.ID]))
	case ActionCommit:
		return dr.outcome(a, dr.p.Commit(ctx, a.ID))
	case ActionAbort:
		return dr.outcome(a, dr.p.Abort(ctx, a.ID))
	}
	ev := Event{ID: a.ID}
	committed, err := dr.o.Outcome(dr.ctx, a.ID)
	switch {
	case err != nil:
		err = fmt.Errorf("twophase: outcome of %s: %w", a.ID, err)
		ev.Type = EventOutcomeErr
	case committed:
		ev.Type = EventOutcomeCommitted
	default:
		ev.Type = EventOutcomeAborted
	}
	return result{ev: ev, err: err}
}

// callCtx bounds one participant call by WithCallTimeout (Decider calls,
// Outcome included, are not bounded).
func (dr *driver) callCtx() (context.Context, context.CancelFunc) {
	if dr.callTimeout > 0 {
		return context.WithTimeout(dr.ctx, dr.callTimeout)
	}
	return dr.ctx, func() {}
}

// outcome is the event (and error) of a participant's answer err to a
// Prepare, Commit or Abort action.
func (dr *driver) outcome(a Action, err error) result {
	ev := Event{ID: a.ID}
	switch a.Type {
	case ActionPrepare:
		ev.Type = EventPrepareOK
		if err != nil {
			err = fmt.Errorf("twophase: prepare %s: %w", a.ID, err)
			switch {
			case errors.Is(err, ErrFenced):
				ev.Type = EventPrepareFenced
			case errors.Is(err, ErrNothingPrepared):
				ev.Type = EventPrepareRefused
			default:
				ev.Type = EventPrepareErr
			}
		}
	case ActionCommit:
		ev.Type = EventCommitOK
		if err != nil {
			err = fmt.Errorf("twophase: commit %s: %w", a.ID, err)
			ev.Type = EventCommitErr
		}
	case ActionAbort:
		ev.Type = EventAbortOK
		if err != nil {
			err = fmt.Errorf("twophase: abort %s: %w", a.ID, err)
			ev.Type = EventAbortErr
		}
	}
	return result{ev: ev, err: err}
}
