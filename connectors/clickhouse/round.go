package clickhouse

// A round's batches are prepared and committed together (the
// twophase.RoundParticipant capability), so that a round inserts one
// block per table, however many partitions it spans, instead of one per
// partition batch.
//
// Every batch of a round keeps an intent of its own (so InDoubt, Acquire's
// busy check and the recovery of one partition work as before); the
// round's intents are written in one insert and share one token, which is
// what ties them together. The token is a hash of the round's cut (every
// member's connector, topic, partition, first and last offset), so a redo
// that finds one member's intent finds the others by its token, re-reads
// each member's range and rebuilds the same blocks: members in (topic,
// partition) order, rows of one table and column list in member order, cut
// into the intent's block size. Block i is inserted with token + "-" + i,
// as a batch's blocks always were.
//
// The round's decision is one Kafka transaction, so its members are
// committed together or not at all. A Commit of any member commits the
// round: a process that owns only some of the round's partitions still
// inserts the whole round (another owner's redo of the same round is
// de-duplicated by its token) and advances every member whose stored
// position still waits for it. A round of one batch has the batch's own
// token (Token), so intents written before rounds existed are redone as
// rounds of one.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

var _ twophase.RoundParticipant = (*Sink)(nil)

// RoundToken is the de-duplication token of a round of batches: Token of a
// round of one, else "txsink2-", the number of members, "-" and a hash of
// every member's identity in (topic, partition, first) order. The number
// lets a redo check that it found every member.
func RoundToken(ids []twophase.BatchID) string {
	if len(ids) == 1 {
		return Token(ids[0])
	}
	ids = slices.SortedFunc(slices.Values(ids), compareIDs)
	h := sha256.New()
	for _, id := range ids {
		for _, s := range []string{id.Connector, id.Topic, strconv.Itoa(int(id.Partition)), strconv.FormatInt(id.First, 10), strconv.FormatInt(id.Last, 10)} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return "txsink2-" + strconv.Itoa(len(ids)) + "-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// roundSize is the number of members a round token names (1 for a batch's
// own token).
func roundSize(token string) int {
	rest, ok := strings.CutPrefix(token, "txsink2-")
	if !ok {
		return 1
	}
	n, _, _ := strings.Cut(rest, "-")
	size, err := strconv.Atoi(n)
	if err != nil || size < 1 {
		return 1
	}
	return size
}

func compareIDs(a, b twophase.BatchID) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.First, b.First), cmp.Compare(a.Last, b.Last))
}

// Prepare implements twophase.Participant: a round of one batch.
func (s *Sink) Prepare(ctx context.Context, b *twophase.Batch) error {
	return s.PrepareRound(ctx, []*twophase.Batch{b})[0]
}

// Commit implements twophase.Participant: it commits the round id was
// prepared in (see CommitRound).
func (s *Sink) Commit(ctx context.Context, id twophase.BatchID) error {
	return s.CommitRound(ctx, []twophase.BatchID{id})[0]
}

