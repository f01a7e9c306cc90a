package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// How long the runner waits for an armed failpoint to fire, and for a
// worker to stop on SIGTERM.
const (
	failpointWait = 45 * time.Second
	termWait      = 30 * time.Second
)

// apply injects one fault and returns once it is healed (the worker is
// running again, the service is back).
func apply(ctx context.Context, p Profile, lanes []*lane, cl *cluster, f Fault) error {
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
		if p.Env.Postgres == nil {
			return errors.New("no PostgreSQL controller")
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return p.Env.Postgres.Restart(rctx, true)
	case PostgresTerminate:
		return forLanes(lanes, func(l *lane) error {
			if l.sink() != SinkPostgres {
				return nil
			}
			return terminateBackends(ctx, l.db)
		})
	case ClickHouseRestart:
		if p.Env.ClickHouse == nil || p.Env.ClickHouse.Server == nil {
			return errors.New("no ClickHouse controller")
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return p.Env.ClickHouse.Server.Restart(rctx)
	case KafkaRestart:
		if p.Env.Broker == nil {
			return errors.New("no Kafka controller")
		}
		rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		if err := p.Env.Broker.Stop(rctx); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		return p.Env.Broker.Start(rctx)
	case ProducerKill:
		for _, l := range lanes {
			l.prod.Abandon()
		}
		return nil
	case RESTPause, RESTStop, RESTRestart, RESTConfig:
		if p.Env.REST == nil {
			return errors.New("REST fault planned without a REST driver")
		}
		return forLanes(lanes, func(l *lane) error {
			info := LaneInfo{Name: l.Name, Connector: l.connector, Topic: l.topic, DatabaseURL: l.db, ConfigPath: l.cfgPath}
			for _, w := range l.workers {
				info.WorkerIDs = append(info.WorkerIDs, w.id)
			}
			return p.Env.REST.Inject(ctx, info, f)
		})
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

func forLanes(lanes []*lane, fn func(*lane) error) error {
	errs := make([]error, len(lanes))
	var wg sync.WaitGroup
	for i, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(l); err != nil {
				errs[i] = fmt.Errorf("lane %s: %w", l.Name, err)
			}
		}()
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
		kill(cur)
		sleep(ctx, f.Pause)
		_, err := w.start("")
		return err
	case TermWorker:
		graceful := stopGracefully(cur, termWait)
		sleep(ctx, f.Pause)
		if _, err := w.start(""); err != nil {
			return err
		}
		if !graceful {
			return fmt.Errorf("%s did not stop within %v of SIGTERM (killed)", w.id, termWait)
		}
		return nil
	case FailpointKill:
		stopGracefully(cur, termWait)
		spec := fmt.Sprintf("%s:%d", killPoint, f.Hit)
		armed, err := w.start(spec)
		if err != nil {
			return err
		}
		fired := armed.wait(failpointWait)
		if !fired {
			kill(armed)
			w.mu.Lock()
			w.notFired++
			w.mu.Unlock()
		}
		if _, err := w.start(""); err != nil {
			return err
		}
		if fired && armed.exitCode() != -1 {
			return fmt.Errorf("%s exited with %d instead of being killed at %s", w.id, armed.exitCode(), spec)
		}
		return nil
	case Zombie:
		if cur == nil || cur.exited() {
			return nil
		}
		_ = cur.cmd.Process.Signal(syscall.SIGSTOP)
		sleep(ctx, f.Hold)
		_ = cur.cmd.Process.Signal(syscall.SIGCONT)
		return nil
	case ZombieFailpoint:
		stopGracefully(cur, termWait)
		spec := fmt.Sprintf("%s:%d:stop", stopPoint, f.Hit)
		armed, err := w.start(spec)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(failpointWait)
		for procState(armed.cmd.Process.Pid) != "T" {
			if armed.exited() || time.Now().After(deadline) {
				w.mu.Lock()
				w.notFired++
				w.mu.Unlock()
				// Never leave an armed stop behind: it could freeze the
				// worker during the drain.
				stopGracefully(armed, termWait)
				_, err := w.start("")
				return err
			}
			sleep(ctx, 100*time.Millisecond)
		}
		sleep(ctx, f.Hold)
		_ = armed.cmd.Process.Signal(syscall.SIGCONT)
		return nil
	}
	return fmt.Errorf("not a worker fault: %s", f.Kind)
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
