// Package chaos runs txsink under a seeded, bounded schedule of faults and
// judges the result with the exactly-once checker (internal/verify).
//
// A run has one or more lanes. Each lane is one connector with its own topic,
// database, upstream transactional producer and 1–3 "txsink run" worker
// processes sharing the connector's consumer group. All lanes live through
// the same schedule at the same time: a worker fault hits the same worker
// index in every lane, a service fault (PostgreSQL crash, Kafka restart) hits
// everyone. A lane writes to PostgreSQL or (Lane.Sink) to ClickHouse. That is
// how the negative controls run "the same schedule": one
// lane in exactly_once, one in at_least_once (must show duplicates), one in
// exactly_once_sink with fencing switched off (must fail the check).
//
// After the schedule the runner heals (continues stopped workers, restarts
// dead ones), stops the producers, waits until every committed record is in
// the sink, stops the workers and runs "txsink verify" on each lane with
// the producer's log and the sampled offset history. Run returns a Summary:
// faults by kind, records in and out, anomalies by kind, max lag and time to
// recover per fault kind.
//
// The same seed gives the same schedule (Plan); the timing of the real
// processes around it differs from run to run.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/faultnet"
	"github.com/txsink/txsink/integration/upstream"
	"github.com/txsink/txsink/internal/verify"
)

// Broker is the Kafka broker the run may kill and restart
// (harness.KafkaService satisfies it).
type Broker interface {
	// Stop kills the broker, keeping its data.
	Stop(ctx context.Context) error
	// Start brings it back with the same address and returns once it serves.
	Start(ctx context.Context) error
}

// Database is the PostgreSQL server the run may crash
// (harness.PostgresService satisfies it).
type Database interface {
	// Restart restarts the server; immediate kills it (crash recovery).
	Restart(ctx context.Context, immediate bool) error
}

// RESTDriver injects the REST faults (pause/resume, stop/resume, restarts,
// config update, offsets edit, delete and re-create) through the workers'
// REST API (ConnectREST is the one for cluster profiles). Without a
// driver (Env.REST), REST fault kinds are not planned. A driver gets the
// lane's connector and worker endpoints and must leave the connector
// running when Inject returns; an error says what the API answered that it
// should not have.
type RESTDriver interface {
	Inject(ctx context.Context, lane LaneInfo, f Fault) error
}

// LaneInfo describes a lane to a RESTDriver.
type LaneInfo struct {
	Name, Connector, Topic, DatabaseURL string
	ConfigPath                          string
	WorkerIDs                           []string
	// URLs are the REST API's base URLs of the workers running the
	// connector (cluster profiles; empty for "txsink run" lanes).
	URLs []string
	// Tasks is the connector's tasks.max.
	Tasks int
}

// Sinks a lane can write to.
const (
	SinkPostgres   = "postgres"
	SinkClickHouse = "clickhouse"
)

// ClickHouseServer is the ClickHouse server the run may restart
// (harness.ClickHouseService satisfies it).
type ClickHouseServer interface {
	// Restart stops the server and starts it again with the same data and
	// address; it returns once the server answers queries.
	Restart(ctx context.Context) error
}

// ClickHouseEnv is where ClickHouse lanes write.
type ClickHouseEnv struct {
	// Addr is the native-protocol address (host:port); User and Password
	// authenticate on it.
	Addr, User, Password string
	// Replicated makes the exactly_once lanes' tables ReplicatedMergeTree
	// (the server has ZooKeeper and the {shard}/{replica} macros; needed on
	// servers without insert_deduplication_token).
	Replicated bool
	// Server injects ClickHouseRestart; nil: none planned.
	Server ClickHouseServer
	// NewDatabase creates a fresh database for a lane and returns its name.
	NewDatabase func(lane string) (string, error)
}

// Lane is one connector living through the schedule.
type Lane struct {
	// Name is short ([a-z0-9]), unique in the run.
	Name string
	// Sink is SinkPostgres (default, "") or SinkClickHouse.
	Sink string
	// Delivery is the connector's delivery.guarantee.
	Delivery string
	// UnsafeNoFencing sets txsink.test.unsafe.disable.fencing (negative
	// control only).
	UnsafeNoFencing bool
	// UnsafeNoRecovery sets txsink.test.unsafe.disable.recovery
	// (negative control only): a commit whose answer was lost stays in
	// doubt.
	UnsafeNoRecovery bool
	// Bootstrap, when set, is the lane's own Kafka cluster (another
	// version, say); Broker, when set too, lets KafkaRestart hit it with
	// the others. Empty: Env.Bootstrap.
	Bootstrap string
	Broker    Broker
	// NewDatabase, when set, creates the lane's database on its own
	// PostgreSQL server (another version, say) instead of
	// Env.NewDatabase; Postgres, when set too, lets PostgresCrash crash
	// that server with the others.
	NewDatabase func(lane string) (string, error)
	Postgres    Database
	// ClickHouse, when set, is a ClickHouse lane's own server (another
	// version, say) instead of Env.ClickHouse; its Server, when set, lets
	// ClickHouseRestart restart it with the others.
	ClickHouse *ClickHouseEnv
	// Config holds further connector settings, set over the runner's own.
	Config map[string]string
}

// bootstrap returns the lane's Kafka bootstrap list.
func (l *lane) bootstrap(p Profile) string {
	if l.Lane.Bootstrap != "" {
		return l.Lane.Bootstrap
	}
	return p.Env.Bootstrap
}

