// Package herder keeps the connectors' configurations and target states,
// and tells the engine (connectors/engine) what to run on this worker, as
// Kafka Connect's herders do. Standalone keeps them in a data directory;
// Distributed shares them with the other workers of a cluster through
// Kafka (see NewDistributed).
package herder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/secrets"
)

// Sentinel errors of the herders. Errors returned by a herder's methods
// wrap one of them (or are config.Errors for an invalid configuration);
// their message is the one Kafka Connect uses and is safe to show (no
// secrets).
var (
	// ErrNotFound: no connector (or task) by that name (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrExists: a connector with that name exists (HTTP 409).
	ErrExists = errors.New("already exists")
	// ErrBadRequest: the request is malformed or not allowed in the
	// connector's current state, as Kafka Connect reports it (HTTP 400).
	ErrBadRequest = errors.New("bad request")
	// ErrConflict: the operation conflicts with the connector's state or
	// another operation on it (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrClosed: the worker is shutting down.
	ErrClosed = errors.New("worker is shutting down")
	// ErrSecretDropped: a configuration change moved the connector to
	// another host, port or user without sending its secret again, so the
	// stored secret was dropped; the connector fails until it is sent
	// (HTTP 409 where an operation needs the sink).
	ErrSecretDropped = errors.New("secret dropped")
	// ErrRebalance: distributed mode cannot answer the request now (a
	// rebalance is under way, or the worker's view of the configuration
	// is stale); retry (HTTP 409, as Kafka Connect).
	ErrRebalance = errors.New("rebalance in progress")
	// ErrForward: another worker must answer the request (the leader, or
	// the worker that runs a task); a *ForwardError says which.
	ErrForward = errors.New("request belongs to another worker")
)

// ForwardError says which worker must answer a request: the REST layer
// forwards the request there (Kafka Connect's forwarding, at most two hops).
type ForwardError struct {
	// URL is the worker's advertised REST URL.
	URL string
	// Target says what that worker is ("the leader", "the worker running
	// task c-2").
	Target string
}

func (e *ForwardError) Error() string { return "the request must go to " + e.Target + " at " + e.URL }

// Unwrap returns ErrForward.
func (e *ForwardError) Unwrap() error { return ErrForward }

// Messages of ErrRebalance errors, Kafka Connect's.
const (
	msgNoLeader = "Cannot complete request momentarily due to no known leader URL, likely because a rebalance was underway."
	msgStale    = "Cannot complete request momentarily due to stale configuration (typically caused by a concurrent config change)"
)

// opError carries a Kafka Connect style message and one of the sentinels.
type opError struct {
	kind error
	msg  string
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &opError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func notFound(name string) error { return errorf(ErrNotFound, "Connector %s not found", name) }

// notStopped is Connect's error for an offsets edit of a connector that
// is not STOPPED.
func notStopped(name string) error {
	return errorf(ErrBadRequest, "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/%s/stop' endpoint", name)
}

// offsetsBusy is the error for an offsets edit that an in-doubt batch
// holds up.
func offsetsBusy(name string) error {
	return errorf(ErrConflict, "Offsets of %s are locked by an in-doubt batch; run the connector so that recovery resolves it, stop it and try again", name)
}

// scrub removes the connector's secrets from an error's message; field
// errors and a dropped secret's note, which hold none, keep their kinds.
func scrub(err error, secs []string) error {
	var ferrs config.Errors
	var oe *opError
	if errors.As(err, &ferrs) || errors.As(err, &oe) && oe.kind == ErrSecretDropped {
		return err // messages without secrets, kinds kept
	}
	return errors.New(secrets.ScrubString(err.Error(), secs))
}

// Info describes a connector as Kafka Connect's ConnectorInfo does.
type Info struct {
	Name string
	// Config is the stored configuration, unredacted: redact it with
	// secrets.RedactConfig before showing it.
	Config map[string]string
	// Tasks lists the task ids (none while STOPPED).
	Tasks []int
	Type  string
}

// Resolve replaces the config provider references of a configuration
// (engine.Options.Resolve; nil: none).
type Resolve func(ctx context.Context, raw map[string]string) (resolved map[string]string, values []string, err error)

// validate checks a configuration for create or update. name is the name
// in the URL or create body; the configuration's "name", when present,
// must equal it. With resolve, the configuration is checked with its
// config provider references resolved (a reference that cannot be
// resolved is an invalid setting), and the errors show the references,
// never what they resolved to (secrets.ResolvedErrors); the configuration
// returned keeps the references.
func validate(ctx context.Context, log *slog.Logger, reg *connectors.Registry, resolve Resolve, name string, raw map[string]string) (cfg map[string]string, err error) {
	defer func() {
		if err == nil {
			logIgnored(log, name, reg.DefsFor(cfg), cfg)
		}
	}()
	cfg = make(map[string]string, len(raw)+1)
	maps.Copy(cfg, raw)
	if n, ok := cfg[config.KeyName]; ok && n != name {
		return nil, errorf(ErrBadRequest, "Connector name configuration (%s) doesn't match connector name in the URL (%s)", secrets.ScrubString(n, secrets.Of(reg, raw)), name)
	}
	cfg[config.KeyName] = name
	if errs := secrets.CheckPlaceholders(reg, cfg); len(errs) > 0 {
		return nil, errs
	}
	if resolve == nil {
		if _, _, errs := reg.Validate(cfg); len(errs) > 0 {
			return nil, errs
		}
		return cfg, nil
	}
	resolved, values, err := resolve(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, _, errs := reg.Validate(resolved); len(errs) > 0 {
		// An error about a setting that holds a reference names the
		// reference, never the value it resolved to.
		return nil, secrets.ResolvedErrors(reg, errs, cfg, resolved, values)
	}
	return cfg, nil
}

// logIgnored logs the settings of an accepted configuration that have no
// effect: names nothing defines (validate reports them too), and other
// connectors' settings txsink accepts without them doing anything (see
// config.CheckKeys). They are logged at create and at each update.
func logIgnored(log *slog.Logger, name string, defs config.Defs, cfg map[string]string) {
	rep := config.CheckKeys(cfg, defs)
	if len(rep.Unknown) > 0 {
		log.Warn("connector configuration has settings txsink does not know; they are ignored (misspelt? see "+config.MigrationPage+")", "connector", name, "settings", rep.Unknown)
	}
	if len(rep.Ignored) > 0 {
		log.Info("connector configuration has other connectors' settings that have no effect in txsink (see "+config.MigrationPage+")", "connector", name, "settings", rep.Ignored)
	}
}

// identity returns where a raw configuration's secrets go: the sink's
// Spec.Identity ("" for a sink without one) and the converters' registry
// targets. A change of either drops the stored secrets it does not send
// again (secrets.Bind).
func identity(reg *connectors.Registry) secrets.Identity {
	return func(raw map[string]string) (string, error) {
		spec, v, _ := reg.Validate(raw)
		id := ""
		if spec.Identity != nil {
			var err error
			if id, err = spec.Identity(v); err != nil {
				return "", err
			}
		}
		if r := convert.RegistryTargets(raw); r != "" {
			id += " " + r
		}
		return id, nil
	}
}

// patchChange turns a PATCH body into a configuration change: a nil value
// removes the setting.
func patchChange(patch map[string]*string) secrets.Change {
	change := secrets.Change{Set: map[string]string{}}
	for k, v := range patch {
		if v == nil {
			change.Unset = append(change.Unset, k)
		} else {
			change.Set[k] = *v
		}
	}
	return change
}
