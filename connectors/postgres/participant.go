package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// Compile-time checks.
var (
	_ connectors.Sink          = (*Sink)(nil)
	_ connectors.LocalWriter   = (*Sink)(nil)
	_ connectors.KeyReader     = (*Sink)(nil)
	_ twophase.Participant     = (*Sink)(nil)
	_ twophase.Stager          = (*Sink)(nil)
	_ connectors.RecordLocator = (*record.Error)(nil)
)

// GIDPrefix starts the global id of every prepared transaction txsink
// creates, so recovery (and a DBA reading pg_prepared_xacts) can tell ours
// from others'.
const GIDPrefix = "txsink1_"

// Sink is the PostgreSQL sink: a twophase.Participant using PREPARE
// TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED, the offsets store in
// the same database, and the local write paths of the other modes.
type Sink struct {
	pool      *pgxpool.Pool
	store     *offsets.PG
	w         *Writer
	connector string
	connHash  string
	log       *slog.Logger

	// slots bounds the transactions staged ahead of their round (nil:
	// staging is off); see EnableStaging.
	slots    chan struct{}
	stageMu  sync.Mutex
	stagedTx map[twophase.BatchID]*staged
	// stagedGroups are the round transactions written ahead (StageRound),
	// by each of their batches.
	stagedGroups map[twophase.BatchID]*stagedGroup
	// keyedTopics are the topics a batch of which needed keyed writes
	// (deletes, upserts, truncates): never written ahead again.
	keyedTopics map[string]bool

	// rounds is the quoted name of the round membership table (round.go);
	// roundConc the prepared transactions a round is written in at most
	// (commit.parallelism). roundOf is the prepared transaction of each
	// batch this sink prepared or found in doubt, until it is resolved.
	rounds    string
	roundConc int
	roundMu   sync.Mutex
	roundOf   map[twophase.BatchID]string
}

// staged is a batch written ahead of its round: an open transaction with
// the batch's rows and no offsets change yet.
type staged struct {
	tx pgx.Tx
}