// Env is where a run happens.
type Env struct {
	// Bootstrap is the Kafka broker's address.
	Bootstrap string
	// Broker and Postgres inject the service faults; nil disables
	// KafkaRestart or PostgresCrash.
	Broker   Broker
	Postgres Database
	// NewDatabase returns the URL of a fresh, empty database for a lane.
	NewDatabase func(lane string) (string, error)
	// Binary is the txsink executable.
	Binary string
	// Dir receives worker logs, connector files, producer logs, offset
	// histories and verify reports.
	Dir string
	// Logf prints progress (nil: discard).
	Logf func(format string, args ...any)
	// REST injects REST faults; nil: none planned (see RESTDriver).
	REST RESTDriver
	// ClickHouse is required by ClickHouse lanes.
	ClickHouse *ClickHouseEnv
	// KafkaCluster, when set, is the multi-broker Kafka cluster at Bootstrap:
	// the broker faults (BrokerLeader, BrokerGroupCoordinator,
	// BrokerTxnCoordinator, ControllerFailover, RollingRestart) are
	// planned, and the workers reach it through its fault proxies
	// (ProxiedBootstrap), so the network faults reach Kafka too.
	KafkaCluster KafkaCluster
	// ProxiedBootstrap is KafkaCluster's bootstrap list through its proxies.
	ProxiedBootstrap string
	// Failover, when set, is a PostgreSQL primary with a streaming
	// standby (the lanes' databases live there), for PostgresFailover.
	Failover Failover
	// Disk, when set, is the PostgreSQL server's data directory on a
	// small filesystem, for DiskFull.
	Disk Disk
}

// Disk fills and frees a database server's filesystem
// (harness.PostgresService from StartPostgresSmallDisk satisfies it).
type Disk interface {
	// FillDisk adds ballast until leaveBytes are free (again: it takes
	// what was freed since); FreeDisk removes it all.
	FillDisk(ctx context.Context, leaveBytes int64) error
	FreeDisk(ctx context.Context) error
}

// Failover is a PostgreSQL primary with a streaming standby
// (harness.PostgresReplicated satisfies it).
type Failover interface {
	// PreparedOnPrimary and PreparedOnStandby list the gids of the
	// prepared transactions in database db (the standby's once promoted).
	PreparedOnPrimary(ctx context.Context, db string) ([]string, error)
	PreparedOnStandby(ctx context.Context, db string) ([]string, error)
	// PauseReplication stops the standby's WAL receiver.
	PauseReplication(ctx context.Context) error
	// Failover kills the primary and promotes the standby.
	Failover(ctx context.Context) error
}

// KafkaCluster is a Kafka cluster whose brokers the run may kill and whose
// clients' connections go through fault proxies
// (harness.KafkaClusterService satisfies it).
type KafkaCluster interface {
	// Brokers lists the node ids.
	Brokers() []int32
	// Proxies are the brokers' fault proxies.
	Proxies() []*faultnet.Proxy
	// Restart kills broker id, waits pause, starts it and returns once
	// every partition is in sync again.
	Restart(ctx context.Context, id int32, pause time.Duration) error
	// RollingRestart stops and starts every broker in turn, gracefully.
	RollingRestart(ctx context.Context) error
	// Leader, GroupCoordinator, TxnCoordinator and Controller find the
	// broker a fault aims at.
	Leader(ctx context.Context, topic string, partition int32) (int32, error)
	GroupCoordinator(ctx context.Context, group string) (int32, error)
	TxnCoordinator(ctx context.Context, txnID string) (int32, error)
	Controller(ctx context.Context) (int32, error)
}

// Profile is one run.
type Profile struct {
	Name string
	Seed uint64
	// Faults bounds the number of faults, Duration the planned start of
	// the last one; set one or both.
	Faults   int
	Duration time.Duration
	// Workers per lane (1–3); Partitions per topic.
	Workers    int
	Partitions int32
	Lanes      []Lane
	// Rate is each lane's upstream records per second; MaxTxn the largest
	// transaction; AbortRatio the share of transactions aborted.
	Rate       int
	MaxTxn     int
	AbortRatio float64
	// SessionTimeout is the connectors' session.timeout.ms.
	SessionTimeout time.Duration
	// GapMin and GapMax bound the planned pause between faults.
	GapMin, GapMax time.Duration
	// Warmup is traffic without faults before the schedule, Cooldown
	// after it (before the producers stop).
	Warmup, Cooldown time.Duration
	// CutWait bounds the wait for a cut fault to hit its request
	// (default 60 s).
	CutWait time.Duration
	// DrainTimeout bounds the wait for the sinks to catch up at the end.
	DrainTimeout time.Duration
	// Weights is the fault mix (nil: DefaultWeights, plus RESTWeights
	// when Env.REST is set).
	Weights map[Kind]int
	// KillPoints are the failpoints FailpointKill cycles through (nil: the
	// runtime's five; ClickHouseKillPoints for ClickHouse profiles).
	KillPoints []string
	// StopPoints are the points ZombieFailpoint cycles through (nil:
	// after-poll and after-prepare; ClickHouseStopPoints adds
	// after-decide).
	StopPoints []string
	// BodyBytes is the size of each record's body (default 40).
	BodyBytes int
	// BlockRows is the ClickHouse lanes' insert.block.rows (default 25:
	// several blocks per batch, so the crash window between two blocks
	// exists).
	BlockRows int
	// Plan, when set, is the schedule itself (focused tests of one
	// fault), instead of one drawn from Seed, Faults and Weights.
	Plan []Fault
	// Then are faults applied after the schedule, in order, GapMax apart
	// (renumbered and timed by PlanOf): the cluster profile's aimed
	// faults (LaneFailpoint, LaneZombie) that give each negative control
	// its window whatever the drawn schedule did.
	Then []Fault
	// Cluster runs every lane's connector on one cluster of Workers
	// "txsink serve" workers in distributed mode instead of "txsink run"
	// processes per lane (see cluster.go): a worker fault hits one worker
	// and so every lane's tasks on it, each connector has tasks.max =
	// Workers, and WorkerJoin and WorkerLeave may be planned. Its lanes
	// all use Env's Kafka (no Lane.Bootstrap).
	Cluster bool
	Env     Env
}

