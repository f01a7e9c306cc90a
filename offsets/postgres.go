package offsets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/internal/failpoint"
)

// PG is the offset store in a PostgreSQL sink database. Its table lives next
// to the data so that rows and offsets commit in one transaction
// (invariant 2).
type PG struct {
	pool  *pgxpool.Pool
	table string // quoted, schema-qualified
	// LockTimeout bounds how long Acquire waits for a locked offsets row
	// (held by a prepared batch) before it returns ErrBusy.
	LockTimeout time.Duration
}

// DefaultTable is the offsets table name.
const DefaultTable = "txsink_offsets"

// NewPG returns a store using table (schema-qualified name parts) in pool.
// Call EnsureSchema before use.
func NewPG(pool *pgxpool.Pool, schema, table string) *PG {
	if schema == "" {
		schema = "public"
	}
	if table == "" {
		table = DefaultTable
	}
	return &PG{pool: pool, table: pgx.Identifier{schema, table}.Sanitize(), LockTimeout: 2 * time.Second}
}

// Table returns the quoted, schema-qualified table name.
func (s *PG) Table() string { return s.table }

// EnsureSchema creates the offsets table if it does not exist.
func (s *PG) EnsureSchema(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
		connector   text        NOT NULL,
		topic       text        NOT NULL,
		partition   integer     NOT NULL,
		next_offset bigint,
		fence       bigint      NOT NULL DEFAULT 0,
		updated_at  timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (connector, topic, partition)
	)`)
	if err != nil {
		var pgErr *pgconn.PgError
		// Two workers racing on CREATE TABLE IF NOT EXISTS can hit a
		// unique violation on the catalog; the table then exists.
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil
		}
		return fmt.Errorf("offsets: create %s: %w", s.table, err)
	}
	return nil
}

// Acquire fences the partitions for a new owner (invariant 4): in one
// transaction it creates missing rows and bumps every row's fence, and
// returns each partition's position. A partition never written has
// Next == Unset. If a row is locked (an in-doubt prepared batch holds it)
// for longer than LockTimeout, Acquire returns an error wrapping ErrBusy and
// changes nothing: resolve the in-doubt batch, then call it again.
func (s *PG) Acquire(ctx context.Context, connector, topic string, partitions []int32) (map[int32]Position, error) {
	out := make(map[int32]Position, len(partitions))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", s.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		for _, p := range partitions {
			var pos Position
			var next *int64
			err := tx.QueryRow(ctx, `INSERT INTO `+s.table+` AS o (connector, topic, partition, next_offset, fence)
				VALUES ($1, $2, $3, NULL, `+fenceNow+`)
				ON CONFLICT (connector, topic, partition)
				DO UPDATE SET fence = GREATEST(o.fence + 1, `+fenceNow+`), updated_at = now()
				RETURNING next_offset, fence, updated_at`, connector, topic, p).Scan(&next, &pos.Fence, &pos.UpdatedAt)
			if err != nil {
				return err
			}
			pos.Topic, pos.Partition, pos.Next = topic, p, Unset
			if next != nil {
				pos.Next = *next
			}
			out[p] = pos
			failpoint.HitIn(connector, failpoint.InFence)
		}
		return nil
	})
	if err != nil {
		if isLockTimeout(err) {
			return nil, fmt.Errorf("offsets: acquire %s/%s: %w", connector, topic, ErrBusy)
		}
		return nil, fmt.Errorf("offsets: acquire %s/%s: %w", connector, topic, err)
	}
	return out, nil
}

// Initialize stores the first position of a partition that had none, while
// the fence is still fence. It returns an error wrapping ErrFenced when the
// fence moved or another owner initialized it first with a different
// offset.
func (s *PG) Initialize(ctx context.Context, connector, topic string, partition int32, fence, next int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET next_offset = $5, updated_at = now()
		WHERE connector = $1 AND topic = $2 AND partition = $3 AND fence = $4 AND (next_offset IS NULL OR next_offset = $5)`,
		connector, topic, partition, fence, next)
	if err != nil {
		return fmt.Errorf("offsets: initialize %s/%s[%d]: %w", connector, topic, partition, err)
	}
	if tag.RowsAffected() == 0 {
		return s.fencedError(ctx, connector, topic, partition, next, fence)
	}
	return nil
}

// Advance moves a partition's next_offset from "from" to "to" inside tx.
// With GuardCAS it updates only while next_offset == from and the fence is
// unchanged, and returns a *FencedError (wrapping ErrFenced) when zero rows
// match (invariant 3). With GuardNone it writes "to" unconditionally.
func (s *PG) Advance(ctx context.Context, tx pgx.Tx, guard Guard, connector, topic string, partition int32, fence, from, to int64) error {
	var tag pgconn.CommandTag
	var err error
	switch guard {
	case GuardNone:
		tag, err = tx.Exec(ctx, `INSERT INTO `+s.table+` AS o (connector, topic, partition, next_offset, fence)
			VALUES ($1, $2, $3, $4, 0)
			ON CONFLICT (connector, topic, partition) DO UPDATE SET next_offset = $4, updated_at = now()`,
			connector, topic, partition, to)
	default:
		tag, err = tx.Exec(ctx, `UPDATE `+s.table+` SET next_offset = $6, updated_at = now()
			WHERE connector = $1 AND topic = $2 AND partition = $3 AND fence = $4 AND next_offset = $5`,
			connector, topic, partition, fence, from, to)
	}
	if err != nil {
		return fmt.Errorf("offsets: advance %s/%s[%d] %d->%d: %w", connector, topic, partition, from, to, err)
	}
	if tag.RowsAffected() == 0 {
		return &FencedError{Connector: connector, Topic: topic, Partition: partition, WantNext: from, Fence: fence, GotNext: -1, GotFenc: -1}
	}
	return nil
}