// NewSink opens a sink on pool for the named connector. It creates the
// offsets table when missing.
func NewSink(ctx context.Context, pool *pgxpool.Pool, connector string, w *Writer, offsetsSchema, offsetsTable string, log *slog.Logger) (*Sink, error) {
	if log == nil {
		log = slog.Default()
	}
	if offsetsSchema == "" {
		offsetsSchema = "public"
	}
	if offsetsTable == "" {
		offsetsTable = offsets.DefaultTable
	}
	if n := len(offsetsTable) + len(roundsSuffix); n > maxIdentLen {
		return nil, fmt.Errorf("%s: %q leaves no room for the round membership table %q (%d bytes; PostgreSQL keeps %d)",
			KeyOffsetsTable, offsetsTable, offsetsTable+roundsSuffix, n, maxIdentLen)
	}
	s := &Sink{
		pool:      pool,
		store:     offsets.NewPG(pool, offsetsSchema, offsetsTable),
		w:         w,
		connector: connector,
		connHash:  shortHash(connector),
		log:       log,
		rounds:    pgx.Identifier{offsetsSchema, offsetsTable + roundsSuffix}.Sanitize(),
		roundConc: 4,
		roundOf:   map[twophase.BatchID]string{},
	}
	if err := s.store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureRounds(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// maxIdentLen is PostgreSQL's identifier length (NAMEDATALEN - 1).
const maxIdentLen = 63

// SetRoundParallelism sets the prepared transactions a round of many
// batches is written in, at most (commit.parallelism; 4 by default).
func (s *Sink) SetRoundParallelism(n int) { s.roundConc = max(n, 1) }

// Store returns the sink's offset store.
func (s *Sink) Store() *offsets.PG { return s.store }

// Pool returns the sink's connection pool.
func (s *Sink) Pool() *pgxpool.Pool { return s.pool }

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// GID returns the prepared transaction's global id for a batch:
// txsink1_<connector hash>_<topic hash>_<partition>_<first>_<last>. It is at
// most 100 bytes (PostgreSQL allows 200) and contains only [0-9a-f_], so it
// is safe as a SQL literal.
func GID(id twophase.BatchID) string {
	return fmt.Sprintf("%s%s_%s_%d_%d_%d", GIDPrefix, shortHash(id.Connector), shortHash(id.Topic), id.Partition, id.First, id.Last)
}

// parseGID splits a gid made by GID. ok is false for anything else.
func parseGID(gid string) (connHash, topicHash string, partition int32, first, last int64, ok bool) {
	rest, found := strings.CutPrefix(gid, GIDPrefix)
	if !found {
		return
	}
	f := strings.Split(rest, "_")
	if len(f) != 5 || len(f[0]) != 16 || len(f[1]) != 16 {
		return
	}
	p, err1 := strconv.ParseInt(f[2], 10, 32)
	a, err2 := strconv.ParseInt(f[3], 10, 64)
	b, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || p < 0 || a < 0 || b < a {
		return
	}
	return f[0], f[1], int32(p), a, b, true
}

// Prepare implements twophase.Participant: BEGIN; compare-and-set the
// offset (first, so a fenced owner stops before writing); write rows and
// dead letters; PREPARE TRANSACTION. A batch that needs a schema change
// (auto.create, auto.evolve, a TRUNCATE, the dead-letter table) makes it
// only when it is alone in its round (b.Alone): its prepared transaction
// keeps an ACCESS EXCLUSIVE lock until COMMIT PREPARED. Otherwise Prepare
// refuses with a *twophase.OwnRoundError. Cancelling ctx before PREPARE
// completes rolls back; if the connection breaks during PREPARE the batch
// may be prepared, and InDoubt lists it.
func (s *Sink) Prepare(ctx context.Context, b *twophase.Batch) (err error) {
	defer func() { s.resetOnLostConnection(err) }()
	defer func() {
		if err == nil {
			s.roundMu.Lock()
			s.roundOf[b.ID] = GID(b.ID)
			s.roundMu.Unlock()
		}
	}()
	sentPrepare := false
	defer func() {
		if err != nil && !sentPrepare && !errors.Is(err, twophase.ErrNothingPrepared) {
			// PREPARE TRANSACTION was never sent: the transaction rolled
			// back (or dies with its connection), nothing is prepared.
			err = fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
		}
	}()
	s.dropGroup(b.ID) // written ahead with others: this batch goes alone
	if sg := s.takeStaged(b.ID); sg != nil {
		defer s.release()
		return classify(s.endTx(ctx, sg.tx, func(tx pgx.Tx) error {
			// The rows were written ahead (Stage): only the offsets'
			// compare-and-set is left before PREPARE. Read committed,
			// it sees the previous round's COMMIT PREPARED.
			if err := s.store.Advance(ctx, tx, offsets.GuardCAS, b.ID.Connector, b.ID.Topic, b.ID.Partition, b.Fence, b.Prev, b.ID.NextOffset()); err != nil {
				return err
			}
			failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
			sentPrepare = true
			if _, err := tx.Exec(ctx, "PREPARE TRANSACTION '"+GID(b.ID)+"'"); err != nil {
				return fmt.Errorf("prepare %s: %w", b.ID, err)
			}
			return nil
		}))
	}
	return classify(s.inTx(ctx, func(tx pgx.Tx) error {
		if err := s.store.Advance(ctx, tx, offsets.GuardCAS, b.ID.Connector, b.ID.Topic, b.ID.Partition, b.Fence, b.Prev, b.ID.NextOffset()); err != nil {
			return err
		}
		c, err := s.w.records.Batch(ctx, b)
		if err != nil {
			return err // before PREPARE: nothing is prepared
		}
		_, err = s.w.WriteBatch(ctx, tx, c, b.Alone)
		if errors.Is(err, ErrSchemaChange) {
			// Nothing was written and PREPARE was not sent.
			return &twophase.OwnRoundError{ID: b.ID, Err: err}
		}
		if errors.Is(err, record.ErrUnavailable) {
			// The record pipeline's environment failed before PREPARE
			// was sent: the transaction rolls back, nothing is left
			// prepared.
			return fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
		}
		if err != nil {
			return err
		}
		failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
		sentPrepare = true
		if _, err := tx.Exec(ctx, "PREPARE TRANSACTION '"+GID(b.ID)+"'"); err != nil {
			return fmt.Errorf("prepare %s: %w", b.ID, err)
		}
		return nil
	}))
}

// classify marks the errors no retry can fix as connectors.Terminal, and
// those of a database that cannot take writes for a while as
// connectors.ErrSinkUnavailable.
func classify(err error) error {
	if err != nil && (errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrUnsupportedColumn) || errors.Is(err, ErrNoConflictTarget)) {
		return &connectors.Terminal{Err: err}
	}
	if Unavailable(err) && !errors.Is(err, connectors.ErrSinkUnavailable) {
		return fmt.Errorf("%w: %w", connectors.ErrSinkUnavailable, err)
	}
	return err
}

// inTx runs fn in a transaction and ends it: after a successful PREPARE
// TRANSACTION the session has no transaction left and the closing COMMIT
// is a no-op.
func (s *Sink) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// A batch that waits on a row lock is waiting on another owner (a
	// zombie's prepared batch, an administrative reset): fail fast with
	// SQLSTATE 55P03 so the runtime recovers instead of hanging.
	if _, err := tx.Exec(ctx, lockTimeoutSQL); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("begin: %w", err)
	}
	return s.endTx(ctx, tx, fn)
}

