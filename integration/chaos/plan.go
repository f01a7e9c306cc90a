package chaos

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/txsink/txsink/internal/failpoint"
)

// Kind names a fault.
type Kind string

// Fault kinds. Worker faults hit the same worker index in every lane; the
// others hit the shared services once.
const (
	// KillWorker: SIGKILL a worker at a random moment, restart it after a
	// short pause.
	KillWorker Kind = "kill"
	// FailpointKill: restart a worker with TXSINK_FAILPOINT=<point>:N so it
	// SIGKILLs itself at that point of the commit protocol, then restart it
	// clean.
	FailpointKill Kind = "failpoint"
	// TermWorker: SIGTERM (the graceful path), restart.
	TermWorker Kind = "term"
	// Zombie: SIGSTOP a worker at a random moment for longer than the
	// group session timeout, then SIGCONT.
	Zombie Kind = "zombie"
	// ZombieFailpoint: restart a worker with <point>:N:stop so it freezes
	// inside a round (records polled, or batches prepared), hold it past the
	// session timeout while the other worker takes over, then SIGCONT.
	ZombieFailpoint Kind = "zombie-failpoint"
	// PostgresCrash: restart PostgreSQL in immediate mode (SIGKILL, crash
	// recovery; prepared transactions survive).
	PostgresCrash Kind = "pg-crash"
	// PostgresTerminate: pg_terminate_backend of the connectors' sessions
	// (application_name LIKE 'txsink/%') in each lane's database.
	PostgresTerminate Kind = "pg-terminate"
	// KafkaRestart: SIGKILL the broker, start it again after a pause.
	KafkaRestart Kind = "kafka-restart"
	// ProducerKill: the upstream producer's client is closed in the middle
	// of a transaction (never ended: the broker aborts it).
	ProducerKill Kind = "producer-kill"
	// ClickHouseRestart: restart the ClickHouse server (graceful stop,
	// killed after 30 s; same data and address).
	ClickHouseRestart Kind = "ch-restart"

	// CutCommit loses the answer to a lane's sink commit, executed by the
	// server, and cuts the connection (through the lane's fault proxy):
	// COMMIT PREPARED in exactly_once PostgreSQL lanes, the local COMMIT
	// (rows and offsets compare-and-set) in the other PostgreSQL lanes, a
	// block insert into the target table in ClickHouse lanes. Hit picks
	// the n-th such request.
	CutCommit Kind = "cut-commit"
	// CutEndTxn loses the answer to an exactly_once lane's EndTxn (the
	// Kafka decision), executed by the transaction coordinator. Needs
	// Env.KafkaCluster (its proxies).
	CutEndTxn Kind = "cut-endtxn"
	// CutTxnOffsets loses the answer to an exactly_once lane's
	// TxnOffsetCommit (the group offsets inside the decision). Needs
	// Env.KafkaCluster.
	CutTxnOffsets Kind = "cut-txn-offsets"
	// NetLatency delays every byte between the workers and one service
	// (Target: postgres, clickhouse or kafka) by Latency, past the
	// session and transaction timeouts, for Hold.
	NetLatency Kind = "net-latency"
	// NetHalfOpen makes the workers' connections to Target black holes
	// (open, silent) for Hold, then closes them.
	NetHalfOpen Kind = "net-half-open"
	// NetBandwidth limits the workers' connections to Target to Rate
	// KB/s for Hold.
	NetBandwidth Kind = "net-bandwidth"
	// BrokerLeader kills (SIGKILL) the broker leading a partition of the
	// first lane's topic, down for Hold. Needs Env.KafkaCluster.
	BrokerLeader Kind = "broker-leader"
	// BrokerGroupCoordinator kills the leader of the first lane's
	// __consumer_offsets partition (its group coordinator).
	BrokerGroupCoordinator Kind = "broker-group-coord"
	// BrokerTxnCoordinator kills the leader of the __transaction_state
	// partition of the first exactly_once lane's first worker (its
	// transaction coordinator).
	BrokerTxnCoordinator Kind = "broker-txn-coord"
	// ControllerFailover kills the active KRaft controller (the metadata
	// quorum's leader).
	ControllerFailover Kind = "controller-failover"
	// RollingRestart restarts every broker in turn, gracefully, each once
	// the cluster is in sync again.
	RollingRestart Kind = "rolling-restart"

	// PostgresFailover freezes worker Worker of every exactly_once
	// PostgreSQL lane right after a decision (its batches prepared and
	// decided, not committed), checks the standby replayed those PREPAREs,
	// pauses the standby's replication for Hold (0: not at all; with
	// asynchronous replication the primary goes on committing), kills the
	// primary and promotes the standby, then kills the frozen workers and
	// restarts them clean. Needs Env.Failover; planned only explicitly.
	PostgresFailover Kind = "pg-failover"

	// DiskFull fills the PostgreSQL data directory's filesystem (a tmpfs
	// of fixed size, Env.Disk) for Hold, then frees it: writes fail with
	// SQLSTATE 53100 meanwhile. Planned only explicitly.
	DiskFull Kind = "disk-full"

	// LaneFailpoint and LaneZombie aim at one lane (Lanes names it) in a
	// worker that runs a task of it: the failpoint (Point, Hit; mapped to
	// the lane's delivery mode as FailpointKill's and ZombieFailpoint's
	// are) is scoped to the lane's connector and armed in place, without
	// the restart that would move the worker's tasks (SIGUSR1 re-arms it
	// from its failpoint file). LaneFailpoint: the worker SIGKILLs itself
	// at the connector's Hit-th pass through Point and is restarted clean.
	// LaneZombie: it freezes there for Hold, then SIGCONT. A worker runs
	// every lane's tasks in a cluster profile, where FailpointKill fires in
	// whichever lane passes first; these give a negative control its
	// window for certain. Planned only explicitly (Profile.Then).
	LaneFailpoint Kind = "lane-failpoint"
	LaneZombie    Kind = "lane-zombie"

	// WorkerJoin: a cluster profile starts one more worker, which takes
	// over some tasks. WorkerLeave: it stops (SIGTERM) the last worker a
	// join added, for good (nothing when none is up). Planned only with
	// Profile.Cluster.
	WorkerJoin  Kind = "join"
	WorkerLeave Kind = "leave"

	// REST faults: actions on a lane's connector through the workers' REST
	// API while records flow (Env.REST, cluster profiles; see rest.go).
	// The first four are planned when Env.REST is set and the profile has
	// no weights of its own; RESTOffsets and RESTRecreate only explicitly.
	RESTPause    Kind = "rest-pause"
	RESTStop     Kind = "rest-stop"
	RESTRestart  Kind = "rest-restart"
	RESTConfig   Kind = "rest-config"
	RESTOffsets  Kind = "rest-offsets"
	RESTRecreate Kind = "rest-recreate"
)