// Step is one partition's move for AdvanceAll: next_offset from From to
// To while the fence is Fence.
type Step struct {
	Connector, Topic string
	Partition        int32
	Fence, From, To  int64
}

// AdvanceAll is Advance with GuardCAS for every step, in order, inside tx,
// sent in one round trip (a pgx batch: each statement still reports its
// own rows). It returns the index of the step that failed, with Advance's
// error, or -1 and nil; a step after a failed one is not applied (the
// transaction is aborted).
func (s *PG) AdvanceAll(ctx context.Context, tx pgx.Tx, steps []Step) (int, error) {
	if len(steps) == 0 {
		return -1, nil
	}
	b := &pgx.Batch{}
	for _, st := range steps {
		b.Queue(`UPDATE `+s.table+` SET next_offset = $6, updated_at = now()
			WHERE connector = $1 AND topic = $2 AND partition = $3 AND fence = $4 AND next_offset = $5`,
			st.Connector, st.Topic, st.Partition, st.Fence, st.From, st.To)
	}
	br := tx.SendBatch(ctx, b)
	at, err := -1, error(nil)
	for i, st := range steps {
		tag, e := br.Exec()
		switch {
		case e != nil:
			at, err = i, fmt.Errorf("offsets: advance %s/%s[%d] %d->%d: %w", st.Connector, st.Topic, st.Partition, st.From, st.To, e)
		case tag.RowsAffected() == 0:
			at, err = i, &FencedError{Connector: st.Connector, Topic: st.Topic, Partition: st.Partition, WantNext: st.From, Fence: st.Fence, GotNext: -1, GotFenc: -1}
		}
		if err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		at, err = -1, fmt.Errorf("offsets: advance %d partitions: %w", len(steps), cerr)
	}
	return at, err
}

// Read returns every stored position of the connector, ordered by topic and
// partition. q may be the pool or a transaction.
func (s *PG) Read(ctx context.Context, connector string) ([]Position, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic, partition, next_offset, fence, updated_at FROM `+s.table+`
		WHERE connector = $1 ORDER BY topic, partition`, connector)
	if err != nil {
		return nil, fmt.Errorf("offsets: read %s: %w", connector, err)
	}
	defer rows.Close()
	var out []Position
	for rows.Next() {
		var p Position
		var next *int64
		if err := rows.Scan(&p.Topic, &p.Partition, &next, &p.Fence, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("offsets: read %s: %w", connector, err)
		}
		p.Next = Unset
		if next != nil {
			p.Next = *next
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("offsets: read %s: %w", connector, err)
	}
	return out, nil
}

// Lookup returns one partition's stored position; ok is false when the
// partition has no row.
func (s *PG) Lookup(ctx context.Context, connector, topic string, partition int32) (Position, bool, error) {
	p := Position{Topic: topic, Partition: partition, Next: Unset}
	var next *int64
	err := s.pool.QueryRow(ctx, `SELECT next_offset, fence, updated_at FROM `+s.table+`
		WHERE connector = $1 AND topic = $2 AND partition = $3`, connector, topic, partition).Scan(&next, &p.Fence, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("offsets: lookup %s/%s[%d]: %w", connector, topic, partition, err)
	}
	if next != nil {
		p.Next = *next
	}
	return p, true, nil
}

// Reset is the administrative edit of stored offsets (the REST offsets
// endpoints and the CLI). In one transaction it sets each listed
// partition's next_offset (Unset clears it, so offsets.initial applies
// again) and bumps its fence, so any live owner is fenced and its next
// compare-and-set fails. With all=true every row of the connector is
// deleted first (a full reset). It waits at most LockTimeout for rows held
// by in-doubt batches and then returns ErrBusy.
func (s *PG) Reset(ctx context.Context, connector string, all bool, positions []Position) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", s.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if all {
			// A live owner is fenced even though its row disappears:
			// its compare-and-set matches no row, and a recreated row
			// starts with a fence above every fence handed out before
			// (see fenceNow).
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.table+` WHERE connector = $1`, connector); err != nil {
				return err
			}
		}
		for _, p := range positions {
			var next any
			if p.Next != Unset {
				next = p.Next
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` AS o (connector, topic, partition, next_offset, fence)
				VALUES ($1, $2, $3, $4, `+fenceNow+`)
				ON CONFLICT (connector, topic, partition)
				DO UPDATE SET next_offset = $4, fence = GREATEST(o.fence + 1, `+fenceNow+`), updated_at = now()`,
				connector, p.Topic, p.Partition, next)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if isLockTimeout(err) {
			return fmt.Errorf("offsets: reset %s: %w", connector, ErrBusy)
		}
		return fmt.Errorf("offsets: reset %s: %w", connector, err)
	}
	return nil
}

func (s *PG) fencedError(ctx context.Context, connector, topic string, partition int32, want, fence int64) error {
	e := &FencedError{Connector: connector, Topic: topic, Partition: partition, WantNext: want, Fence: fence, GotNext: -1, GotFenc: -1}
	if p, ok, err := s.Lookup(ctx, connector, topic, partition); err == nil && ok {
		e.GotNext, e.GotFenc = p.Next, p.Fence
	}
	return e
}

// fenceNow is the SQL expression for a fresh fence: the clock in
// milliseconds. Fences only grow (GREATEST with the old value + 1), and a
// row that was deleted by a reset and recreated still starts above every
// fence handed out before, so a zombie's stale fence can never match again.
const fenceNow = `(extract(epoch from clock_timestamp()) * 1000)::bigint`

// isLockTimeout reports SQLSTATE 55P03 (lock_not_available).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