// endTx runs fn in the open transaction tx and ends it: COMMIT when fn
// succeeds (a no-op after PREPARE TRANSACTION), ROLLBACK otherwise.
func (s *Sink) endTx(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return &commitError{err}
	}
	return nil
}

// EnableStaging lets up to n transactions be staged ahead of their round
// (twophase.Stager); n <= 0 leaves staging off. Each holds a pooled
// connection from Stage until its Prepare or Discard, so n must leave the
// rounds the connections they need: the caller sizes it from
// connection.pool.size.
func (s *Sink) EnableStaging(n int) {
	if n <= 0 {
		s.slots = nil
		return
	}
	s.slots = make(chan struct{}, n)
	s.stagedTx = map[twophase.BatchID]*staged{}
	s.stagedGroups = map[twophase.BatchID]*stagedGroup{}
	s.keyedTopics = map[string]bool{}
}

// errStagingOff is Stage's answer when EnableStaging was not called.
var errStagingOff = errors.New("staging is off")

// errNoSlot is Stage's answer when every staging slot is taken.
var errNoSlot = errors.New("no staging slot is free; the batch is written in its round")

// errNotAppendOnly is Stage's answer for a batch whose write depends on
// the rows already in the table (a DELETE, an upsert, a TRUNCATE): written
// ahead, it would not see the previous round's uncommitted rows (a delete
// of a key that round inserted would delete nothing), so it is written at
// its prepare, after the previous round committed.
var errNotAppendOnly = errors.New("the batch needs keyed writes (deletes, upserts or truncates); it is written at its prepare")

// Stage implements twophase.Stager: it begins a read-committed transaction
// and writes the batch's rows and dead letters in it, without schema
// changes (a batch that needs one fails here and gets its own round from
// Prepare). Only append-only batches are written ahead: upsert mode, and
// from its first such batch on a topic with deletes, truncates or change
// events, are refused (errNotAppendOnly) and written at their prepare. A
// batch that finds every staging slot taken is not staged either
// (errNoSlot). The transaction stays open, holding a pooled connection
// and a staging slot, until Prepare(b), WriteLocal(b) or Discard. It
// touches no offsets row, so
// it blocks no fencing; it may wait on row locks of the round being
// decided (an upsert of the same key), which that round's COMMIT PREPARED
// releases.
func (s *Sink) Stage(ctx context.Context, b *twophase.Batch) (err error) {
	if s.slots == nil {
		return errStagingOff
	}
	if s.w.cfg.InsertMode == InsertModeUpsert {
		return errNotAppendOnly
	}
	s.stageMu.Lock()
	keyed := s.keyedTopics[b.ID.Topic]
	s.stageMu.Unlock()
	if keyed {
		return errNotAppendOnly
	}
	tx, err := s.beginStaged(ctx)
	if err != nil {
		return fmt.Errorf("stage %s: %w", b.ID, err)
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	// Append-only: a batch of change events or tombstones refuses, and
	// its topic is not written ahead from now on.
	if err := s.writeGroup(ctx, tx, []*twophase.Batch{b}, true); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("stage %s: %w", b.ID, err)
	}
	s.stageMu.Lock()
	if old := s.stagedTx[b.ID]; old != nil {
		// Cannot happen (a batch is staged once per round); never leak.
		_ = old.tx.Rollback(context.WithoutCancel(ctx))
		s.release()
	}
	s.stagedTx[b.ID] = &staged{tx: tx}
	s.stageMu.Unlock()
	return nil
}

// Discard implements twophase.Stager: it rolls back the staged
// transactions of ids.
func (s *Sink) Discard(ids []twophase.BatchID) {
	for _, id := range ids {
		s.dropGroup(id)
		if sg := s.takeStaged(id); sg != nil {
			// Bounded: a connection that hangs is closed, which rolls
			// back too.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = sg.tx.Rollback(ctx)
			cancel()
			s.release()
		}
	}
}

