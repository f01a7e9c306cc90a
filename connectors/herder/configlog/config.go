package configlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/engine"
)

// Connector is a connector's shared state in the config topic.
type Connector struct {
	Name string
	// Config is the stored configuration (with config provider
	// references, never resolved values).
	Config map[string]string
	// Target is the target state (RUNNING when none was written).
	Target engine.TargetState
	// Tasks is the task count of the last commit record (0 before one).
	Tasks            int
	Created, Updated time.Time
}

// Restart is a restart request read from the config topic.
type Restart struct {
	Connector, ID            string
	IncludeTasks, OnlyFailed bool
}

// Change is what a batch of config topic records changed.
type Change struct {
	// Connectors names the connectors whose configuration, target state
	// or task count changed.
	Connectors []string
	// Restarts are the restart requests read after the log first caught
	// up (older ones are history, not requests).
	Restarts []Restart
	// TopicsReset names the connectors whose active topics were reset
	// (status topic: tombstones of their topic records).
	TopicsReset []string
	// KeyLearned is set when the batch held the cluster's signing key
	// (records written from now on are signed).
	KeyLearned bool
}

// Options configure a ConfigLog or a StatusLog.
type Options struct {
	Topic     string
	Bootstrap []string
	KafkaOpts []kgo.Opt
	Log       *slog.Logger
	// OnChange, when set, is called from the reading goroutine after each
	// batch of records that changed something; it must not block long.
	OnChange func(Change)
	// Keys is the cluster's signing key, shared by the config log (which
	// finds it), the status log and the leader's writer (nil: a keyring
	// of the log's own).
	Keys *Keyring
}

// ConfigLog reads the config topic from its start into the connectors'
// shared state, read_committed (the leader writes in transactions). Its
// methods are safe for concurrent use.
type ConfigLog struct {
	opt Options
	cl  *kgo.Client
	adm *kadm.Client
	log *slog.Logger

	mu       sync.Mutex
	conns    map[string]*Connector
	next     int64         // the offset after the last record read (control records included)
	moved    chan struct{} // closed and replaced whenever next moves
	live     bool          // caught up once: restart requests from now on are requests
	unknown  []string      // records refused (another version)
	keys     *Keyring
	rejected Rejected // records ignored: not signed by the cluster
}

// NewConfigLog returns a reader of opt.Topic; Run reads.
func NewConfigLog(opt Options) (*ConfigLog, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opt.Bootstrap...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{opt.Topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers take offsets too: with them the reader knows
		// it reached an end offset that a marker ends.
		kgo.KeepControlRecords(),
		kgo.ClientID("txsink-cluster-config"),
	}, opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	if opt.Keys == nil {
		opt.Keys = NewKeyring()
	}
	return &ConfigLog{opt: opt, cl: cl, adm: kadm.NewClient(cl), log: opt.Log, conns: map[string]*Connector{}, moved: make(chan struct{}), keys: opt.Keys, rejected: Rejected{}}, nil
}

// Run reads the topic until ctx ends. Whoever calls Run closes the log
// (Close) after it returned.
func (l *ConfigLog) Run(ctx context.Context) {
	for ctx.Err() == nil {
		fs, ok := poll(ctx, l.cl, l.log, "config")
		if !ok {
			return
		}
		var ch Change
		changed := map[string]bool{}
		var last int64 = -1
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if r.Attrs.IsControl() {
				return
			}
			l.apply(r, changed, &ch)
		})
		if last < 0 {
			continue
		}
		for n := range changed {
			ch.Connectors = append(ch.Connectors, n)
		}
		l.mu.Lock()
		l.next = last + 1
		close(l.moved)
		l.moved = make(chan struct{})
		l.mu.Unlock()
		if l.opt.OnChange != nil && (len(ch.Connectors) > 0 || len(ch.Restarts) > 0 || ch.KeyLearned) {
			l.opt.OnChange(ch)
		}
	}
}

