package herder

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder/configlog"
	"github.com/txsink/txsink/connectors/secrets"
)

// Active topics in distributed mode, as Kafka Connect keeps them: each
// worker writes to the status topic the topics its tasks of a connector
// wrote records from (status-topic-<topic>:connector-<name>), so every
// worker answers GET …/topics alike; a reset, on any worker, writes
// tombstones for them, and every worker that reads one resets what its
// engine noted, so a topic is active again once a round writes from it.

// topicsEvery is how often a worker writes the topics its engine noted.
const topicsEvery = 2 * time.Second

// runTopics writes new active topics until ctx ends.
func (h *Distributed) runTopics(ctx context.Context) {
	t := time.NewTicker(topicsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, n := range h.appliedNames() {
			h.publishTopics(n)
		}
	}
}

// appliedNames returns the connectors this worker runs a part of.
func (h *Distributed) appliedNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.applied))
}

// publishTopics writes the connector's active topics this worker noted and
// has not written yet. A topic that a config provider reference named is a
// secret (its name is among the engine's secrets) and is never written:
// resolved values do not go to the status topic.
func (h *Distributed) publishTopics(name string) {
	ts, _ := h.eng.ActiveTopics(name)
	ts = notSecret(ts, h.eng.Secrets())
	var fresh []string
	h.mu.Lock()
	seen := h.topics[name]
	for _, t := range ts {
		if !seen[t] {
			if seen == nil {
				seen = map[string]bool{}
				h.topics[name] = seen
			}
			seen[t] = true
			fresh = append(fresh, t)
		}
	}
	h.mu.Unlock()
	for _, t := range fresh {
		h.stLog.PutTopic(name, t)
	}
}

// statusChanged is told what the status topic changed: a reset of a
// connector's active topics (by any worker) resets this worker's too.
func (h *Distributed) statusChanged(ch configlog.Change) {
	for _, n := range ch.TopicsReset {
		h.mu.Lock()
		delete(h.topics, n)
		h.mu.Unlock()
		h.eng.ResetActiveTopics(n)
	}
}

// ActiveTopics returns, sorted, the topics the connector wrote records
// from since the last reset, on any worker (Kafka Connect's active topics,
// kept in the status topic).
func (h *Distributed) ActiveTopics(_ context.Context, name string) ([]string, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, t := range h.stLog.Topics(name) {
		set[t] = true
	}
	local, _ := h.eng.ActiveTopics(name)
	for _, t := range local {
		set[t] = true
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// ResetActiveTopics empties the connector's active topics on every worker:
// tombstones in the status topic, which each worker reads. Any worker
// makes it, as in Kafka Connect.
func (h *Distributed) ResetActiveTopics(ctx context.Context, name string) error {
	ts, err := h.ActiveTopics(ctx, name)
	if err != nil {
		return err
	}
	h.stLog.DeleteTopics(name, ts)
	h.mu.Lock()
	delete(h.topics, name)
	h.mu.Unlock()
	h.eng.ResetActiveTopics(name)
	return nil
}

// RecentRounds returns the last rounds of the connector's tasks on this
// worker, newest first (the /ui status page shows this worker's).
func (h *Distributed) RecentRounds(_ context.Context, name string) ([]engine.RoundTiming, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	rs, _ := h.eng.RecentRounds(name)
	return rs, nil
}

// notSecret returns the topics of ts whose names hold none of secs.
func notSecret(ts, secs []string) []string {
	var out []string
	for _, t := range ts {
		if secrets.ScrubString(t, secs) == t {
			out = append(out, t)
		}
	}
	return out
}