// DefaultWeights is the mix of fault kinds per deck of 32 faults (see
// Plan).
var DefaultWeights = map[Kind]int{
	KillWorker:        6,
	FailpointKill:     7,
	TermWorker:        3,
	Zombie:            2,
	ZombieFailpoint:   3,
	PostgresCrash:     3,
	PostgresTerminate: 4,
	KafkaRestart:      2,
	ProducerKill:      2,
}

// ClickHouseWeights is the mix of the ClickHouse profiles: no PostgreSQL
// faults, ClickHouse restarts instead, and more failpoints (the kill points
// include the sink's crash windows, ClickHouseKillPoints).
var ClickHouseWeights = map[Kind]int{
	KillWorker:        7,
	FailpointKill:     10,
	TermWorker:        3,
	Zombie:            2,
	ZombieFailpoint:   2,
	ClickHouseRestart: 3,
	KafkaRestart:      1,
	ProducerKill:      4,
}

// ClickHouseKillPoints are the failpoints of the ClickHouse profiles: the
// runtime's points the ClickHouse sink passes through in exactly_once
// (it has no after-write there) and its three crash windows — W1
// after-decide (decided, nothing inserted), W2 ch-mid-insert (between two
// blocks of a batch), W3 ch-after-insert (every block in, offset and intent
// not yet written) — and ahead-before-decide (pipelined rounds: the next
// round mapped ahead, this one prepared and undecided).
var ClickHouseKillPoints = []string{failpoint.AfterPoll, failpoint.AfterPrepare, failpoint.AfterDecide,
	PointCHMidInsert, PointCHAfterInsert, failpoint.AfterCommit, failpoint.AheadBeforeDecide}

// The ClickHouse sink's failpoints (connectors/clickhouse.PointMidInsert,
// PointAfterInsert).
const (
	PointCHMidInsert   = "ch-mid-insert"
	PointCHAfterInsert = "ch-after-insert"
)

