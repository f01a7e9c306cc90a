package api

import (
	"context"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/offsets"
)

// Herder is what the API needs from the worker's herder (Kafka Connect's
// Herder): the connectors' configurations and target states, their
// statuses and their offsets. herder.Standalone is one.
//
// Errors wrap one of herder's sentinels (ErrNotFound is 404, ErrExists,
// ErrConflict, ErrSecretDropped and ErrRebalance 409, ErrBadRequest 400,
// ErrClosed 503), are a *herder.ForwardError (the request is forwarded to
// the worker it names, see forward) or are config.Errors (400); any other
// error is a 500. Their messages are
// safe to show. Cancelling ctx abandons the wait for an answer; an
// operation already applied to a connector stays applied, and one that
// needs Kafka or the sink (status, offsets) returns ctx's error.
type Herder interface {
	// Registry returns the sinks the worker runs.
	Registry() *connectors.Registry
	// Secrets returns the secret strings of every connector's
	// configuration, for removing them from messages (secrets.ScrubString).
	Secrets() []string
	// Ready reports whether the worker finished starting and is not
	// shutting down, and an error (nil when none) that makes it unhealthy.
	Ready(ctx context.Context) (bool, error)
	// ClusterID returns the Kafka cluster's id, or "" when Kafka does not
	// answer before ctx ends.
	ClusterID(ctx context.Context) string

	// Connectors lists the connector names, sorted.
	Connectors(ctx context.Context) ([]string, error)
	// Info returns a connector's configuration (unredacted) and tasks.
	Info(ctx context.Context, name string) (herder.Info, error)
	// Status returns the states of a connector and its tasks.
	Status(ctx context.Context, name string) (engine.ConnectorStatus, error)

	// Create adds a connector in the initial target state.
	Create(ctx context.Context, name string, raw map[string]string, initial engine.TargetState) (herder.Info, error)
	// PutConfig creates the connector (created is true) or replaces its
	// configuration.
	PutConfig(ctx context.Context, name string, raw map[string]string) (info herder.Info, created bool, err error)
	// PatchConfig merges patch into the connector's configuration (a nil
	// value removes a setting).
	PatchConfig(ctx context.Context, name string, patch map[string]*string) (herder.Info, error)
	// Delete stops and removes the connector; its offsets stay in the
	// sink.
	Delete(ctx context.Context, name string) error
	// Pause, Resume and Stop set the connector's target state to PAUSED,
	// RUNNING and STOPPED.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Stop(ctx context.Context, name string) error
	// Restart restarts the connector and, with includeTasks, its tasks
	// (onlyFailed: only FAILED ones) in the background, and returns the
	// status showing RESTARTING for what will be restarted.
	Restart(ctx context.Context, name string, includeTasks, onlyFailed bool) (engine.ConnectorStatus, error)
	// RestartTask restarts one task of a RUNNING or PAUSED connector (a
	// paused task starts again paused); ErrNotFound for a STOPPED one.
	RestartTask(ctx context.Context, name string, task int) error

	// ActiveTopics returns, sorted, the topics the connector wrote records
	// from since the last ResetActiveTopics (Connect's active topics).
	ActiveTopics(ctx context.Context, name string) ([]string, error)
	// ResetActiveTopics empties the connector's set of active topics.
	ResetActiveTopics(ctx context.Context, name string) error
	// RecentRounds returns the connector's last rounds, newest first (the
	// /ui status page).
	RecentRounds(ctx context.Context, name string) ([]engine.RoundTiming, error)

	// Offsets returns the offsets stored in the connector's sink.
	Offsets(ctx context.Context, name string) ([]offsets.Position, error)
	// AlterOffsets sets the stored offsets of the listed partitions of a
	// STOPPED connector (Next == offsets.Unset clears one).
	AlterOffsets(ctx context.Context, name string, positions []offsets.Position) error
	// ResetOffsets deletes every stored offset of a STOPPED connector.
	ResetOffsets(ctx context.Context, name string) error
}

var (
	_ Herder = (*herder.Standalone)(nil)
	_ Herder = (*herder.Distributed)(nil)
	_ syncer = (*herder.Distributed)(nil)
	_ owners = (*herder.Distributed)(nil)
)
