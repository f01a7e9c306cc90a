package postgres

// Rounds in few prepared transactions (twophase.RoundParticipant). A round
// of many partitions paid one PREPARE TRANSACTION and one COMMIT PREPARED
// per partition batch, each a WAL flush and a round trip: at 1,000
// partitions a round held about 95 batches and ran at 37 % of the
// 6-partition rate. PrepareRound now writes the round's batches in at most
// commit.parallelism prepared transactions (the parallelism the round had
// before), each holding several batches under one global id:
//
//	txsink2_<connector hash>_<members>_<hash of the members>
//
// A prepared transaction's own rows are invisible until COMMIT PREPARED,
// so recovery could not tell which batches such a gid holds. Before
// PREPARE the sink commits that on another connection: one row per member
// in the membership table beside the offsets table (<offsets table>_rounds).
// InDoubt reads it for every prepared txsink2 gid; Commit and Abort of any
// member find the gid through it. A round's decision is one (the Kafka
// transaction commits every member's offsets or none), so committing one
// member commits the transaction, as the contract allows, and a new owner
// of another member's partition finds it no longer prepared and its
// offset moved. The membership rows of a transaction are deleted once it
// is committed or rolled back; rows left by a crash between the two are
// inert (InDoubt reads only rows of prepared gids) and a DBA may delete
// any row whose gid is not in pg_prepared_xacts.
//
// A batch written ahead (Stage) has its own open transaction and is
// prepared alone, as before; so is a group of one.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

var _ twophase.RoundParticipant = (*Sink)(nil)

// RoundGIDPrefix starts the global id of a prepared transaction that holds
// several batches of a round.
const RoundGIDPrefix = "txsink2_"

// roundsSuffix names the membership table: the offsets table's name with
// it, in the same schema.
const roundsSuffix = "_rounds"

// roundGID returns the global id of the prepared transaction holding ids
// (sorted by topic and partition): at most 8+16+1+5+1+16 bytes, only
// [0-9a-f_].
func roundGID(connHash string, ids []twophase.BatchID) string {
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\n", id.Topic, id.Partition, id.First, id.Last)
	}
	return fmt.Sprintf("%s%s_%d_%s", RoundGIDPrefix, connHash, len(ids), hex.EncodeToString(h.Sum(nil)[:8]))
}

// RoundGID returns the global id of the prepared transaction that holds
// ids (in topic and partition order) for connector.
func RoundGID(connector string, ids []twophase.BatchID) string {
	return roundGID(shortHash(connector), ids)
}

// ensureRounds creates the membership table when missing.
func (s *Sink) ensureRounds(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.rounds+` (
		gid          text        NOT NULL,
		connector    text        NOT NULL,
		topic        text        NOT NULL,
		partition    integer     NOT NULL,
		first_offset bigint      NOT NULL,
		last_offset  bigint      NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (gid, topic, partition)
	)`)
	if err != nil {
		var pgErr *pgconn.PgError
		// Two workers racing on CREATE TABLE IF NOT EXISTS: the table
		// then exists.
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			return fmt.Errorf("create the round membership table %s: %w", s.rounds, err)
		}
	}
	return nil
}

