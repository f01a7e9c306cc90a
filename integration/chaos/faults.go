package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/integration/faultnet"
	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/internal/verify"
	"github.com/txsink/txsink/offsets"
)

// How long the runner waits for an armed failpoint to fire, and for a
// worker to stop on SIGTERM.
const (
	failpointWait = 45 * time.Second
	// takeoverWait bounds the wait, after an aimed zombie's hold, for the
	// lane's other workers to write past what it holds (tookOver): a
	// condition, so it costs nothing when they do, and long enough for a
	// rebalance on a loaded machine.
	takeoverWait = 2 * time.Minute
	termWait     = 30 * time.Second
)

// apply injects one fault and returns once it is healed (the worker is
// running again, the service is back).
func apply(ctx context.Context, p Profile, lanes []*lane, cl *cluster, f Fault) error {
	if len(f.Lanes) > 0 {
		var only []*lane
		for _, l := range lanes {
			if slices.Contains(f.Lanes, l.Name) {
				only = append(only, l)
			}
		}
		lanes = only
	}
	switch f.Kind {
	case KillWorker, TermWorker, FailpointKill, Zombie, ZombieFailpoint:
		if cl != nil {
			// One process runs every lane's tasks: its failpoints fire in
			// whichever lane passes them first.
			return applyWorker(ctx, cl.all()[f.Worker], f, f.Point, f.Point)
		}
		return forLanes(lanes, func(l *lane) error {
			return applyWorker(ctx, l.workers[f.Worker], f, pointFor(l.sink(), l.Delivery, f.Point), stopPointFor(l.sink(), l.Delivery, f.Point))
		})
	case LaneFailpoint, LaneZombie:
		if len(lanes) != 1 {
			return fmt.Errorf("%s names %d lanes, want one", f.Kind, len(lanes))
		}
		return applyLane(ctx, p.Env.Logf, cl, lanes[0], f)
	case WorkerJoin, WorkerLeave:
		if cl == nil {
			return errors.New("worker joins and leaves need a cluster profile")
		}
		if f.Kind == WorkerJoin {
			jctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			return cl.join(jctx)
		}
		if err := cl.leave(); !errors.Is(err, errNothingToLeave) {
			return err
		}
		return nil
	case PostgresCrash:
		dbs := p.postgresServers()
		if len(dbs) == 0 {
			return errors.New("no PostgreSQL controller")
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return parallel(len(dbs), func(i int) error { return dbs[i].Restart(rctx, true) })
	case PostgresTerminate:
		return forLanes(lanes, func(l *lane) error {
			if l.sink() != SinkPostgres {
				return nil
			}
			return terminateBackends(ctx, l.db)
		})
	case ClickHouseRestart:
		servers := p.clickHouseServers()
		if len(servers) == 0 {
			return errors.New("no ClickHouse controller")
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return parallel(len(servers), func(i int) error { return servers[i].Restart(rctx) })
	case KafkaRestart:
		return restartBrokers(ctx, p, f)
	case CutCommit:
		return forLanes(lanes, func(l *lane) error { return cutSink(ctx, p, l, f) })
	case CutEndTxn, CutTxnOffsets:
		return forLanes(lanes, func(l *lane) error { return cutKafka(ctx, p, l, f) })
	case NetLatency, NetHalfOpen, NetBandwidth:
		return netFault(ctx, p, lanes, f)
	case BrokerLeader, BrokerGroupCoordinator, BrokerTxnCoordinator, ControllerFailover, RollingRestart:
		return brokerFault(ctx, p, lanes, f)
	case PostgresFailover:
		return failover(ctx, p, lanes, f)
	case DiskFull:
		if p.Env.Disk == nil {
			return errors.New("no small disk")
		}
		if err := p.Env.Disk.FillDisk(ctx, 0); err != nil {
			return err
		}
		// The server may free space of its own meanwhile (temporary
		// files, a truncated relation): the ballast takes it back every
		// second while the fault holds.
		for end := time.Now().Add(f.Hold); ctx.Err() == nil; {
			left := time.Until(end)
			if left <= 0 {
				break
			}
			sleep(ctx, min(left, time.Second))
			if time.Until(end) > 0 {
				if err := p.Env.Disk.FillDisk(ctx, 0); err != nil {
					_ = p.Env.Disk.FreeDisk(context.WithoutCancel(ctx))
					return err
				}
			}
		}
		return p.Env.Disk.FreeDisk(context.WithoutCancel(ctx))
	case ProducerKill:
		for _, l := range lanes {
			l.prod.Kill()
		}
		return nil
	case RESTPause, RESTStop, RESTRestart, RESTConfig, RESTOffsets, RESTRecreate:
		if p.Env.REST == nil {
			return errors.New("REST fault planned without a REST driver")
		}
		return forLanes(lanes, func(l *lane) error {
			info := LaneInfo{Name: l.Name, Connector: l.connector, Topic: l.topic, DatabaseURL: l.db, ConfigPath: l.cfgPath,
				Tasks: p.Workers}
			for _, w := range l.workers {
				info.WorkerIDs = append(info.WorkerIDs, w.id)
			}
			if cl != nil {
				info.URLs = cl.restURLs()
			}
			return p.Env.REST.Inject(ctx, info, f)
		})
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// forLanes runs fn on every lane at once.
func forLanes(lanes []*lane, fn func(*lane) error) error {
	return parallel(len(lanes), func(i int) error {
		if err := fn(lanes[i]); err != nil {
			return fmt.Errorf("lane %s: %w", lanes[i].Name, err)
		}
		return nil
	})
}

// parallel runs fn(0) … fn(n-1) at once and joins their errors.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// applyWorker injects a worker fault; killPoint and stopPoint are the
// failpoints its FailpointKill and ZombieFailpoint arm.
func applyWorker(ctx context.Context, w *worker, f Fault, killPoint, stopPoint string) error {
	cur := w.hold()
	defer w.release()
	switch f.Kind {
	case KillWorker:
		cur.Kill()
		sleep(ctx, f.Pause)
		_, err := w.start("")
		return err
	case TermWorker:
		graceful := cur.Stop(termWait)
		sleep(ctx, f.Pause)
		if _, err := w.start(""); err != nil {
			return err
		}
		if !graceful {
			return fmt.Errorf("%s did not stop within %v of SIGTERM (killed)", w.id, termWait)
		}
		return nil
	case FailpointKill:
		cur.Stop(termWait)
		spec := fmt.Sprintf("%s:%d", killPoint, f.Hit)
		armed, err := w.start(spec)
		if err != nil {
			return err
		}
		fired := armed.Wait(failpointWait)
		if !fired {
			armed.Kill()
			w.mu.Lock()
			w.notFired++
			w.mu.Unlock()
		}
		if _, err := w.start(""); err != nil {
			return err
		}
		if fired && armed.ExitCode() != -1 {
			return fmt.Errorf("%s exited with %d instead of being killed at %s", w.id, armed.ExitCode(), spec)
		}
		return nil
	case Zombie:
		if cur == nil || cur.Exited() {
			return nil
		}
		cur.Signal(syscall.SIGSTOP)
		sleep(ctx, f.Hold)
		cur.Signal(syscall.SIGCONT)
		return nil
	case ZombieFailpoint:
		cur.Stop(termWait)
		spec := fmt.Sprintf("%s:%d:stop", stopPoint, f.Hit)
		armed, err := w.start(spec)
		if err != nil {
			return err
		}
		if !waitStopped(ctx, armed, failpointWait) {
			w.mu.Lock()
			w.notFired++
			w.mu.Unlock()
			// Never leave an armed stop behind: it could freeze the
			// worker during the drain.
			armed.Stop(termWait)
			_, err := w.start("")
			return err
		}
		sleep(ctx, f.Hold)
		armed.Signal(syscall.SIGCONT)
		return nil
	}
	return fmt.Errorf("not a worker fault: %s", f.Kind)
}

// applyLane injects a LaneFailpoint or LaneZombie: it arms the failpoint,
// scoped to the lane's connector, in place in a worker running a task of
// the lane (the cluster's, from the connector's status; else the lane's
// own f.Worker), and waits for it to fire. A worker whose task moved or
// whose partitions gave it nothing to do in that time is disarmed and the
// next is tried; the fault counts as not fired only when none fired.
func applyLane(ctx context.Context, logf func(string, ...any), cl *cluster, l *lane, f Fault) error {
	spec := fmt.Sprintf("%s@%s:%d", pointFor(l.sink(), l.Delivery, f.Point), l.connector, f.Hit)
	if f.Kind == LaneZombie {
		spec = fmt.Sprintf("%s@%s:%d:stop", stopPointFor(l.sink(), l.Delivery, f.Point), l.connector, f.Hit)
	}
	// Between two faults the tasks may be moving (a worker just restarted
	// rejoins): the status is read again until a task runs somewhere.
	deadline := time.Now().Add(2 * failpointWait)
	var tried []*worker
	var statusErr error
	for len(tried) < 3 && time.Now().Before(deadline) && ctx.Err() == nil {
		var candidates []*worker
		if cl != nil {
			ws, err := cl.taskWorkers(ctx, l.connector)
			statusErr = err
			for _, w := range ws {
				// A process just started may not have installed its
				// SIGUSR1 handler yet (the signal would end it), and the
				// status may still name its last incarnation.
				if !slices.Contains(tried, w) && w.uptime() >= 2*time.Second {
					candidates = append(candidates, w)
				}
			}
		} else {
			// "txsink run" lanes: the lane's own workers, from f.Worker
			// on; one whose partitions gave it nothing to do is left for
			// the next.
			for k := range l.workers {
				w := l.workers[(f.Worker+k)%len(l.workers)]
				if !slices.Contains(tried, w) && w.uptime() >= 2*time.Second {
					candidates = append(candidates, w)
				}
			}
			if len(tried) == len(l.workers) {
				break
			}
		}
		if len(candidates) == 0 {
			sleep(ctx, time.Second)
			continue
		}
		w := candidates[0]
		tried = append(tried, w)
		fired, err := armLane(ctx, logf, w, l, spec, f, failpointWait/3)
		if err != nil || fired {
			return err
		}
	}
	for _, w := range tried {
		w.mu.Lock()
		w.notFired++
		w.mu.Unlock()
	}
	if len(tried) == 0 && statusErr != nil {
		return fmt.Errorf("%s: no worker found running a task of the lane: %w", spec, statusErr)
	}
	return fmt.Errorf("%s fired in none of the %d workers tried within %v", spec, len(tried), 2*failpointWait)
}

// armLane arms spec in w's running incarnation, waits up to wait for it
// to fire and heals: a killed worker is restarted clean, a stopped one is
// continued once held Hold and once the lane's other workers took over
// (see tookOver). Not fired, the point is disarmed.
func armLane(ctx context.Context, logf func(string, ...any), w *worker, l *lane, spec string, f Fault, wait time.Duration) (bool, error) {
	cur := w.hold()
	defer w.release()
	if cur == nil || cur.Exited() {
		return false, nil
	}
	if err := w.arm(cur, spec); err != nil {
		return false, err
	}
	if f.Kind == LaneZombie {
		if !waitStopped(ctx, cur, wait) {
			return false, w.arm(cur, "")
		}
		frozen := time.Now()
		before, err := l.offsets(ctx)
		if err != nil {
			cur.Signal(syscall.SIGCONT)
			return true, err
		}
		sleep(ctx, f.Hold)
		if !tookOver(ctx, l, before, takeoverWait) {
			// Continued now, the zombie's write could come before the
			// others' and be no duplicate: the control would have no
			// window, and its passing would prove nothing. The fault
			// fails instead (the test cannot tell, so it says so).
			cur.Signal(syscall.SIGCONT)
			return true, fmt.Errorf("%s: no stored offset of lane %s moved past its value at the freeze within %v: the zombie's window did not open",
				spec, l.Name, time.Since(frozen).Round(time.Second))
		}
		cur.Signal(syscall.SIGCONT)
		return true, nil
	}
	if !cur.Wait(wait) {
		if err := w.arm(cur, ""); err != nil || !cur.Wait(time.Second) {
			return false, err
		}
	}
	_, err := w.start("")
	if err == nil && cur.ExitCode() != -1 {
		err = fmt.Errorf("%s exited with %d instead of being killed at %s", w.id, cur.ExitCode(), spec)
	}
	return true, err
}

// tookOver waits up to d until every partition's stored next offset in
// the lane's sink moved past before's: with records flowing on every
// partition, the frozen worker's partitions were taken over and written
// past what it holds, so its late write is a duplicate unless the sink's
// fence refuses it.
func tookOver(ctx context.Context, l *lane, before []verify.OffsetSample, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil {
		now, err := l.offsets(ctx)
		if err == nil && movedPast(before, now) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return false
}

// lostWait bounds how long failover waits, after its hold, for a lane to
// commit something that the paused standby does not have: a frozen
// worker's session timeout and the rebalance after it.
const lostWait = 2 * time.Minute

// committedPast waits up to d until some partition's stored next offset in
// the lane's sink moved past before's.
func committedPast(ctx context.Context, l *lane, before []verify.OffsetSample, d time.Duration) bool {
	was := map[int32]int64{}
	for _, s := range before {
		was[s.Partition] = s.Next
	}
	deadline := time.Now().Add(d)
	for ctx.Err() == nil {
		now, err := l.offsets(ctx)
		if err == nil && slices.ContainsFunc(now, func(s verify.OffsetSample) bool {
			n, ok := was[s.Partition]
			return s.Next >= 0 && (!ok || s.Next > n)
		}) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return false
}

// movedPast reports whether every partition of before has a greater next
// offset in now.
func movedPast(before, now []verify.OffsetSample) bool {
	next := map[int32]int64{}
	for _, s := range now {
		next[s.Partition] = s.Next
	}
	for _, s := range before {
		if n, ok := next[s.Partition]; !ok || n <= s.Next {
			return false
		}
	}
	return len(before) > 0
}

// terminateBackends ends the connector sessions in the lane's database.
func terminateBackends(ctx context.Context, dbURL string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(cctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'txsink/%' AND pid <> pg_backend_pid()`)
	return err
}

// restartBrokers kills every broker a KafkaRestart hits (Env.Broker and
// the lanes' own), keeps them down for f.Hold and starts them again.
func restartBrokers(ctx context.Context, p Profile, f Fault) error {
	var brokers []Broker
	if p.Env.Broker != nil {
		brokers = append(brokers, p.Env.Broker)
	}
	for _, l := range p.Lanes {
		if l.Broker != nil && !slices.Contains(brokers, l.Broker) {
			brokers = append(brokers, l.Broker)
		}
	}
	if len(brokers) == 0 {
		return errors.New("no Kafka controller")
	}
	rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	return parallel(len(brokers), func(i int) error {
		if err := brokers[i].Stop(rctx); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		return brokers[i].Start(rctx)
	})
}

// sinkCommitRequest is the request whose answer CutCommit loses in a lane.
func sinkCommitRequest(l *lane) faultnet.Request {
	switch {
	case l.sink() == SinkClickHouse:
		return faultnet.ClickHouseInsert("events")
	case l.Delivery == "exactly_once":
		return faultnet.PostgresQuery("COMMIT PREPARED")
	}
	return faultnet.PostgresQuery("COMMIT")
}

// newCut returns the cut f asks for.
func newCut(req faultnet.Request, f Fault) *faultnet.Cut {
	c := faultnet.NewCut(req, f.Hit)
	if f.Request {
		c.LoseRequest()
	}
	return c
}

// cutSink loses the answer to (or with f.Request, the request of) the
// lane's f.Hit-th sink commit from now.
func cutSink(ctx context.Context, p Profile, l *lane, f Fault) error {
	if l.sinkProxy == nil {
		return errors.New("the lane's database has no fault proxy")
	}
	return awaitCut(ctx, p.CutWait, newCut(sinkCommitRequest(l), f), l.sinkProxy)
}

// cutKafka loses the answer to an exactly_once lane's f.Hit-th EndTxn or
// TxnOffsetCommit from now, on whichever broker coordinates it.
func cutKafka(ctx context.Context, p Profile, l *lane, f Fault) error {
	if l.Delivery != "exactly_once" || l.Bootstrap != "" {
		return nil // no Kafka transaction, or not behind the proxies
	}
	if p.Env.KafkaCluster == nil {
		return errors.New("no Kafka cluster with fault proxies")
	}
	key := faultnet.APIKeyEndTxn
	if f.Kind == CutTxnOffsets {
		key = faultnet.APIKeyTxnOffsetCommit
	}
	// Transactional ids are txsink-<connector>-<task>-<worker id>.
	return awaitCut(ctx, p.CutWait, newCut(faultnet.KafkaRequest(key, "txsink-"+l.connector+"-"), f), p.Env.KafkaCluster.Proxies()...)
}

// awaitCut arms c on the proxies and waits up to wait until it happened.
func awaitCut(ctx context.Context, wait time.Duration, c *faultnet.Cut, proxies ...*faultnet.Proxy) error {
	for _, px := range proxies {
		if err := px.Arm(c); err != nil {
			return err
		}
		defer px.Disarm(c)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.Done():
	case <-t.C:
		return fmt.Errorf("%s: not within %v (%d matching requests seen)", c, wait, c.Matches())
	case <-ctx.Done():
		return ctx.Err()
	}
	if !c.ReplySeen() && !c.LosesRequest() {
		return fmt.Errorf("%s: the connection was cut before the server answered", c)
	}
	return nil
}

// netFault applies a toxic to every proxy of f.Target for f.Hold.
func netFault(ctx context.Context, p Profile, lanes []*lane, f Fault) error {
	var proxies []*faultnet.Proxy
	switch f.Target {
	case TargetKafka:
		if p.Env.KafkaCluster != nil {
			proxies = p.Env.KafkaCluster.Proxies()
		}
	case TargetPostgres, TargetClickHouse:
		for _, l := range lanes {
			if l.sinkProxy != nil && l.sink() == f.Target {
				proxies = append(proxies, l.sinkProxy)
			}
		}
	}
	if len(proxies) == 0 {
		return fmt.Errorf("no fault proxy for target %q", f.Target)
	}
	var err error
	for _, px := range proxies {
		switch f.Kind {
		case NetLatency:
			err = errors.Join(err, px.Latency(f.Latency, f.Latency/10))
		case NetHalfOpen:
			err = errors.Join(err, px.HalfOpen())
		case NetBandwidth:
			err = errors.Join(err, px.Bandwidth(f.Rate))
		}
	}
	sleep(ctx, f.Hold)
	for _, px := range proxies {
		px.Heal(context.WithoutCancel(ctx))
	}
	return err
}

// brokerFault kills the broker a cluster fault aims at (or restarts them
// all in turn) and returns once the cluster is in sync again.
func brokerFault(ctx context.Context, p Profile, lanes []*lane, f Fault) error {
	c := p.Env.KafkaCluster
	if c == nil {
		return errors.New("no Kafka cluster")
	}
	// A broker's start gets the bound of a first start (a SIGKILLed one
	// recovers its logs first; under load that has taken minutes), a
	// rolling restart that bound for each broker.
	bound := harness.StartTimeout
	if f.Kind == RollingRestart {
		bound *= time.Duration(len(c.Brokers()))
	}
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if f.Kind == RollingRestart {
		return c.RollingRestart(rctx)
	}
	var first, firstEO *lane
	for _, l := range lanes {
		if l.Bootstrap != "" {
			continue
		}
		if first == nil {
			first = l
		}
		if firstEO == nil && l.Delivery == "exactly_once" {
			firstEO = l
		}
	}
	var id int32
	var err error
	switch f.Kind {
	case BrokerLeader:
		if first == nil {
			return errors.New("no lane on the cluster")
		}
		id, err = c.Leader(rctx, first.topic, int32(f.Hit)%p.Partitions)
	case BrokerGroupCoordinator:
		if first == nil {
			return errors.New("no lane on the cluster")
		}
		id, err = c.GroupCoordinator(rctx, "txsink-"+first.connector)
	case BrokerTxnCoordinator:
		if firstEO == nil {
			firstEO = first
		}
		if firstEO == nil {
			return errors.New("no lane on the cluster")
		}
		id, err = c.TxnCoordinator(rctx, fmt.Sprintf("txsink-%s-0-%s", firstEO.connector, firstEO.workers[0].id))
	case ControllerFailover:
		id, err = c.Controller(rctx)
	}
	if err != nil {
		return fmt.Errorf("finding the broker to kill: %w", err)
	}
	p.Env.Logf("chaos: %s: killing broker %d", f.Kind, id)
	return c.Restart(rctx, id, f.Hold)
}

// failover freezes worker f.Worker of the exactly_once PostgreSQL lanes
// right after a decision with batches prepared on the primary, pauses
// replication for f.Hold, fails over and restarts the frozen workers
// clean: the new primary's recovery must resolve what they left. With
// synchronous replication (f.Hold 0), every transaction prepared on the
// old primary while they were frozen must be prepared on the new one.
func failover(ctx context.Context, p Profile, lanes []*lane, f Fault) error {
	fo := p.Env.Failover
	if fo == nil {
		return errors.New("no replicated PostgreSQL")
	}
	type frozenWorker struct {
		l    *lane
		w    *worker
		p    *harness.Process
		db   string
		gids []string // prepared on the old primary while frozen
	}
	var frozen []*frozenWorker
	defer func() {
		for _, fw := range frozen {
			fw.p.Kill()
			_, _ = fw.w.start("")
			fw.w.release()
		}
	}()
	var errs []error
	for _, l := range lanes {
		if l.sink() != SinkPostgres || l.Delivery != "exactly_once" {
			continue
		}
		u, err := url.Parse(l.db)
		if err != nil {
			return err
		}
		fw := &frozenWorker{l: l, w: l.workers[f.Worker], db: strings.TrimPrefix(u.Path, "/")}
		fw.w.hold().Stop(termWait)
		frozen = append(frozen, fw)
		// A decided round may have had nothing left prepared (a prepare
		// failed): freeze at the next one then.
		for try := 1; try <= 3 && len(fw.gids) == 0; try++ {
			if fw.p != nil {
				fw.p.Kill()
			}
			if fw.p, err = fw.w.start(fmt.Sprintf("%s:%d:stop", failpoint.AfterDecide, try)); err != nil {
				return err
			}
			if !waitStopped(ctx, fw.p, failpointWait) {
				continue
			}
			// Only the frozen worker's batches: the lane's other workers
			// go on, and a transaction of theirs can be listed prepared
			// while PREPARE still waits for the standby, before the
			// client knows it (CI once saw two such, from the other
			// worker's partitions, missing on the new primary).
			all, err := fo.PreparedOnPrimary(ctx, fw.db)
			if err != nil {
				return err
			}
			owned, err := fw.w.owned()
			if err != nil {
				return err
			}
			fw.gids = nil
			for _, g := range all {
				ps, err := gidPartitions(ctx, l.db, g)
				if err != nil {
					return err
				}
				if len(ps) > 0 && !slices.ContainsFunc(ps, func(p int32) bool { return !owned[p] }) {
					fw.gids = append(fw.gids, g)
				}
			}
		}
		if len(fw.gids) == 0 {
			errs = append(errs, fmt.Errorf("lane %s: %s never stopped after a decision with batches prepared", l.Name, fw.w.id))
		}
	}
	if f.Hold > 0 {
		if err := fo.PauseReplication(ctx); err != nil {
			return fmt.Errorf("pausing replication: %w", err)
		}
		// What the standby has is at most what the primary has now.
		paused := map[*lane][]verify.OffsetSample{}
		for _, l := range lanes {
			if l.sink() != SinkPostgres {
				continue
			}
			s, err := l.offsets(ctx)
			if err != nil {
				return fmt.Errorf("lane %s: stored offsets at the pause: %w", l.Name, err)
			}
			paused[l] = s
		}
		sleep(ctx, f.Hold)
		// Each lane must have committed on the primary alone, or the
		// failover loses nothing of it: a lane's other worker can be held
		// by a rebalance that waits for the frozen one until its session
		// times out (CI once saw the eo lane write nothing in the 8 s).
		// The sample that shows it is recorded for the checker.
		for l, before := range paused {
			t0 := time.Now()
			if !committedPast(ctx, l, before, lostWait) {
				errs = append(errs, fmt.Errorf("lane %s committed nothing on the primary in %v with replication paused", l.Name, f.Hold+lostWait))
				continue
			}
			l.sample(ctx)
			p.Env.Logf("chaos: pg-failover: lane %s committed on the primary alone (%v after the hold)", l.Name, time.Since(t0).Round(time.Millisecond))
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := fo.Failover(fctx); err != nil {
		return errors.Join(append(errs, fmt.Errorf("failover: %w", err))...)
	}
	// The frozen workers' partitions stay theirs until the session
	// timeout, so what they left prepared is still there for the next
	// owner's recovery to resolve.
	for _, fw := range frozen {
		gids, err := fo.PreparedOnStandby(fctx, fw.db)
		if err != nil {
			errs = append(errs, fmt.Errorf("lane %s: prepared transactions on the new primary: %w", fw.l.Name, err))
			continue
		}
		missing := slices.DeleteFunc(slices.Clone(fw.gids), func(g string) bool { return slices.Contains(gids, g) })
		p.Env.Logf("chaos: pg-failover: lane %s: prepared on the old primary %v, on the new %v", fw.l.Name, fw.gids, gids)
		if f.Hold == 0 && len(missing) > 0 {
			errs = append(errs, fmt.Errorf("lane %s: prepared transactions lost in the failover: %v", fw.l.Name, missing))
		}
	}
	return errors.Join(errs...)
}

// waitStopped waits up to d for p to be stopped (SIGSTOP by a failpoint).
func waitStopped(ctx context.Context, p *harness.Process, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for p.State() != "T" {
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return true
}

// gidPartitions returns the partitions of a PostgreSQL sink's prepared
// transaction gid in the database at dbURL: a batch's own
// (gidPartition), or a round's, from the sink's membership table (none:
// not the sink's).
func gidPartitions(ctx context.Context, dbURL, gid string) ([]int32, error) {
	if p, ok := gidPartition(gid); ok {
		return []int32{p}, nil
	}
	if !strings.HasPrefix(gid, postgres.RoundGIDPrefix) {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT partition FROM "+offsets.DefaultTable+"_rounds WHERE gid = $1", gid)
	if err != nil {
		return nil, fmt.Errorf("the batches of %s: %w", gid, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// gidPartition is the partition of a PostgreSQL sink's prepared transaction
// id, txsink1_<connector hash>_<topic hash>_<partition>_<first>_<last>.
func gidPartition(gid string) (int32, bool) {
	f := strings.Split(gid, "_")
	if len(f) != 6 || f[0] != "txsink1" {
		return 0, false
	}
	p, err := strconv.ParseInt(f[3], 10, 32)
	return int32(p), err == nil
}