func (p *Profile) defaults() error {
	if p.Name == "" {
		p.Name = "chaos"
	}
	if p.Workers == 0 {
		p.Workers = 2
	}
	if p.Workers < 1 || p.Workers > 3 {
		return fmt.Errorf("workers: must be between 1 and 3, got %d", p.Workers)
	}
	if p.Partitions == 0 {
		p.Partitions = 6
	}
	if len(p.Lanes) == 0 {
		p.Lanes = []Lane{{Name: "eo", Delivery: "exactly_once"}}
	}
	if p.Rate == 0 {
		p.Rate = 150
	}
	if p.MaxTxn == 0 {
		p.MaxTxn = 30
	}
	if p.AbortRatio == 0 {
		p.AbortRatio = 0.15
	}
	if p.SessionTimeout == 0 {
		p.SessionTimeout = 6 * time.Second
	}
	if p.GapMax == 0 {
		p.GapMin, p.GapMax = time.Second, 3*time.Second
	}
	if p.DrainTimeout == 0 {
		p.DrainTimeout = 3 * time.Minute
	}
	if p.CutWait == 0 {
		p.CutWait = time.Minute
	}
	if p.Faults <= 0 && p.Duration <= 0 && p.Plan == nil {
		return errors.New("faults, duration or plan: one must be set")
	}
	if p.Env.Bootstrap == "" || p.Env.Binary == "" || p.Env.Dir == "" {
		return errors.New("env: Bootstrap, Binary and Dir are required")
	}
	if p.BlockRows == 0 {
		p.BlockRows = 25
	}
	if p.Env.Logf == nil {
		p.Env.Logf = func(string, ...any) {}
	}
	seen := map[string]bool{}
	for _, l := range p.Lanes {
		if l.Name == "" || seen[l.Name] {
			return fmt.Errorf("lanes: empty or repeated name %q", l.Name)
		}
		seen[l.Name] = true
		if p.Cluster && l.Bootstrap != "" {
			return fmt.Errorf("lane %s: bootstrap: the lanes of a cluster profile share the cluster's Kafka (Env.Bootstrap)", l.Name)
		}
		switch l.Sink {
		case "", SinkPostgres:
			if p.Env.NewDatabase == nil && l.NewDatabase == nil {
				return fmt.Errorf("lane %s: env: NewDatabase (or the lane's) is required for PostgreSQL lanes", l.Name)
			}
			if l.Postgres != nil && l.NewDatabase == nil {
				return fmt.Errorf("lane %s: postgres: a lane's own server needs the lane's NewDatabase", l.Name)
			}
		case SinkClickHouse:
			if che := p.clickHouseOf(l); che == nil || che.NewDatabase == nil || che.Addr == "" {
				return fmt.Errorf("lane %s: env: ClickHouse (or the lane's) with Addr and NewDatabase is required for ClickHouse lanes", l.Name)
			}
			if l.Delivery == "exactly_once_sink" {
				return fmt.Errorf("lane %s: the ClickHouse sink has no exactly_once_sink", l.Name)
			}
		default:
			return fmt.Errorf("lane %s: sink: want %s or %s, got %q", l.Name, SinkPostgres, SinkClickHouse, l.Sink)
		}
	}
	return nil
}

// hasSink reports whether a lane writes to sink.
func (p *Profile) hasSink(sink string) bool {
	for _, l := range p.Lanes {
		if l.sink() == sink {
			return true
		}
	}
	return false
}

func (l Lane) sink() string {
	if l.Sink == "" {
		return SinkPostgres
	}
	return l.Sink
}

// weights returns the fault mix the profile plans with: the profile's (or
// DefaultWeights, plus RESTWeights when Env.REST is set) without the kinds
// this environment cannot inject.
func (p *Profile) weights() map[Kind]int {
	w := map[Kind]int{}
	src := p.Weights
	if src == nil {
		src = DefaultWeights
	}
	for k, n := range src {
		w[k] = n
	}
	if !p.hasBroker() {
		delete(w, KafkaRestart)
	}
	if len(p.postgresServers()) == 0 || !p.hasSink(SinkPostgres) {
		delete(w, PostgresCrash)
	}
	if !p.hasSink(SinkPostgres) {
		delete(w, PostgresTerminate)
	}
	if len(p.clickHouseServers()) == 0 {
		delete(w, ClickHouseRestart)
	}
	if p.Env.KafkaCluster == nil {
		for k := range BrokerWeights {
			delete(w, k)
		}
		delete(w, RollingRestart)
	}
	if p.Env.KafkaCluster == nil || p.Env.ProxiedBootstrap == "" || !p.hasExactlyOnce() {
		delete(w, CutEndTxn)
		delete(w, CutTxnOffsets)
	}
	if len(p.netTargets()) == 0 {
		delete(w, NetLatency)
		delete(w, NetHalfOpen)
		delete(w, NetBandwidth)
	}
	if p.Env.REST != nil && p.Weights == nil {
		for k, n := range RESTWeights {
			w[k] = n
		}
	}
	if p.Env.REST == nil {
		for k := range RESTWeights {
			delete(w, k)
		}
	}
	if !p.Cluster {
		delete(w, WorkerJoin)
		delete(w, WorkerLeave)
	}
	return w
}

