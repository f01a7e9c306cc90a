package task

// Source transactions applied whole (source.transactions=whole, docs/cdc.md).
//
// The machine holds polled records instead of cutting them at once. A
// round takes, from every partition, the held records up to the first one
// of a source transaction that is not ready, and from the transaction
// topic every record up to the END of the last ready transaction. A
// transaction is ready when its END is held, every END before it in the
// transaction topic is ready, and the change events it announces
// (event_count, over every table) are all held; or when it was split. So
// the records of a round are every event of a prefix of the source's
// commit order, plus records without transaction metadata, and the sink
// writes a round in one transaction: a reader of the target sees only
// states the source had.
//
// Memory is bounded by MaxRecords: the transaction topic holds at most
// MaxRecords, each change topic partition an equal share of it; a
// partition at its bound is not held further, and the task seeks it back
// to read those records again once its head moves, so a partition read
// far ahead of the others (a backlog drained unevenly) waits for them
// instead of filling memory. Time is bounded by
// MaxWaitTicks: a transaction still not ready that long after its first
// record was held (its events do not all arrive, or do not fit) is split
// (ReportTxnSplit): its events are cut as they come, as without the mode,
// and its END once it arrives. A bad record
// (errors.tolerance=none) stops the task after the transactions before
// its own are applied, and nothing of its own.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// TxnConfig turns on whole source transactions.
type TxnConfig struct {
	// Topic is the source connector's transaction topic (Debezium's
	// <topic.prefix>.transaction). Its records are cut with the
	// transactions they end; they are not rows.
	Topic string
	// MaxRecords bounds the records held, shared among the partitions.
	MaxRecords int
	// MaxWaitTicks bounds how long a transaction may block, from its
	// first held record.
	MaxWaitTicks int64
}

func (c *TxnConfig) validate() error {
	switch {
	case c.Topic == "":
		return fmt.Errorf("task: Config.Txn.Topic is empty")
	case c.MaxRecords < 1:
		return fmt.Errorf("task: Config.Txn.MaxRecords must be at least 1, got %d", c.MaxRecords)
	case c.MaxWaitTicks < 1:
		return fmt.Errorf("task: Config.Txn.MaxWaitTicks must be at least 1, got %d", c.MaxWaitTicks)
	}
	return nil
}

type heldRec struct {
	r    *kgo.Record
	mark record.TxnMark
}

// txnHold is the records polled and not yet cut, per partition.
type txnHold struct {
	cfg      TxnConfig
	held     map[TP][]heldRec
	n        int
	first    map[string]int64  // the tick a transaction's first record was held
	released map[string]string // split transactions: id → why
}

func newTxnHold(cfg TxnConfig) *txnHold {
	return &txnHold{cfg: cfg, held: map[TP][]heldRec{}, first: map[string]int64{}, released: map[string]string{}}
}

func (h *txnHold) add(tp TP, r *kgo.Record, mark record.TxnMark, now int64) {
	h.held[tp] = append(h.held[tp], heldRec{r, mark})
	h.n++
	if mark.Kind != record.TxnNone {
		if _, ok := h.first[mark.ID]; !ok {
			h.first[mark.ID] = now
		}
	}
}

// drop forgets what is held of the partitions keep does not keep.
func (h *txnHold) drop(keep func(TP) bool) {
	for tp, recs := range h.held {
		if !keep(tp) {
			h.n -= len(recs)
			delete(h.held, tp)
		}
	}
	h.prune()
}

// prune forgets the first-held ticks of transactions nothing is held of.
func (h *txnHold) prune() {
	live := map[string]bool{}
	for _, recs := range h.held {
		for _, x := range recs {
			if x.mark.Kind != record.TxnNone {
				live[x.mark.ID] = true
			}
		}
	}
	for id := range h.first {
		if !live[id] {
			delete(h.first, id)
		}
	}
}

func (h *txnHold) parts() []TP {
	out := make([]TP, 0, len(h.held))
	for tp, recs := range h.held {
		if len(recs) > 0 {
			out = append(out, tp)
		}
	}
	sortTPs(out)
	return out
}