// NetWeights are the network faults (fault proxies), BrokerWeights the
// broker faults of a three-broker Kafka cluster (a rolling restart, which takes
// minutes, only in the soak: SoakWeights); CIWeights is the CI profile's
// mix: DefaultWeights with both.
var (
	NetWeights = map[Kind]int{CutCommit: 3, CutEndTxn: 2, CutTxnOffsets: 1, NetLatency: 2, NetHalfOpen: 2, NetBandwidth: 1}

	BrokerWeights = map[Kind]int{BrokerLeader: 2, BrokerGroupCoordinator: 1, BrokerTxnCoordinator: 1, ControllerFailover: 1}

	CIWeights = merge(DefaultWeights, NetWeights, BrokerWeights)

	SoakWeights = merge(CIWeights, map[Kind]int{RollingRestart: 1, ClickHouseRestart: 3, FailpointKill: 3, ZombieFailpoint: 1})
)

// merge returns the sum of weight maps.
func merge(ms ...map[Kind]int) map[Kind]int {
	out := map[Kind]int{}
	for _, m := range ms {
		for k, n := range m {
			out[k] += n
		}
	}
	return out
}

// Network fault targets (Fault.Target).
const (
	TargetPostgres   = "postgres"
	TargetClickHouse = "clickhouse"
	TargetKafka      = "kafka"
)

// ClusterWeights is the mix of the cluster profiles: worker faults on
// the shared workers, joins and leaves, broker restarts and killed
// producers.
var ClusterWeights = map[Kind]int{
	KillWorker:      4,
	FailpointKill:   4,
	TermWorker:      2,
	Zombie:          2,
	ZombieFailpoint: 3,
	WorkerJoin:      2,
	WorkerLeave:     2,
	KafkaRestart:    1,
	ProducerKill:    1,
}

// RESTWeights is added to the mix when Env.REST is set.
var RESTWeights = map[Kind]int{RESTPause: 2, RESTStop: 1, RESTRestart: 1, RESTConfig: 1}

// Protocol points a FailpointKill or ZombieFailpoint cycles through. The
// two ahead-* points are the windows of pipelined rounds (exactly_once on
// PostgreSQL); they fire only when a round is written ahead, so in a lane
// without a backlog they may not fire (the summary counts those).
var killPoints = []string{failpoint.AfterPoll, failpoint.AfterWrite, failpoint.AfterPrepare, failpoint.AfterDecide, failpoint.AfterCommit,
	failpoint.AheadBeforeDecide, failpoint.AheadAfterCommit}
var stopPoints = []string{failpoint.AfterPoll, failpoint.AfterPrepare}

// ClickHouseStopPoints are the zombie points of the ClickHouse profiles:
// besides the runtime's two, after-decide (intent written, decision
// committed, nothing inserted), the race a ClickHouse lane without fencing
// loses: the zombie inserts a batch the new owner redid already.
var ClickHouseStopPoints = []string{failpoint.AfterPoll, failpoint.AfterPrepare, failpoint.AfterDecide}

// Fault is one planned fault.
type Fault struct {
	// Seq numbers the faults from 1.
	Seq int
	// At is the planned start, relative to the start of the schedule; a
	// fault starts at At or when the previous one ended, whichever is later.
	At   time.Duration
	Kind Kind
	// Worker is the worker index for worker faults.
	Worker int
	// Point and Hit arm a failpoint (FailpointKill, ZombieFailpoint): the
	// worker is hit at the Hit-th pass through Point.
	Point string
	Hit   int
	// Hold is how long a zombie stays stopped, a broker stays down or a
	// network fault lasts; Pause is the delay before a killed worker is
	// restarted.
	Hold, Pause time.Duration
	// Target is the service a network fault hits (TargetPostgres, …);
	// Latency the delay of NetLatency; Rate the KB/s of NetBandwidth.
	Target  string
	Latency time.Duration
	Rate    int64
	// Request makes a cut lose the request itself (the server never
	// executes it) instead of its answer.
	Request bool
	// Lanes, when set, names the lanes a cut or worker fault hits (the
	// others are left alone); empty: every lane.
	Lanes []string
}

