package engine

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// metrics are the worker's Prometheus metrics. Labels carry only
// connector names, topics, partitions, phases and outcomes: never a
// configuration value. A topic that a config provider reference named is
// a secret like any resolved value: its label is scrubbed (topicLabels).
type metrics struct {
	e *Engine

	consumed          *prometheus.CounterVec
	written           *prometheus.CounterVec
	deadLettered      *prometheus.CounterVec
	rounds            *prometheus.CounterVec
	batches           *prometheus.CounterVec
	writtenAhead      *prometheus.CounterVec
	fenced            *prometheus.CounterVec
	phase             *prometheus.HistogramVec
	taskFailures      *prometheus.CounterVec
	taskRestarts      *prometheus.CounterVec
	connectorFailures *prometheus.CounterVec
	unavailable       *prometheus.CounterVec
	txnSplit          *prometheus.CounterVec

	nextDesc, lagDesc, inDoubtDesc, inDoubtAgeDesc, stateDesc, taskStateDesc *prometheus.Desc
	lagUpdatedDesc, waitingDesc                                              *prometheus.Desc
}

func newMetrics(e *Engine) *metrics {
	conn := []string{"connector"}
	return &metrics{
		e:            e,
		consumed:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_records_consumed_total", Help: "Records polled from Kafka (read_committed), including records of rounds that were aborted and redone."}, conn),
		written:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_records_written_total", Help: "Records of committed rounds (rows written or dead-lettered)."}, conn),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_records_dead_lettered_total", Help: "Records written to the dead-letter destination in committed rounds."}, conn),
		rounds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_rounds_total", Help: "Rounds by outcome (committed, aborted, in_doubt, partial)."}, []string{"connector", "outcome"}),
		batches:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_batches_total", Help: "Partition batches by the outcome of their round (committed, aborted, in_doubt, partial)."}, []string{"connector", "outcome"}),
		writtenAhead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_batches_written_ahead_total", Help: "Partition batches of committed rounds whose rows were written ahead, while the round before them committed (rounds.max.in.flight above 1). Against txsink_batches_total{outcome=\"committed\"}: the share of the work taken off the commit path."}, conn),
		fenced:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_batches_fenced_total", Help: "Commits refused because another owner fenced the partition (fence conflicts)."}, conn),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "txsink_commit_phase_seconds", Help: "Duration of the commit protocol's phases per round: prepare, decide, commit, and total.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"connector", "phase"}),
		taskFailures:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_task_failures_total", Help: "Tasks that stopped with an error."}, conn),
		taskRestarts:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_task_restarts_total", Help: "Automatic restarts of failed tasks."}, conn),
		connectorFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_connector_failures_total", Help: "Failures to open a connector's sink or pass its preflight check."}, conn),
		txnSplit:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_source_transactions_split_total", Help: "Source transactions applied in parts because a bound of source.transactions=whole ended their wait (source.transactions.max.records, source.transactions.max.wait.ms); each is also logged with its id."}, conn),
		unavailable:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txsink_dependency_unavailable_total", Help: "Rounds (and sink opens) that failed because a dependency was unavailable (a schema registry, the sink database); the task retried them with backoff and skipped nothing. txsink_task_waiting says which tasks wait now, and for what."}, conn),
		nextDesc:          prometheus.NewDesc("txsink_partition_next_offset", "Stored next_offset of an owned partition (the offset of the next record to write).", []string{"connector", "topic", "partition"}, nil),
		lagDesc:           prometheus.NewDesc("txsink_partition_lag", "Records of an owned partition that a read_committed consumer could still read and the sink has not stored: committed records from the stored next_offset up to the last stable offset (transaction markers and aborted records do not count; 0 when drained).", []string{"connector", "topic", "partition"}, nil),
		lagUpdatedDesc:    prometheus.NewDesc("txsink_partition_lag_updated_timestamp_seconds", "When txsink_partition_lag of an owned partition was last looked up in Kafka (Unix time). While Kafka does not answer, txsink_partition_lag keeps its last value and this stays behind: time() minus it is the lag's staleness.", []string{"connector", "topic", "partition"}, nil),
		waitingDesc:       prometheus.NewDesc("txsink_task_waiting", "1 while a RUNNING task waits for a dependency (cause: broker, topic, database, schema_registry); it retries by itself and skips nothing. 0 otherwise.", []string{"connector", "task", "cause"}, nil),
		inDoubtDesc:       prometheus.NewDesc("txsink_in_doubt_batches", "Prepared batches awaiting a decision.", conn, nil),
		inDoubtAgeDesc:    prometheus.NewDesc("txsink_in_doubt_oldest_age_seconds", "Age of the oldest in-doubt batch, since this worker first saw it (0 when none).", conn, nil),
		stateDesc:         prometheus.NewDesc("txsink_connector_state", "1 for the connector's current state.", []string{"connector", "state"}, nil),
		taskStateDesc:     prometheus.NewDesc("txsink_tasks", "Tasks per state.", []string{"connector", "state"}, nil),
	}
}

