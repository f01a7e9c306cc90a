package engine

// Health that tells (issue 27): a task that cannot make progress because
// something outside it is missing stays RUNNING, as in Kafka Connect (its
// tools read state, worker_id and trace only), and says why in a waiting
// detail with a cause, in txsink_task_waiting and in /health. FAILED is
// kept for what a person must fix.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/secrets"
)

// Cause is what a waiting task waits for.
type Cause string

// The causes of a waiting task.
const (
	// CauseBroker: no Kafka broker of the bootstrap list answers.
	CauseBroker Cause = "broker"
	// CauseTopic: a topic of the connector's topics list does not exist.
	CauseTopic Cause = "topic"
	// CauseSchemaRegistry: the Schema Registry does not answer (or
	// answers 5xx); records are neither written nor skipped.
	CauseSchemaRegistry Cause = "schema_registry"
	// CauseDatabase: the sink database cannot be reached or cannot take
	// writes for a while (down, out of disk space or connections).
	CauseDatabase Cause = "database"
)

// Causes lists every cause, in the order the status shows them.
var Causes = []Cause{CauseBroker, CauseTopic, CauseDatabase, CauseSchemaRegistry}

// causeOf classifies the error of a round or of a sink call: "" when it
// is none of the dependencies' (the machine's retry or a failure).
func causeOf(err error) Cause {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, record.ErrUnavailable):
		return CauseSchemaRegistry
	case errors.Is(err, connectors.ErrSinkUnavailable):
		return CauseDatabase
	}
	return ""
}

// causeObserver is the part of the engine's observer that the driver
// tells of causes it finds itself (the broker probe, recovery at
// assignment). Observers that do not implement it (tests' own) miss
// nothing else.
type causeObserver interface {
	// waitFor sets (err != nil) or clears (err == nil) a task's waiting
	// cause.
	waitFor(task int, cause Cause, err error)
	// lost is told of partitions lost (not revoked) before Revoked: their
	// last lag stays shown while the broker is gone.
	lost(task int, topic string, partitions []int32)
}

// waitFor tells the task's observer of a cause, when it listens.
func (t *Task) waitFor(cause Cause, err error) {
	if co, ok := t.opt.Observer.(causeObserver); ok {
		co.waitFor(t.id, cause, err)
	}
}

// noteLost tells the task's observer, when it listens, of lost
// partitions.
func (t *Task) noteLost(rev map[string][]int32) {
	if co, ok := t.opt.Observer.(causeObserver); ok {
		for topic, ps := range rev {
			co.lost(t.id, topic, ps)
		}
	}
}

// probeEvery is how often a running task checks that a broker answers
// and that its topics exist; probeTimeout bounds one check.
const (
	probeEvery   = 2 * time.Second
	probeTimeout = 5 * time.Second
)

// probeKafka checks, every probeEvery until ctx ends, that a broker of
// the bootstrap list answers a metadata request and that every topic of
// the connector's topics list exists (topics.regex: only the broker), and
// tells the observer. A consumer client retries both for ever and only
// logs, so without it a task with a dead broker or a misspelt topic looks
// healthy. It runs on a goroutine of its own, with a client of its own
// (the session's comes and goes).
func (t *Task) probeKafka(ctx context.Context) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.opt.Bootstrap...), kgo.ClientID("txsink-" + t.conn.Name + "-probe"),
		kgo.RetryTimeout(probeTimeout), kgo.RequestRetries(1), kgo.MetadataMinAge(time.Second)}, t.opt.KafkaOpts...)...)
	if err != nil {
		return
	}
	defer cl.Close()
	defer func() {
		// Whoever runs next probes again.
		t.waitFor(CauseBroker, nil)
		t.waitFor(CauseTopic, nil)
	}()
	var topics []string
	if t.conn.TopicsPattern() == "" {
		topics = t.conn.Topics
	}
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		broker, topic := probeOnce(pctx, cl, topics)
		cancel()
		if ctx.Err() != nil {
			return
		}
		t.waitFor(CauseBroker, broker)
		t.waitFor(CauseTopic, topic)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeOnce returns the broker's error (none answered) or the topics'
// (some do not exist).
func probeOnce(ctx context.Context, cl *kgo.Client, topics []string) (broker, topic error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, tp := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(tp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("no Kafka broker answers: %w", err), nil
	}
	var missing []string
	for _, rt := range resp.Topics {
		if errors.Is(kerr.ErrorForCode(rt.ErrorCode), kerr.UnknownTopicOrPartition) && rt.Topic != nil {
			missing = append(missing, *rt.Topic)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	sort.Strings(missing)
	if len(missing) == 1 {
		return nil, fmt.Errorf("topic %s does not exist (txsink does not create the topics it reads: create it, or correct topics)", missing[0])
	}
	return nil, fmt.Errorf("topics %s do not exist (txsink does not create the topics it reads: create them, or correct topics)", strings.Join(missing, ", "))
}

// startProbe runs probeKafka until ctx ends or stop is called; stop
// waits for it to end.
func (t *Task) startProbe(ctx context.Context) (stop func()) {
	if len(t.opt.Bootstrap) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.probeKafka(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// sinkUnavailableLocked handles a sink that could not open because its
// database cannot be reached (connectors.ErrSinkUnavailable): unlike a
// failure, nothing needs a person. The connector and its tasks are
// RUNNING (or PAUSED), each task waiting for the database with the
// error, and the open is retried under the restart policy's backoff.
// The caller holds c.op.
func (e *Engine) sinkUnavailableLocked(c *conn, err error, secs []string) {
	trace := secrets.ScrubString(err.Error(), secs)
	state := runState(c.cfg.Target == TargetPaused)
	c.mu.Lock()
	c.state, c.trace = state, ""
	here := c.newTaskSlotsLocked(c.tasksMax, state)
	c.gen++
	c.mu.Unlock()
	for _, i := range here {
		c.obs.waitFor(i, CauseDatabase, err)
	}
	e.metrics.unavailable.WithLabelValues(c.name).Inc()
	e.log.Warn("the sink database is unavailable; the connector's tasks wait and it retries with backoff", "connector", c.name, "err", trace)
	e.scheduleConnRestart(c)
}

// clearCause clears a cause of every task of the connector.
func (o *observer) clearCause(cause Cause) {
	o.mu.Lock()
	var ids []int
	for id := range o.tasks {
		ids = append(ids, id)
	}
	o.mu.Unlock()
	for _, id := range ids {
		o.waitFor(id, cause, nil)
	}
}

// TaskWaiting is one waiting cause of a task that runs on this worker.
type TaskWaiting struct {
	Connector string
	Task      int
	Waiting
}

// Waiting lists the waiting causes of the tasks that run on this worker,
// by connector, task and cause (no I/O: GET /health).
func (e *Engine) Waiting() []TaskWaiting {
	var out []TaskWaiting
	for _, c := range e.all() {
		c.mu.Lock()
		here := map[int]bool{}
		for i, t := range c.tasks {
			here[i] = t.here
		}
		c.mu.Unlock()
		for id, ws := range c.obs.waitingCauses() {
			if !here[id] {
				continue
			}
			for _, w := range ws {
				out = append(out, TaskWaiting{Connector: c.name, Task: id, Waiting: w})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Connector != b.Connector {
			return a.Connector < b.Connector
		}
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		return slices.Index(Causes, a.Cause) < slices.Index(Causes, b.Cause)
	})
	return out
}
