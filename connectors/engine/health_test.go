package engine_test

// Health that tells (issue 27): a task that waits for a dependency is
// RUNNING with a waiting detail naming the cause, in the status, in
// txsink_task_waiting and in Engine.Waiting (GET /health); never FAILED.
// On kfake with the in-memory sink, through the engine.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/twophase"
)

// healthEngine is an engine over the rig's cluster with a fast restart
// policy and its own metrics registry.
type healthEngine struct {
	*engine.Engine
	reg *prometheus.Registry
}

func newHealthEngine(t *testing.T, addrs []string, spec connectors.Spec) healthEngine {
	t.Helper()
	reg := &connectors.Registry{}
	if err := reg.Register(spec); err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	level := slog.LevelError
	if os.Getenv("TXSINK_DRIVER_DEBUG") != "" {
		level = slog.LevelDebug
	}
	e, err := engine.New(reg, engine.Options{
		WorkerID: "w1", Bootstrap: addrs, Registerer: prom,
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Restart: engine.RestartPolicy{Enabled: true, Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return healthEngine{e, prom}
}

func (h healthEngine) run(name, topic, delivery string) {
	raw := map[string]string{
		"name": name, "connector.class": "memory", "topics": topic,
		"delivery.guarantee": delivery, "batch.max.records": "30", "batch.linger.ms": "5",
		"session.timeout.ms": "3000", "shutdown.grace.ms": "2000",
	}
	h.Apply(context.Background(), name, engine.Config{Raw: raw, Target: engine.TargetRunning})
}

// task0 returns task 0's status.
func (h healthEngine) task0(t *testing.T, name string) engine.TaskStatus {
	t.Helper()
	st, ok := h.Status(context.Background(), name)
	if !ok || len(st.Tasks) != 1 {
		t.Fatalf("status of %s: %+v", name, st)
	}
	return st.Tasks[0]
}

// gauge returns the value of a metric with the given labels (false when
// there is no such series).
func (h healthEngine) gauge(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// waitUntil checks cond until it holds, failing the test when d passes
// without it. What these tests wait for (a waiting detail, a metric, a
// status) has no event of its own to wake on, so cond is checked again
// at every tick of a 20 ms ticker; d is a bound, not a wait.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			if ok, why = cond(); !ok {
				t.Fatalf("%s: not within %s: %s", what, d, why)
			}
			return
		}
	}
}

// waitingFor reports whether the task is RUNNING and waits for cause,
// with an error containing want; and that the metric and Engine.Waiting
// say so too.
func (h healthEngine) waitingFor(t *testing.T, name string, cause engine.Cause, want string) (bool, string) {
	ts := h.task0(t, name)
	if ts.State != engine.StateRunning {
		return false, fmt.Sprintf("task is %s (trace %q)", ts.State, ts.Trace)
	}
	var w *engine.Waiting
	for i := range ts.Waits {
		if ts.Waits[i].Cause == cause {
			w = &ts.Waits[i]
		}
	}
	if w == nil || !strings.Contains(w.Error, want) {
		return false, fmt.Sprintf("waits %+v, want %s with %q", ts.Waits, cause, want)
	}
	if ts.Waiting == nil {
		return false, "Waits set but not Waiting"
	}
	if v, ok := h.gauge(t, "txsink_task_waiting", "connector", name, "task", "0", "cause", string(cause)); !ok || v != 1 {
		return false, fmt.Sprintf("txsink_task_waiting{cause=%s} = %v (%v), want 1", cause, v, ok)
	}
	for _, tw := range h.Waiting() {
		if tw.Connector == name && tw.Task == 0 && tw.Cause == cause {
			return true, ""
		}
	}
	return false, fmt.Sprintf("Engine.Waiting %+v misses it", h.Waiting())
}

// notWaiting reports whether the task is RUNNING with no waiting cause
// and every txsink_task_waiting series of it is 0.
func (h healthEngine) notWaiting(t *testing.T, name string) (bool, string) {
	ts := h.task0(t, name)
	if ts.State != engine.StateRunning || ts.Waiting != nil || len(ts.Waits) > 0 {
		return false, fmt.Sprintf("task %s, waits %+v", ts.State, ts.Waits)
	}
	for _, c := range engine.Causes {
		if v, ok := h.gauge(t, "txsink_task_waiting", "connector", name, "task", "0", "cause", string(c)); !ok || v != 0 {
			return false, fmt.Sprintf("txsink_task_waiting{cause=%s} = %v (%v), want 0", c, v, ok)
		}
	}
	return true, ""
}