// SinkCollectors is implemented by sinks with metrics of their own (the
// ClickHouse sink's redo and de-duplication window counters); the worker
// exposes them with its own at /metrics.
type SinkCollectors interface {
	Collectors() []prometheus.Collector
}

// sinkMetrics collects the metrics of every open sink at scrape time. It
// describes nothing, so the registry accepts whatever the sinks report
// (an unchecked collector).
type sinkMetrics struct{ e *Engine }

func (sinkMetrics) Describe(chan<- *prometheus.Desc) {}

func (sm sinkMetrics) Collect(ch chan<- prometheus.Metric) {
	var sinks []SinkCollectors
	for _, c := range sm.e.all() {
		c.mu.Lock()
		run := c.run
		c.mu.Unlock()
		if run == nil {
			continue
		}
		if sc, ok := run.Sink.(SinkCollectors); ok {
			sinks = append(sinks, sc)
		}
	}
	for _, sc := range sinks {
		for _, c := range sc.Collectors() {
			c.Collect(ch)
		}
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.consumed, m.written, m.deadLettered, m.rounds, m.batches, m.writtenAhead, m.fenced, m.phase, m.taskFailures, m.taskRestarts, m.connectorFailures, m.unavailable, m.txnSplit, m, sinkMetrics{m.e}, memoryMetrics{m.e.opt.Memory}} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) round(name string, r RoundStats) {
	m.consumed.WithLabelValues(name).Add(float64(r.Records))
	outcome := r.Outcome
	if outcome == "" {
		outcome = "unknown"
	}
	m.rounds.WithLabelValues(name, outcome).Inc()
	m.batches.WithLabelValues(name, outcome).Add(float64(r.Batches))
	if r.Outcome == "committed" {
		m.written.WithLabelValues(name).Add(float64(r.Records))
		m.deadLettered.WithLabelValues(name).Add(float64(r.DeadLettered))
		m.writtenAhead.WithLabelValues(name).Add(float64(r.WrittenAhead))
	}
	for _, p := range []struct {
		phase string
		d     time.Duration
	}{{"prepare", r.Prepare}, {"decide", r.Decide}, {"commit", r.Commit}, {"total", r.Total}} {
		if p.d > 0 {
			m.phase.WithLabelValues(name, p.phase).Observe(p.d.Seconds())
		}
	}
}

// zero creates a connector's counter series at 0, so that dashboards and
// alert rules see them (and rate/increase work) before the first event.
func (m *metrics) zero(name string) {
	for _, v := range []*prometheus.CounterVec{m.consumed, m.written, m.deadLettered, m.writtenAhead, m.fenced, m.taskFailures, m.taskRestarts, m.connectorFailures, m.unavailable, m.txnSplit} {
		v.WithLabelValues(name)
	}
	for _, outcome := range []string{"committed", "aborted"} {
		m.rounds.WithLabelValues(name, outcome)
		m.batches.WithLabelValues(name, outcome)
	}
}

// forget drops a deleted connector's series.
func (m *metrics) forget(name string) {
	l := prometheus.Labels{"connector": name}
	for _, v := range []*prometheus.MetricVec{m.consumed.MetricVec, m.written.MetricVec, m.deadLettered.MetricVec, m.rounds.MetricVec, m.batches.MetricVec, m.writtenAhead.MetricVec, m.fenced.MetricVec, m.phase.MetricVec, m.taskFailures.MetricVec, m.taskRestarts.MetricVec, m.connectorFailures.MetricVec, m.unavailable.MetricVec, m.txnSplit.MetricVec} {
		v.DeletePartialMatch(l)
	}
}

// forgetPartition is a no-op: partition series are computed at scrape time.
func (m *metrics) forgetPartition(string, string, int32) {}