// PrepareRound implements twophase.RoundParticipant: the batches written
// ahead alone are prepared one by one, each round transaction written
// ahead (StageRound) as one, and the others in at most commit.parallelism
// prepared transactions; all at once.
func (s *Sink) PrepareRound(ctx context.Context, bs []*twophase.Batch) []error {
	errs := make([]error, len(bs))
	var alone, rest []int
	ahead := map[*stagedGroup][]int{}
	for i, b := range bs {
		switch alone1, sg := s.stagedAs(b.ID); {
		case alone1:
			alone = append(alone, i)
		case sg != nil:
			ahead[sg] = append(ahead[sg], i)
		default:
			rest = append(rest, i)
		}
	}
	var groups [][]int
	var gids []string
	var staged []*stagedGroup
	for sg, idx := range ahead {
		if len(idx) != len(sg.ids) {
			// Not the round it was written for: written anew.
			s.dropGroup(sg.ids[0])
			rest = append(rest, idx...)
			continue
		}
		slices.SortFunc(idx, func(x, y int) int { return compareID(bs[x].ID, bs[y].ID) })
		groups, gids, staged = append(groups, idx), append(gids, sg.gid), append(staged, sg)
	}
	// Partition order, so that two groups never wait on each other's
	// offsets rows in opposite orders.
	slices.SortFunc(rest, func(x, y int) int { return compareID(bs[x].ID, bs[y].ID) })
	conc := max(s.roundConc, 1)
	// One transaction writes its batches one after the other on one
	// connection: the round is cut into up to commit.parallelism
	// transactions, written at once, as its batches were before. A
	// transaction of one batch is that batch's own (txsink1_).
	for _, grp := range cutRound(rest, conc) {
		gid := ""
		if len(grp) > 1 {
			gid = roundGID(s.connHash, idsOf(bs, grp))
		}
		groups, gids, staged = append(groups, grp), append(gids, gid), append(staged, nil)
	}
	// Every round transaction's batches, committed in one insert before
	// any of them is prepared.
	var members [][]twophase.BatchID
	for _, grp := range groups {
		if len(grp) > 1 {
			members = append(members, idsOf(bs, grp))
		}
	}
	var membersErr error
	if len(members) > 0 {
		membersErr = s.addMembers(ctx, members)
	}
	var g errgroup.Group
	g.SetLimit(conc)
	for _, i := range alone {
		g.Go(func() error { errs[i] = s.Prepare(ctx, bs[i]); return nil })
	}
	for n, grp := range groups {
		g.Go(func() error {
			switch {
			case len(grp) == 1:
				errs[grp[0]] = s.Prepare(ctx, bs[grp[0]])
				return nil
			case membersErr != nil:
				if staged[n] != nil {
					s.dropGroup(staged[n].ids[0])
				}
				for _, i := range grp {
					errs[i] = fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, classify(membersErr))
				}
				return nil
			}
			bg := make([]*twophase.Batch, len(grp))
			for j, i := range grp {
				bg[j] = bs[i]
			}
			for j, err := range s.prepareGroup(ctx, gids[n], bg, staged[n]) {
				errs[grp[j]] = err
			}
			return nil
		})
	}
	_ = g.Wait()
	return errs
}

// cutRound cuts idx, in order, into up to conc runs of near equal length.
func cutRound(idx []int, conc int) [][]int {
	k := min(conc, len(idx))
	out := make([][]int, k)
	for g := range k {
		out[g] = idx[g*len(idx)/k : (g+1)*len(idx)/k]
	}
	return out
}

// idsOf returns the ids of bs at idx.
func idsOf(bs []*twophase.Batch, idx []int) []twophase.BatchID {
	ids := make([]twophase.BatchID, len(idx))
	for j, i := range idx {
		ids[j] = bs[i].ID
	}
	return ids
}

// stagedGroup is a round transaction written ahead (StageRound): its
// batches' rows in an open read-committed transaction holding a staging
// slot, with no offsets change and no membership rows yet.
type stagedGroup struct {
	tx  pgx.Tx
	gid string
	ids []twophase.BatchID // in partition order
}