// poll fetches the next records of a topic log, logging fetch errors; false
// once the client is closed.
func poll(ctx context.Context, cl *kgo.Client, log *slog.Logger, what string) (kgo.Fetches, bool) {
	fs := cl.PollFetches(ctx)
	if fs.IsClientClosed() {
		return nil, false
	}
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) {
			log.Warn("reading the "+what+" topic", "topic", t, "partition", p, "err", err)
		}
	})
	return fs, true
}

// apply applies one record; one it cannot apply is logged and left alone
// (and remembered when it is of another version).
func (l *ConfigLog) apply(r *kgo.Record, changed map[string]bool, ch *Change) {
	key := string(r.Key)
	if strings.HasPrefix(key, clusterKeyPrefix) {
		l.applyKey(r, ch)
		return
	}
	// Before the key record every record is one of a cluster that
	// predates signing; after it only signed ones are the cluster's.
	if l.keys.Known() {
		if reason := l.keys.verify(l.opt.Topic, r); reason != "" {
			l.reject(r, reason)
			return
		}
	}
	if err := l.applyRecord(key, r.Value, changed, ch); err != nil {
		l.log.Error("config topic record left unapplied", "topic", l.opt.Topic, "offset", r.Offset, "key", key, "err", err)
		if errors.Is(err, ErrVersion) {
			l.mu.Lock()
			l.unknown = append(l.unknown, fmt.Sprintf("%s at offset %d: %v", key, r.Offset, err))
			l.mu.Unlock()
		}
	}
}

// applyKey reads a key record: the first one sets the cluster's key,
// any later one is refused (a leader writes one only while none exists).
func (l *ConfigLog) applyKey(r *kgo.Record, ch *Change) {
	if l.keys.Known() {
		l.reject(r, ReasonSecondKey)
		return
	}
	b, err := parseKey(r.Value)
	if err != nil {
		l.log.Error("config topic key record left unapplied", "topic", l.opt.Topic, "offset", r.Offset, "err", err)
		l.reject(r, ReasonBadKey)
		return
	}
	if l.keys.setKey(b) {
		ch.KeyLearned = true
		l.log.Info("cluster signing key read: config and status records are checked from here on", "topic", l.opt.Topic, "offset", r.Offset)
	}
}

