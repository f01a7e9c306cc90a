// Package membership forms a distributed txsink cluster through Kafka's
// group coordinator, as Kafka Connect's workers do: the classic group
// protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) with protocol type
// "connect" and txsink's own protocol name, member metadata that carries a
// worker's REST URL, config offset and what it runs, and an incremental
// assignor (Assign) run by the leader that moves only what must move.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ProtocolType is the group's protocol type, Kafka Connect's.
const ProtocolType = "connect"

// Protocol is the name of the protocol (and of its metadata and
// assignment encoding) this txsink speaks; a future txsink that changes
// them offers a new name besides this one, and the coordinator picks one
// every member knows.
const Protocol = "txsink-v1"

// Member is one member of a generation, as the leader sees it.
type Member struct {
	ID       string
	Metadata []byte
}

// Generation is this member's view of a completed rebalance.
type Generation struct {
	Generation int32
	MemberID   string
	LeaderID   string
	// Assignment is what the leader assigned to this member.
	Assignment []byte
}

// Options configure a Group.
type Options struct {
	// Client sends the group requests (franz-go routes them to the
	// group's coordinator). The Group does not close it.
	Client *kgo.Client
	Group  string
	// Session, Rebalance and Heartbeat are the group timings
	// (session.timeout.ms, rebalance.timeout.ms, heartbeat.interval.ms).
	Session, Rebalance, Heartbeat time.Duration
	// Metadata returns this member's metadata for a join.
	Metadata func() []byte
	// Assign, called on the leader between JoinGroup and SyncGroup,
	// returns each member's assignment (by member id). An error is logged
	// and the members get no assignment from this round: the Group joins
	// again after a pause.
	Assign func(ctx context.Context, leaderID string, members []Member) (map[string][]byte, error)
	// OnAssigned receives every completed rebalance; OnRevoked is told
	// when the member starts rejoining or lost its membership (stable is
	// false until the next OnAssigned). Both are called from the Group's
	// goroutine and must not block long.
	OnAssigned func(Generation)
	OnRevoked  func(lost bool)
	Log        *slog.Logger
}

// Group is this worker's membership of the cluster's group.
type Group struct {
	opt    Options
	log    *slog.Logger
	rejoin chan struct{}

	mu       sync.Mutex
	memberID string
	gen      int32
	stable   bool
}

// New returns a Group; Run joins it.
func New(opt Options) *Group {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	return &Group{opt: opt, log: opt.Log, rejoin: make(chan struct{}, 1)}
}

// Rejoin makes the member join again, which starts a rebalance when it is
// the leader or its metadata changed (a follower with the same metadata
// just gets the current generation again).
func (g *Group) Rejoin() {
	select {
	case g.rejoin <- struct{}{}:
	default:
	}
}

// State returns the current generation and member id, and whether the
// member holds the assignment of that generation (no rebalance under way).
func (g *Group) State() (gen int32, memberID string, stable bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, g.memberID, g.stable
}

func (g *Group) setStable(stable bool, lost bool) {
	g.mu.Lock()
	was := g.stable
	g.stable = stable
	g.mu.Unlock()
	if was && !stable && g.opt.OnRevoked != nil {
		g.opt.OnRevoked(lost)
	}
}

// errRejoin ends a heartbeat loop to join again.
var errRejoin = errors.New("rejoin")

