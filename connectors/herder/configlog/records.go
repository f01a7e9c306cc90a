// Package configlog keeps the state a distributed txsink cluster shares in
// Kafka, as Kafka Connect does: connector configurations, target states,
// task counts and restart requests in a compacted one-partition config
// topic, which only the cluster's leader writes (in transactions fenced
// across leaders), and connector and task states in a compacted status
// topic, which every worker writes for what it runs.
//
// Records are keyed like Connect's (connector-<name>, target-state-<name>,
// task-<name>-<n>, commit-<name>, status-connector-<name>,
// status-task-<name>-<n>) and hold JSON values with a version, {"v":1,…}.
// A record of another version (a newer txsink) is refused: it is left
// unapplied, logged, and reported by Unknown until the worker is upgraded.
package configlog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// Version is the version of the records this txsink writes and reads.
const Version = 1

// Key prefixes of the config and status topics.
const (
	connectorPrefix = "connector-"
	targetPrefix    = "target-state-"
	taskPrefix      = "task-"
	commitPrefix    = "commit-"
	restartPrefix   = "restart-connector-"
	statusConnector = "status-connector-"
	statusTask      = "status-task-"
	statusTopic     = "status-topic-"
	topicConnector  = ":connector-"
)

// ErrVersion is wrapped by the error for a record of a version this txsink
// does not read.
var ErrVersion = errors.New("unknown record version")

// Record is one record of the config or status topic; a nil Value is a
// tombstone.
type Record struct {
	Key   string
	Value []byte
}

type connectorValue struct {
	V       int               `json:"v"`
	Config  map[string]string `json:"config"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
}

type targetValue struct {
	V     int                `json:"v"`
	State engine.TargetState `json:"state"`
}

type taskValue struct {
	V int `json:"v"`
	// ConfigSHA256 identifies the configuration the task runs (a txsink
	// task runs its connector's configuration).
	ConfigSHA256 string `json:"config_sha256"`
}

type commitValue struct {
	V     int `json:"v"`
	Tasks int `json:"tasks"`
}

type restartValue struct {
	V            int    `json:"v"`
	ID           string `json:"id"`
	IncludeTasks bool   `json:"include_tasks"`
	OnlyFailed   bool   `json:"only_failed"`
}

type topicValue struct {
	V          int    `json:"v"`
	Topic      string `json:"topic"`
	Connector  string `json:"connector"`
	Discovered int64  `json:"discovered"` // Unix milliseconds
}

type statusValue struct {
	V          int          `json:"v"`
	State      engine.State `json:"state"`
	Trace      string       `json:"trace,omitempty"`
	WorkerID   string       `json:"worker_id"`
	Generation int32        `json:"generation"`
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("configlog: encoding %T: %v", v, err)) // plain structs of strings and numbers
	}
	return b
}

// decode reads a versioned value; a version other than Version wraps
// ErrVersion.
func decode(b []byte, v any) error {
	var head struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if head.V == nil {
		return fmt.Errorf("%w: no \"v\" field", ErrVersion)
	}
	if *head.V != Version {
		return fmt.Errorf("%w %d: this txsink reads version %d; upgrade it", ErrVersion, *head.V, Version)
	}
	return json.Unmarshal(b, v)
}

// ConfigHash identifies a configuration (task records hold it).
func ConfigHash(cfg map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(h, "%d:%s=%d:%s;", len(k), k, len(cfg[k]), cfg[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PutConnector is the record of a connector's configuration.
func PutConnector(name string, cfg map[string]string, created, updated time.Time) Record {
	return Record{Key: connectorPrefix + name, Value: encode(connectorValue{V: Version, Config: cfg, Created: created.UTC(), Updated: updated.UTC()})}
}

// PutTarget is the record of a connector's target state.
func PutTarget(name string, target engine.TargetState) Record {
	return Record{Key: targetPrefix + name, Value: encode(targetValue{V: Version, State: target})}
}

// PutTasks are the records of a connector's n tasks running cfg, ending
// with the commit record that makes them take effect (Connect's task and
// commit records); stale are the ids of tasks of an earlier, larger count,
// deleted.
func PutTasks(name string, cfg map[string]string, n, stale int) []Record {
	hash := ConfigHash(cfg)
	var out []Record
	for i := range n {
		out = append(out, Record{Key: taskKey(name, i), Value: encode(taskValue{V: Version, ConfigSHA256: hash})})
	}
	for i := n; i < stale; i++ {
		out = append(out, Record{Key: taskKey(name, i)})
	}
	return append(out, Record{Key: commitPrefix + name, Value: encode(commitValue{V: Version, Tasks: n})})
}

// PutRestart is a request to restart a connector (and with includeTasks
// its tasks; onlyFailed: only FAILED ones) on every worker that runs a
// part of it. id makes each request a record of its own.
func PutRestart(name, id string, includeTasks, onlyFailed bool) Record {
	return Record{Key: restartPrefix + name, Value: encode(restartValue{V: Version, ID: id, IncludeTasks: includeTasks, OnlyFailed: onlyFailed})}
}

// DeleteConnector are the tombstones of a connector with tasks tasks.
func DeleteConnector(name string, tasks int) []Record {
	out := []Record{{Key: connectorPrefix + name}, {Key: targetPrefix + name}, {Key: restartPrefix + name}}
	for i := range tasks {
		out = append(out, Record{Key: taskKey(name, i)})
	}
	return append(out, Record{Key: commitPrefix + name})
}

func taskKey(name string, i int) string { return taskPrefix + name + "-" + strconv.Itoa(i) }

// StatusConnectorKey and StatusTaskKey are the status topic's keys.
func StatusConnectorKey(name string) string { return statusConnector + name }

// StatusTaskKey is the status topic's key of a task.
func StatusTaskKey(name string, task int) string {
	return statusTask + name + "-" + strconv.Itoa(task)
}

// StatusTopicKey is the status topic's key of a connector's active topic
// (Kafka Connect's: status-topic-<topic>:connector-<name>).
func StatusTopicKey(name, topic string) string { return statusTopic + topic + topicConnector + name }

// splitTask parses "<name>-<n>".
func splitTask(s string) (string, int, bool) {
	i := strings.LastIndexByte(s, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return s[:i], n, true
}