// StageRound implements twophase.RoundStager: a round's batches are cut
// as PrepareRound would cut them (partition order, up to
// commit.parallelism transactions), and each transaction of several
// batches is written in an open transaction of its own that holds a
// staging slot until PrepareRound, or Discard of one of its batches. A
// transaction of one batch is staged by Stage. What Stage refuses,
// StageRound refuses too: upsert mode, topics that needed keyed writes,
// no free slot; a transaction one of whose batches needs a keyed write or
// fails to convert is not staged, and its batches are written in their
// round.
func (s *Sink) StageRound(ctx context.Context, bs []*twophase.Batch) []error {
	errs := make([]error, len(bs))
	fill := func(idx []int, err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	all := make([]int, len(bs))
	for i := range all {
		all[i] = i
	}
	switch {
	case s.slots == nil:
		fill(all, errStagingOff)
		return errs
	case s.w.cfg.InsertMode == InsertModeUpsert:
		fill(all, errNotAppendOnly)
		return errs
	}
	var rest []int
	s.stageMu.Lock()
	for i, b := range bs {
		if s.keyedTopics[b.ID.Topic] {
			errs[i] = errNotAppendOnly
		} else {
			rest = append(rest, i)
		}
	}
	s.stageMu.Unlock()
	slices.SortFunc(rest, func(x, y int) int { return compareID(bs[x].ID, bs[y].ID) })
	var g errgroup.Group
	for _, grp := range cutRound(rest, max(s.roundConc, 1)) {
		g.Go(func() error {
			if len(grp) == 1 {
				errs[grp[0]] = s.Stage(ctx, bs[grp[0]])
				return nil
			}
			bg := make([]*twophase.Batch, len(grp))
			for j, i := range grp {
				bg[j] = bs[i]
			}
			fill(grp, s.stageGroup(ctx, bg))
			return nil
		})
	}
	_ = g.Wait()
	return errs
}

// stageGroup writes bs (two or more, in partition order) ahead in one
// transaction, as prepareGroup will prepare them.
func (s *Sink) stageGroup(ctx context.Context, bs []*twophase.Batch) error {
	ids := make([]twophase.BatchID, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	gid := roundGID(s.connHash, ids)
	tx, err := s.beginStaged(ctx)
	if err != nil {
		return fmt.Errorf("stage %s: %w", gid, err)
	}
	if err := s.writeGroup(ctx, tx, bs, true); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		s.release()
		return fmt.Errorf("stage %s: %w", gid, err)
	}
	sg := &stagedGroup{tx: tx, gid: gid, ids: ids}
	s.stageMu.Lock()
	for _, id := range ids {
		if old := s.stagedGroups[id]; old != nil {
			// Cannot happen (a batch is staged once per round); never
			// leak.
			s.stageMu.Unlock()
			s.dropGroup(id)
			s.stageMu.Lock()
		}
		s.stagedGroups[id] = sg
	}
	s.stageMu.Unlock()
	return nil
}

// writeGroup writes bs's rows in tx: with ahead (StageRound), only
// append-only batches; a batch that needs a keyed write marks its topic
// as never written ahead again.
func (s *Sink) writeGroup(ctx context.Context, tx pgx.Tx, bs []*twophase.Batch, ahead bool) error {
	cs := make([]*connectors.Converted, len(bs))
	for i, b := range bs {
		c, err := s.w.records.Batch(ctx, b)
		if err != nil {
			return &groupError{at: i, err: err}
		}
		cs[i] = c
	}
	at, err := s.w.WriteBatches(ctx, tx, cs, ahead)
	if errors.Is(err, errKeyedWrite) {
		s.stageMu.Lock()
		s.keyedTopics[bs[at].ID.Topic] = true
		s.stageMu.Unlock()
		return errNotAppendOnly
	}
	if err != nil {
		return &groupError{at: at, err: err}
	}
	return nil
}

// groupError is an error of the batch at (-1: none in particular) of a
// round transaction.
type groupError struct {
	at  int
	err error
}

func (e *groupError) Error() string { return e.err.Error() }
func (e *groupError) Unwrap() error { return e.err }

// stagedAs tells how id was written ahead, in one look: alone (Stage),
// or in the round transaction sg (StageRound), or not at all.
func (s *Sink) stagedAs(id twophase.BatchID) (alone bool, sg *stagedGroup) {
	if s.slots == nil {
		return false, nil
	}
	s.stageMu.Lock()
	defer s.stageMu.Unlock()
	if _, ok := s.stagedTx[id]; ok {
		return true, nil
	}
	return false, s.stagedGroups[id]
}

// takeGroup removes the staged round transaction holding id, if any, and
// returns it; its slot is the caller's to release.
func (s *Sink) takeGroup(id twophase.BatchID) *stagedGroup {
	if s.slots == nil {
		return nil
	}
	s.stageMu.Lock()
	defer s.stageMu.Unlock()
	sg := s.stagedGroups[id]
	if sg == nil {
		return nil
	}
	for _, m := range sg.ids {
		delete(s.stagedGroups, m)
	}
	return sg
}

// dropGroup rolls back the staged round transaction holding id, if any.
func (s *Sink) dropGroup(id twophase.BatchID) {
	sg := s.takeGroup(id)
	if sg == nil {
		return
	}
	// Bounded: a connection that hangs is closed, which rolls back too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = sg.tx.Rollback(ctx)
	cancel()
	s.release()
}

func compareID(a, b twophase.BatchID) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// prepareGroup prepares bs (two or more, in partition order) in one
// transaction, gid, whose membership rows are committed: every offset's
// compare-and-set first, then every batch's rows (unless sg, the
// transaction written ahead with them, holds them), then PREPARE
// TRANSACTION. A batch that fails before PREPARE gets its error; the
// others are refused (ErrNothingPrepared), as nothing of them is
// prepared either.
func (s *Sink) prepareGroup(ctx context.Context, gid string, bs []*twophase.Batch, sg *stagedGroup) []error {
	ids := make([]twophase.BatchID, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	sent := false
	cur := -1 // the batch being written when an error struck
	body := func(tx pgx.Tx) error {
		steps := make([]offsets.Step, len(bs))
		for i, b := range bs {
			steps[i] = offsets.Step{Connector: b.ID.Connector, Topic: b.ID.Topic, Partition: b.ID.Partition, Fence: b.Fence, From: b.Prev, To: b.ID.NextOffset()}
		}
		// Read committed: a transaction written ahead sees the previous
		// round's COMMIT PREPARED here.
		if at, err := s.store.AdvanceAll(ctx, tx, steps); err != nil {
			cur = at
			return err
		}
		if sg == nil {
			// One statement per table for all the batches (WriteBatches).
			if err := s.writeGroup(ctx, tx, bs, false); err != nil {
				var ge *groupError
				if errors.As(err, &ge) {
					cur = ge.at
					err = ge.err
				}
				if errors.Is(err, ErrSchemaChange) && cur >= 0 {
					return &twophase.OwnRoundError{ID: bs[cur].ID, Err: err}
				}
				return err
			}
		}
		// After the membership rows (PrepareRound): a crash here leaves
		// rows of a gid never prepared, which recovery must ignore.
		failpoint.HitIn(bs[0].ID.Connector, failpoint.AfterWrite)
		sent = true
		if _, err := tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
			return fmt.Errorf("prepare %s (%d batches): %w", gid, len(bs), err)
		}
		return nil
	}
	var err error
	if sg != nil {
		if s.takeGroup(ids[0]) != sg {
			// Discarded meanwhile: nothing of it is left to prepare.
			err = fmt.Errorf("%s was discarded", gid)
		} else {
			err = s.endTx(ctx, sg.tx, body)
			s.release()
		}
	} else {
		err = s.inTx(ctx, body)
	}
	s.resetOnLostConnection(err)
	errs := make([]error, len(bs))
	switch {
	case err == nil:
		s.roundMu.Lock()
		for _, id := range ids {
			s.roundOf[id] = gid
		}
		s.roundMu.Unlock()
	case sent:
		// PREPARE was sent: the transaction may be prepared, and its
		// membership rows are committed for recovery to find.
		for i := range errs {
			errs[i] = classify(err)
		}
	default:
		cause := classify(err)
		for i := range errs {
			switch {
			case cur < 0 || i == cur: // no batch's in particular, or this one's
				errs[i] = fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, cause)
			default:
				// Not this batch's fault: %v, so that its fence or bad
				// record is not taken for this one's.
				errs[i] = fmt.Errorf("%w: batch %s of the same transaction failed: %v", twophase.ErrNothingPrepared, bs[cur].ID, cause)
			}
		}
	}
	return errs
}