// PrepareRound implements twophase.RoundParticipant: it maps every
// record of the round (a bad record fails its batch here, before the
// decision), checks that each partition's stored fence and next_offset
// are still the owner's (without a compare-and-set: see the package
// documentation), and records the round's intents in one insert. No target
// row is written. When one batch fails, nothing is written and the others
// are refused (ErrNothingPrepared). Cancelling ctx before the intents
// insert returns leaves either nothing or pending intents that InDoubt
// lists.
func (s *Sink) PrepareRound(ctx context.Context, batches []*twophase.Batch) []error {
	errs := make([]error, len(batches))
	refuse := func(cause error) []error {
		for i, b := range batches {
			if errs[i] == nil {
				// The cause is the other batch's, not this one's (a fenced
				// partition must not drop this one): text, not wrapped.
				errs[i] = fmt.Errorf("clickhouse: prepare %s: %w: another batch of its round failed: %v", b.ID, twophase.ErrNothingPrepared, cause)
			}
		}
		return errs
	}
	order := slices.Clone(batches)
	slices.SortFunc(order, func(a, b *twophase.Batch) int { return compareIDs(a.ID, b.ID) })
	// Map the batches the runtime did not stage ahead, several at once
	// (as the Prepare calls of a round of batch participants were).
	parts := make([]*prepared, len(order))
	failed := make([]error, len(order))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, b := range order {
		if len(b.Records) == 0 {
			failed[i] = fmt.Errorf("clickhouse: prepare %s: empty batch", b.ID)
			continue
		}
		if parts[i] = s.takeAhead(b.ID); parts[i] != nil {
			continue
		}
		g.Go(func() error {
			var err error
			if parts[i], err = s.buildBatch(ctx, b); err != nil {
				failed[i] = nothingPrepared(err)
			}
			return nil
		})
	}
	_ = g.Wait()
	for i, err := range failed {
		if err != nil {
			errs[slices.Index(batches, order[i])] = err
			return refuse(err)
		}
	}
	ids := make([]twophase.BatchID, len(order))
	for i, b := range order {
		ids[i] = b.ID
	}
	p := merge(ids, parts, s.cfg.BlockRows)

	mech := MechNone
	tables := p.tables()
	mechs := make([]Mechanism, len(tables))
	for i, t := range tables {
		m, why := s.mechanismFor(t)
		if m == MechNone && !s.cfg.UnsafeNoFencing {
			err := fmt.Errorf("clickhouse: prepare %s: table %s cannot de-duplicate a redo: %s", ids[0], t.Ident, why)
			errs[slices.Index(batches, order[0])] = err
			return refuse(err)
		}
		if i == 0 {
			mech = m
		}
		mechs[i] = m
	}
	if !s.cfg.UnsafeNoFencing {
		pos, err := s.st.positions(ctx, s.cfg.Connector, "")
		if err != nil {
			return refuse(err)
		}
		var fenced error
		for _, b := range order {
			got, ok := pos[b.ID.Topic][b.ID.Partition]
			if !ok || got.Fence != b.Fence || got.Next != b.Prev {
				if !ok {
					got.Next = offsets.Unset
				}
				fenced = &offsets.FencedError{Connector: b.ID.Connector, Topic: b.ID.Topic, Partition: b.ID.Partition, WantNext: b.Prev, Fence: b.Fence, GotNext: got.Next, GotFenc: got.Fence}
				errs[slices.Index(batches, b)] = fenced
			}
		}
		if fenced != nil {
			return refuse(fenced)
		}
	}
	token := RoundToken(ids)
	ins := make([]intent, len(order))
	for i, b := range order {
		ins[i] = intent{ID: b.ID, Fence: b.Fence, Prev: b.Prev, Token: token, Target: p.target(), Records: len(b.Records),
			Blocks: p.nblocks(), BlockRows: s.cfg.BlockRows, Mechanism: mech}
	}
	if i, err := s.nextAttempts(ctx, ins); err != nil {
		if i >= 0 {
			// That batch's own: no room for another attempt under its
			// fence (ErrFenced: the partition is acquired anew).
			errs[slices.Index(batches, order[i])] = err
		}
		return refuse(err)
	}
	if err := s.st.writeIntents(ctx, ins, statusPending, ""); err != nil {
		for i := range errs {
			errs[i] = err // the insert may have gone in: in doubt
		}
		return errs
	}
	p.members = ins
	s.mu.Lock()
	for _, in := range ins {
		s.cache[cacheKey{in.ID, in.Fence}] = p
	}
	for i, t := range tables {
		s.mechs[t.Name] = mechs[i]
	}
	s.mu.Unlock()
	return errs
}