func (s *Sink) takeStaged(id twophase.BatchID) *staged {
	if s.slots == nil {
		return nil
	}
	s.stageMu.Lock()
	defer s.stageMu.Unlock()
	sg := s.stagedTx[id]
	delete(s.stagedTx, id)
	return sg
}

func (s *Sink) release() { <-s.slots }

// beginStaged takes a staging slot and begins the read-committed
// transaction of a write ahead in it; the slot is the caller's to
// release once the transaction is prepared or rolled back. It never
// waits for a slot (errNoSlot): the slots may be held by the round being
// written, released only when it is.
func (s *Sink) beginStaged(ctx context.Context) (pgx.Tx, error) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, errNoSlot
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err == nil {
		if _, err = tx.Exec(ctx, lockTimeoutSQL); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		s.release()
		return nil, fmt.Errorf("begin: %w", err)
	}
	return tx, nil
}

// lockTimeoutSQL bounds lock waits inside a batch transaction.
const lockTimeoutSQL = "SET LOCAL lock_timeout = '10s'"

// commitError is an error returned by COMMIT itself.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// Commit implements twophase.Participant with COMMIT PREPARED of the
// transaction holding id (its own, or its round's: round.go). A batch that
// is no longer prepared counts as committed when the stored offset has
// reached its end.
func (s *Sink) Commit(ctx context.Context, id twophase.BatchID) error {
	return s.CommitRound(ctx, []twophase.BatchID{id})[0]
}

// forget drops what the sink remembers of id's prepared transaction.
func (s *Sink) forget(id twophase.BatchID) {
	s.roundMu.Lock()
	delete(s.roundOf, id)
	s.roundMu.Unlock()
}

// commitAlone commits id's own prepared transaction.
func (s *Sink) commitAlone(ctx context.Context, id twophase.BatchID) (err error) {
	defer func() { s.resetOnLostConnection(err) }()
	defer s.forget(id)
	err = s.finish(ctx, "COMMIT PREPARED", GID(id))
	if err == nil {
		return nil
	}
	if !isUndefinedObject(err) {
		return fmt.Errorf("commit prepared %s: %w", id, err)
	}
	pos, ok, lerr := s.store.Lookup(ctx, id.Connector, id.Topic, id.Partition)
	if lerr != nil {
		return fmt.Errorf("commit prepared %s: %w", id, lerr)
	}
	if ok && pos.Next >= id.NextOffset() {
		return nil
	}
	return fmt.Errorf("commit prepared %s: %w", id, twophase.ErrNotPrepared)
}

// Abort implements twophase.Participant with ROLLBACK PREPARED; a batch
// that is not prepared is already aborted.
func (s *Sink) Abort(ctx context.Context, id twophase.BatchID) (err error) {
	defer func() { s.resetOnLostConnection(err) }()
	if handled, err := s.abortRound(ctx, id); handled {
		return err
	}
	defer s.forget(id)
	err = s.finish(ctx, "ROLLBACK PREPARED", GID(id))
	if err == nil || isUndefinedObject(err) {
		return nil
	}
	return fmt.Errorf("rollback prepared %s: %w", id, err)
}

