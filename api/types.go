package api

import (
	"slices"
	"sort"
	"time"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// The wire shapes below follow Kafka Connect 3.9's REST entities field for
// field (ConnectorInfo, ConnectorStateInfo, TaskInfo, ConnectorOffsets,
// ConfigInfos, ServerInfo, ErrorMessage). txsink's additions live under a
// single "txsink" key so that the Connect fields stay exactly Connect's.

// errorBody is Connect's ErrorMessage.
type errorBody struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
}

// messageBody is Connect's Message (offsets edits).
type messageBody struct {
	Message string `json:"message"`
}

type serverInfo struct {
	Version        string `json:"version"`
	Commit         string `json:"commit"`
	KafkaClusterID string `json:"kafka_cluster_id"`
}

type createRequest struct {
	Name         *string  `json:"name"`
	Config       settings `json:"config"`
	InitialState *string  `json:"initial_state"`
}

type taskID struct {
	Connector string `json:"connector"`
	Task      int    `json:"task"`
}

type connectorInfo struct {
	Name   string            `json:"name"`
	Config map[string]string `json:"config"`
	Tasks  []taskID          `json:"tasks"`
	Type   string            `json:"type"`
}

type taskInfo struct {
	ID     taskID            `json:"id"`
	Config map[string]string `json:"config"`
}

type connectorState struct {
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	// Version is the connector plugin's version (Connect 4.1, KIP-891).
	Version string `json:"version"`
	Trace   string `json:"trace,omitempty"`
	// Txsink holds txsink's additions.
	Txsink *connectorExt `json:"txsink,omitempty"`
}

type connectorExt struct {
	TargetState string         `json:"target_state"`
	InDoubt     []inDoubtBatch `json:"in_doubt"`
}

type taskState struct {
	ID       int    `json:"id"`
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	// Version is the connector plugin's version (Connect 4.1, KIP-891).
	Version string   `json:"version"`
	Trace   string   `json:"trace,omitempty"`
	Txsink  *taskExt `json:"txsink,omitempty"`
}

type taskExt struct {
	Partitions        []partitionStatus `json:"partitions"`
	InDoubt           []inDoubtBatch    `json:"in_doubt"`
	LastFenceConflict *fenceConflict    `json:"last_fence_conflict"`
	LastRound         *roundSummary     `json:"last_round"`
	Waiting           *waiting          `json:"waiting,omitempty"`
	Waits             []waiting         `json:"waits,omitempty"`
	Restarts          int               `json:"restarts"`
	NextRestart       *time.Time        `json:"next_restart"`
}

// waiting: the task is RUNNING but cannot make progress because a
// dependency (cause: broker, topic, database, schema_registry) is missing
// or unavailable; it retries by itself and skips nothing. Connect's tools
// read state and trace only, and see a RUNNING task.
type waiting struct {
	Cause string    `json:"cause"`
	Since time.Time `json:"since"`
	Error string    `json:"error"`
}

type partitionStatus struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	NextOffset int64  `json:"next_offset"`
	EndOffset  *int64 `json:"end_offset"`
	Lag        *int64 `json:"lag"`
}

type inDoubtBatch struct {
	Topic       string    `json:"topic"`
	Partition   int32     `json:"partition"`
	FirstOffset int64     `json:"first_offset"`
	LastOffset  int64     `json:"last_offset"`
	Since       time.Time `json:"since"`
}

type fenceConflict struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
}

type roundSummary struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
	Records int       `json:"records"`
	Batches int       `json:"batches"`
	TotalMs float64   `json:"total_ms"`
}

type connectorStatus struct {
	Name      string         `json:"name"`
	Connector connectorState `json:"connector"`
	Tasks     []taskState    `json:"tasks"`
	Type      string         `json:"type"`
}

// activeTopics is Connect's ActiveTopicsInfo, keyed by connector name.
type activeTopics struct {
	Topics []string `json:"topics"`
}

type offsetPartition struct {
	KafkaTopic     string `json:"kafka_topic"`
	KafkaPartition int32  `json:"kafka_partition"`
}