func (f Fault) String() string {
	s := fmt.Sprintf("#%d +%v %s", f.Seq, f.At.Round(time.Millisecond), f.Kind)
	switch f.Kind {
	case KillWorker, TermWorker:
		s += fmt.Sprintf(" w%d pause=%v", f.Worker+1, f.Pause)
	case FailpointKill:
		s += fmt.Sprintf(" w%d %s:%d", f.Worker+1, f.Point, f.Hit)
	case Zombie:
		s += fmt.Sprintf(" w%d hold=%v", f.Worker+1, f.Hold)
	case ZombieFailpoint:
		s += fmt.Sprintf(" w%d %s:%d:stop hold=%v", f.Worker+1, f.Point, f.Hit, f.Hold)
	case LaneFailpoint:
		s += fmt.Sprintf(" %s:%d", f.Point, f.Hit)
	case LaneZombie:
		s += fmt.Sprintf(" %s:%d:stop hold=%v", f.Point, f.Hit, f.Hold)
	case KafkaRestart, BrokerLeader, BrokerGroupCoordinator, BrokerTxnCoordinator, ControllerFailover:
		s += fmt.Sprintf(" down=%v", f.Hold)
		if f.Kind == BrokerLeader {
			s += fmt.Sprintf(" partition#%d", f.Hit)
		}
	case PostgresFailover:
		s += fmt.Sprintf(" w%d lag=%v", f.Worker+1, f.Hold)
	case DiskFull:
		s += fmt.Sprintf(" hold=%v", f.Hold)
	case CutCommit, CutEndTxn, CutTxnOffsets:
		s += fmt.Sprintf(" #%d", f.Hit)
		if f.Request {
			s += " request"
		}
	case NetLatency:
		s += fmt.Sprintf(" %s latency=%v hold=%v", f.Target, f.Latency, f.Hold)
	case NetHalfOpen:
		s += fmt.Sprintf(" %s hold=%v", f.Target, f.Hold)
	case NetBandwidth:
		s += fmt.Sprintf(" %s rate=%dKB/s hold=%v", f.Target, f.Rate, f.Hold)
	case RESTPause, RESTStop, RESTRestart, RESTConfig, RESTOffsets, RESTRecreate:
		s += fmt.Sprintf(" hold=%v", f.Hold)
	}
	if len(f.Lanes) > 0 {
		s += " lanes=" + strings.Join(f.Lanes, ",")
	}
	return s
}

// PlanOptions shape a schedule.
type PlanOptions struct {
	Seed uint64
	// Faults is the number of faults (0: unbounded, use Duration).
	Faults int
	// Duration bounds the planned start of the last fault (0: unbounded,
	// use Faults). At least one of the two must be set.
	Duration time.Duration
	Workers  int
	// Gap is the range of planned pauses between two faults.
	GapMin, GapMax time.Duration
	// SessionTimeout is the connectors' group session timeout: zombies
	// are held past it.
	SessionTimeout time.Duration
	// Weights is the mix per deck; nil means DefaultWeights.
	Weights map[Kind]int
	// KillPoints are the failpoints FailpointKill cycles through; nil
	// means the runtime's five (after-poll … after-commit).
	KillPoints []string
	// StopPoints are the points ZombieFailpoint cycles through; nil means
	// after-poll and after-prepare.
	StopPoints []string
	// Targets are the services network faults may hit (TargetPostgres,
	// …); network faults are not planned without one.
	Targets []string
	// Partitions is the number of partitions BrokerLeader picks from.
	Partitions int32
}