// reject counts and logs a record that the cluster did not write (without
// its key or value: they are whatever its producer chose).
func (l *ConfigLog) reject(r *kgo.Record, reason string) {
	l.mu.Lock()
	l.rejected[reason]++
	l.mu.Unlock()
	l.log.Warn("config topic record ignored: not signed by this cluster", "topic", l.opt.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
}

// Rejected returns the counts of records ignored because the cluster did
// not sign them, per reason.
func (l *ConfigLog) Rejected() Rejected {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejected.clone()
}

// Keys returns the log's keyring.
func (l *ConfigLog) Keys() *Keyring { return l.keys }

// update changes a connector's state under the lock, creating it unless
// the record is a tombstone.
func (l *ConfigLog) update(name string, tombstone bool, fn func(*Connector)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conns[name]
	if c == nil {
		if tombstone {
			return
		}
		c = &Connector{Name: name, Target: engine.TargetRunning}
		l.conns[name] = c
	}
	fn(c)
}

func (l *ConfigLog) applyRecord(key string, val []byte, changed map[string]bool, ch *Change) error {
	switch {
	case strings.HasPrefix(key, restartPrefix):
		var v restartValue
		if val == nil {
			return nil
		}
		if err := decode(val, &v); err != nil {
			return err
		}
		l.mu.Lock()
		live := l.live
		l.mu.Unlock()
		if live {
			ch.Restarts = append(ch.Restarts, Restart{Connector: strings.TrimPrefix(key, restartPrefix), ID: v.ID, IncludeTasks: v.IncludeTasks, OnlyFailed: v.OnlyFailed})
		}
	case strings.HasPrefix(key, connectorPrefix):
		name := strings.TrimPrefix(key, connectorPrefix)
		changed[name] = true
		if val == nil {
			l.mu.Lock()
			delete(l.conns, name)
			l.mu.Unlock()
			return nil
		}
		var v connectorValue
		if err := decode(val, &v); err != nil {
			return err
		}
		if v.Config == nil {
			return errors.New("connector record without a configuration")
		}
		l.update(name, false, func(c *Connector) { c.Config, c.Created, c.Updated = v.Config, v.Created, v.Updated })
	case strings.HasPrefix(key, targetPrefix):
		name := strings.TrimPrefix(key, targetPrefix)
		v := targetValue{State: engine.TargetRunning}
		if val != nil {
			if err := decode(val, &v); err != nil {
				return err
			}
			if _, err := engine.ParseTargetState(string(v.State)); err != nil || v.State == "" {
				return fmt.Errorf("target state %q is not RUNNING, PAUSED or STOPPED", v.State)
			}
		}
		changed[name] = true
		l.update(name, val == nil, func(c *Connector) { c.Target = v.State })
	case strings.HasPrefix(key, commitPrefix):
		name := strings.TrimPrefix(key, commitPrefix)
		var v commitValue
		if val != nil {
			if err := decode(val, &v); err != nil {
				return err
			}
			if v.Tasks < 0 {
				return fmt.Errorf("commit record with %d tasks", v.Tasks)
			}
		}
		changed[name] = true
		l.update(name, val == nil, func(c *Connector) { c.Tasks = v.Tasks })
	case strings.HasPrefix(key, taskPrefix):
		if _, _, ok := splitTask(strings.TrimPrefix(key, taskPrefix)); !ok {
			return errors.New("malformed task key")
		}
		if val != nil {
			var v taskValue
			return decode(val, &v)
		}
	default:
		return errors.New("unknown key")
	}
	return nil
}

// end returns the offset after the topic's last stable record (its last
// stable offset: records of open transactions lie beyond it).
func (l *ConfigLog) end(ctx context.Context) (int64, error) {
	lo, err := l.adm.ListCommittedOffsets(ctx, l.opt.Topic)
	if err != nil {
		return 0, err
	}
	o, ok := lo.Lookup(l.opt.Topic, 0)
	if !ok {
		return 0, fmt.Errorf("config topic %s: partition 0 missing", l.opt.Topic)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("config topic %s: %w", l.opt.Topic, o.Err)
	}
	return o.Offset, nil
}

// ReadToEnd waits until the log has read every record committed when it
// was called and returns the offset it reached. Cancelling ctx abandons
// the wait.
func (l *ConfigLog) ReadToEnd(ctx context.Context) (int64, error) {
	end, err := l.end(ctx)
	if err != nil {
		return 0, err
	}
	if err := l.WaitFor(ctx, end); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.live = true
	next := l.next
	l.mu.Unlock()
	return next, nil
}

// WaitFor waits until the log has read up to offset (exclusive).
func (l *ConfigLog) WaitFor(ctx context.Context, offset int64) error {
	for {
		l.mu.Lock()
		next, moved := l.next, l.moved
		l.mu.Unlock()
		if next >= offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading the config topic up to offset %d (at %d): %w", offset, next, ctx.Err())
		case <-moved:
		}
	}
}

// Offset returns the offset after the last record read.
func (l *ConfigLog) Offset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Connector returns a connector's state; false when it has no
// configuration (never created, or deleted).
func (l *ConfigLog) Connector(name string) (Connector, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conns[name]
	if c == nil || c.Config == nil {
		return Connector{}, false
	}
	out := *c
	out.Config = maps.Clone(c.Config)
	return out, true
}

// Connectors returns every connector that has a configuration.
func (l *ConfigLog) Connectors() map[string]Connector {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Connector{}
	for n, c := range l.conns {
		if c.Config != nil {
			cp := *c
			cp.Config = maps.Clone(c.Config)
			out[n] = cp
		}
	}
	return out
}

// Unknown describes the records refused because of their version (newest
// last); none when every record was read.
func (l *ConfigLog) Unknown() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.unknown...)
}

// Close stops reading; Run returns.
func (l *ConfigLog) Close() { l.cl.Close() }
