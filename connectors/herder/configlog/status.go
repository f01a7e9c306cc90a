package configlog

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/engine"
)

// Status is the state of a connector or task as the worker that runs it
// last wrote it.
type Status struct {
	State engine.State
	// Trace is the error of a FAILED state (secrets removed).
	Trace string
	// WorkerID is the writer's id (its advertised host:port).
	WorkerID string
	// Generation is the cluster generation of the assignment under which
	// the writer ran it: a write of an older generation than the stored
	// one, by another worker (a deposed owner), is not applied.
	Generation int32
}

// StatusLog reads the status topic from its start and writes this
// worker's statuses to it (an idempotent producer; writes are
// asynchronous, in order per key). Its methods are safe for concurrent use.
type StatusLog struct {
	opt Options
	cl  *kgo.Client
	log *slog.Logger

	mu       sync.Mutex
	conns    map[string]*Status
	tasks    map[string]map[int]*Status
	topics   map[string]map[string]bool // connector → its active topics
	keys     *Keyring
	rejected Rejected
}

// NewStatusLog returns the status log of opt.Topic; Run reads it.
func NewStatusLog(opt Options) (*StatusLog, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opt.Bootstrap...),
		kgo.ConsumeTopics(opt.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic(opt.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ClientID("txsink-cluster-status"),
	}, opt.KafkaOpts...)...)
	if err != nil {
		return nil, err
	}
	if opt.Keys == nil {
		opt.Keys = NewKeyring()
	}
	return &StatusLog{opt: opt, cl: cl, log: opt.Log, conns: map[string]*Status{}, tasks: map[string]map[int]*Status{}, topics: map[string]map[string]bool{}, keys: opt.Keys, rejected: Rejected{}}, nil
}

// Run reads the topic until ctx ends. Whoever calls Run closes the log
// after it returned. Start it once the config log read its topic to the
// end, so that it knows the cluster's key if there is one: until a key is
// known, unsigned records are those of a cluster that predates signing.
func (l *StatusLog) Run(ctx context.Context) {
	for ctx.Err() == nil {
		fs, ok := poll(ctx, l.cl, l.log, "status")
		if !ok {
			return
		}
		changed, reset := map[string]bool{}, map[string]bool{}
		fs.EachRecord(func(r *kgo.Record) {
			if !l.trusted(ctx, r) {
				return
			}
			if strings.HasPrefix(string(r.Key), statusTopic) {
				if name, tombstone := l.applyTopic(r); tombstone {
					reset[name] = true
				}
				return
			}
			if name := l.apply(r); name != "" {
				changed[name] = true
			}
		})
		if l.opt.OnChange != nil && len(changed)+len(reset) > 0 {
			ch := Change{}
			for n := range changed {
				ch.Connectors = append(ch.Connectors, n)
			}
			for n := range reset {
				ch.TopicsReset = append(ch.TopicsReset, n)
			}
			l.opt.OnChange(ch)
		}
	}
}