// Run takes part in the group until ctx ends, then leaves it (LeaveGroup,
// so the others rebalance at once instead of after the session timeout).
func (g *Group) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := g.round(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errRejoin) {
			backoff = 100 * time.Millisecond
			continue
		}
		if err != nil {
			g.log.Warn("cluster group: rejoining", "group", g.opt.Group, "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
	g.setStable(false, false)
	g.leave()
}

// round joins, syncs and heartbeats until the generation ends. errRejoin
// means join again at once.
func (g *Group) round(ctx context.Context) error {
	g.mu.Lock()
	memberID := g.memberID
	g.mu.Unlock()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group = g.opt.Group
	join.SessionTimeoutMillis = int32(g.opt.Session.Milliseconds())
	join.RebalanceTimeoutMillis = int32(g.opt.Rebalance.Milliseconds())
	join.MemberID = memberID
	join.ProtocolType = ProtocolType
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = Protocol
	proto.Metadata = g.opt.Metadata()
	join.Protocols = append(join.Protocols, proto)
	jr, err := join.RequestWith(ctx, g.opt.Client)
	if err != nil {
		return fmt.Errorf("JoinGroup: %w", err)
	}
	if err := kerr.ErrorForCode(jr.ErrorCode); err != nil {
		switch {
		case errors.Is(err, kerr.MemberIDRequired):
			g.setMember(jr.MemberID, 0)
			return errRejoin
		case errors.Is(err, kerr.UnknownMemberID):
			g.setMember("", 0)
			return errRejoin
		case errors.Is(err, kerr.RebalanceInProgress):
			return errRejoin
		}
		return fmt.Errorf("JoinGroup: %w", err)
	}
	if jr.Protocol != nil && *jr.Protocol != Protocol {
		return fmt.Errorf("JoinGroup: the group chose protocol %q; this txsink speaks %s", *jr.Protocol, Protocol)
	}
	g.setMember(jr.MemberID, jr.Generation)
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group = g.opt.Group
	sync.Generation = jr.Generation
	sync.MemberID = jr.MemberID
	sync.ProtocolType = kmsg.StringPtr(ProtocolType)
	sync.Protocol = kmsg.StringPtr(Protocol)
	if jr.LeaderID == jr.MemberID {
		members := make([]Member, len(jr.Members))
		for i, m := range jr.Members {
			members[i] = Member{ID: m.MemberID, Metadata: m.ProtocolMetadata}
		}
		actx, cancel := context.WithTimeout(ctx, g.opt.Rebalance)
		plan, err := g.opt.Assign(actx, jr.LeaderID, members)
		cancel()
		if err != nil {
			g.log.Error("cluster group: the leader could not assign; joining again", "err", err)
			plan = nil
		}
		for id, b := range plan {
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = id, b
			sync.GroupAssignment = append(sync.GroupAssignment, a)
		}
	}
	sr, err := sync.RequestWith(ctx, g.opt.Client)
	if err != nil {
		return fmt.Errorf("SyncGroup: %w", err)
	}
	if err := kerr.ErrorForCode(sr.ErrorCode); err != nil {
		switch {
		case errors.Is(err, kerr.UnknownMemberID):
			g.setMember("", 0)
			return errRejoin
		case errors.Is(err, kerr.RebalanceInProgress), errors.Is(err, kerr.IllegalGeneration):
			return errRejoin
		}
		return fmt.Errorf("SyncGroup: %w", err)
	}
	if len(sr.MemberAssignment) == 0 {
		return errors.New("SyncGroup: no assignment from the leader")
	}
	g.setStable(true, false)
	if g.opt.OnAssigned != nil {
		g.opt.OnAssigned(Generation{Generation: jr.Generation, MemberID: jr.MemberID, LeaderID: jr.LeaderID, Assignment: sr.MemberAssignment})
	}
	return g.heartbeat(ctx, jr.Generation, jr.MemberID)
}

func (g *Group) setMember(id string, gen int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.memberID, g.gen = id, gen
}

// heartbeat heartbeats until the generation ends (errRejoin) or ctx does.
func (g *Group) heartbeat(ctx context.Context, gen int32, memberID string) error {
	t := time.NewTicker(g.opt.Heartbeat)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.rejoin:
			g.setStable(false, false)
			return errRejoin
		case <-t.C:
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.Generation, hb.MemberID = g.opt.Group, gen, memberID
		hctx, cancel := context.WithTimeout(ctx, g.opt.Session)
		hr, err := hb.RequestWith(hctx, g.opt.Client)
		cancel()
		if err == nil {
			err = kerr.ErrorForCode(hr.ErrorCode)
		}
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.Is(err, kerr.RebalanceInProgress):
			g.setStable(false, false)
			return errRejoin
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.FencedInstanceID):
			// Out of the group (a session that expired while this worker
			// was stopped or cut off): what it runs may already run
			// elsewhere; rejoin and let the leader decide.
			g.log.Warn("cluster group: membership lost; rejoining", "group", g.opt.Group, "err", err)
			if errors.Is(err, kerr.UnknownMemberID) {
				g.setMember("", 0)
			}
			g.setStable(false, true)
			return errRejoin
		default:
			if ctx.Err() != nil {
				return nil
			}
			if time.Since(lastOK) > g.opt.Session {
				g.setStable(false, true)
				return fmt.Errorf("no heartbeat answered for %v: %w", g.opt.Session, err)
			}
		}
	}
}

// leave sends LeaveGroup (best effort, briefly).
func (g *Group) leave() {
	g.mu.Lock()
	memberID := g.memberID
	g.memberID = ""
	g.mu.Unlock()
	if memberID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = g.opt.Group
	req.MemberID = memberID
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	req.Members = append(req.Members, m)
	if _, err := req.RequestWith(ctx, g.opt.Client); err != nil {
		g.log.Warn("cluster group: LeaveGroup failed (the others rebalance after the session timeout)", "err", err)
	}
}
