package herder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txsink/txsink/connectors/herder/configlog"
)

// clusterMetrics are distributed mode's Prometheus metrics, read from the
// herder's state at scrape time (labels: no configuration value).
type clusterMetrics struct {
	h          *Distributed
	rebalances prometheus.Counter
	genDesc    *prometheus.Desc
	leaderDesc *prometheus.Desc
	workerDesc *prometheus.Desc
	unitsDesc  *prometheus.Desc
	pending    *prometheus.Desc
	ignored    *prometheus.Desc
}

func newClusterMetrics(h *Distributed) *clusterMetrics {
	return &clusterMetrics{
		h:          h,
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "txsink_cluster_rebalances_total", Help: "Assignments this worker received from the cluster's leader (one per completed rebalance)."}),
		genDesc:    prometheus.NewDesc("txsink_cluster_generation", "Generation of the cluster group this worker holds the plan of (0 before the first).", nil, nil),
		leaderDesc: prometheus.NewDesc("txsink_cluster_leader", "1 when this worker is the cluster's leader.", nil, nil),
		workerDesc: prometheus.NewDesc("txsink_cluster_workers", "Workers in the current generation of the cluster.", nil, nil),
		unitsDesc:  prometheus.NewDesc("txsink_cluster_assigned", "Connectors (kind=connector) and tasks (kind=task) the plan gives this worker.", []string{"kind"}, nil),
		pending:    prometheus.NewDesc("txsink_cluster_pending_tasks", "Connectors and tasks waiting for a departed worker (scheduled.rebalance.max.delay.ms), in the current plan.", nil, nil),
		ignored:    prometheus.NewDesc("txsink_cluster_records_ignored_total", "Records of the config topic (topic=config) or the status topic (topic=status) this worker ignored because the cluster did not sign them (reason: unsigned, bad_signature, second_key, bad_key): written there by something other than the cluster's workers.", []string{"topic", "reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *clusterMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.rebalances.Describe(ch)
	for _, d := range []*prometheus.Desc{m.genDesc, m.leaderDesc, m.workerDesc, m.unitsDesc, m.pending, m.ignored} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *clusterMetrics) Collect(ch chan<- prometheus.Metric) {
	m.rebalances.Collect(ch)
	h := m.h
	h.mu.Lock()
	var gen, leader, workers, conns, tasks, pending float64
	if p := h.plan; p != nil {
		gen, workers, pending = float64(h.planGen), float64(len(p.Workers)), float64(len(p.Pending))
		if p.Leader == h.memberID {
			leader = 1
		}
		for _, u := range p.Mine(h.memberID) {
			if u.Task < 0 {
				conns++
			} else {
				tasks++
			}
		}
	}
	h.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.genDesc, prometheus.GaugeValue, gen)
	ch <- prometheus.MustNewConstMetric(m.leaderDesc, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(m.workerDesc, prometheus.GaugeValue, workers)
	ch <- prometheus.MustNewConstMetric(m.unitsDesc, prometheus.GaugeValue, conns, "connector")
	ch <- prometheus.MustNewConstMetric(m.unitsDesc, prometheus.GaugeValue, tasks, "task")
	ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, pending)
	for topic, counts := range map[string]configlog.Rejected{"config": h.cfgLog.Rejected(), "status": h.stLog.Rejected()} {
		for _, reason := range []string{configlog.ReasonUnsigned, configlog.ReasonBadSignature, configlog.ReasonSecondKey, configlog.ReasonBadKey} {
			ch <- prometheus.MustNewConstMetric(m.ignored, prometheus.CounterValue, float64(counts[reason]), topic, reason)
		}
	}
}