// postgresServers returns every PostgreSQL server a PostgresCrash hits:
// Env.Postgres and the lanes' own.
func (p *Profile) postgresServers() []Database {
	var dbs []Database
	if p.Env.Postgres != nil {
		dbs = append(dbs, p.Env.Postgres)
	}
	for _, l := range p.Lanes {
		if l.Postgres != nil && l.sink() == SinkPostgres && !slices.Contains(dbs, l.Postgres) {
			dbs = append(dbs, l.Postgres)
		}
	}
	return dbs
}

// clickHouseOf returns where a ClickHouse lane writes: its own server or
// Env.ClickHouse.
func (p *Profile) clickHouseOf(l Lane) *ClickHouseEnv {
	if l.ClickHouse != nil {
		return l.ClickHouse
	}
	return p.Env.ClickHouse
}

// clickHouseServers returns every ClickHouse server a ClickHouseRestart
// hits: those of the ClickHouse lanes that can be restarted.
func (p *Profile) clickHouseServers() []ClickHouseServer {
	var out []ClickHouseServer
	for _, l := range p.Lanes {
		if che := p.clickHouseOf(l); l.sink() == SinkClickHouse && che != nil && che.Server != nil && !slices.Contains(out, che.Server) {
			out = append(out, che.Server)
		}
	}
	return out
}

// hasBroker reports whether a KafkaRestart has a broker to restart.
func (p *Profile) hasBroker() bool {
	if p.Env.Broker != nil {
		return true
	}
	for _, l := range p.Lanes {
		if l.Broker != nil {
			return true
		}
	}
	return false
}

// hasExactlyOnce reports whether a lane on the main cluster runs
// exactly_once (it has Kafka transactions to cut).
func (p *Profile) hasExactlyOnce() bool {
	for _, l := range p.Lanes {
		if l.Delivery == "exactly_once" && l.Bootstrap == "" {
			return true
		}
	}
	return false
}

// netTargets lists the services network faults can reach through proxies.
func (p *Profile) netTargets() []string {
	var out []string
	if p.hasSink(SinkPostgres) {
		out = append(out, TargetPostgres)
	}
	if p.hasSink(SinkClickHouse) {
		out = append(out, TargetClickHouse)
	}
	if p.Env.KafkaCluster != nil && p.Env.ProxiedBootstrap != "" {
		out = append(out, TargetKafka)
	}
	return out
}

// PlanOf returns the schedule Run will apply.
func PlanOf(p Profile) ([]Fault, error) {
	if err := p.defaults(); err != nil {
		return nil, err
	}
	plan := p.Plan
	if plan == nil {
		plan = Plan(PlanOptions{Seed: p.Seed, Faults: p.Faults, Duration: p.Duration, Workers: p.Workers,
			GapMin: p.GapMin, GapMax: p.GapMax, SessionTimeout: p.SessionTimeout, Weights: p.weights(),
			KillPoints: p.KillPoints, StopPoints: p.StopPoints, Targets: p.netTargets(), Partitions: p.Partitions})
	}
	if len(p.Then) == 0 {
		return plan, nil
	}
	plan = slices.Clone(plan)
	for _, f := range p.Then {
		f.Seq, f.At = len(plan)+1, p.GapMax
		if n := len(plan); n > 0 {
			f.At += plan[n-1].At
		}
		plan = append(plan, f)
	}
	return plan, nil
}

// needsSinkProxy reports whether a fault of plan goes through the lanes'
// database proxies.
func needsSinkProxy(plan []Fault) bool {
	for _, f := range plan {
		switch f.Kind {
		case CutCommit:
			return true
		case NetLatency, NetHalfOpen, NetBandwidth:
			if f.Target != TargetKafka {
				return true
			}
		}
	}
	return false
}

// lane is a Lane at run time.
type lane struct {
	Lane
	connector, topic, db, cfgPath string
	conf                          map[string]string // the connector's configuration
	prod                          *upstream.Producer
	prodLog                       *os.File
	workers                       []*worker
	pool                          *pgxpool.Pool // PostgreSQL lanes
	ch                            driver.Conn   // ClickHouse lanes
	// sinkProxy is between the workers and the lane's database (nil
	// when no network fault is planned).
	sinkProxy *faultnet.Proxy

	mu      sync.Mutex
	samples []verify.OffsetSample
	maxLag  int64
	heals   []heal
	drained bool
}

// heal is the moment a fault ended, with what upstream had acknowledged;
// next is when the following fault started (zero for the last).
type heal struct {
	kind     Kind
	at, next time.Time
	frontier map[int32]int64
}