// nextAttempts sets the attempt of each intent of a round about to be
// prepared (see nextAttempt), reading the batches' earlier intents in one
// query. An error of one intent's comes with its index; -1 otherwise.
func (s *Sink) nextAttempts(ctx context.Context, ins []intent) (int, error) {
	ids := make([]twophase.BatchID, len(ins))
	for i, in := range ins {
		ids[i] = in.ID
	}
	old, err := s.st.intentsOfMany(ctx, s.cfg.Connector, ids)
	if err != nil {
		return -1, err
	}
	for i := range ins {
		if err := nextAttempt(&ins[i], old[keyOf(ins[i].ID)]); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// merge is the round of the batches ids (in (topic, partition) order) with
// their mapped rows parts: rows of one table and column list in member
// order, cut into blocks of blockRows, and the dead letters in one block.
// A round of one is the batch's own layout.
func merge(ids []twophase.BatchID, parts []*prepared, blockRows int) *prepared {
	if len(parts) == 1 {
		return parts[0]
	}
	out := &prepared{}
	byKey := map[groupKey]*rowGroup{}
	for i, p := range parts {
		sp := func(n int) span { return span{topic: ids[i].Topic, partition: ids[i].Partition, n: n} }
		for _, g := range p.groups {
			k := groupKey{g.t.Name, g.shape, colNames(g.cols)}
			m := byKey[k]
			if m == nil {
				m = &rowGroup{t: g.t, shape: g.shape, cols: g.cols}
				byKey[k] = m
				out.groups = append(out.groups, m)
			}
			m.rows = append(m.rows, g.rows...)
			m.offs = append(m.offs, g.offs...)
			m.spans = append(m.spans, sp(len(g.rows)))
		}
		if d := p.dlq; d != nil {
			if out.dlq == nil {
				out.dlq = &block{T: d.T, Cols: d.Cols}
			}
			out.dlq.Rows = append(out.dlq.Rows, d.Rows...)
			out.dlq.Offsets = append(out.dlq.Offsets, d.Offsets...)
			out.dlq.Spans = append(out.dlq.Spans, sp(len(d.Rows)))
		}
	}
	out.blocks = blocks(out.groups, blockRows)
	return out
}

// CommitRound implements twophase.RoundParticipant: once the decision
// committed, it inserts the blocks of the rounds ids were prepared in
// (from memory, or rebuilt from Kafka in another process), advances the
// stored offset of every member and marks the intents done. It is
// idempotent: a done batch returns nil at once, and the inserts of a redo
// are de-duplicated (token or identical block) or skipped when already
// present. A round one of whose partitions moved (a newer owner, an
// offsets reset) before any of it went in is not inserted: its intents
// are marked fenced and the error wraps twophase.ErrFenced. Cancelling
// ctx in the middle leaves the intents pending; the next Commit
// (recovery) redoes the round.
func (s *Sink) CommitRound(ctx context.Context, ids []twophase.BatchID) []error {
	errs := make([]error, len(ids))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	all, err := s.st.intentsOfMany(ctx, s.cfg.Connector, ids)
	if err != nil {
		return fail(err)
	}
	// The latest pending (or, for the negative control, done) intent of
	// each batch, grouped by round.
	var tokens []string
	asked := map[string][]int{}
	pend := make([]intent, len(ids))
	for i, id := range ids {
		in, done := latest(all[keyOf(id)], s.cfg.UnsafeNoFencing)
		switch {
		case done:
			s.dropCache(id)
			continue
		case in == nil:
			errs[i] = fmt.Errorf("clickhouse: commit %s: %w", id, twophase.ErrNotPrepared)
			continue
		}
		pend[i] = *in
		if asked[in.Token] == nil {
			tokens = append(tokens, in.Token)
		}
		asked[in.Token] = append(asked[in.Token], i)
	}
	for _, tok := range tokens {
		idx := asked[tok]
		err := s.commitRound(ctx, pend[idx[0]], all)
		for _, i := range idx {
			if err != nil {
				errs[i] = fmt.Errorf("clickhouse: commit %s: %w", ids[i], err)
			}
		}
	}
	return errs
}

// latest picks, of one batch's intents, the pending one of the greatest
// fence; done reports that the batch is done (never, for the negative
// control, which commits a done intent again as if it were pending).
func latest(ins []intent, unsafe bool) (pend *intent, done bool) {
	for i := range ins {
		switch ins[i].Status {
		case statusDone:
			if !unsafe {
				return nil, true
			}
			fallthrough
		case statusPending:
			if pend == nil || ins[i].Fence > pend.Fence {
				pend = &ins[i]
			}
		}
	}
	return pend, false
}

// commitRound commits the round of the pending intent lead; known are
// intents already read, by batch.
func (s *Sink) commitRound(ctx context.Context, lead intent, known map[batchKey][]intent) error {
	p := s.takeCache(lead.ID, lead.Fence)
	members, err := s.roundMembers(ctx, lead, p, known)
	if err != nil {
		return err
	}
	unsafe := s.cfg.UnsafeNoFencing
	inserted := false // a member is done or advanced: every block went in
	var ready, advanced, fenced []intent
	var fe error
	if unsafe {
		ready = members
	} else {
		pos, err := s.st.positions(ctx, s.cfg.Connector, "")
		if err != nil {
			return err
		}
		for _, m := range members {
			got, ok := pos[m.ID.Topic][m.ID.Partition]
			switch {
			case m.Status == statusDone:
				inserted = true
			case ok && got.Fence == m.Fence && got.Next >= m.ID.NextOffset():
				// Rows and offset went in before; only the done mark is missing.
				inserted = true
				advanced = append(advanced, m)
			case ok && got.Fence == m.Fence && got.Next == m.Prev:
				ready = append(ready, m)
			default:
				if !ok {
					got.Next = offsets.Unset
				}
				fenced = append(fenced, m)
				fe = &offsets.FencedError{Connector: m.ID.Connector, Topic: m.ID.Topic, Partition: m.ID.Partition, WantNext: m.Prev, Fence: m.Fence, GotNext: got.Next, GotFenc: got.Fence}
			}
		}
		if len(fenced) > 0 && !inserted {
			// Nothing of the round went in: none of it does. The members
			// still owned resume from their stored offsets, which did not
			// move.
			s.stats.fenced.Add(uint64(len(members)))
			pending := append(append([]intent{}, ready...), fenced...)
			if err := s.st.writeIntents(ctx, pending, statusFenced, fe.Error()); err != nil {
				return err
			}
			s.dropRound(members)
			s.log.Warn("commit of a decided round refused: a partition's fence or offset moved (newer owner or offsets reset); none of its rows are inserted", "batch", lead.ID.String(), "members", len(members), "err", fe)
			return fe
		}
	}
	if !inserted {
		redo := p == nil
		if redo {
			if p, err = s.rebuild(ctx, members); err != nil {
				return err
			}
		}
		if err := s.insertAll(ctx, lead, p, redo); err != nil {
			return err
		}
		failpoint.HitIn(lead.ID.Connector, PointAfterInsert)
	}
	if len(fenced) > 0 {
		// Rows of the round went in before a partition moved (only an
		// offsets reset can do that): those partitions are the reset's.
		if err := s.st.writeIntents(ctx, fenced, statusFenced, fe.Error()); err != nil {
			return err
		}
		s.log.Warn("round committed while a partition's fence or offset had moved: that partition's offset is left as it is", "batch", lead.ID.String(), "err", fe)
	}
	next := make([]offsets.Position, 0, len(ready))
	for _, m := range ready {
		next = append(next, offsets.Position{Topic: m.ID.Topic, Partition: m.ID.Partition, Next: m.ID.NextOffset(), Fence: m.Fence})
	}
	if err := s.st.writePositions(ctx, s.cfg.Connector, next); err != nil {
		return err
	}
	done := append(ready, advanced...)
	note := ""
	if len(ready) == 0 {
		note = "offset already advanced"
	}
	if err := s.st.writeIntents(ctx, done, statusDone, note); err != nil {
		return err
	}
	s.stats.committed.Add(uint64(len(done)))
	s.dropRound(members)
	return fe // nil unless a partition moved
}

// roundMembers returns the intents of the round lead belongs to: the
// members p recorded when this process prepared it (read again unless
// known has them all), else every batch with lead's token; each as its
// latest state under the fence it was prepared with (pending, or done once
// another process committed it).
func (s *Sink) roundMembers(ctx context.Context, lead intent, p *prepared, known map[batchKey][]intent) ([]intent, error) {
	var found map[batchKey][]intent
	var err error
	if p != nil && p.members != nil {
		ids := make([]twophase.BatchID, len(p.members))
		found = map[batchKey][]intent{}
		for i, m := range p.members {
			ids[i] = m.ID
			if ins, ok := known[keyOf(m.ID)]; ok && found != nil {
				found[keyOf(m.ID)] = ins
			} else {
				found = nil
			}
		}
		if found == nil {
			found, err = s.st.intentsOfMany(ctx, s.cfg.Connector, ids)
		}
	} else {
		found, err = s.st.intentsOfToken(ctx, s.cfg.Connector, lead.Token)
	}
	if err != nil {
		return nil, err
	}
	var out []intent
	for _, ins := range found {
		var m *intent
		for i := range ins {
			if ins[i].Token != lead.Token || (ins[i].Status != statusPending && ins[i].Status != statusDone) {
				continue
			}
			if m == nil || ins[i].Fence > m.Fence {
				m = &ins[i]
			}
		}
		if m == nil {
			continue
		}
		if m.Status == statusDone && s.cfg.UnsafeNoFencing {
			m.Status = statusPending
		}
		out = append(out, *m)
	}
	if !slices.ContainsFunc(out, func(m intent) bool { return m.ID == lead.ID }) {
		out = append(out, lead)
	}
	slices.SortFunc(out, func(a, b intent) int { return compareIDs(a.ID, b.ID) })
	if want := roundSize(lead.Token); len(out) != want {
		return nil, fmt.Errorf("round of %s: %d of its %d intents found pending or done: %w", lead.ID, len(out), want, errRoundSplit)
	}
	return out, nil
}

// errRoundSplit: a round's members disagree (one aborted or fenced while
// another is pending): a contract violation, never guessed past.
var errRoundSplit = errors.New("clickhouse: a round's intents disagree")

// dropRound forgets the in-memory rows of a round's members.
func (s *Sink) dropRound(members []intent) {
	for _, m := range members {
		s.dropCache(m.ID)
	}
}

// rebuild re-reads each member's range from Kafka and maps it again, with
// the intents' block size, into the same blocks: the records route to the
// same tables, which exist (created, and evolved with idempotent DDL,
// before the intents were written).
func (s *Sink) rebuild(ctx context.Context, members []intent) (*prepared, error) {
	lead := members[0]
	blockRows := lead.BlockRows
	if blockRows <= 0 {
		blockRows = s.cfg.BlockRows
	}
	ids := make([]twophase.BatchID, len(members))
	parts := make([]*prepared, len(members))
	for i, in := range members {
		ids[i] = in.ID
		recs, err := readRange(ctx, s.env.Bootstrap, s.env.KafkaOpts, in.ID)
		if err != nil {
			return nil, err
		}
		if in.Records > 0 && len(recs) != in.Records {
			return nil, fmt.Errorf("clickhouse: redo %s: re-read %d records, the intent has %d: %w", in.ID, len(recs), in.Records, ErrRangeUnreadable)
		}
		// The runtime's pipeline, with the connector's errors.tolerance,
		// sets aside the same records as when the batch was prepared.
		c, err := s.records.Convert(ctx, recs)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: redo %s: %w", in.ID, err)
		}
		if parts[i], err = s.build(ctx, c, blockRows); err != nil {
			return nil, fmt.Errorf("clickhouse: redo %s: %w", in.ID, err)
		}
	}
	p := merge(ids, parts, blockRows)
	if n := p.nblocks(); lead.Blocks > 0 && n != lead.Blocks {
		s.log.Warn("redo builds a different number of blocks than the original insert (the table changed?): de-duplication may miss", "batch", lead.ID.String(), "members", len(members), "blocks", n, "intent_blocks", lead.Blocks)
	}
	return p, nil
}
