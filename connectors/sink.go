// Package connectors is the sink contract: what a sink implements (Sink,
// made of capabilities: a participant, an offset store, the guarantees it
// declares, and optionally LocalWriter and twophase.Stager), what it is
// given (the converted records of a batch, Converted, and their tolerance
// operator, to which it reports the records it cannot write), how it is
// registered by name (Spec, Registry), what it gets from the worker (Env,
// Policy) and how its errors steer the runtime (Terminal, RecordLocator).
// The record pipeline itself (RecordPipeline) runs in the runtime. The runtime that runs
// connectors and tasks is connectors/engine; the herders that keep their
// configurations are connectors/herder.
package connectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/connectors/transform"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// Sink is what the runtime needs from every sink, made of small
// capabilities: the 2PC participant (twophase.Participant: recovery of
// in-doubt batches needs it whatever the guarantee), the sink-side offset
// store (OffsetStore), and the guarantees the sink declares it supports.
// The optional capabilities are separate interfaces the runtime looks for:
// LocalWriter (the local guarantees: exactly_once_sink, at_least_once,
// at_most_once) and twophase.Stager (pipelined rounds).
type Sink interface {
	twophase.Participant
	OffsetStore
	// Guarantees declares the delivery guarantees the sink supports, and
	// why it does not support the others (nil when it supports every
	// one). The runtime refuses a connector whose guarantee is not in the
	// set with that error, before Preflight. A sink that declares a local
	// guarantee implements LocalWriter.
	Guarantees() (supported Guarantees, whyNot error)
	// Preflight checks that the sink can honour the delivery guarantee g
	// (one it declared) and returns an error that says what to change
	// when it cannot.
	Preflight(ctx context.Context, g Guarantee) error
	// Close releases connections.
	Close()
}

// OffsetStore is the sink-side offset store (invariants 3 and 4).
type OffsetStore interface {
	// Acquire fences the partitions for this owner and returns their
	// stored positions (invariant 4). It returns an error wrapping
	// offsets.ErrBusy while an in-doubt batch holds a partition.
	Acquire(ctx context.Context, topic string, partitions []int32) (map[int32]offsets.Position, error)
	// Initialize stores the first position of a partition that had none.
	Initialize(ctx context.Context, topic string, partition int32, fence, next int64) error
	// Positions reads every stored position of the connector.
	Positions(ctx context.Context) ([]offsets.Position, error)
	// ResetOffsets edits stored offsets administratively, fencing owners.
	ResetOffsets(ctx context.Context, all bool, positions []offsets.Position) error
}

// LocalWriter is the optional capability of the local guarantees: a
// batch written in sink transactions of its own, without two-phase commit.
type LocalWriter interface {
	// WriteLocal writes a batch without two-phase commit. With
	// offsets.GuardCAS rows and the offset advance commit in one
	// transaction (exactly_once_sink); an unknown commit outcome is
	// resolved from the stored offset before WriteLocal returns. With
	// offsets.GuardNone, order says whether rows (RowsFirst) or the offset
	// (OffsetFirst) commit first, in separate transactions. A sink is only
	// asked for the orders of the guarantees it declared.
	WriteLocal(ctx context.Context, b *twophase.Batch, guard offsets.Guard, order Order) error
}

// RoundWriter is the optional capability source.transactions=whole needs:
// a round's batches, rows and offset advances (with offsets.GuardCAS),
// written in one sink transaction, so that the round's source
// transactions become visible together or not at all. An unknown commit
// outcome is resolved from the stored offsets before WriteRound returns.
type RoundWriter interface {
	WriteRound(ctx context.Context, batches []*twophase.Batch, guard offsets.Guard) error
}

// Supports checks that sink declares g and has the capabilities it needs
// (a LocalWriter for the local guarantees). Its error says what to change.
func Supports(sink Sink, g Guarantee) error {
	set, why := sink.Guarantees()
	if !set.Has(g) {
		if why == nil {
			why = fmt.Errorf("the sink does not support delivery.guarantee=%s (it supports %s)", g, set)
		}
		return fmt.Errorf("preflight: %w", why)
	}
	if _, ok := sink.(LocalWriter); g.Local() && !ok {
		return fmt.Errorf("preflight: delivery.guarantee=%s needs a sink that writes batches locally, and this one does not", g)
	}
	return nil
}