// Run applies the profile's schedule and returns the summary. An error
// means the run itself failed (services, processes); what the checker found
// is in the Summary, lane by lane.
func Run(ctx context.Context, p Profile) (Summary, error) {
	if err := p.defaults(); err != nil {
		return Summary{}, err
	}
	plan, _ := PlanOf(p)
	env := p.Env
	logf := env.Logf
	start := time.Now()
	sum := Summary{Profile: p.Name, Seed: p.Seed, Workers: p.Workers, Cluster: p.Cluster, Partitions: p.Partitions, Plan: plan, Faults: map[Kind]int{}}
	logf("chaos: profile %s, seed %d (replay with TXSINK_CHAOS_SEED=%d), %d faults planned, %d workers, %d lanes, work dir %s",
		p.Name, p.Seed, p.Seed, len(plan), p.Workers, len(p.Lanes), env.Dir)
	logf("chaos: schedule:\n%s", FormatPlan(plan))
	if err := os.MkdirAll(env.Dir, 0o755); err != nil {
		return sum, err
	}

	nonce := rand.Uint32()
	var lanes []*lane
	var cl *cluster
	workers := func() []*worker { // every worker the run may have started
		if cl != nil {
			return cl.all()
		}
		var out []*worker
		for _, l := range lanes {
			out = append(out, l.workers...)
		}
		return out
	}
	defer func() {
		for _, w := range workers() {
			w.hold().Kill()
		}
		for _, l := range lanes {
			if l.pool != nil {
				l.pool.Close()
			}
			if l.ch != nil {
				_ = l.ch.Close()
			}
			if l.prodLog != nil {
				l.prodLog.Close()
			}
			if l.sinkProxy != nil {
				l.sinkProxy.Close()
			}
		}
	}()
	for i, lc := range p.Lanes {
		l, err := setupLane(ctx, p, lc, i, nonce, plan)
		if err != nil {
			return sum, fmt.Errorf("lane %s: %w", lc.Name, err)
		}
		lanes = append(lanes, l)
	}
	if p.Cluster {
		var err error
		if cl, err = newCluster(&p, nonce); err != nil {
			return sum, err
		}
	}

	// Traffic.
	prodCtx, stopProducers := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	// A run that ends early (an error) still waits for its producers: one
	// logging after the test ended would panic the test binary.
	defer func() { stopProducers(); prodWG.Wait() }()
	for _, l := range lanes {
		prodWG.Add(1)
		go func() { defer prodWG.Done(); l.prod.Run(prodCtx) }()
		for _, w := range l.workers {
			if _, err := w.start(""); err != nil {
				return sum, fmt.Errorf("lane %s: start %s: %w", l.Name, w.id, err)
			}
		}
	}
	if cl != nil {
		if err := cl.start(ctx); err != nil {
			return sum, err
		}
		for _, l := range lanes {
			if err := cl.createConnector(ctx, l, l.conf); err != nil {
				return sum, fmt.Errorf("lane %s: %w", l.Name, err)
			}
		}
	}
	supervised := func() []*worker {
		if cl != nil {
			return cl.active()
		}
		return workers()
	}

	// Sampler and supervisor.
	bgCtx, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() {
		defer bgWG.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-t.C:
			}
			for _, l := range lanes {
				l.sample(bgCtx)
			}
			for _, w := range supervised() {
				w.supervise()
			}
		}
	}()
	stopBackground := func() { stopBG(); bgWG.Wait() }
	defer stopBackground()

	// Warm up: every lane has written something.
	logf("chaos: warming up")
	deadline := time.Now().Add(2 * time.Minute)
	for _, l := range lanes {
		for !l.hasProgress() {
			if time.Now().After(deadline) {
				return sum, fmt.Errorf("lane %s: no progress within 2 minutes of start (see %s)", l.Name, env.Dir)
			}
			sleep(ctx, 500*time.Millisecond)
		}
	}
	sleep(ctx, p.Warmup)

	// The schedule.
	schedStart := time.Now()
	for _, f := range plan {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		if p.Duration > 0 && time.Since(schedStart) > p.Duration {
			// Faults run one after another and take time: a duration-bound
			// run ends on time with a prefix of its schedule.
			sum.Skipped = len(plan) - sum.Injected
			logf("chaos: duration %v reached: %d planned faults not applied", p.Duration, sum.Skipped)
			break
		}
		if d := time.Until(schedStart.Add(f.At)); d > 0 {
			sleep(ctx, d)
		}
		t0 := time.Now()
		for _, l := range lanes {
			l.mu.Lock()
			if n := len(l.heals); n > 0 {
				l.heals[n-1].next = t0
			}
			l.mu.Unlock()
		}
		err := apply(ctx, p, lanes, cl, f)
		now := time.Now()
		for _, l := range lanes {
			fr, _ := l.prod.Snapshot()
			l.mu.Lock()
			l.heals = append(l.heals, heal{kind: f.Kind, at: now, frontier: fr})
			l.mu.Unlock()
		}
		sum.Faults[f.Kind]++
		sum.Injected++
		status := "ok"
		if err != nil {
			status = "error: " + err.Error()
			sum.FaultErrors = append(sum.FaultErrors, fmt.Sprintf("%s: %v", f, err))
		}
		logf("chaos: %s (%v) %s", f, now.Sub(t0).Round(time.Millisecond), status)
	}
	sum.ScheduleTime = time.Since(schedStart)
	sleep(ctx, p.Cooldown)

	// Heal: every worker running, none stopped.
	for _, w := range supervised() {
		w.signal(syscall.SIGCONT)
		w.release()
	}
	logf("chaos: schedule done in %v; stopping producers and draining", sum.ScheduleTime.Round(time.Second))
	stopProducers()
	prodWG.Wait()

	// Drain each lane.
	var drainWG sync.WaitGroup
	for _, l := range lanes {
		drainWG.Add(1)
		go func() {
			defer drainWG.Done()
			l.drain(ctx, p)
		}()
	}
	drainWG.Wait()
	stopBackground()
	for _, l := range lanes {
		l.sample(ctx) // the drained state closes the last recoveries
	}
	for _, w := range workers() {
		w.hold().Stop(30 * time.Second)
	}

	// Check.
	for _, l := range lanes {
		if cl != nil {
			l.workers = cl.all() // its exits are the cluster's
		}
		ls, err := l.check(ctx, p)
		if err != nil {
			return sum, fmt.Errorf("lane %s: %w", l.Name, err)
		}
		sum.Lanes = append(sum.Lanes, ls)
	}
	sum.Wall = time.Since(start)
	return sum, nil
}

