package engine

// What the herders read from a connector's observer besides its status:
// the active topics (GET /connectors/{name}/topics).

import (
	"maps"
	"slices"
)

// ActiveTopics returns, sorted, the topics from which the connector's
// committed rounds wrote records since the last ResetActiveTopics (Kafka
// Connect's active topics, KIP-558); false when the engine does not know
// the connector. Unlike Connect, which keeps the set in its status topic,
// the engine keeps it in memory: a restarted worker starts with an empty
// set that fills as rounds commit.
func (e *Engine) ActiveTopics(name string) ([]string, bool) {
	c := e.lookup(name)
	if c == nil {
		return nil, false
	}
	c.obs.mu.Lock()
	defer c.obs.mu.Unlock()
	return slices.Sorted(maps.Keys(c.obs.active)), true
}

// ResetActiveTopics empties the connector's set of active topics; a topic
// is active again once a round commits records from it. Offsets and rows
// are not touched. False when the engine does not know the connector.
func (e *Engine) ResetActiveTopics(name string) bool {
	c := e.lookup(name)
	if c == nil {
		return false
	}
	c.obs.mu.Lock()
	c.obs.active = nil
	c.obs.mu.Unlock()
	e.log.Info("connector active topics reset", "connector", name)
	return true
}

// noteActiveLocked adds the topics of a committed round's records to the
// active topics. The caller holds o.mu.
func (o *observer) noteActiveLocked(r RoundStats) {
	if r.Outcome != "committed" || r.Records == 0 {
		return
	}
	for _, p := range r.Positions {
		if o.active == nil {
			o.active = map[string]bool{}
		}
		o.active[p.Topic] = true
	}
}
