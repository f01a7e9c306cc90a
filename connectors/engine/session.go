package engine

// The driver's Kafka side: the consumer-group membership of a run (a
// session, started again after a restart), whose franz-go callbacks only
// enqueue events for the driver's loop, and the gate that keeps polls out
// of a transaction's Begin and End.

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/task"
	"github.com/txsink/txsink/twophase"
)

// session is one consumer-group membership: a Kafka client (a
// GroupTransactSession in exactly_once) and what its callbacks need.
type session struct {
	cl      *kgo.Client
	gts     *kgo.GroupTransactSession // exactly_once only
	dec     *twophase.KafkaDecider    // exactly_once only
	outcome outcomeReader
	pollFn  func(context.Context, int) kgo.Fetches
	// gate keeps polls out of the transaction's Begin and End (franz-go
	// forbids polling concurrently with them); nil outside exactly_once.
	gate *pollGate
	// sizer adjusts the client's fetch limits to the memory budget (nil:
	// none, or fetch.max.bytes is set).
	sizer *fetchSizer
	// ready is closed once the fields above are set: a callback that
	// fires while the client is being built waits for it.
	ready chan struct{}
	// closing is closed when the session ends: revoke callbacks stop
	// waiting for their acknowledgement.
	closing chan struct{}
}

func (s *session) close() {
	close(s.closing)
	if s.gts != nil {
		s.gts.Close()
	} else {
		s.cl.Close()
	}
}

// startSession joins the consumer group with a new client. Assignments
// arrive as EventAssigned once their recovery and fence bump ran.
func (d *driver) startSession() error {
	t := d.t
	s := &session{ready: make(chan struct{}), closing: make(chan struct{})}
	onAssign := func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		select {
		case <-s.ready:
		case <-actx.Done():
			return nil, actx.Err()
		}
		out, ps, err := t.assign(actx, s.outcome, offs)
		if err == nil && t.gate != nil && t.gate.pausedNow() {
			// Paused: the assigned topics are not fetched (with
			// topics.regex the connector's topics list is empty, so
			// only the assignment names them), before the first fetch.
			topics := slices.Collect(maps.Keys(offs))
			s.cl.PauseFetchTopics(topics...)
			if !t.gate.pausedNow() {
				// Resumed meanwhile: the driver's resume may have run
				// before this pause (the gate flips before the driver
				// hears of it, so a pause still seen here is resumed
				// by the driver after it).
				s.cl.ResumeFetchTopics(topics...)
			}
		}
		if err == nil && len(ps) > 0 {
			// The observer hears of an assignment and a revocation in
			// the callbacks themselves, so that a partition moving
			// between tasks is never shown owned by both.
			if obs := t.opt.Observer; obs != nil {
				obs.Assigned(t.id, ps)
			}
			d.in.push(task.Event{Type: task.EventAssigned, Positions: ps})
		}
		return out, err
	}
	revoke := func(lost bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(ctx context.Context, _ *kgo.Client, rev map[string][]int32) {
			var parts []task.TP
			for topic, ps := range rev {
				for _, p := range ps {
					parts = append(parts, task.TP{Topic: topic, Partition: p})
				}
			}
			if len(parts) == 0 {
				return
			}
			if lost {
				t.noteLost(rev) // (health.go)
			}
			if obs := t.opt.Observer; obs != nil {
				for topic, ps := range rev {
					obs.Revoked(t.id, topic, ps)
				}
			}
			seq := d.revSeq.Add(1)
			ack := d.ackChan(seq)
			d.in.push(task.Event{Type: task.EventRevoked, Seq: seq, Partitions: parts, Lost: lost})
			if lost || s.gts != nil {
				// exactly_once: the session aborts the round in flight;
				// waiting for it would deadlock with its End.
				return
			}
			// The local guarantees finish the round that writes these
			// partitions before giving them up.
			select {
			case <-ack:
			case <-ctx.Done():
			case <-s.closing:
			}
		}
	}
	opts, sizer := t.clientOpts(onAssign, revoke(false), revoke(true))
	s.sizer = sizer
	if d.g == connectors.TwoPhase {
		opts = append(opts,
			kgo.TransactionalID(fmt.Sprintf("txsink-%s-%d-%s", t.conn.Name, t.id, t.opt.InstanceID)),
			kgo.TransactionTimeout(t.conn.TxnTimeout),
		)
		gts, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		s.gts, s.cl = gts, gts.Client()
		s.dec = twophase.NewKafkaDecider(gts, t.conn.GroupID)
		s.outcome, s.pollFn, s.gate = s.dec, gts.PollRecords, newPollGate()
	} else {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		s.cl = cl
		s.outcome, s.pollFn = stableOutcome{cl, t.conn.GroupID}, cl.PollRecords
	}
	close(s.ready)
	d.s = s
	if t.gate != nil && t.gate.pausedNow() {
		s.cl.PauseFetchTopics(t.conn.Topics...)
	}
	if t.conn.DLQTopic != "" {
		if err := t.ensureDLQTopic(d.hard, s.cl); err != nil {
			return err
		}
	}
	return nil
}

// endSession leaves the group: the machine cancelled the polls and
// discarded the write-aheads first.
func (d *driver) endSession() {
	if d.s == nil {
		return
	}
	for seq := range d.polls {
		d.cancelPoll(seq)
	}
	d.s.close()
	d.s = nil
	d.ackAll()
}

func (d *driver) ackChan(seq uint64) chan struct{} {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	ch := make(chan struct{})
	d.acks[seq] = ch
	return ch
}

func (d *driver) ack(seq uint64) {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	if ch, ok := d.acks[seq]; ok {
		close(ch)
		delete(d.acks, seq)
	}
}

func (d *driver) ackAll() {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	for seq, ch := range d.acks {
		close(ch)
		delete(d.acks, seq)
	}
}
