package engine

// What the herders read from a connector's observer besides its status:
// the active topics (GET /connectors/{name}/topics) and the last rounds'
// timings (the /ui status page).

import (
	"maps"
	"slices"
	"time"
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

// recentRounds is how many rounds RecentRounds keeps per connector.
const recentRounds = 20

// RoundTiming is one finished round of a task and its phases.
type RoundTiming struct {
	At      time.Time
	Task    int
	Outcome string // committed, aborted, in_doubt, partial
	Records int
	Batches int
	// DeadLettered records of the round went to the dead-letter
	// destination.
	DeadLettered                   int
	Prepare, Decide, Commit, Total time.Duration
}

// RecentRounds returns the connector's last rounds (up to 20, all tasks),
// newest first, kept in memory since the worker started; false when the
// engine does not know the connector.
func (e *Engine) RecentRounds(name string) ([]RoundTiming, bool) {
	c := e.lookup(name)
	if c == nil {
		return nil, false
	}
	c.obs.mu.Lock()
	out := slices.Clone(c.obs.recent)
	c.obs.mu.Unlock()
	slices.Reverse(out)
	return out, true
}

// noteRoundLocked keeps r among the recent rounds. The caller holds o.mu.
func (o *observer) noteRoundLocked(task int, r RoundStats) {
	o.recent = append(o.recent, RoundTiming{At: time.Now().UTC(), Task: task, Outcome: r.Outcome, Records: r.Records, Batches: r.Batches,
		DeadLettered: r.DeadLettered, Prepare: r.Prepare, Decide: r.Decide, Commit: r.Commit, Total: r.Total})
	if n := len(o.recent); n > recentRounds {
		o.recent = slices.Delete(o.recent, 0, n-recentRounds)
	}
}
