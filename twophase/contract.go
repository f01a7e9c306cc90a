// Package twophase is txsink's two-phase commit: the participant contract a
// sink implements, a coordinator written as a deterministic state machine
// with I/O at its edges, the Kafka decision record, and recovery of in-doubt
// batches.
//
// One round of the protocol (DESIGN.md, "The commit protocol"):
//
//  1. the runtime polls records and cuts one [Batch] per partition;
//  2. every batch is prepared in its participant (durable, decidable later
//     from another process);
//  3. the [Decider] records the decision (a Kafka transaction that commits
//     the consumer group's offsets);
//  4. every prepared batch is committed or aborted.
//
// When the decision's outcome is unknown (a timeout, a lost connection) the
// prepared batches stay in doubt; [Recover] resolves them from durable
// records before any new work on their partitions (invariant 7).
package twophase

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchID identifies one batch: the records of one partition between two
// offsets, inclusive (invariant 6). Re-reading the range yields the same
// records in the same order.
type BatchID struct {
	Connector string
	Topic     string
	Partition int32
	First     int64 // offset of the first record of the batch
	Last      int64 // offset of the last record of the batch
}

// NextOffset is the offset stored in the sink once the batch commits.
func (id BatchID) NextOffset() int64 { return id.Last + 1 }

// String formats the identity for logs and errors.
func (id BatchID) String() string {
	return fmt.Sprintf("%s/%s[%d]@%d-%d", id.Connector, id.Topic, id.Partition, id.First, id.Last)
}

// Batch is the work of one round for one partition.
type Batch struct {
	ID BatchID
	// Prev is the partition's stored next_offset that this batch continues
	// from: the compare-and-set expects it. It is ID.First or lower (gaps
	// left by transaction markers and compaction are normal).
	Prev int64
	// Fence is the epoch the owner obtained when the partition was assigned
	// (invariant 4). A participant refuses to prepare when the stored fence
	// differs, returning an error that wraps [ErrFenced].
	Fence int64
	// Records are the partition's records in offset order, First..Last,
	// read with read_committed isolation (gaps left by transaction markers
	// are normal).
	Records []*kgo.Record
	// Converted is what the runtime made of Records before handing the
	// batch to a participant (txsink's runtime converts and transforms
	// them once, before the sink: a *connectors.Converted). twophase
	// never reads it; it is nil when a participant is called outside the
	// runtime's rounds (recovery re-reading a range, tests), and the
	// participant then converts Records through the runtime's pipeline.
	Converted any
	// Alone is set when the batch is the only one of its round. A
	// participant may then take locks that a prepared batch keeps until
	// the decision and that the round's other batches would wait on (a
	// schema change's ACCESS EXCLUSIVE lock): with other batches, the
	// decision would wait for them while they wait for it. Without Alone,
	// such a Prepare refuses with an *OwnRoundError.
	Alone bool
}

// OwnRoundError is a Prepare refusal: the batch needs locks that only a
// batch alone in its round may take (see Batch.Alone). Nothing was
// prepared (it wraps ErrNothingPrepared); the runtime retries the batch in
// a round of its own.
type OwnRoundError struct {
	ID  BatchID
	Err error
}

func (e *OwnRoundError) Error() string {
	return "batch " + e.ID.String() + " needs a round of its own: " + e.Err.Error()
}

// Unwrap returns ErrNothingPrepared and the cause.
func (e *OwnRoundError) Unwrap() []error { return []error{ErrNothingPrepared, e.Err} }

// Participant is one sink's side of the protocol. Every method must be safe
// to call from a process other than the one that prepared the batch: that is
// how recovery finishes the work of a crashed or fenced owner.
type Participant interface {
	// Prepare writes the batch's rows, its offset advance (compare-and-set
	// from Prev to ID.NextOffset, only while the fence still equals
	// b.Fence) and its dead letters, and makes all of it durable but not
	// yet visible. It returns an error wrapping ErrFenced when the
	// compare-and-set or fence check fails; nothing is then left prepared.
	// An error wrapping ErrNothingPrepared says Prepare failed before
	// anything of the batch became durable, so it is not in doubt.
	// Cancelling ctx before Prepare returns leaves either nothing or a
	// prepared batch that InDoubt lists.
	Prepare(ctx context.Context, b *Batch) error
	// Commit makes a prepared batch visible. It is idempotent: committing a
	// batch that is no longer prepared returns nil when the batch's effects
	// are visible (it was committed before) and an error wrapping
	// ErrNotPrepared when they are not.
	Commit(ctx context.Context, id BatchID) error
	// Abort discards a prepared batch. It is idempotent: aborting a batch
	// that is not prepared returns nil.
	Abort(ctx context.Context, id BatchID) error
	// InDoubt lists the connector's prepared batches, whoever prepared them.
	InDoubt(ctx context.Context, connector string) ([]BatchID, error)
}