// trusted reports whether a record was written by the cluster: with the
// cluster's key known, its signature must be valid; a signed record read
// before the key is known waits for it (a worker signed it, so the config
// topic holds the key). A record that is not trusted is counted and
// logged without its content.
func (l *StatusLog) trusted(ctx context.Context, r *kgo.Record) bool {
	if !l.keys.Known() {
		if !signed(r) {
			return true
		}
		if err := l.keys.wait(ctx); err != nil {
			return false
		}
	}
	reason := l.keys.verify(l.opt.Topic, r)
	if reason == "" {
		return true
	}
	l.mu.Lock()
	l.rejected[reason]++
	l.mu.Unlock()
	l.log.Warn("status topic record ignored: not signed by this cluster", "topic", l.opt.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	return false
}

// Rejected returns the counts of records ignored because the cluster did
// not sign them, per reason.
func (l *StatusLog) Rejected() Rejected {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejected.clone()
}

// apply applies one record and returns the connector it concerns ("" when
// none or refused).
func (l *StatusLog) apply(r *kgo.Record) string {
	key := string(r.Key)
	var st *Status
	if r.Value != nil {
		var v statusValue
		if err := decode(r.Value, &v); err != nil {
			l.log.Error("status topic record left unapplied", "topic", l.opt.Topic, "partition", r.Partition, "offset", r.Offset, "key", key, "err", err)
			return ""
		}
		st = &Status{State: v.State, Trace: v.Trace, WorkerID: v.WorkerID, Generation: v.Generation}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case strings.HasPrefix(key, statusConnector):
		name := strings.TrimPrefix(key, statusConnector)
		if !newer(l.conns[name], st) {
			return ""
		}
		if st == nil {
			delete(l.conns, name)
		} else {
			l.conns[name] = st
		}
		return name
	case strings.HasPrefix(key, statusTask):
		name, id, ok := splitTask(strings.TrimPrefix(key, statusTask))
		if !ok {
			return ""
		}
		ts := l.tasks[name]
		if !newer(ts[id], st) {
			return ""
		}
		if st == nil {
			delete(ts, id)
			return name
		}
		if ts == nil {
			ts = map[int]*Status{}
			l.tasks[name] = ts
		}
		ts[id] = st
		return name
	}
	return ""
}

// applyTopic applies an active topic record; it returns its connector and
// whether it was a tombstone (a reset).
func (l *StatusLog) applyTopic(r *kgo.Record) (string, bool) {
	key := strings.TrimPrefix(string(r.Key), statusTopic)
	i := strings.LastIndex(key, topicConnector)
	if i <= 0 {
		l.log.Error("status topic record with a malformed key left unapplied", "topic", l.opt.Topic, "key", string(r.Key))
		return "", false
	}
	topic, name := key[:i], key[i+len(topicConnector):]
	if r.Value != nil {
		var v topicValue
		if err := decode(r.Value, &v); err != nil {
			l.log.Error("status topic record left unapplied", "topic", l.opt.Topic, "partition", r.Partition, "offset", r.Offset, "key", string(r.Key), "err", err)
			return "", false
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Value == nil {
		delete(l.topics[name], topic)
		return name, true
	}
	if l.topics[name] == nil {
		l.topics[name] = map[string]bool{}
	}
	l.topics[name][topic] = true
	return name, false
}

// Topics returns the connector's active topics, sorted.
func (l *StatusLog) Topics(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.topics[name]))
}

// PutTopic writes that the connector wrote records from topic (Kafka
// Connect's active topics; asynchronously).
func (l *StatusLog) PutTopic(name, topic string) {
	v := encode(topicValue{V: Version, Topic: topic, Connector: name, Discovered: time.Now().UnixMilli()})
	l.produce(&kgo.Record{Key: []byte(StatusTopicKey(name, topic)), Value: v})
}

// DeleteTopics writes tombstones for the connector's active topics (a
// reset; every worker reading them resets its own record of them).
func (l *StatusLog) DeleteTopics(name string, topics []string) {
	for _, t := range topics {
		l.produce(&kgo.Record{Key: []byte(StatusTopicKey(name, t))})
	}
}

// newer reports whether next may replace cur: a tombstone always does; a
// status of another worker only with a generation at least cur's.
func newer(cur, next *Status) bool {
	return next == nil || cur == nil || next.WorkerID == cur.WorkerID || next.Generation >= cur.Generation
}

// Connector returns the connector's last status.
func (l *StatusLog) Connector(name string) (Status, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.conns[name]
	if s == nil {
		return Status{}, false
	}
	return *s, true
}

// Task returns a task's last status.
func (l *StatusLog) Task(name string, id int) (Status, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.tasks[name][id]
	if s == nil {
		return Status{}, false
	}
	return *s, true
}

// PutConnector writes the connector's status (asynchronously).
func (l *StatusLog) PutConnector(name string, s Status) {
	l.put(StatusConnectorKey(name), &s)
}

// PutTask writes a task's status (asynchronously).
func (l *StatusLog) PutTask(name string, id int, s Status) {
	l.put(StatusTaskKey(name, id), &s)
}

// Delete writes tombstones for the statuses of a connector, of its tasks
// below tasks, and of its active topics.
func (l *StatusLog) Delete(name string, tasks int) {
	l.put(StatusConnectorKey(name), nil)
	for i := range tasks {
		l.put(StatusTaskKey(name, i), nil)
	}
	l.DeleteTopics(name, l.Topics(name))
}

func (l *StatusLog) put(key string, s *Status) {
	r := &kgo.Record{Key: []byte(key)}
	if s != nil {
		r.Value = encode(statusValue{V: Version, State: s.State, Trace: s.Trace, WorkerID: s.WorkerID, Generation: s.Generation})
	}
	l.produce(r)
}

func (l *StatusLog) produce(r *kgo.Record) {
	r.Topic = l.opt.Topic
	l.keys.sign(r)
	l.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		if err != nil {
			l.log.Warn("writing to the status topic", "key", string(r.Key), "err", err)
		}
	})
}

// Flush waits up to d for the statuses written so far to be acknowledged.
func (l *StatusLog) Flush(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = l.cl.Flush(ctx)
}

// Close stops reading and writing; Run returns.
func (l *StatusLog) Close() { l.cl.Close() }