// Describe implements prometheus.Collector for the scrape-time gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.nextDesc, m.lagDesc, m.lagUpdatedDesc, m.waitingDesc, m.inDoubtDesc, m.inDoubtAgeDesc, m.stateDesc, m.taskStateDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: partition positions and lag,
// in-doubt batches and states, looked up at scrape time (bounded to a few
// seconds; what does not answer in time is left out).
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	type connSnap struct {
		name   string
		state  State
		tasks  map[State]int
		obs    *observer
		sink   connectors.Sink
		hasRun bool
		secs   []string
		here   []int // the tasks that run here
	}
	var snaps []connSnap
	for _, c := range m.e.all() {
		c.mu.Lock()
		s := connSnap{name: c.name, state: c.state, tasks: map[State]int{}, obs: c.obs, secs: c.secrets}
		if s.state == "" {
			s.state = StateUnassigned
		}
		for i, t := range c.tasks {
			s.tasks[t.state]++
			if t.here {
				s.here = append(s.here, i)
			}
		}
		if c.run != nil {
			s.sink, s.hasRun = c.run.Sink, true
		}
		c.mu.Unlock()
		snaps = append(snaps, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	var at []lagAt
	for _, s := range snaps {
		ch <- prometheus.MustNewConstMetric(m.stateDesc, prometheus.GaugeValue, 1, s.name, string(s.state))
		for st, n := range s.tasks {
			ch <- prometheus.MustNewConstMetric(m.taskStateDesc, prometheus.GaugeValue, float64(n), s.name, string(st))
		}
		for _, p := range s.obs.positions() {
			at = append(at, lagAt{tp{p.Topic, p.Partition}, p.Next})
		}
	}
	_, lags := m.e.partitionLags(ctx, at)
	now := time.Now()
	for _, s := range snaps {
		waits := s.obs.waitingCauses()
		for _, id := range s.here {
			on := map[Cause]bool{}
			for _, w := range waits[id] {
				on[w.Cause] = true
			}
			for _, c := range Causes {
				v := 0.0
				if on[c] {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(m.waitingDesc, prometheus.GaugeValue, v, s.name, strconv.Itoa(id), string(c))
			}
		}
		positions := s.obs.positions()
		kept := s.obs.keptLags()
		all := positions
		for k := range kept {
			all = append(all, offsets.Position{Topic: k.topic, Partition: k.partition})
		}
		label := topicLabels(all, s.secs)
		for _, p := range positions {
			part := strconv.Itoa(int(p.Partition))
			ch <- prometheus.MustNewConstMetric(m.nextDesc, prometheus.GaugeValue, float64(p.Next), s.name, label[p.Topic], part)
			// A lag Kafka did not answer for keeps its last value, with
			// when it was looked up: a lag alert still sees the backlog
			// while the broker is gone, and a staleness alert fires.
			l, ok := lags[lagAt{tp{p.Topic, p.Partition}, p.Next}]
			pt, ok := s.obs.lagPoint(tp{p.Topic, p.Partition}, l, ok, now)
			if ok {
				ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, float64(pt.lag), s.name, label[p.Topic], part)
				ch <- prometheus.MustNewConstMetric(m.lagUpdatedDesc, prometheus.GaugeValue, float64(pt.at.UnixNano())/1e9, s.name, label[p.Topic], part)
			}
			delete(kept, tp{p.Topic, p.Partition})
		}
		for k, pt := range kept {
			part := strconv.Itoa(int(k.partition))
			ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, float64(pt.lag), s.name, label[k.topic], part)
			ch <- prometheus.MustNewConstMetric(m.lagUpdatedDesc, prometheus.GaugeValue, float64(pt.at.UnixNano())/1e9, s.name, label[k.topic], part)
		}
		if !s.hasRun {
			continue
		}
		batches, err := s.obs.inDoubt(ctx, s.sink)
		if err != nil {
			continue
		}
		age := 0.0
		for _, b := range batches {
			age = max(age, time.Since(b.Since).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(m.inDoubtDesc, prometheus.GaugeValue, float64(len(batches)), s.name)
		ch <- prometheus.MustNewConstMetric(m.inDoubtAgeDesc, prometheus.GaugeValue, age, s.name)
	}
}

// topicLabels returns the label of each topic of positions: its name with
// the connector's secrets removed (a topic named by a config provider
// reference shows as [hidden]), made unique with "#n" when two topics
// scrub to the same text (metrics with the same labels would fail the
// whole scrape).
func topicLabels(positions []offsets.Position, secs []string) map[string]string {
	var names []string
	label := map[string]string{}
	for _, p := range positions {
		if _, ok := label[p.Topic]; !ok {
			label[p.Topic] = ""
			names = append(names, p.Topic)
		}
	}
	sort.Strings(names)
	used := map[string]bool{}
	for _, n := range names {
		l := secrets.ScrubString(n, secs)
		for i := 2; used[l]; i++ {
			l = fmt.Sprintf("%s#%d", secrets.ScrubString(n, secs), i)
		}
		used[l] = true
		label[n] = l
	}
	return label
}