// Stager is a [Participant] that can write a batch ahead of its round, for
// pipelined rounds: while round N is prepared and decided, the runtime
// stages round N+1's batches, and round N+1's Prepare then only adds the
// offsets' compare-and-set and the PREPARE to the staged write.
//
// A staged batch is not prepared: nothing of it is durable or visible, it
// holds no lock on the partition's offsets, and it vanishes with its
// process or connection. Recovery never sees it. Prepare, Commit and Abort
// keep their contracts; Prepare of a batch that was not staged (or whose
// staging failed) does the whole write itself, as without a Stager.
type Stager interface {
	// Stage writes b's rows (and dead letters) in a transaction the
	// participant keeps open for Prepare(b). It may wait for resources
	// the current round releases; it never waits for a later round. An
	// error leaves nothing staged: Prepare then writes the batch itself
	// and reports the real error, if any.
	Stage(ctx context.Context, b *Batch) error
	// Discard rolls back whatever is staged for ids (a round that will
	// not run: its predecessor aborted, the task stops).
	Discard(ids []BatchID)
}

// RoundStager is a [Stager] and [RoundParticipant] that writes a whole
// round ahead in the units its PrepareRound prepares (the PostgreSQL sink:
// up to commit.parallelism transactions of several batches), instead of
// batch by batch. StageRound returns one error per batch, in order (nil:
// staged), with Stage's meaning: a batch not staged is written by its
// round. What is staged waits for the round's PrepareRound, or Discard of
// any of its batches, which rolls back the unit it is in; a Prepare of one
// of its batches alone rolls back its unit too, and its other batches are
// then written by their round.
type RoundStager interface {
	Stager
	StageRound(ctx context.Context, batches []*Batch) []error
}

// RoundParticipant is a [Participant] that prepares the batches of a round
// in one call and commits them in one call, so that it can write them in
// fewer units than batches: the ClickHouse sink inserts one block per
// table per round instead of one per partition, the PostgreSQL sink
// prepares a round's batches in a few transactions instead of one each.
// The [Machine] is the same for every participant; only the driver groups
// the calls it asks for.
//
// The batches of one PrepareRound are one round: their decision is one
// (one Kafka transaction commits all their offsets or none), and the
// participant may rely on that. A Commit of any one of them (CommitRound
// with a subset, in recovery by a process that owns only some of the
// round's partitions) makes visible every batch of the unit it was
// written in (ClickHouse: the whole round; PostgreSQL: its transaction,
// one of up to commit.parallelism per round), and an Abort of one
// is only ever asked for when the decision aborted all of them.
type RoundParticipant interface {
	Participant
	// PrepareRound prepares batches as one round and returns one error per
	// batch, in order (nil: prepared), with the meanings of Prepare's. A
	// batch that is not prepared because another batch of the round
	// failed gets an error wrapping ErrNothingPrepared.
	PrepareRound(ctx context.Context, batches []*Batch) []error
	// CommitRound commits the rounds the batches ids belong to and returns
	// one error per id, in order, with the meanings of Commit's.
	CommitRound(ctx context.Context, ids []BatchID) []error
}

// Decider records and reads the decision of a round. In exactly_once mode it
// is a Kafka transaction that commits the consumer group's offsets (KIP-447:
// fenced by the group generation).
type Decider interface {
	// Begin opens the round's decision record (a Kafka transaction). It is
	// called once per round, before any batch is prepared.
	Begin(ctx context.Context) error
	// Decide ends the round's decision record with a commit when commit is
	// true and with an abort otherwise. It returns committed=true only when
	// the commit is durable. An error means the outcome is unknown: the
	// caller must leave its participants prepared and run recovery.
	Decide(ctx context.Context, commit bool) (committed bool, err error)
	// Outcome reads, from durable records, whether the round that prepared
	// id was committed. It waits for pending decisions to settle (stable
	// offsets); it never guesses.
	Outcome(ctx context.Context, id BatchID) (committed bool, err error)
}

// OutcomeReader is the part of a [Decider] that [Recover] needs: reading a
// decision back from durable records. The runtimes whose own rounds have
// no decision record (the local guarantees) still read one to resolve
// batches an earlier exactly_once run left prepared.
type OutcomeReader interface {
	// Outcome reads whether the round that prepared id was committed; see
	// [Decider.Outcome].
	Outcome(ctx context.Context, id BatchID) (committed bool, err error)
}

// Sentinel errors.
var (
	// ErrFenced means another owner holds the partition: its fence epoch or
	// stored offset moved. The batch must be dropped, never retried blindly.
	ErrFenced = errors.New("twophase: fenced by a newer owner")
	// ErrNotPrepared means Commit found neither a prepared batch nor its
	// committed effects.
	ErrNotPrepared = errors.New("twophase: batch is not prepared")
	// ErrInDoubt means a round ended without a known outcome; recovery must
	// run before new work on its partitions.
	ErrInDoubt = errors.New("twophase: outcome unknown, batches in doubt")
	// ErrNothingPrepared is wrapped by a Prepare error that happened before
	// anything of the batch became durable (the batch's records could not
	// be converted because a schema registry was unavailable, say): the
	// batch is then known not to be prepared, is not in doubt, and the
	// round aborts without recovery. A participant must only use it where
	// no PREPARE (or durable intent) can have been sent.
	ErrNothingPrepared = errors.New("twophase: nothing prepared")
)
