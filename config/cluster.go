package config

import (
	"fmt"
	"strings"
	"time"
)

// Distributed mode's worker settings, with Kafka Connect's names. group.id
// selects distributed mode.
const (
	KeyClusterGroupID           = "group.id"
	KeyConfigTopic              = "config.storage.topic"
	KeyConfigReplication        = "config.storage.replication.factor"
	KeyStatusTopic              = "status.storage.topic"
	KeyStatusReplication        = "status.storage.replication.factor"
	KeyStatusPartitions         = "status.storage.partitions"
	KeyOffsetTopic              = "offset.storage.topic"
	KeyOffsetReplication        = "offset.storage.replication.factor"
	KeyOffsetPartitions         = "offset.storage.partitions"
	KeyHeartbeatIntervalMs      = "heartbeat.interval.ms"
	KeyClusterSessionTimeoutMs  = "session.timeout.ms"
	KeyRebalanceTimeoutMs       = "rebalance.timeout.ms"
	KeyScheduledRebalanceMaxMs  = "scheduled.rebalance.max.delay.ms"
	KeyRESTAdvertisedListener   = "rest.advertised.listener"
	clusterGroup                = "Distributed mode"
	ignoredOffsetSettingSummary = "Accepted for Kafka Connect worker files and ignored: txsink keeps every partition's progress in the sink (next to the rows), never in an offsets topic."
)

// ClusterDefs are distributed mode's worker settings (part of WorkerDefs).
var ClusterDefs = Defs{
	{Name: KeyClusterGroupID, Type: String, Group: clusterGroup, Doc: "Selects distributed mode: the workers with this group id form one cluster through Kafka's group coordinator, keep connector configurations and target states in config.storage.topic and statuses in status.storage.topic, and share the connectors' tasks. Any worker answers the REST API; writes are forwarded to the leader. Unset: standalone mode (configurations in data.dir). See docs/cluster.md.",
		Check: checkGroupID},
	{Name: KeyConfigTopic, Type: String, Group: clusterGroup, Doc: "Distributed mode (required): the compacted one-partition topic of connector configurations, target states and task counts; created at start if missing. Holds connector configurations, so its secrets must be config provider references (config.providers). The leader writes a random signing key to it; the cluster's config and status records carry a signature made with it, and records without a valid one are ignored and counted (docs/security.md, Internal topics). No connector may use it as a dead-letter or source topic."},
	{Name: KeyConfigReplication, Type: Int, Default: "3", Min: -1, Max: 32767, Group: clusterGroup, Doc: "Replication factor of config.storage.topic when txsink creates it; -1: the broker's default.",
		Check: checkReplication},
	{Name: KeyStatusTopic, Type: String, Group: clusterGroup, Doc: "Distributed mode (required): the compacted topic of connector and task states, which every worker writes for what it runs (signed, as the config topic's records); created at start if missing. No connector may use it as a dead-letter or source topic."},
	{Name: KeyStatusReplication, Type: Int, Default: "3", Min: -1, Max: 32767, Group: clusterGroup, Doc: "Replication factor of status.storage.topic when txsink creates it; -1: the broker's default.",
		Check: checkReplication},
	{Name: KeyStatusPartitions, Type: Int, Default: "5", Min: 1, Max: 1000, Group: clusterGroup, Doc: "Partitions of status.storage.topic when txsink creates it."},
	{Name: KeyOffsetTopic, Type: String, Group: clusterGroup, Doc: ignoredOffsetSettingSummary},
	{Name: KeyOffsetReplication, Type: Int, Group: clusterGroup, Doc: ignoredOffsetSettingSummary},
	{Name: KeyOffsetPartitions, Type: Int, Group: clusterGroup, Doc: ignoredOffsetSettingSummary},
	{Name: KeyHeartbeatIntervalMs, Type: Int, Default: "3000", Min: 10, Max: 3600000, Group: clusterGroup, Doc: "How often a worker heartbeats to the cluster's group coordinator; below session.timeout.ms."},
	{Name: KeyClusterSessionTimeoutMs, Type: Int, Default: "10000", Min: 100, Max: 3600000, Group: clusterGroup, Doc: "How long the group coordinator waits for a silent worker before it leaves the cluster and its connectors and tasks are assigned to others (within the broker's group.min/max.session.timeout.ms). Each connector's own session.timeout.ms bounds how fast its partitions move."},
	{Name: KeyRebalanceTimeoutMs, Type: Int, Default: "60000", Min: 100, Max: 3600000, Group: clusterGroup, Doc: "How long a rebalance of the cluster waits for every worker to rejoin."},
	{Name: KeyScheduledRebalanceMaxMs, Type: Int, Default: "300000", Min: 0, Max: 86400000, Group: clusterGroup, Doc: "How long the leader keeps the tasks of a worker that left unassigned, waiting for it to come back (a rolling restart), before giving them to the others (Kafka Connect's KIP-415 delay). While they wait, the connector's other tasks take over their partitions at once; a connector that would have no task running anywhere is reassigned without waiting."},
	{Name: KeyRESTAdvertisedListener, Type: String, Enum: []string{"http", "https"}, Group: clusterGroup, Doc: "Scheme of the REST URL other workers use to forward requests to this one (http or https). Default: https when rest.tls.cert.file is set, else http."},
}