// plan returns how many held records of each partition a round takes
// now, and the transactions that block the rest, in partition order.
func (h *txnHold) plan() (take map[TP]int, blockers []string) {
	parts := h.parts()
	held := map[string]int64{} // change events held, per transaction
	for _, tp := range parts {
		if tp.Topic == h.cfg.Topic {
			continue
		}
		for _, x := range h.held[tp] {
			if x.mark.Kind == record.TxnEvent {
				held[x.mark.ID]++
			}
		}
	}
	// Drop a transaction from the ready set when not all of its held
	// events can be taken (one waits behind a record of a later
	// transaction: never from Debezium, which writes in commit order),
	// until the plan is stable.
	refused := map[string]bool{}
	for {
		ready := map[string]bool{}
		for id := range h.released {
			ready[id] = true
		}
		ends := map[TP]int{} // records of the transaction topic taken
		for _, tp := range parts {
			if tp.Topic != h.cfg.Topic {
				continue
			}
			for i, x := range h.held[tp] {
				if x.mark.Kind != record.TxnEnd {
					continue
				}
				_, split := h.released[x.mark.ID]
				if !split && (refused[x.mark.ID] || held[x.mark.ID] < x.mark.Count) {
					break
				}
				ready[x.mark.ID] = true
				ends[tp] = i + 1
			}
		}
		take = map[TP]int{}
		taken := map[string]int64{}
		for _, tp := range parts {
			if tp.Topic == h.cfg.Topic {
				take[tp] = ends[tp]
				continue
			}
			n := 0
			for _, x := range h.held[tp] {
				if x.mark.Kind != record.TxnNone && !ready[x.mark.ID] {
					break
				}
				if x.mark.Kind == record.TxnEvent {
					taken[x.mark.ID]++
				}
				n++
			}
			take[tp] = n
		}
		again := false
		for id := range ready {
			if _, split := h.released[id]; !split && taken[id] < held[id] {
				refused[id], again = true, true
			}
		}
		if !again {
			break
		}
	}
	seen := map[string]bool{}
	for _, tp := range parts {
		recs := h.held[tp]
		i := take[tp]
		if tp.Topic == h.cfg.Topic {
			// The first END not taken blocks.
			for ; i < len(recs) && recs[i].mark.Kind != record.TxnEnd; i++ {
			}
		}
		if i < len(recs) && recs[i].mark.Kind != record.TxnNone && !seen[recs[i].mark.ID] {
			seen[recs[i].mark.ID] = true
			blockers = append(blockers, recs[i].mark.ID)
		}
	}
	return take, blockers
}

// cut takes what plan allows from the held records: one batch per
// partition, continuing from its stored next offset.
func (h *txnHold) cut(m *Machine) []*twophase.Batch {
	take, _ := h.plan()
	var out []*twophase.Batch
	for _, tp := range h.parts() {
		n := take[tp]
		if n == 0 {
			continue
		}
		c := m.parts[tp]
		recs := h.held[tp]
		b := &twophase.Batch{
			ID:    twophase.BatchID{Connector: m.cfg.Connector, Topic: tp.Topic, Partition: tp.Partition, First: recs[0].r.Offset, Last: recs[n-1].r.Offset},
			Prev:  c.next,
			Fence: c.fence,
		}
		for _, x := range recs[:n] {
			b.Records = append(b.Records, x.r)
			if x.mark.Kind == record.TxnEnd {
				delete(h.released, x.mark.ID)
			}
		}
		h.held[tp] = slices.Clone(recs[n:])
		h.n -= n
		out = append(out, b)
	}
	h.prune()
	return out
}

// release splits the transactions that block, for why, and returns a
// report of each it split.
func (h *txnHold) release(ids []string, why string, out []Action) []Action {
	for _, id := range ids {
		if _, ok := h.released[id]; ok {
			continue
		}
		h.released[id] = why
		out = append(out, report(Report{Type: ReportTxnSplit, TxnID: id,
			Err: fmt.Errorf("source transaction %s is applied in parts: %s", id, why)}))
	}
	return out
}