// addMembers commits the membership rows of round transactions (each
// list is one transaction's batches) in one insert, on a connection of
// its own. Written again for a round redone after an abort: the rows are
// the same.
func (s *Sink) addMembers(ctx context.Context, txs [][]twophase.BatchID) error {
	var gids, topics []string
	var parts []int32
	var firsts, lasts []int64
	for _, ids := range txs {
		gid := roundGID(s.connHash, ids)
		for _, id := range ids {
			gids, topics, parts = append(gids, gid), append(topics, id.Topic), append(parts, id.Partition)
			firsts, lasts = append(firsts, id.First), append(lasts, id.Last)
		}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.rounds+` (gid, connector, topic, partition, first_offset, last_offset)
		SELECT g, $1, t, p, f, l FROM unnest($2::text[], $3::text[], $4::int[], $5::bigint[], $6::bigint[]) AS m(g, t, p, f, l)
		ON CONFLICT (gid, topic, partition) DO NOTHING`, s.connector, gids, topics, parts, firsts, lasts)
	if err != nil {
		return fmt.Errorf("record the batches of the round's transactions: %w", err)
	}
	return nil
}

// dropMembers deletes gid's membership rows once it is committed or rolled
// back; a failure only leaves inert rows.
func (s *Sink) dropMembers(ctx context.Context, gid string) {
	s.roundMu.Lock()
	for id, g := range s.roundOf {
		if g == gid {
			delete(s.roundOf, id)
		}
	}
	s.roundMu.Unlock()
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.rounds+` WHERE gid = $1`, gid); err != nil {
		s.log.Debug("deleting the membership rows of a resolved round failed; they are inert", "gid", gid, "err", err)
	}
}