// InDoubt implements twophase.Participant: the connector's prepared
// transactions in this database, from pg_prepared_xacts. Topic names come
// from the offsets table (a prepared batch always follows a row there).
func (s *Sink) InDoubt(ctx context.Context, connector string) (_ []twophase.BatchID, err error) {
	defer func() { err = markUnavailable(err) }()
	defer func() { s.resetOnLostConnection(err) }()
	prefix, rprefix := GIDPrefix+shortHash(connector)+"_", RoundGIDPrefix+shortHash(connector)+"_"
	rows, err := s.pool.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND (left(gid, $2) = $1 OR left(gid, $2) = $3)`,
		prefix, len(prefix), rprefix)
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	s.prune(gids)
	if len(gids) == 0 {
		return nil, nil
	}
	var rounds []string
	gids = slices.DeleteFunc(gids, func(g string) bool {
		if strings.HasPrefix(g, rprefix) {
			rounds = append(rounds, g)
			return true
		}
		return false
	})
	var out []twophase.BatchID
	if len(rounds) > 0 {
		if out, err = s.inDoubtRounds(ctx, connector, rounds); err != nil {
			return nil, err
		}
	}
	if len(gids) == 0 {
		return out, nil
	}
	positions, err := s.store.Read(ctx, connector)
	if err != nil {
		return nil, err
	}
	topics := map[string]string{}
	for _, p := range positions {
		topics[shortHash(p.Topic)] = p.Topic
	}
	for _, gid := range gids {
		_, th, p, first, last, ok := parseGID(gid)
		if !ok {
			continue
		}
		topic, ok := topics[th]
		if !ok {
			s.log.Warn("prepared transaction of this connector names an unknown topic; leaving it", "gid", gid)
			continue
		}
		out = append(out, twophase.BatchID{Connector: connector, Topic: topic, Partition: p, First: first, Last: last})
	}
	return out, nil
}

// Acquire implements connectors.Sink.
func (s *Sink) Acquire(ctx context.Context, topic string, partitions []int32) (_ map[int32]offsets.Position, err error) {
	defer func() { err = markUnavailable(err) }()
	defer func() { s.resetOnLostConnection(err) }()
	pos, err := s.store.Acquire(ctx, s.connector, topic, partitions)
	if err == nil {
		s.sweepMembers(ctx, topic, partitions)
	}
	return pos, err
}

// Initialize implements connectors.Sink.
func (s *Sink) Initialize(ctx context.Context, topic string, partition int32, fence, next int64) error {
	return s.store.Initialize(ctx, s.connector, topic, partition, fence, next)
}

// Positions implements connectors.Sink.
func (s *Sink) Positions(ctx context.Context) ([]offsets.Position, error) {
	return s.store.Read(ctx, s.connector)
}

// ResetOffsets implements connectors.Sink.
func (s *Sink) ResetOffsets(ctx context.Context, all bool, positions []offsets.Position) error {
	return s.store.Reset(ctx, s.connector, all, positions)
}

// WriteLocal implements connectors.LocalWriter for exactly_once_sink (Atomic with
// GuardCAS), at_least_once (RowsFirst) and at_most_once (OffsetFirst).
func (s *Sink) WriteLocal(ctx context.Context, b *twophase.Batch, guard offsets.Guard, order connectors.Order) (err error) {
	defer func() { s.resetOnLostConnection(err) }()
	return classify(s.writeLocal(ctx, b, guard, order))
}

// resetOnLostConnection closes every pooled connection when err says a
// connection was lost or timed out (sink.timeout.ms). The pool's other
// connections were opened to the same server: after a failover, or behind
// a proxy whose backend died, each would hang until its own timeout.
// Fresh connections go to whichever host is the primary now
// (target_session_attrs=read-write).
func (s *Sink) resetOnLostConnection(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return // the server answered
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		s.log.Warn("a PostgreSQL connection was lost or timed out; closing the pool's connections", "err", err)
		s.pool.Reset()
	}
}

func (s *Sink) writeLocal(ctx context.Context, b *twophase.Batch, guard offsets.Guard, order connectors.Order) error {
	advance := func(tx pgx.Tx) error {
		return s.store.Advance(ctx, tx, guard, b.ID.Connector, b.ID.Topic, b.ID.Partition, b.Fence, b.Prev, b.ID.NextOffset())
	}
	c, err := s.w.records.Batch(ctx, b)
	if err != nil {
		return err
	}
	write := func(tx pgx.Tx) error {
		_, err := s.w.WriteBatch(ctx, tx, c, true)
		return err
	}
	switch order {
	case connectors.RowsFirst:
		if err := s.inTx(ctx, write); err != nil {
			return err
		}
		failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
		return s.inTx(ctx, advance)
	case connectors.OffsetFirst:
		if err := s.inTx(ctx, advance); err != nil {
			return err
		}
		failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
		return s.inTx(ctx, write)
	}
	s.dropGroup(b.ID)
	if sg := s.takeStaged(b.ID); sg != nil {
		// exactly_once_sink, pipelined: the rows were written ahead
		// (Stage); the offsets' compare-and-set, in the same
		// transaction, decides whether they commit. Read committed, it
		// sees the previous round's COMMIT.
		err = s.endTx(ctx, sg.tx, func(tx pgx.Tx) error {
			if err := advance(tx); err != nil {
				return err
			}
			failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
			return nil
		})
		s.release()
	} else {
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			if err := advance(tx); err != nil {
				return err
			}
			if err := write(tx); err != nil {
				return err
			}
			failpoint.HitIn(b.ID.Connector, failpoint.AfterWrite)
			return nil
		})
	}
	if err == nil || guard != offsets.GuardCAS || !isAmbiguousCommit(err) {
		return err
	}
	return s.resolveCommit(ctx, err, []*twophase.Batch{b})
}

// resolveCommit resolves a COMMIT whose outcome is unknown (the
// connection broke, err) from the stored offsets (invariant 7): the
// transaction committed when every batch's offset moved to its end under
// its fence (one transaction: all moved, or none). ctx may be what ended
// the commit: the lookup gets a bound of its own.
func (s *Sink) resolveCommit(ctx context.Context, err error, bs []*twophase.Batch) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	for _, b := range bs {
		pos, ok, lerr := s.store.Lookup(lctx, b.ID.Connector, b.ID.Topic, b.ID.Partition)
		if lerr != nil {
			return fmt.Errorf("%w (and resolving it failed: %v)", err, lerr)
		}
		if !ok || pos.Next != b.ID.NextOffset() || pos.Fence != b.Fence {
			return err
		}
	}
	s.log.Info("ambiguous commit resolved as committed", "batch", bs[0].ID.String(), "batches", len(bs))
	return nil
}

// WriteRound implements connectors.RoundWriter (source.transactions=whole):
// every batch's offset advance and rows in one transaction, in the order
// given.
func (s *Sink) WriteRound(ctx context.Context, bs []*twophase.Batch, guard offsets.Guard) (err error) {
	defer func() { s.resetOnLostConnection(err) }()
	return classify(s.writeRound(ctx, bs, guard))
}

func (s *Sink) writeRound(ctx context.Context, bs []*twophase.Batch, guard offsets.Guard) error {
	if len(bs) == 0 {
		return nil
	}
	cs := make([]*connectors.Converted, len(bs))
	for i, b := range bs {
		c, err := s.w.records.Batch(ctx, b)
		if err != nil {
			return err
		}
		cs[i] = c
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i, b := range bs {
			if err := s.store.Advance(ctx, tx, guard, b.ID.Connector, b.ID.Topic, b.ID.Partition, b.Fence, b.Prev, b.ID.NextOffset()); err != nil {
				return err
			}
			if _, err := s.w.WriteBatch(ctx, tx, cs[i], true); err != nil {
				return err
			}
		}
		failpoint.HitIn(bs[0].ID.Connector, failpoint.AfterWrite)
		return nil
	})
	if err == nil || guard != offsets.GuardCAS || !isAmbiguousCommit(err) {
		return err
	}
	return s.resolveCommit(ctx, err, bs)
}

// lookupTimeout bounds the read that resolves an ambiguous local commit.
const lookupTimeout = 30 * time.Second

// isAmbiguousCommit reports an error from COMMIT that does not say the
// transaction failed: the connection broke while the server may have
// committed.
func isAmbiguousCommit(err error) bool {
	var ce *commitError
	if !errors.As(err, &ce) {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// ReadsKeys implements connectors.KeyReader: pk.mode=record_key takes the
// primary key from every record's key.
func (s *Sink) ReadsKeys() bool { return s.w.cfg.readsKeys() }

// Guarantees implements connectors.Sink: PostgreSQL supports every
// delivery guarantee (exactly_once needs prepared transactions, which
// Preflight checks).
func (s *Sink) Guarantees() (connectors.Guarantees, error) { return connectors.AllGuarantees, nil }

// Preflight implements connectors.Sink: exactly_once needs prepared
// transactions.
func (s *Sink) Preflight(ctx context.Context, g connectors.Guarantee) error {
	var v string
	if err := s.pool.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&v); err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	n, _ := strconv.Atoi(v)
	if g == connectors.TwoPhase && n == 0 {
		return fmt.Errorf("preflight: delivery.guarantee=exactly_once needs prepared transactions, but max_prepared_transactions is 0 on this PostgreSQL server: set max_prepared_transactions (for example 64; each exactly_once task holds up to commit.parallelism plus connection.pool.size of them, see docs/deploy.md, \"What txsink keeps in PostgreSQL\"; a server restart is needed) or use delivery.guarantee=exactly_once_sink")
	}
	return nil
}

// Close implements connectors.Sink.
func (s *Sink) Close() {
	s.discardStaged()
	s.pool.Close()
}

// discardStaged rolls back every transaction written ahead: each holds a
// pooled connection, which the pool's Close would wait for.
func (s *Sink) discardStaged() {
	if s.slots == nil {
		return
	}
	s.stageMu.Lock()
	var ids []twophase.BatchID
	for id := range s.stagedTx {
		ids = append(ids, id)
	}
	for id := range s.stagedGroups {
		ids = append(ids, id)
	}
	s.stageMu.Unlock()
	s.Discard(ids)
}

// isUndefinedObject reports SQLSTATE 42704: the prepared transaction does
// not exist.
func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}