func setupLane(ctx context.Context, p Profile, lc Lane, i int, nonce uint32, plan []Fault) (*lane, error) {
	env := p.Env
	l := &lane{Lane: lc}
	l.connector = fmt.Sprintf("chaos-%s-%d-%08x", lc.Name, p.Seed, nonce)
	l.topic = l.connector
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(l.bootstrap(p), ",")...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	// Replication factor -1: the cluster's default (3 on the harness's
	// cluster, 1 on a lone broker).
	resp, err := kadm.NewClient(adm).CreateTopic(cctx, p.Partitions, -1, nil, l.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	var conf map[string]string
	if lc.sink() == SinkClickHouse {
		conf, err = setupClickHouse(cctx, p, l)
	} else {
		conf, err = setupPostgres(ctx, cctx, p, l)
	}
	if err != nil {
		return nil, err
	}
	if needsSinkProxy(plan) {
		if err := l.proxySink(conf); err != nil {
			return nil, err
		}
	}
	if lc.UnsafeNoFencing {
		conf["txsink.test.unsafe.disable.fencing"] = "true"
	}
	if lc.UnsafeNoRecovery {
		conf["txsink.test.unsafe.disable.recovery"] = "true"
	}
	maps.Copy(conf, lc.Config)
	l.conf = conf
	b, _ := json.MarshalIndent(map[string]any{"name": l.connector, "config": conf}, "", "  ")
	l.cfgPath = filepath.Join(env.Dir, lc.Name+"-connector.json")
	if err := os.WriteFile(l.cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	if l.prodLog, err = os.Create(filepath.Join(env.Dir, lc.Name+"-producer.jsonl")); err != nil {
		return nil, err
	}
	l.prod = upstream.New(upstream.Options{
		Name: lc.Name, Bootstrap: l.bootstrap(p), Topic: l.topic, Partitions: p.Partitions,
		Rate: p.Rate, MaxTxn: p.MaxTxn, AbortRatio: p.AbortRatio, BodyBytes: p.BodyBytes,
		Seed: p.Seed + uint64(i) + 1, TransactionalID: "chaos-up-" + l.topic,
		Log: l.prodLog, Logf: env.Logf,
	})
	workerBootstrap := l.bootstrap(p)
	if lc.Bootstrap == "" && env.ProxiedBootstrap != "" {
		workerBootstrap = env.ProxiedBootstrap
	}
	for w := range p.Workers {
		if p.Cluster {
			break // the cluster's workers serve every lane
		}
		id := fmt.Sprintf("w%d", w+1)
		args := []string{"run", "-bootstrap", workerBootstrap, "-config", l.cfgPath, "-worker-id", id, "-log-level", "info"}
		if lc.UnsafeNoFencing || lc.UnsafeNoRecovery {
			args = append(args, "-allow-unsafe-test-settings") // txsink refuses the switches otherwise
		}
		l.workers = append(l.workers, &worker{
			logName: lc.Name + "-" + id, idx: w, id: id, binary: env.Binary, logDir: env.Dir, exits: map[string]int{},
			args: args,
		})
	}
	return l, nil
}

// proxySink puts a fault proxy between the lane's workers and its
// database and points the connector's connection.url at it. The runner's
// own connections (sampler, drain, verify) stay direct.
func (l *lane) proxySink(conf map[string]string) error {
	u, err := url.Parse(conf["connection.url"])
	if err != nil {
		return fmt.Errorf("connection.url: %w", err)
	}
	proto := faultnet.Postgres
	if l.sink() == SinkClickHouse {
		proto = faultnet.ClickHouse
	}
	if l.sinkProxy, err = faultnet.New(l.Name+"-"+l.sink(), "127.0.0.1:0", u.Host, proto); err != nil {
		return err
	}
	u.Host = l.sinkProxy.Addr()
	conf["connection.url"] = u.String()
	return nil
}

// setupPostgres creates the lane's database and table and returns the
// connector's sink settings.
func setupPostgres(ctx, cctx context.Context, p Profile, l *lane) (map[string]string, error) {
	var err error
	newDB := p.Env.NewDatabase
	if l.Lane.NewDatabase != nil {
		newDB = l.Lane.NewDatabase
	}
	if l.db, err = newDB(l.Name); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(l.db)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	if l.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	// No primary key: duplicates stay visible.
	if _, err := l.pool.Exec(cctx, `CREATE TABLE events (id text NOT NULL, seq bigint, body text,
		__connect_topic text, __connect_partition int, __connect_offset bigint)`); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	return map[string]string{
		"name":                   l.connector,
		"connector.class":        "postgres",
		"topics":                 l.topic,
		"connection.url":         l.db,
		"delivery.guarantee":     l.Delivery,
		"pk.mode":                "kafka",
		"table.name.format":      "events",
		"batch.max.records":      "500",
		"batch.linger.ms":        "50",
		"session.timeout.ms":     fmt.Sprint(p.SessionTimeout.Milliseconds()),
		"transaction.timeout.ms": "10000",
		"sink.timeout.ms":        "15000",
	}, nil
}

// setupClickHouse creates the lane's database and table and returns the
// connector's sink settings. exactly_once lanes get a de-duplicating table
// (ReplicatedMergeTree with a ZooKeeper path unique to the database, or
// MergeTree with a non-replicated window on servers with tokens); the
// other lanes a plain MergeTree, which keeps every duplicate visible (the
// server's block de-duplication would otherwise hide some of
// at_least_once's re-inserts by chance, not by design).
func setupClickHouse(cctx context.Context, p Profile, l *lane) (map[string]string, error) {
	che := p.clickHouseOf(l.Lane)
	db, err := che.NewDatabase(l.Name)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	l.db = "clickhouse://" + che.Addr + "/" + db
	l.ch, err = clickhouse.Open(&clickhouse.Options{
		Addr: []string{che.Addr}, Protocol: clickhouse.Native,
		Auth:        clickhouse.Auth{Database: db, Username: che.User, Password: che.Password},
		DialTimeout: 2 * time.Second, MaxOpenConns: 2,
	})
	if err != nil {
		return nil, err
	}
	engine := "MergeTree ORDER BY (__connect_partition, __connect_offset)"
	if l.Delivery == "exactly_once" {
		if che.Replicated {
			engine = fmt.Sprintf("ReplicatedMergeTree('/clickhouse/tables/{shard}/%s/events', '{replica}') ORDER BY (__connect_partition, __connect_offset) SETTINGS replicated_deduplication_window = 1000", db)
		} else {
			engine += " SETTINGS non_replicated_deduplication_window = 1000"
		}
	}
	if err := l.ch.Exec(cctx, "CREATE TABLE events (id String, seq Int64, body String, __connect_topic String, __connect_partition Int32, __connect_offset Int64) ENGINE = "+engine); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	return map[string]string{
		"name":                   l.connector,
		"connector.class":        "clickhouse",
		"topics":                 l.topic,
		"connection.url":         l.db,
		"connection.user":        che.User,
		"connection.password":    che.Password,
		"delivery.guarantee":     l.Delivery,
		"pk.mode":                "kafka",
		"table.name.format":      "events",
		"batch.max.records":      "500",
		"batch.linger.ms":        "100",
		"insert.block.rows":      fmt.Sprint(p.BlockRows),
		"session.timeout.ms":     fmt.Sprint(p.SessionTimeout.Milliseconds()),
		"transaction.timeout.ms": "10000",
		"sink.timeout.ms":        "15000",
	}, nil
}

// offsets reads the lane's stored next offsets and fences (ClickHouse: the
// row with the greatest (fence, next_offset) per partition).
func (l *lane) offsets(ctx context.Context) ([]verify.OffsetSample, error) {
	var got []verify.OffsetSample
	if l.ch != nil {
		rows, err := l.ch.Query(ctx, "SELECT `partition`, argMax(next_offset, (fence, next_offset)), max(fence) FROM txsink_offsets WHERE connector = ? AND topic = ? GROUP BY `partition`", l.connector, l.topic)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			s := verify.OffsetSample{Topic: l.topic}
			var fence uint64
			if err := rows.Scan(&s.Partition, &s.Next, &fence); err != nil {
				return nil, err
			}
			s.Fence = int64(fence)
			got = append(got, s)
		}
		return got, rows.Err()
	}
	rows, err := l.pool.Query(ctx, `SELECT partition, coalesce(next_offset, -1), fence FROM txsink_offsets WHERE connector = $1 AND topic = $2`, l.connector, l.topic)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		s := verify.OffsetSample{Topic: l.topic}
		if err := rows.Scan(&s.Partition, &s.Next, &s.Fence); err != nil {
			return nil, err
		}
		got = append(got, s)
	}
	return got, rows.Err()
}