// DeadLetter is one bad record that errors.tolerance=all set aside: the
// record as consumed and its error. The runtime produces a committed
// batch's dead letters (Converted.DeadLetters) to the dead-letter topic.
type DeadLetter struct {
	Record *kgo.Record
	Err    *record.Error
}

// RecordLocator is implemented by errors about one bad record (sinks'
// record errors), so the runtime can stop the partition exactly there.
type RecordLocator interface {
	error
	RecordCoordinates() (topic string, partition int32, offset int64)
}

// Terminal marks errors that retrying cannot fix: a missing target table,
// a column type the sink cannot write. The task fails with the error (and
// the worker's restart policy decides what happens next) instead of
// retrying the batch forever.
type Terminal struct{ Err error }

func (e *Terminal) Error() string { return e.Err.Error() }
func (e *Terminal) Unwrap() error { return e.Err }

// IsTerminal reports whether err, or an error it wraps, is a *Terminal.
func IsTerminal(err error) bool {
	var t *Terminal
	return errors.As(err, &t)
}

// ErrSinkUnavailable is wrapped by a sink's error when the sink database
// cannot take writes for a while, through no fault of the batch: out of
// disk space, out of connections, shutting down, in crash recovery, or
// not reachable. The runtime then waits with a growing backoff, shows the
// error as the task's "waiting" status, writes and skips nothing
// meanwhile, and carries on from the stored offsets once a round commits
// again.
var ErrSinkUnavailable = errors.New("the sink database is unavailable")

// Order is the commit order of the non-atomic modes.
type Order int

// Commit orders for WriteLocal with offsets.GuardNone.
const (
	Atomic      Order = iota // rows and offset in one transaction
	RowsFirst                // at_least_once: a crash in between duplicates
	OffsetFirst              // at_most_once: a crash in between loses
)

// Env is what a sink factory gets from the worker besides the connector's
// own settings.
type Env struct {
	// Bootstrap and KafkaOpts reach the Kafka cluster the connector
	// consumes (a sink that re-reads batch ranges during recovery needs it).
	Bootstrap []string
	KafkaOpts []kgo.Opt
	Log       *slog.Logger
	// Pipeline is the connector's converters, transforms and change-event
	// stage. The runtime runs every batch through it (Converted: the
	// sink reads the records converted one at a time); a sink only uses it, through NewRecordPipeline
	// with the connector's errors.tolerance, for the batches the runtime
	// did not convert: ranges it re-reads from Kafka during recovery. Nil
	// means txsink's default JSON converter.
	Pipeline *convert.Pipeline
	// Policy is what the worker allows the connector's configuration to
	// make it do (Unix sockets, environment credentials).
	Policy Policy
}

// Factory opens a sink for a validated connector configuration.
type Factory func(ctx context.Context, env Env, conn config.Connector, v config.Values) (Sink, error)

// Spec describes a registered sink.
type Spec struct {
	// Name is the short name (postgres, clickhouse).
	Name string
	// Class is the connector.class alias Kafka Connect users write.
	Class string
	// Version of the sink plugin.
	Version string
	// Defs are the sink's own settings, after config.ConnectorDefs.
	Defs config.Defs
	// Validate checks cross-field rules and what the worker's policy
	// allows; it returns field errors.
	Validate func(v config.Values, p Policy) config.Errors
	// Identity, when set, returns where and as whom the configuration's
	// secrets are used: a canonical text of the sink's hosts, ports and
	// user, without any secret. A stored secret is kept across a
	// configuration change only while Identity stays the same (see
	// secrets.Bind).
	Identity func(v config.Values) (string, error)
	New      Factory
}

// RedactURL hides the credentials of a URL-like value, for a sink's error
// messages (see secrets.RedactURL).
func RedactURL(v string) string { return secrets.RedactURL(v) }

// AllDefs returns the common settings, the converters', the transforms',
// the change data capture settings and the sink's.
func (s Spec) AllDefs() config.Defs {
	out := append(config.Defs{}, config.ConnectorDefs...)
	out = append(out, convert.Defs...)
	out = append(out, transform.Defs...)
	out = append(out, convert.CDCDefs...)
	return append(out, s.Defs...)
}

var _ secrets.Lookup = (*Registry)(nil)

// Registry maps sink names and class aliases to specs. The zero value is
// empty and ready to use.
type Registry struct {
	mu     sync.RWMutex
	specs  map[string]Spec
	policy Policy
}

