package configlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrTopic is wrapped by EnsureTopic's errors for an existing topic that
// cannot serve (wrong partition count or cleanup policy); retrying does
// not help.
var ErrTopic = errors.New("unusable topic")

// TopicSpec is a topic the cluster needs.
type TopicSpec struct {
	Name string
	// Setting is the worker setting that names it, for errors.
	Setting string
	// Partitions is the count to create with; Exact requires an existing
	// topic to have exactly this many (the config topic: one, so every
	// worker reads its records in one order).
	Partitions int32
	Exact      bool
	// Replication is the replication factor to create with (-1: the
	// broker's default).
	Replication int16
}

// EnsureTopic creates a compacted topic if it does not exist, and checks
// an existing one: compacted, and with Exact, the partition count.
// Cancelling ctx abandons the check.
func EnsureTopic(ctx context.Context, adm *kadm.Client, t TopicSpec) error {
	resp, err := adm.CreateTopic(ctx, t.Partitions, t.Replication, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, t.Name)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating %s %s: %w", t.Setting, t.Name, err)
	}
	details, err := adm.ListTopics(ctx, t.Name)
	if err != nil {
		return fmt.Errorf("describing %s %s: %w", t.Setting, t.Name, err)
	}
	d, ok := details[t.Name]
	if !ok || d.Err != nil {
		return fmt.Errorf("describing %s %s: %v", t.Setting, t.Name, d.Err)
	}
	if t.Exact && int32(len(d.Partitions)) != t.Partitions {
		return fmt.Errorf("%w: %s %s has %d partitions; it must have exactly %d", ErrTopic, t.Setting, t.Name, len(d.Partitions), t.Partitions)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, t.Name)
	if err != nil {
		return fmt.Errorf("describing %s %s: %w", t.Setting, t.Name, err)
	}
	rc, err := cfgs.On(t.Name, nil)
	if err != nil {
		return fmt.Errorf("describing %s %s: %w", t.Setting, t.Name, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil && *c.Value != "compact" {
			return fmt.Errorf("%w: %s %s has cleanup.policy=%s; it must be compact (deleted records would lose connectors)", ErrTopic, t.Setting, t.Name, *c.Value)
		}
	}
	return nil
}
