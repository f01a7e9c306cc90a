package herder

import (
	"context"

	"github.com/txsink/txsink/connectors/engine"
)

// ActiveTopics returns, sorted, the topics the connector's tasks on this
// worker wrote records from since the last reset.
func (h *Distributed) ActiveTopics(_ context.Context, name string) ([]string, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	ts, _ := h.eng.ActiveTopics(name)
	return ts, nil
}

// ResetActiveTopics empties the connector's active topics on this worker.
func (h *Distributed) ResetActiveTopics(_ context.Context, name string) error {
	if _, err := h.lookup(name); err != nil {
		return err
	}
	h.eng.ResetActiveTopics(name)
	return nil
}

// RecentRounds returns the last rounds of the connector's tasks on this
// worker, newest first (the /ui status page of this worker).
func (h *Distributed) RecentRounds(_ context.Context, name string) ([]engine.RoundTiming, error) {
	if _, err := h.lookup(name); err != nil {
		return nil, err
	}
	rs, _ := h.eng.RecentRounds(name)
	return rs, nil
}