// TestHealthDatabaseDownAtStart: a sink whose database cannot be reached
// when the connector starts leaves its task RUNNING, waiting for the
// database with the error (before: FAILED, which TxsinkTaskFailed pages
// on); once the database answers, the connector opens by itself and
// drains.
func TestHealthDatabaseDownAtStart(t *testing.T) {
	r := newMemRig(t, 2, 20)
	var down atomic.Bool
	down.Store(true)
	var tries atomic.Int32
	spec := r.spec(nil)
	open := spec.New
	spec.New = func(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
		tries.Add(1)
		if down.Load() {
			return nil, fmt.Errorf("connect to the database: %w: dial tcp 127.0.0.1:1: connection refused", connectors.ErrSinkUnavailable)
		}
		return open(ctx, env, c, v)
	}
	h := newHealthEngine(t, r.c.ListenAddrs(), spec)
	h.run("dbstart", r.topic, "exactly_once")
	waitUntil(t, 30*time.Second, "waiting for the database", func() (bool, string) {
		return h.waitingFor(t, "dbstart", engine.CauseDatabase, "connection refused")
	})
	waitUntil(t, 30*time.Second, "two more open attempts", func() (bool, string) {
		return tries.Load() >= 3, fmt.Sprint(tries.Load(), " tries")
	})
	// Still waiting, never FAILED, after retries.
	if ok, why := h.waitingFor(t, "dbstart", engine.CauseDatabase, "connection refused"); !ok {
		t.Fatalf("after %d tries: %s", tries.Load(), why)
	}
	if v, _ := h.gauge(t, "txsink_tasks", "connector", "dbstart", "state", "FAILED"); v != 0 {
		t.Fatalf("txsink_tasks{state=FAILED} = %v", v)
	}
	down.Store(false)
	r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })
	waitUntil(t, 30*time.Second, "waiting cleared", func() (bool, string) { return h.notWaiting(t, "dbstart") })
}

// TestHealthDatabaseLostMidRun: a database lost while the task runs
// shows the task waiting for it (the sink's calls fail with
// connectors.ErrSinkUnavailable), and the wait ends once it answers.
func TestHealthDatabaseLostMidRun(t *testing.T) {
	for _, delivery := range []string{"exactly_once", "exactly_once_sink"} {
		t.Run(delivery, func(t *testing.T) {
			r := newMemRig(t, 2, 20)
			var down atomic.Bool
			lost := fmt.Errorf("%w: write: connection reset by peer", connectors.ErrSinkUnavailable)
			h := newHealthEngine(t, r.c.ListenAddrs(), r.spec(func(s *sinktest.MemSink) {
				s.Hook = func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
					if down.Load() && p != sinktest.AfterCommit && p != sinktest.AfterLocalCommit {
						return lost
					}
					return nil
				}
			}))
			h.run("dblost", r.topic, delivery)
			r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })
			if ok, why := h.notWaiting(t, "dblost"); !ok {
				t.Fatal(why)
			}
			down.Store(true)
			more := produceSpread(t, r.c.ListenAddrs(), r.topic, 10)
			waitUntil(t, 30*time.Second, "waiting for the database", func() (bool, string) {
				return h.waitingFor(t, "dblost", engine.CauseDatabase, "connection reset")
			})
			down.Store(false)
			for k, v := range more {
				r.want[k] = v
			}
			r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })
			waitUntil(t, 30*time.Second, "waiting cleared", func() (bool, string) { return h.notWaiting(t, "dblost") })
			r.check(t, false)
		})
	}
}