// SetPolicy sets what configurations validated by this registry may make
// the worker do. The zero Policy is the strict one.
func (r *Registry) SetPolicy(p Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy = p
}

// Policy returns the registry's policy.
func (r *Registry) Policy() Policy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.policy
}

// Register adds a sink; it fails if the name or class is taken.
func (r *Registry) Register(s Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.specs == nil {
		r.specs = map[string]Spec{}
	}
	for _, k := range []string{s.Name, s.Class} {
		if _, ok := r.specs[strings.ToLower(k)]; ok {
			return fmt.Errorf("connectors: sink %q already registered", k)
		}
	}
	r.specs[strings.ToLower(s.Name)] = s
	r.specs[strings.ToLower(s.Class)] = s
	return nil
}

// Lookup finds a sink by name or class alias (case-insensitive).
func (r *Registry) Lookup(nameOrClass string) (Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.specs[strings.ToLower(nameOrClass)]
	return s, ok
}

// Specs lists every registered sink once, by name.
func (r *Registry) Specs() []Spec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	var out []Spec
	for _, s := range r.specs {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Validate checks a raw connector configuration against the common and the
// sink's definitions. It returns the spec (zero if connector.class is
// unknown), the effective values and the field errors.
func (r *Registry) Validate(raw map[string]string) (Spec, config.Values, config.Errors) {
	class := raw[config.KeyClass]
	spec, ok := r.Lookup(class)
	if !ok {
		v, errs := config.ConnectorDefs.Validate(raw)
		if class != "" {
			errs = append(errs, config.FieldError{Name: config.KeyClass, Msg: fmt.Sprintf("unknown connector class %q; known: %s", class, strings.Join(r.names(), ", "))})
		}
		return Spec{}, v, errs
	}
	v, errs := spec.AllDefs().Validate(raw)
	p := r.Policy()
	// Every check runs whatever the others found, so that one answer
	// lists every problem (as Kafka Connect's validate does). A later
	// check's error about a setting an earlier one already faulted is
	// left out: it would only restate it (a missing connection.url is
	// also not a valid URL).
	more := func(later config.Errors) {
		faulted := map[string]bool{}
		for _, e := range errs {
			faulted[e.Name] = true
		}
		for _, e := range later {
			if !faulted[e.Name] {
				errs = append(errs, e)
			}
		}
	}
	more(config.CheckTopics(v))
	more(config.CheckSourceTxns(v))
	if spec.Validate != nil {
		more(spec.Validate(v, p))
	}
	if dlq := v[config.KeyDLQTopic]; dlq != "" && slices.Contains(v.List(config.KeyTopics), dlq) {
		errs = append(errs, config.FieldError{Name: config.KeyDLQTopic, Msg: fmt.Sprintf("the dead-letter topic %q may not be one of the connector's topics", dlq)})
	}
	errs = append(errs, config.CheckTopicNames(v, p.ReservedTopics)...)
	if v.Int(config.KeyDLQReplication) == 0 {
		errs = append(errs, config.FieldError{Name: config.KeyDLQReplication, Msg: "must be -1 (the broker's default) or at least 1, got 0"})
	}
	for _, key := range []string{config.KeyUnsafeNoFencing, config.KeyUnsafeNoRecovery} {
		if v.Bool(key) && !p.UnsafeTestSettings {
			errs = append(errs, config.FieldError{Name: key, Msg: "is a test-only switch that breaks exactly-once delivery; this worker refuses it (only a process started with -allow-unsafe-test-settings accepts it)"})
		}
	}
	more(convert.Check(v, convert.WithRegistryPolicy(p.Registry)))
	// Misspelt settings and other connectors' settings that would change
	// what is written (config.CheckKeys).
	errs = append(errs, config.CheckKeys(raw, spec.AllDefs()).Refused...)
	return spec, v, errs
}

// DefsFor returns the definitions that apply to a raw configuration: its
// sink's (AllDefs), or the common connector settings when its
// connector.class is unknown or r is nil. It makes r a secrets.Lookup.
func (r *Registry) DefsFor(raw map[string]string) config.Defs {
	if r != nil {
		if spec, ok := r.Lookup(raw[config.KeyClass]); ok {
			return spec.AllDefs()
		}
	}
	return config.ConnectorDefs
}

func (r *Registry) names() []string {
	var out []string
	for _, s := range r.Specs() {
		out = append(out, s.Name+" ("+s.Class+")")
	}
	return out
}