type offsetValue struct {
	KafkaOffset int64 `json:"kafka_offset"`
}

type connectorOffset struct {
	Partition offsetPartition `json:"partition"`
	Offset    *offsetValue    `json:"offset"`
}

type connectorOffsets struct {
	Offsets []connectorOffset `json:"offsets"`
}

type pluginInfo struct {
	Class   string `json:"class"`
	Type    string `json:"type"`
	Version string `json:"version"`
}

// configKeyInfo is Connect's ConfigKeyInfo as Connect serializes it:
// "order" is the position within the group (Connect's orderInGroup).
type configKeyInfo struct {
	Name          string   `json:"name"`
	Type          string   `json:"type"`
	Required      bool     `json:"required"`
	DefaultValue  *string  `json:"default_value"`
	Importance    string   `json:"importance"`
	Documentation string   `json:"documentation"`
	Group         string   `json:"group"`
	Width         string   `json:"width"`
	DisplayName   string   `json:"display_name"`
	Dependents    []string `json:"dependents"`
	Order         int      `json:"order"`
}

// configValueInfo is Connect's ConfigValueInfo.
type configValueInfo struct {
	Name              string   `json:"name"`
	Value             *string  `json:"value"`
	RecommendedValues []string `json:"recommended_values"`
	Errors            []string `json:"errors"`
	Visible           bool     `json:"visible"`
}

type configInfo struct {
	Definition configKeyInfo   `json:"definition"`
	Value      configValueInfo `json:"value"`
}

// configInfos is Connect's ConfigInfos (the validate response).
type configInfos struct {
	Name       string       `json:"name"`
	ErrorCount int          `json:"error_count"`
	Groups     []string     `json:"groups"`
	Configs    []configInfo `json:"configs"`
}

type loggerLevel struct {
	Level        string `json:"level"`
	LastModified *int64 `json:"last_modified"`
}

type healthBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	// Waiting lists the tasks of this worker that wait for a dependency
	// (txsink extension; omitted when none, and when the API requires
	// authentication: /health is open).
	Waiting []healthWaiting `json:"waiting,omitempty"`
}

type healthWaiting struct {
	Connector string    `json:"connector"`
	Task      int       `json:"task"`
	Cause     string    `json:"cause"`
	Since     time.Time `json:"since"`
}

func toInfo(reg *connectors.Registry, inf herder.Info) connectorInfo {
	out := connectorInfo{Name: inf.Name, Config: secrets.RedactConfig(reg, inf.Config), Type: inf.Type, Tasks: []taskID{}}
	for _, t := range inf.Tasks {
		out.Tasks = append(out.Tasks, taskID{Connector: inf.Name, Task: t})
	}
	return out
}

func toTaskState(t engine.TaskStatus, version string) taskState {
	ts := taskState{ID: t.ID, State: string(t.State), WorkerID: t.WorkerID, Version: version, Trace: t.Trace}
	ext := &taskExt{Partitions: []partitionStatus{}, InDoubt: toInDoubt(t.InDoubt), Restarts: t.Restarts}
	for _, p := range t.Partitions {
		ps := partitionStatus{Topic: p.Topic, Partition: p.Partition, NextOffset: p.NextOffset}
		if p.EndOffset >= 0 {
			e := p.EndOffset
			ps.EndOffset = &e
		}
		if p.Lag >= 0 {
			l := p.Lag
			ps.Lag = &l
		}
		ext.Partitions = append(ext.Partitions, ps)
	}
	if f := t.LastFenceConflict; f != nil {
		ext.LastFenceConflict = &fenceConflict{At: f.At, Error: f.Error}
	}
	if r := t.LastRound; r != nil {
		ext.LastRound = &roundSummary{At: r.At, Outcome: r.Outcome, Records: r.Records, Batches: r.Batches, TotalMs: float64(r.Total.Microseconds()) / 1000}
	}
	if w := t.Waiting; w != nil {
		ext.Waiting = &waiting{Cause: string(w.Cause), Since: w.Since, Error: w.Error}
	}
	for _, w := range t.Waits {
		ext.Waits = append(ext.Waits, waiting{Cause: string(w.Cause), Since: w.Since, Error: w.Error})
	}
	if !t.RestartAt.IsZero() {
		n := t.RestartAt.UTC()
		ext.NextRestart = &n
	}
	ts.Txsink = ext
	return ts
}