// TestHealthDatabaseDownAtAssignment: the sink opened, but the database
// is gone when the task's partitions are assigned (recovery and fencing
// fail, as after a session restart in the middle of a run): the task
// waits for the database, retrying, instead of showing nothing.
func TestHealthDatabaseDownAtAssignment(t *testing.T) {
	r := newMemRig(t, 2, 20)
	var down atomic.Bool
	down.Store(true)
	h := newHealthEngine(t, r.c.ListenAddrs(), r.spec(func(s *sinktest.MemSink) {
		s.Hook = func(_ context.Context, p sinktest.Point, _ twophase.BatchID) error {
			if down.Load() && p == sinktest.InAcquire {
				return fmt.Errorf("%w: acquire: connection refused", connectors.ErrSinkUnavailable)
			}
			return nil
		}
	}))
	h.run("dbassign", r.topic, "exactly_once")
	waitUntil(t, 30*time.Second, "waiting for the database", func() (bool, string) {
		return h.waitingFor(t, "dbassign", engine.CauseDatabase, "acquire: connection refused")
	})
	down.Store(false)
	r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })
	waitUntil(t, 30*time.Second, "waiting cleared", func() (bool, string) { return h.notWaiting(t, "dbassign") })
	r.check(t, false)
}

// TestHealthTopicMissing: a connector whose topic does not exist is
// RUNNING and waits for the topic, naming it; created, the wait ends.
func TestHealthTopicMissing(t *testing.T) {
	r := newMemRigOn(t, "present", 1)
	h := newHealthEngine(t, r.c.ListenAddrs(), r.spec(nil))
	h.run("notopic", "absent_topic", "exactly_once")
	waitUntil(t, 30*time.Second, "waiting for the topic", func() (bool, string) {
		return h.waitingFor(t, "notopic", engine.CauseTopic, "topic absent_topic does not exist")
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "absent_topic"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "waiting cleared", func() (bool, string) { return h.notWaiting(t, "notopic") })
}

// TestHealthBrokerGone: with the broker gone the task waits for it, and
// txsink_partition_lag keeps its last value while
// txsink_partition_lag_updated_timestamp_seconds stays where it was; with
// a broker back on the same address the wait ends and the lag is looked
// up again.
func TestHealthBrokerGone(t *testing.T) {
	port := freeTCPPort(t)
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, "ev"), kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := start()
	r := &memRig{c: c, store: sinktest.NewStore(), topic: "ev", ev: newEvents()}
	r.want = produceSpread(t, c.ListenAddrs(), "ev", 10)
	h := newHealthEngine(t, c.ListenAddrs(), r.spec(nil))
	h.run("gone", "ev", "exactly_once_sink")
	r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })
	var before float64
	waitUntil(t, 30*time.Second, "lag 0 looked up", func() (bool, string) {
		lag, ok := h.gauge(t, "txsink_partition_lag", "connector", "gone", "topic", "ev", "partition", "0")
		before, _ = h.gauge(t, "txsink_partition_lag_updated_timestamp_seconds", "connector", "gone", "topic", "ev", "partition", "0")
		return ok && lag == 0 && before > 0, fmt.Sprintf("lag %v (%v), updated %v", lag, ok, before)
	})
	closedAt := float64(time.Now().UnixNano()) / 1e9
	c.Close()
	waitUntil(t, 30*time.Second, "waiting for the broker", func() (bool, string) {
		return h.waitingFor(t, "gone", engine.CauseBroker, "no Kafka broker answers")
	})
	lag, ok := h.gauge(t, "txsink_partition_lag", "connector", "gone", "topic", "ev", "partition", "0")
	updated, _ := h.gauge(t, "txsink_partition_lag_updated_timestamp_seconds", "connector", "gone", "topic", "ev", "partition", "0")
	if !ok || lag != 0 {
		t.Errorf("with the broker gone, txsink_partition_lag = %v (%v), want its last value 0", lag, ok)
	}
	if updated < before || updated > closedAt {
		// (A lookup that answered would have moved it past closedAt.)
		t.Errorf("with the broker gone, the lag's update time is %v; want it between %v and the broker's end %v", updated, before, closedAt)
	}
	c2 := start()
	defer c2.Close()
	waitUntil(t, 30*time.Second, "waiting cleared", func() (bool, string) { return h.notWaiting(t, "gone") })
}

// freeTCPPort returns a port free on 127.0.0.1 when asked.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := strconv.Atoi(strings.TrimPrefix(l.Addr().String(), "127.0.0.1:"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