// sweepMembers deletes the membership rows of the partitions just
// acquired whose gid is not prepared: rows a crash left between the
// membership insert and PREPARE, or between COMMIT PREPARED and their
// delete. Acquire bumped the fences of these partitions and, past its lock
// wait, no prepared transaction holds their offsets rows; so no gid with
// one of these batches is prepared now, and none can be later but by this
// owner, whose rounds insert their rows again. A failure only leaves inert
// rows.
func (s *Sink) sweepMembers(ctx context.Context, topic string, partitions []int32) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.rounds+` r
		WHERE r.connector = $1 AND r.topic = $2 AND r.partition = ANY($3)
		AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts x WHERE x.gid = r.gid AND x.database = current_database())`,
		s.connector, topic, partitions)
	if err != nil {
		s.log.Debug("sweeping the membership rows of acquired partitions failed; they are inert", "topic", topic, "err", err)
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		s.log.Info("deleted membership rows left by an earlier owner (a crash between writing them and PREPARE or after COMMIT PREPARED)", "topic", topic, "rows", n)
	}
}

// preparedGID returns the prepared transaction that holds id: the round
// this sink prepared it in, or found it in (InDoubt), or else the one
// pg_prepared_xacts and the membership table name. "" when none is
// prepared. At most one can be: each holds the batch's offsets row.
func (s *Sink) preparedGID(ctx context.Context, id twophase.BatchID) (string, error) {
	s.roundMu.Lock()
	gid, ok := s.roundOf[id]
	s.roundMu.Unlock()
	if ok {
		return gid, nil
	}
	var out string
	err := s.pool.QueryRow(ctx, `SELECT x.gid FROM pg_prepared_xacts x
		WHERE x.database = current_database() AND (x.gid = $1 OR x.gid IN (
			SELECT gid FROM `+s.rounds+` WHERE connector = $2 AND topic = $3 AND partition = $4 AND first_offset = $5 AND last_offset = $6))
		LIMIT 1`, GID(id), id.Connector, id.Topic, id.Partition, id.First, id.Last).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find the prepared transaction of %s: %w", id, err)
	}
	return out, nil
}

