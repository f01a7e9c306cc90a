package twophase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaDecider is the [Decider] of exactly_once mode: each round's decision
// is one Kafka transaction of a [kgo.GroupTransactSession] that commits the
// consumer group's offsets (KIP-447, fenced by the group generation).
//
// The offsets it commits are, after [KafkaDecider.CommitExactly], exactly
// the round's: for every batch, [BatchID.NextOffset] (see
// [KafkaDecider.Outcome]). Without it they are the session's own, one past
// the last record polled through the session, and the runtime must then
// cut, per partition, one batch ending at the last record polled since the
// previous round.
//
// Rebalances: the session aborts the transaction of a round during which
// any partition was revoked or lost (Decide(ctx, true) then returns
// committed=false and a nil error). Do not end the round from inside an
// OnPartitionsRevoked or OnPartitionsLost callback, and do not make those
// callbacks wait for an in-flight round: franz-go holds the lock End needs
// while it runs them, so either deadlocks. To let the in-flight round
// finish before a revoke, use kgo.BlockRebalanceOnPoll and call
// AllowRebalance after Round returns.
type KafkaDecider struct {
	sess    *kgo.GroupTransactSession
	group   string
	backoff time.Duration // first wait while offsets are unstable
	// exact, when set by CommitExactly, replaces the session's offsets in
	// the next Decide's offset commit.
	exact map[string]map[int32]kgo.EpochOffset
}

var _ Decider = (*KafkaDecider)(nil)

// NewKafkaDecider returns a decider that ends sess's transactions and reads
// decisions back from group's committed offsets. group must be the
// session's consumer group. The decider does not own sess: closing it is
// the caller's job.
func NewKafkaDecider(sess *kgo.GroupTransactSession, group string) *KafkaDecider {
	return &KafkaDecider{sess: sess, group: group, backoff: 50 * time.Millisecond}
}

// Begin begins the session's transaction. The session cannot be
// interrupted here: ctx is only checked first.
func (d *KafkaDecider) Begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("twophase: kafka begin: %w", err)
	}
	if err := d.sess.Begin(); err != nil {
		return fmt.Errorf("twophase: kafka begin: %w", err)
	}
	return nil
}

// Decide ends the session's transaction: with kgo.TryCommit when commit is
// true, committing the group's offsets in the transaction, and with
// kgo.TryAbort otherwise.
//
// committed=false with a nil error means the transaction aborted: asked to,
// or because the group rebalanced (a revoke, a lost partition, or the
// coordinator refusing the offset commit with ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, …: KIP-447 fencing of a
// zombie). An error means the outcome is unknown; franz-go says no End
// error is retryable, so the session should be closed and recreated and
// [Recover] run. Cancelling ctx makes the outcome unknown and, per
// franz-go, likely leaves the session unusable: cancel only to shut down.
func (d *KafkaDecider) Decide(ctx context.Context, commit bool) (bool, error) {
	if exact := d.exact; exact != nil {
		d.exact = nil
		ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
			rewriteOffsetCommit(req, exact)
			return nil
		})
	}
	committed, err := d.sess.End(ctx, kgo.TransactionEndTry(commit))
	if err != nil {
		return false, fmt.Errorf("twophase: kafka end transaction (commit=%t): %w", commit, err)
	}
	return committed, nil
}

// CommitExactly makes the next Decide commit exactly the offsets of
// batches, each partition's [BatchID.NextOffset], instead of the session's
// (one past the last record polled): with pipelined rounds the session has
// already polled the next round's records when this round decides, and
// committing them would record a decision for batches not prepared yet.
// Partitions without a batch keep their committed offsets. The epoch
// committed is the leader epoch of each batch's last record.
func (d *KafkaDecider) CommitExactly(batches []*Batch) {
	exact := make(map[string]map[int32]kgo.EpochOffset, 1)
	for _, b := range batches {
		ps := exact[b.ID.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			exact[b.ID.Topic] = ps
		}
		epoch := int32(-1)
		if n := len(b.Records); n > 0 {
			epoch = b.Records[n-1].LeaderEpoch
		}
		ps[b.ID.Partition] = kgo.EpochOffset{Epoch: epoch, Offset: b.ID.NextOffset()}
	}
	d.exact = exact
}