// pluginVersion is the version of the plugin a connector configuration
// names ("" when unknown).
func pluginVersion(reg *connectors.Registry, cfg map[string]string) string {
	if spec, ok := reg.Lookup(cfg[config.KeyClass]); ok {
		return spec.Version
	}
	return ""
}

func toInDoubt(bs []engine.InDoubtBatch) []inDoubtBatch {
	out := []inDoubtBatch{}
	for _, b := range bs {
		out = append(out, inDoubtBatch{Topic: b.Topic, Partition: b.Partition, FirstOffset: b.FirstOffset, LastOffset: b.LastOffset, Since: b.Since})
	}
	return out
}

// toStatus converts a status; version is the connector plugin's version
// (pluginVersion).
func toStatus(st engine.ConnectorStatus, version string) connectorStatus {
	out := connectorStatus{
		Name: st.Name,
		Type: st.Type,
		Connector: connectorState{
			State: string(st.Connector.State), WorkerID: st.Connector.WorkerID, Version: version, Trace: st.Connector.Trace,
			Txsink: &connectorExt{TargetState: string(st.Target), InDoubt: toInDoubt(st.InDoubt)},
		},
		Tasks: []taskState{},
	}
	for _, t := range st.Tasks {
		out.Tasks = append(out.Tasks, toTaskState(t, version))
	}
	return out
}

func toOffsets(ps []offsets.Position) connectorOffsets {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	out := connectorOffsets{Offsets: []connectorOffset{}}
	for _, p := range ps {
		out.Offsets = append(out.Offsets, connectorOffset{
			Partition: offsetPartition{KafkaTopic: p.Topic, KafkaPartition: p.Partition},
			Offset:    &offsetValue{KafkaOffset: p.Next},
		})
	}
	return out
}

// scrubStatus removes secrets from what a status shows besides its traces
// (which the engine scrubbed): the topics of partitions and in-doubt
// batches, which a config provider reference may have named, and the
// errors of fence conflicts and waits. secs nil: every connector's
// (Herder.Secrets).
func (s *Server) scrubStatus(st engine.ConnectorStatus, secs []string) engine.ConnectorStatus {
	if secs == nil {
		secs = s.h.Secrets()
	}
	if len(secs) == 0 {
		return st
	}
	scrub := func(v string) string { return secrets.ScrubString(v, secs) }
	inDoubt := func(bs []engine.InDoubtBatch) []engine.InDoubtBatch {
		out := slices.Clone(bs)
		for i := range out {
			out[i].Topic = scrub(out[i].Topic)
		}
		return out
	}
	st.Connector.Trace = scrub(st.Connector.Trace)
	st.InDoubt = inDoubt(st.InDoubt)
	tasks := make([]engine.TaskStatus, len(st.Tasks))
	for i, t := range st.Tasks {
		t.Trace = scrub(t.Trace)
		t.Partitions = slices.Clone(t.Partitions)
		for j := range t.Partitions {
			t.Partitions[j].Topic = scrub(t.Partitions[j].Topic)
		}
		t.InDoubt = inDoubt(t.InDoubt)
		if f := t.LastFenceConflict; f != nil {
			c := *f
			c.Error = scrub(c.Error)
			t.LastFenceConflict = &c
		}
		if w := t.Waiting; w != nil {
			c := *w
			c.Error = scrub(c.Error)
			t.Waiting = &c
		}
		t.Waits = slices.Clone(t.Waits)
		for j := range t.Waits {
			t.Waits[j].Error = scrub(t.Waits[j].Error)
		}
		tasks[i] = t
	}
	st.Tasks = tasks
	return st
}