// bound splits what blocks too long. A late transaction that is complete
// (its END and every event it announces are held) and waits only behind
// an earlier one is not split while a blocker that is not complete
// remains: that one is split at its own deadline, and the complete one
// then goes whole and in the source's commit order. Splitting the
// complete one instead would apply it before the earlier transaction, a
// state the source never had. Only when every blocker is complete (records
// of transactions interleaved against commit order) are the late ones
// split, so that the task always moves.
func (h *txnHold) bound(m *Machine, out []Action) []Action {
	_, blockers := h.plan()
	if len(blockers) == 0 {
		return out
	}
	incomplete := slices.ContainsFunc(blockers, func(id string) bool { return !h.complete(id) })
	var late []string
	for _, id := range blockers {
		if incomplete && h.complete(id) {
			continue
		}
		if at, ok := h.first[id]; ok && m.now-at >= h.cfg.MaxWaitTicks {
			late = append(late, id)
		}
	}
	if len(late) > 0 {
		out = h.release(late, fmt.Sprintf("not complete within source.transactions.max.wait.ms=%d (its events did not all arrive, or they do not fit in its partitions' shares of source.transactions.max.records)", h.cfg.MaxWaitTicks*TickMillis), out)
	}
	return out
}

// complete reports whether transaction id's END and every event it
// announces are held.
func (h *txnHold) complete(id string) bool {
	var events, count int64
	ended := false
	for tp, recs := range h.held {
		for _, x := range recs {
			if x.mark.ID != id {
				continue
			}
			switch {
			case tp.Topic == h.cfg.Topic && x.mark.Kind == record.TxnEnd:
				ended, count = true, x.mark.Count
			case x.mark.Kind == record.TxnEvent:
				events++
			}
		}
	}
	return ended && events >= count
}

// polledTxn holds the records of a poll and cuts a round of what is
// ready.
func (m *Machine) polledTxn(recs []*kgo.Record, marks []record.TxnMark, out []Action) []Action {
	data := 0
	for k := range m.parts {
		if k.Topic != m.txn.cfg.Topic {
			data++
		}
	}
	share := max(m.txn.cfg.MaxRecords/max(data, 1), 1)
	full := map[TP]bool{}
	// Shares shrink when the task is assigned more partitions: a change
	// partition holding more than its share now gives the excess back
	// (its last held records, read again later from the first of them),
	// so the bound holds after an assignment too.
	for k, held := range m.txn.held {
		c, ok := m.parts[k]
		if !ok || k.Topic == m.txn.cfg.Topic || len(held) <= share {
			continue
		}
		m.txn.n -= len(held) - share
		c.ahead = held[share].r.Offset
		m.txn.held[k] = slices.Clone(held[:share])
		full[k] = true
	}
	m.txn.prune()
	for i, r := range recs {
		k := TP{r.Topic, r.Partition}
		c, ok := m.parts[k]
		if !ok || r.Offset < c.from() {
			continue // revoked meanwhile, or already held or written
		}
		limit := share
		if k.Topic == m.txn.cfg.Topic {
			limit = m.txn.cfg.MaxRecords
		}
		if full[k] || len(m.txn.held[k]) >= limit {
			full[k] = true // read again from c.from() (the seek below)
			continue
		}
		if c.stopAt >= 0 && r.Offset >= c.stopAt {
			c.atStop = true
			continue
		}
		var mark record.TxnMark
		if i < len(marks) {
			mark = marks[i]
		}
		m.txn.add(k, r, mark, m.now)
		c.ahead = r.Offset + 1
	}
	if len(full) > 0 {
		var seeks []offsets.Position
		for k := range full {
			c := m.parts[k]
			seeks = append(seeks, offsets.Position{Topic: k.Topic, Partition: k.Partition, Next: c.from(), Fence: c.fence})
		}
		sortPositions(seeks)
		out = append(out, Action{Type: ActionSeek, Positions: seeks})
	}
	return m.cutTxn(m.txn.bound(m, out))
}

// cutTxn starts a round of the held records that are ready, when no
// round is in flight.
func (m *Machine) cutTxn(out []Action) []Action {
	if len(m.rounds) > 0 {
		return out
	}
	batches := m.txn.cut(m)
	if len(batches) == 0 {
		// A partition stopped at a bad record: the transactions before
		// it are applied, the one it belongs to is not (the target stays
		// at a state the source had), and the task stops.
		if err := m.stoppedError(); err != nil {
			return m.fail(err, out)
		}
		return out
	}
	m.roundID++
	m.rounds = append(m.rounds, &round{Round: &Round{ID: m.roundID, Batches: batches}})
	return out
}