// finish runs COMMIT PREPARED or ROLLBACK PREPARED gid. Another process
// ending the same transaction (two new owners of a round's partitions)
// makes it busy for a moment: finish waits for it to go, and then reports
// it gone (42704), as if the other one had been first.
func (s *Sink) finish(ctx context.Context, verb, gid string) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		_, err := s.pool.Exec(ctx, verb+" '"+gid+"'")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55000" {
			return err
		}
		// 55000: "prepared transaction with identifier ... is busy".
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// CommitRound implements twophase.RoundParticipant: each prepared
// transaction holding ids is committed once, up to commit.parallelism of
// them at a time.
func (s *Sink) CommitRound(ctx context.Context, ids []twophase.BatchID) []error {
	errs := make([]error, len(ids))
	byGID := map[string][]int{}
	var order []string
	for i, id := range ids {
		gid, err := s.preparedGID(ctx, id)
		if err != nil {
			errs[i] = err
			continue
		}
		if gid == "" {
			gid = GID(id) // none prepared: its own path answers from the offset
		}
		if _, ok := byGID[gid]; !ok {
			order = append(order, gid)
		}
		byGID[gid] = append(byGID[gid], i)
	}
	var g errgroup.Group
	g.SetLimit(max(s.roundConc, 1))
	for _, gid := range order {
		members := byGID[gid]
		g.Go(func() error {
			if !strings.HasPrefix(gid, RoundGIDPrefix) {
				for _, i := range members {
					errs[i] = s.commitAlone(ctx, ids[i])
				}
				return nil
			}
			err := s.finish(ctx, "COMMIT PREPARED", gid)
			s.resetOnLostConnection(err)
			if err == nil || isUndefinedObject(err) {
				s.dropMembers(ctx, gid)
			}
			for _, i := range members {
				errs[i] = s.committed(ctx, ids[i], gid, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	return errs
}

// committed is the answer for id after its transaction gid's COMMIT
// PREPARED returned err: a transaction no longer prepared counts as
// committed when the stored offset has reached id's end.
func (s *Sink) committed(ctx context.Context, id twophase.BatchID, gid string, err error) error {
	if err == nil {
		return nil
	}
	if !isUndefinedObject(err) {
		return fmt.Errorf("commit prepared %s (%s): %w", gid, id, err)
	}
	pos, ok, lerr := s.store.Lookup(ctx, id.Connector, id.Topic, id.Partition)
	if lerr != nil {
		return fmt.Errorf("commit prepared %s (%s): %w", gid, id, lerr)
	}
	if ok && pos.Next >= id.NextOffset() {
		return nil
	}
	return fmt.Errorf("commit prepared %s (%s): %w", gid, id, twophase.ErrNotPrepared)
}

// inDoubtRounds returns the batches of the prepared round transactions
// gids, from the membership table, and remembers which gid holds each.
func (s *Sink) inDoubtRounds(ctx context.Context, connector string, gids []string) ([]twophase.BatchID, error) {
	type member struct {
		gid string
		id  twophase.BatchID
	}
	rows, err := s.pool.Query(ctx, `SELECT gid, topic, partition, first_offset, last_offset FROM `+s.rounds+`
		WHERE connector = $1 AND gid = ANY($2) ORDER BY gid, topic, partition`, connector, gids)
	if err != nil {
		return nil, fmt.Errorf("read the batches of prepared rounds: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (member, error) {
		m := member{id: twophase.BatchID{Connector: connector}}
		err := row.Scan(&m.gid, &m.id.Topic, &m.id.Partition, &m.id.First, &m.id.Last)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the batches of prepared rounds: %w", err)
	}
	out := make([]twophase.BatchID, len(ms))
	seen := map[string]bool{}
	s.roundMu.Lock()
	for i, m := range ms {
		seen[m.gid] = true
		s.roundOf[m.id] = m.gid
		out[i] = m.id
	}
	s.roundMu.Unlock()
	for _, gid := range gids {
		if !seen[gid] {
			// Cannot happen: the rows are committed before PREPARE.
			s.log.Warn("prepared round transaction of this connector has no membership rows; leaving it for a DBA", "gid", gid, "table", s.rounds)
		}
	}
	return out, nil
}

// prune forgets the transactions of batches that are no longer prepared
// (resolved by another process); prepared lists every prepared
// transaction of the connector. Forgetting one that is prepared after all
// (its PREPARE finished after the list was read) only costs a query when
// it is committed.
func (s *Sink) prune(prepared []string) {
	keep := make(map[string]bool, len(prepared))
	for _, g := range prepared {
		keep[g] = true
	}
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	for id, g := range s.roundOf {
		if !keep[g] {
			delete(s.roundOf, id)
		}
	}
}

// abortRound rolls back the prepared transaction holding id, if it is a
// round's.
func (s *Sink) abortRound(ctx context.Context, id twophase.BatchID) (handled bool, err error) {
	gid, err := s.preparedGID(ctx, id)
	if err != nil {
		return true, err
	}
	if !strings.HasPrefix(gid, RoundGIDPrefix) {
		return false, nil
	}
	err = s.finish(ctx, "ROLLBACK PREPARED", gid)
	if err == nil || isUndefinedObject(err) {
		s.dropMembers(ctx, gid)
		return true, nil
	}
	return true, fmt.Errorf("rollback prepared %s (%s): %w", gid, id, err)
}