// rewriteOffsetCommit replaces the partitions of req with exactly those of
// exact, keeping the topic ids and member metadata franz-go filled in.
func rewriteOffsetCommit(req *kmsg.TxnOffsetCommitRequest, exact map[string]map[int32]kgo.EpochOffset) {
	var meta *string
	ids := map[string][16]byte{}
	for _, t := range req.Topics {
		ids[t.Topic] = t.TopicID
		for _, p := range t.Partitions {
			if meta == nil {
				meta = p.Metadata
			}
		}
	}
	if meta == nil {
		m := req.MemberID
		meta = &m
	}
	topics := make([]string, 0, len(exact))
	for t := range exact {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	req.Topics = req.Topics[:0]
	for _, t := range topics {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = t
		rt.TopicID = ids[t]
		ps := make([]int32, 0, len(exact[t]))
		for p := range exact[t] {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		for _, p := range ps {
			eo := exact[t][p]
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = p
			rp.Offset = eo.Offset
			rp.LeaderEpoch = eo.Epoch
			rp.Metadata = meta
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
}

// Outcome reports whether the round that prepared id committed: it reads
// the group's committed offset for id's partition with stable semantics
// (waiting, with backoff bounded by ctx, while a transaction that commits
// offsets for the group is still pending) and returns committed when the
// offset equals id.NextOffset().
//
// Why equality: the round that prepared id commits exactly NextOffset for
// the partition, and while id is prepared no later batch of the partition
// can be prepared (its compare-and-set starts from NextOffset, which only
// id's commit stores in the sink), so no later decision can have moved the
// group's offset past it. Any other value means the round's transaction
// did not commit: the previous round's offset (id.First) when it aborted,
// or something an operator wrote. No committed offset at all (the group or
// partition has none, e.g. the very first round aborted, or the offsets
// expired under offsets.retention.minutes) also reads as not committed.
// Misreading a committed round as aborted only costs a redo, because the
// sink, not Kafka, is the source of truth for progress: the sink's
// next_offset stays at id.First and the range is re-read and rewritten
// (invariants 1 and 6; dead letters produced in that Kafka transaction
// would be duplicated). The opposite mistake is the one equality avoids.
func (d *KafkaDecider) Outcome(ctx context.Context, id BatchID) (bool, error) {
	parts := map[string][]int32{id.Topic: {id.Partition}}
	offs, err := stableOffsets(ctx, d.sess.Client(), d.group, d.backoff, parts)
	if err != nil {
		return false, fmt.Errorf("twophase: outcome of %s: %w", id, err)
	}
	return OutcomeFromOffsets(id, offs), nil
}

// OutcomeFromOffsets reports whether offsets, as returned by
// [StableOffsets], record id's round as committed: the partition's offset
// equals id.NextOffset(). A missing offset means not committed. See
// [KafkaDecider.Outcome] for why. Use it to resolve many batches with one
// offset fetch.
func OutcomeFromOffsets(id BatchID, offsets map[string]map[int32]int64) bool {
	off, ok := offsets[id.Topic][id.Partition]
	return ok && off == id.NextOffset()
}

// StableOffsets fetches group's committed offsets with stable semantics
// (KIP-447 RequireStable): while a transaction that commits offsets for the
// group is pending, the broker answers UNSTABLE_OFFSET_COMMIT and this
// retries with exponential backoff until ctx is done. It returns
// offsets[topic][partition]; partitions without a committed offset are
// absent. A group unknown to the coordinator has no offsets and yields an
// empty map. cl is only used for requests; it is not closed.
//
// Name the topics: their partitions are then listed and asked for
// explicitly, and the broker reports a pending offset even for a partition
// that never had a committed one. With no topics, the group's committed
// topics are fetched, and a partition whose only offset is still pending
// in a transaction is silently absent instead of unstable (Kafka and kfake
// both only check the pending state of partitions they report).
func StableOffsets(ctx context.Context, cl *kgo.Client, group string, topics ...string) (map[string]map[int32]int64, error) {
	var parts map[string][]int32
	if len(topics) > 0 {
		listed, err := kadm.NewClient(cl).ListTopics(ctx, topics...) // not closed: it would close cl
		if err != nil {
			return nil, fmt.Errorf("twophase: stable offsets of group %q: list topics: %w", group, err)
		}
		parts = make(map[string][]int32, len(topics))
		for _, t := range topics {
			td, ok := listed[t]
			if !ok {
				return nil, fmt.Errorf("twophase: stable offsets of group %q: topic %q not found", group, t)
			}
			if td.Err != nil {
				return nil, fmt.Errorf("twophase: stable offsets of group %q: topic %q: %w", group, t, td.Err)
			}
			parts[t] = td.Partitions.Numbers()
		}
	}
	return stableOffsets(ctx, cl, group, 50*time.Millisecond, parts)
}

const maxStableBackoff = time.Second

// stableOffsets fetches parts (all the group's topics when nil) with
// RequireStable, retrying while unstable.
func stableOffsets(ctx context.Context, cl *kgo.Client, group string, backoff time.Duration, parts map[string][]int32) (map[string]map[int32]int64, error) {
	for {
		offs, err := fetchStableOnce(ctx, cl, group, parts)
		if !errors.Is(err, kerr.UnstableOffsetCommit) {
			return offs, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("twophase: stable offsets of group %q: %w (last: %w)", group, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, maxStableBackoff)
	}
}

func fetchStableOnce(ctx context.Context, cl *kgo.Client, group string, parts map[string][]int32) (map[string]map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.RequireStable = true
	for topic, ps := range parts {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		rt.Partitions = ps
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("twophase: fetch offsets of group %q: %w", group, err)
	}
	code := resp.ErrorCode
	type part struct {
		topic     string
		partition int32
		offset    int64
		code      int16
	}
	var got []part
	if len(resp.Groups) > 0 { // v8+
		g := resp.Groups[0]
		code = g.ErrorCode
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				got = append(got, part{t.Topic, p.Partition, p.Offset, p.ErrorCode})
			}
		}
	} else {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				got = append(got, part{t.Topic, p.Partition, p.Offset, p.ErrorCode})
			}
		}
	}
	if err := kerr.ErrorForCode(code); err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return map[string]map[int32]int64{}, nil
		}
		return nil, fmt.Errorf("twophase: fetch offsets of group %q: %w", group, err)
	}
	out := make(map[string]map[int32]int64)
	for _, p := range got {
		if err := kerr.ErrorForCode(p.code); err != nil {
			return nil, fmt.Errorf("twophase: fetch offsets of group %q, %s[%d]: %w", group, p.topic, p.partition, err)
		}
		if p.offset < 0 {
			continue
		}
		if out[p.topic] == nil {
			out[p.topic] = make(map[int32]int64)
		}
		out[p.topic][p.partition] = p.offset
	}
	return out, nil
}
