package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// Offsets reads the offsets stored in the connector's sink, of the
// partitions that have one: through its open sink when it runs on this
// worker, else through a sink opened from raw for the call (bounded by
// Options.OpenTimeout). Cancelling ctx abandons the read.
func (e *Engine) Offsets(ctx context.Context, name string, raw map[string]string) ([]offsets.Position, error) {
	var ps []offsets.Position
	err := e.withSink(ctx, name, raw, func(s connectors.Sink) error {
		var err error
		ps, err = s.Positions(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := ps[:0]
	for _, p := range ps {
		if p.Next != offsets.Unset {
			out = append(out, p)
		}
	}
	return out, nil
}

// EditOffsets edits the offsets stored in the connector's sink in one sink
// transaction that also bumps the partitions' fences (Sink.ResetOffsets):
// with all it deletes every one, else it sets the listed ones (Next ==
// offsets.Unset clears one). It returns an error wrapping offsets.ErrBusy
// while an in-doubt batch holds an offset. The consumer group's committed
// offsets, a mirror for lag tooling, follow afterwards (best effort,
// logged). The herder makes sure the connector runs nowhere. Cancelling
// ctx before the sink commits leaves the offsets as they were.
func (e *Engine) EditOffsets(ctx context.Context, name string, raw map[string]string, all bool, positions []offsets.Position) error {
	err := e.withSink(ctx, name, raw, func(s connectors.Sink) error { return s.ResetOffsets(ctx, all, positions) })
	if err != nil {
		return err
	}
	if all {
		e.log.Info("connector offsets reset", "connector", name)
	} else {
		e.log.Info("connector offsets altered", "connector", name, "partitions", len(positions))
	}
	e.mirrorGroup(ctx, raw, all, positions)
	return nil
}

// withSink runs fn with the running connector's sink, or with a sink opened
// from raw for the call.
func (e *Engine) withSink(ctx context.Context, name string, raw map[string]string, fn func(connectors.Sink) error) error {
	if c := e.lookup(name); c != nil {
		c.mu.Lock()
		run, secs := c.run, c.secrets
		c.mu.Unlock()
		if run != nil {
			return scrubErr(fn(run.Sink), secs)
		}
	}
	octx, cancel := context.WithTimeout(ctx, e.opt.OpenTimeout)
	defer cancel()
	resolved, values, err := e.resolve(octx, raw)
	if err != nil {
		return err
	}
	secs := append(secrets.Of(e.reg, resolved), secrets.Provided(values)...)
	defer e.holdSecrets(secs)() // the sink's log lines
	err = e.withOpenSink(octx, name, resolved, fn)
	return scrubErr(err, secs)
}

// withOpenSink opens the sink of a resolved configuration for fn.
func (e *Engine) withOpenSink(octx context.Context, name string, raw map[string]string, fn func(connectors.Sink) error) error {
	spec, v, errs := e.reg.Validate(raw)
	if len(errs) > 0 {
		return errs
	}
	conn := config.ParseConnector(v)
	pipe, err := convert.NewPipeline(v, convert.WithRegistryPolicy(e.reg.Policy().Registry))
	if err != nil {
		return err
	}
	s, err := spec.New(octx, connectors.Env{Bootstrap: e.opt.Bootstrap, KafkaOpts: e.opt.KafkaOpts, Log: e.log.With("connector", name), Pipeline: pipe, Policy: e.reg.Policy()}, conn, v)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// mirrorGroup makes the consumer group's committed offsets follow an
// administrative edit. The sink stays the source of truth (consumption
// resumes from it), so a failure here is only logged.
func (e *Engine) mirrorGroup(ctx context.Context, raw map[string]string, all bool, positions []offsets.Position) {
	_, v, _ := e.reg.Validate(raw)
	group := config.ParseConnector(v).GroupID
	adm, err := e.adminClient()
	if err != nil {
		e.log.Warn("offsets edited in the sink; could not mirror them to the consumer group", "group", group, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if all {
		resp, err := adm.DeleteGroups(ctx, group)
		if err == nil {
			if r, ok := resp[group]; ok && r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
				err = r.Err
			}
		}
		if err != nil {
			e.log.Warn("offsets reset in the sink; could not delete the consumer group's offsets", "group", group, "err", err)
		}
		return
	}
	offs := kadm.Offsets{}
	var del []string
	for _, p := range positions {
		if p.Next == offsets.Unset {
			del = append(del, fmt.Sprintf("%s[%d]", p.Topic, p.Partition))
			continue
		}
		offs.Add(kadm.Offset{Topic: p.Topic, Partition: p.Partition, At: p.Next, LeaderEpoch: -1})
	}
	if len(offs) > 0 {
		if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
			e.log.Warn("offsets altered in the sink; could not mirror them to the consumer group", "group", group, "err", err)
		}
	}
	if len(del) > 0 {
		e.log.Info("cleared partitions keep their consumer group offsets (a mirror only)", "group", group, "partitions", del)
	}
}

// scrubbedError is an error whose message had secrets removed; it still
// unwraps to the original, so its kinds (errors.Is) stay.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubErr removes secrets from err's message, keeping what it wraps.
func scrubErr(err error, secs []string) error {
	if err == nil {
		return nil
	}
	if msg := secrets.ScrubString(err.Error(), secs); msg != err.Error() {
		return &scrubbedError{msg: msg, err: err}
	}
	return err
}

// errClosed is returned for the admin client once the engine is closed.
var errClosed = errors.New("the worker is shutting down")

// adminClient returns the worker's shared Kafka admin client; none once
// the engine is closed (Close closes it).
func (e *Engine) adminClient() (*kadm.Client, error) {
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if e.admin != nil {
		return e.admin, nil
	}
	if e.isClosed() {
		return nil, errClosed
	}
	if len(e.opt.Bootstrap) == 0 {
		return nil, errors.New("no Kafka bootstrap servers configured")
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.opt.Bootstrap...), kgo.ClientID("txsink-worker-admin")}, e.opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	e.adminCl, e.admin = cl, kadm.NewClient(cl)
	return e.admin, nil
}

// ClusterID returns the Kafka cluster id, or "" when Kafka does not answer
// before ctx ends.
func (e *Engine) ClusterID(ctx context.Context) string {
	e.adminMu.Lock()
	id := e.clusterID
	e.adminMu.Unlock()
	if id != "" {
		return id
	}
	adm, err := e.adminClient()
	if err != nil {
		return ""
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return ""
	}
	e.adminMu.Lock()
	e.clusterID = md.Cluster
	e.adminMu.Unlock()
	return md.Cluster
}