// Cluster is distributed mode's configuration.
type Cluster struct {
	// Enabled is set when group.id is.
	Enabled bool
	GroupID string
	// ConfigTopic and StatusTopic are the shared topics; the replication
	// factors apply when the worker creates them (-1: the broker's
	// default).
	ConfigTopic, StatusTopic             string
	ConfigReplication, StatusReplication int16
	StatusPartitions                     int32
	// Heartbeat, Session and Rebalance are the group membership timings;
	// MaxDelay is scheduled.rebalance.max.delay.ms.
	Heartbeat, Session, Rebalance, MaxDelay time.Duration
	// AdvertisedListener is "http", "https" or "" (the scheme the API
	// serves).
	AdvertisedListener string
	// IgnoredOffsetSettings lists the offset.storage.* settings given
	// (accepted and ignored; the caller may say so in its log).
	IgnoredOffsetSettings []string
	// OffsetTopic is offset.storage.topic: txsink does not use it, but a
	// Kafka Connect cluster sharing the worker file does.
	OffsetTopic string
}

// Topics maps the worker's own topics (those of config.storage.topic,
// status.storage.topic and offset.storage.topic that are set) to the
// settings that name them: no connector may write to or consume them.
func (c Cluster) Topics() map[string]string {
	out := map[string]string{}
	for name, key := range map[string]string{c.OffsetTopic: KeyOffsetTopic, c.StatusTopic: KeyStatusTopic, c.ConfigTopic: KeyConfigTopic} {
		if name != "" {
			out[name] = key
		}
	}
	return out
}

// parseCluster reads distributed mode's settings from validated values.
func parseCluster(v Values) (Cluster, Errors) {
	var errs Errors
	add := func(name, msg string) { errs = append(errs, FieldError{Name: name, Msg: msg}) }
	ms := func(k string) time.Duration { return time.Duration(v.Int(k)) * time.Millisecond }
	c := Cluster{
		Enabled:            strings.TrimSpace(v[KeyClusterGroupID]) != "",
		GroupID:            strings.TrimSpace(v[KeyClusterGroupID]),
		ConfigTopic:        strings.TrimSpace(v[KeyConfigTopic]),
		StatusTopic:        strings.TrimSpace(v[KeyStatusTopic]),
		ConfigReplication:  int16(v.Int(KeyConfigReplication)),
		StatusReplication:  int16(v.Int(KeyStatusReplication)),
		StatusPartitions:   int32(v.Int(KeyStatusPartitions)),
		Heartbeat:          ms(KeyHeartbeatIntervalMs),
		Session:            ms(KeyClusterSessionTimeoutMs),
		Rebalance:          ms(KeyRebalanceTimeoutMs),
		MaxDelay:           ms(KeyScheduledRebalanceMaxMs),
		AdvertisedListener: v[KeyRESTAdvertisedListener],
		OffsetTopic:        strings.TrimSpace(v[KeyOffsetTopic]),
	}
	for _, k := range []string{KeyOffsetTopic, KeyOffsetReplication, KeyOffsetPartitions} {
		if v[k] != "" {
			c.IgnoredOffsetSettings = append(c.IgnoredOffsetSettings, k)
		}
	}
	if !c.Enabled {
		return c, nil
	}
	if c.ConfigTopic == "" {
		add(KeyConfigTopic, "distributed mode (group.id is set) needs the topic of connector configurations")
	}
	if c.StatusTopic == "" {
		add(KeyStatusTopic, "distributed mode (group.id is set) needs the topic of connector and task states")
	}
	if c.ConfigTopic != "" && c.ConfigTopic == c.StatusTopic {
		add(KeyStatusTopic, fmt.Sprintf("must differ from config.storage.topic (%s)", c.ConfigTopic))
	}
	if c.Heartbeat >= c.Session {
		add(KeyHeartbeatIntervalMs, fmt.Sprintf("must be below session.timeout.ms (%d), got %d", c.Session.Milliseconds(), c.Heartbeat.Milliseconds()))
	}
	if c.Rebalance < c.Session {
		add(KeyRebalanceTimeoutMs, fmt.Sprintf("must be at least session.timeout.ms (%d), got %d", c.Session.Milliseconds(), c.Rebalance.Milliseconds()))
	}
	if v[KeyWorkerID] != "" {
		add(KeyWorkerID, "in distributed mode a worker's id is its advertised REST address (host:port, from rest.advertised.host.name and rest.advertised.port), which other workers and statuses use; remove worker.id")
	}
	return c, errs
}

func checkGroupID(v string) error {
	if strings.ContainsAny(v, "\x00\r\n") {
		return fmt.Errorf("must not contain control characters")
	}
	return nil
}

func checkReplication(v string) error {
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err == nil && n == 0 {
		return fmt.Errorf("must be -1 (the broker's default) or at least 1, got 0")
	}
	return nil
}