// sample records the lane's stored offsets and its lag.
func (l *lane) sample(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	got, err := l.offsets(qctx)
	if err != nil {
		return
	}
	now := time.Now()
	for i := range got {
		got[i].At = now
	}
	fr, _ := l.prod.Snapshot()
	var lag int64
	next := map[int32]int64{}
	for _, s := range got {
		next[s.Partition] = s.Next
	}
	for p, f := range fr {
		if n := next[p]; f > n {
			lag += f - max(n, 0)
		}
	}
	l.mu.Lock()
	l.samples = append(l.samples, got...)
	l.maxLag = max(l.maxLag, lag)
	l.mu.Unlock()
}

func (l *lane) hasProgress() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.samples {
		if s.Next > 0 {
			return true
		}
	}
	return false
}

// drain waits until no upstream transaction is open and the sink holds
// every committed record (by its stored offsets).
func (l *lane) drain(ctx context.Context, p Profile) {
	logf := p.Env.Logf
	start := time.Now()
	timeout := p.DrainTimeout
	if l.UnsafeNoRecovery {
		// A negative control without recovery is expected to stall.
		timeout = min(timeout, 20*time.Second)
	}
	deadline := start.Add(timeout)
	sctx, cancel := context.WithTimeout(ctx, p.DrainTimeout+2*time.Minute)
	target, err := upstream.CommittedEnds(sctx, l.bootstrap(p), nil, l.topic, timeout)
	cancel()
	if err != nil {
		logf("chaos: lane %s: scan for the drain target: %v", l.Name, err)
		return
	}
	for {
		if l.reached(ctx, target) {
			logf("chaos: lane %s drained in %v", l.Name, time.Since(start).Round(time.Millisecond))
			l.mu.Lock()
			l.drained = true
			l.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			logf("chaos: lane %s NOT drained within %v (target %v)", l.Name, timeout, target)
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func (l *lane) reached(ctx context.Context, target map[int32]int64) bool {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	samples, err := l.offsets(qctx)
	if err != nil {
		return false
	}
	got := map[int32]int64{}
	for _, s := range samples {
		got[s.Partition] = s.Next
	}
	for p, t := range target {
		if got[p] < t {
			return false
		}
	}
	return true
}

// check runs "txsink verify" on the lane and builds its summary.
func (l *lane) check(ctx context.Context, p Profile) (LaneSummary, error) {
	env := p.Env
	ls := LaneSummary{Name: l.Name, Delivery: l.Delivery, Unsafe: l.UnsafeNoFencing, Exits: map[string]int{}}
	l.mu.Lock()
	ls.Drained, ls.MaxLag = l.drained, l.maxLag
	samples := append([]verify.OffsetSample(nil), l.samples...)
	heals := append([]heal(nil), l.heals...)
	l.mu.Unlock()
	_, st := l.prod.Snapshot()
	ls.Producer = st
	for _, w := range l.workers {
		w.mu.Lock()
		for c, n := range w.exits {
			ls.Exits[c] += n
		}
		ls.FailpointsNotFired += w.notFired
		w.mu.Unlock()
	}
	ls.Recovery = recoveries(samples, heals)

	histPath := filepath.Join(env.Dir, l.Name+"-offsets.jsonl")
	hf, err := os.Create(histPath)
	if err != nil {
		return ls, err
	}
	enc := json.NewEncoder(hf)
	for _, s := range samples {
		_ = enc.Encode(s)
	}
	if err := hf.Close(); err != nil {
		return ls, err
	}
	if err := l.prodLog.Sync(); err != nil {
		return ls, err
	}
	args := []string{"verify", "-bootstrap", l.bootstrap(p), "-config", l.cfgPath,
		"-id-column", "id", "-id-field", "id", "-compare", "seq",
		"-producer-log", l.prodLog.Name(), "-offset-history", histPath,
		"-prepared-grace", "0", "-max-lag", "0", "-output", "json", "-timeout", "5m"}
	vctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(vctx, env.Binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ls.VerifyExit = 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return ls, fmt.Errorf("txsink verify: %w", err)
		}
		ls.VerifyExit = ee.ExitCode()
	}
	_ = os.WriteFile(filepath.Join(env.Dir, l.Name+"-verify.json"), stdout.Bytes(), 0o644)
	if ls.VerifyExit != 0 && ls.VerifyExit != 1 {
		return ls, fmt.Errorf("txsink verify exited %d: %s", ls.VerifyExit, stderr.String())
	}
	var r verify.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return ls, fmt.Errorf("txsink verify output: %w\n%s", err, stdout.String())
	}
	ls.Report = &r
	var text bytes.Buffer
	_ = r.WriteText(&text)
	_ = os.WriteFile(filepath.Join(env.Dir, l.Name+"-verify.txt"), text.Bytes(), 0o644)
	env.Logf("chaos: lane %s (%s%s): txsink verify exit %d\n%s", l.Name, l.Delivery, map[bool]string{true: ", fencing disabled", false: ""}[l.UnsafeNoFencing], ls.VerifyExit, text.String())
	return ls, nil
}

// recoveries measures, per fault kind, the time from a fault's end until
// the sink's stored offsets covered everything upstream had acknowledged at
// that moment. A recovery still running when the next fault started is
// counted as overlapped: its time includes that fault's.
func recoveries(samples []verify.OffsetSample, heals []heal) map[Kind]*Recovery {
	// Group samples by time (one query returns all partitions).
	type snap struct {
		at   time.Time
		next map[int32]int64
	}
	var snaps []snap
	for _, s := range samples {
		if len(snaps) == 0 || !snaps[len(snaps)-1].at.Equal(s.At) {
			snaps = append(snaps, snap{at: s.At, next: map[int32]int64{}})
		}
		snaps[len(snaps)-1].next[s.Partition] = s.Next
	}
	out := map[Kind]*Recovery{}
	for _, h := range heals {
		r := out[h.kind]
		if r == nil {
			r = &Recovery{}
			out[h.kind] = r
		}
		i := sort.Search(len(snaps), func(i int) bool { return !snaps[i].at.Before(h.at) })
		found := false
		for ; i < len(snaps); i++ {
			ok := true
			for p, f := range h.frontier {
				if snaps[i].next[p] < f {
					ok = false
					break
				}
			}
			if ok {
				r.add(snaps[i].at.Sub(h.at))
				if !h.next.IsZero() && snaps[i].at.After(h.next) {
					r.Overlapped++
				}
				found = true
				break
			}
		}
		if !found {
			r.NotRecovered++
		}
	}
	return out
}