// Plan returns the seeded fault schedule: the same options give the same
// schedule. Faults are dealt from shuffled decks built from the weights, so
// every kind with a weight appears in every full deck; failpoints cycle
// through the protocol points in a shuffled order.
func Plan(o PlanOptions) []Fault {
	if o.Faults <= 0 && o.Duration <= 0 {
		return nil
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.GapMax < o.GapMin {
		o.GapMax = o.GapMin
	}
	w := o.Weights
	if w == nil {
		w = DefaultWeights
	}
	var kinds []Kind
	for k := range w {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	var deckTemplate []Kind
	for _, k := range kinds {
		for range w[k] {
			deckTemplate = append(deckTemplate, k)
		}
	}
	if len(deckTemplate) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x74787369))
	between := func(a, b time.Duration) time.Duration {
		if b <= a {
			return a
		}
		return a + time.Duration(rng.Int64N(int64(b-a)))
	}
	var deck []Kind
	kp := append([]string(nil), killPoints...)
	if o.KillPoints != nil {
		kp = append([]string(nil), o.KillPoints...)
	}
	sp := append([]string(nil), stopPoints...)
	if o.StopPoints != nil {
		sp = append([]string(nil), o.StopPoints...)
	}
	ki, si := len(kp), len(sp)
	var out []Fault
	at := time.Duration(0)
	for seq := 1; ; seq++ {
		if o.Faults > 0 && seq > o.Faults {
			break
		}
		at += between(o.GapMin, o.GapMax)
		if o.Duration > 0 && at > o.Duration {
			break
		}
		if len(deck) == 0 {
			deck = append(deck, deckTemplate...)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		f := Fault{Seq: seq, At: at, Kind: deck[0], Worker: rng.IntN(o.Workers)}
		deck = deck[1:]
		switch f.Kind {
		case KillWorker, TermWorker:
			f.Pause = between(0, 2*time.Second).Round(100 * time.Millisecond)
		case FailpointKill:
			if ki == len(kp) {
				rng.Shuffle(len(kp), func(i, j int) { kp[i], kp[j] = kp[j], kp[i] })
				ki = 0
			}
			f.Point, f.Hit = kp[ki], 1+rng.IntN(3)
			ki++
		case Zombie:
			f.Hold = (o.SessionTimeout + between(3*time.Second, 6*time.Second)).Round(100 * time.Millisecond)
		case ZombieFailpoint:
			if si == len(sp) {
				rng.Shuffle(len(sp), func(i, j int) { sp[i], sp[j] = sp[j], sp[i] })
				si = 0
			}
			f.Point, f.Hit = sp[si], 1+rng.IntN(3)
			si++
			// Long enough for the other worker to rejoin, take the
			// partitions over and write past the zombie's batch, even on
			// a loaded machine: only then does a commit without fencing
			// show as duplicates.
			f.Hold = (o.SessionTimeout + between(8*time.Second, 12*time.Second)).Round(100 * time.Millisecond)
		case KafkaRestart, BrokerGroupCoordinator, BrokerTxnCoordinator, ControllerFailover:
			f.Hold = between(time.Second, 4*time.Second).Round(100 * time.Millisecond)
		case BrokerLeader:
			f.Hold = between(time.Second, 4*time.Second).Round(100 * time.Millisecond)
			f.Hit = rng.IntN(int(max(o.Partitions, 1)))
		case CutCommit, CutEndTxn, CutTxnOffsets:
			f.Hit = 1 + rng.IntN(3)
		case NetLatency, NetHalfOpen, NetBandwidth:
			if len(o.Targets) > 0 {
				f.Target = o.Targets[rng.IntN(len(o.Targets))]
			}
			f.Hold = between(3*time.Second, 8*time.Second).Round(100 * time.Millisecond)
			switch f.Kind {
			case NetLatency:
				// Past the group session timeout and near the
				// transaction timeout: members drop out, rounds abort.
				f.Latency = (o.SessionTimeout + between(0, 4*time.Second)).Round(100 * time.Millisecond)
			case NetBandwidth:
				f.Rate = 8 + rng.Int64N(25)
			}
		case RESTPause, RESTStop, RESTRestart, RESTConfig:
			f.Hold = between(time.Second, 5*time.Second).Round(100 * time.Millisecond)
		}
		out = append(out, f)
	}
	return out
}

// FormatPlan prints a schedule, one fault a line.
func FormatPlan(fs []Fault) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// stopPointFor maps a planned zombie stop to the lane's zombie window. The
// local modes' window is after-poll (records in hand, nothing written), or
// before-write when asked for (the round checked as owned, nothing
// written): a stop at after-write would hold the offsets row lock and keep
// the other worker out, so no commit could race the new owner's.
func stopPointFor(sink, delivery, point string) string {
	if delivery != "exactly_once" {
		if point == failpoint.BeforeWrite {
			return point // past the ownership checks, before the write
		}
		return failpoint.AfterPoll
	}
	return pointFor(sink, delivery, point)
}

// pointFor maps a planned failpoint to one the lane's delivery mode passes
// through: the local modes (no PREPARE, no Kafka decision) have only
// after-poll and after-write, their commit window; PostgreSQL has no
// ClickHouse crash windows (their nearest point is after-decide).
func pointFor(sink, delivery, point string) string {
	if sink != SinkClickHouse && (point == PointCHMidInsert || point == PointCHAfterInsert) {
		point = failpoint.AfterDecide
	}
	if delivery == "exactly_once" {
		return point
	}
	switch point {
	case failpoint.AfterPoll, failpoint.AfterWrite:
		return point
	}
	return failpoint.AfterWrite
}
