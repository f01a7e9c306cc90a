package configlog

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/connectors/engine"
)

// producer is a plain producer of the cluster's Kafka: what a record that
// reaches the topics another way (a connector's dead letters, a producer
// with write access) looks like.
func producer(t *testing.T, opt Options) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(opt.Bootstrap...), kgo.DefaultProduceTopic(opt.Topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) int64 {
	t.Helper()
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	return res[len(res)-1].Record.Offset
}

// forgeries are the ways a record can come without the cluster's
// signature: none, a wrong one, one copied from another record, two.
func forgeries(rec Record, copied []byte) []*kgo.Record {
	hdr := func(v []byte) []kgo.RecordHeader { return []kgo.RecordHeader{{Key: SignatureHeader, Value: v}} }
	return []*kgo.Record{
		{Key: []byte(rec.Key), Value: rec.Value},
		{Key: []byte(rec.Key), Value: rec.Value, Headers: hdr(bytes.Repeat([]byte{0xff}, 32))},
		{Key: []byte(rec.Key), Value: rec.Value, Headers: hdr(copied)},
		{Key: []byte(rec.Key), Value: rec.Value, Headers: append(hdr(copied), hdr(nil)...)},
		{Key: []byte(rec.Key), Value: rec.Value, Headers: []kgo.RecordHeader{{Key: strings.ToUpper(SignatureHeader), Value: copied}}},
	}
}

// TestConfigLogRefusesUnsigned: once the cluster's key is in the config
// topic, a record that a plain producer wrote there (the two-record attack
// of issue 25: stop a connector, replace its configuration) is ignored and
// counted, in every spelling of its signature, while the leader's records
// apply; a second key record changes nothing, and a new reader that
// replays the log agrees.
func TestConfigLogRefusesUnsigned(t *testing.T) {
	_, opt := cluster(t)
	ctx := ctxT(t)
	opt.Keys = NewKeyring()
	l := startLog(t, opt)
	if _, err := l.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(ctx, opt, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	key, err := PutClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, []Record{key}); err != nil {
		t.Fatal(err)
	}
	// The leader signs once its reader read the key (ensureKey).
	if _, err := l.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{"name": "victim", "topics": "orders"}
	now := time.Now()
	off, err := w.Write(ctx, append([]Record{PutConnector("victim", cfg, now, now)}, PutTasks("victim", cfg, 1, 0)...))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFor(ctx, off+1); err != nil {
		t.Fatal(err)
	}
	if !opt.Keys.Known() {
		t.Fatal("the key record was not read")
	}
	// A signature the cluster made, for another record.
	var copied []byte
	for _, h := range signedCopy(opt, PutTarget("other", engine.TargetRunning)).Headers {
		copied = h.Value
	}
	cl := producer(t, opt)
	evil := map[string]string{"name": "victim", "topics": "evil", "connection.url": "postgres:///?host=/var/run/postgresql"}
	var forged []*kgo.Record
	forged = append(forged, forgeries(PutTarget("victim", engine.TargetStopped), copied)...)
	forged = append(forged, forgeries(PutConnector("victim", evil, now, now), copied)...)
	forged = append(forged, forgeries(PutConnector("intruder", evil, now, now), copied)...)
	forged = append(forged, &kgo.Record{Key: []byte("connector-victim")}) // an unsigned tombstone
	second, _ := PutClusterKey()
	forged = append(forged, &kgo.Record{Key: []byte(second.Key), Value: second.Value})
	last := produce(t, ctx, cl, forged...)
	if err := l.WaitFor(ctx, last+1); err != nil {
		t.Fatal(err)
	}
	check := func(l *ConfigLog, who string) {
		t.Helper()
		c, ok := l.Connector("victim")
		if !ok || c.Target != engine.TargetRunning || c.Config["topics"] != "orders" || c.Config["connection.url"] != "" {
			t.Errorf("%s: victim %+v %v: a forged record applied", who, c, ok)
		}
		if _, ok := l.Connector("intruder"); ok {
			t.Errorf("%s: a forged connector exists", who)
		}
		r := l.Rejected()
		// Per forged record: no header and a header of another name are
		// unsigned; a wrong, a copied and a doubled signature are bad.
		if r[ReasonUnsigned] != 7 || r[ReasonBadSignature] != 9 || r[ReasonSecondKey] != 1 {
			t.Errorf("%s: rejected %v, want 7 unsigned, 9 bad signatures, 1 second key", who, r)
		}
	}
	check(l, "reader")
	// The leader's records still apply, signed with the first key.
	off, err = w.Write(ctx, []Record{PutTarget("victim", engine.TargetPaused)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFor(ctx, off+1); err != nil {
		t.Fatal(err)
	}
	if c, _ := l.Connector("victim"); c.Target != engine.TargetPaused {
		t.Errorf("the leader's target state did not apply: %s", c.Target)
	}
	// A new worker's reader replays the topic alike.
	opt2 := opt
	opt2.Keys = NewKeyring()
	l2 := startLog(t, opt2)
	if _, err := l2.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := l2.Connector("victim"); c.Target != engine.TargetPaused || c.Config["topics"] != "orders" {
		t.Errorf("replay: victim %+v", c)
	}
	if _, ok := l2.Connector("intruder"); ok {
		t.Error("replay: a forged connector exists")
	}
	if r := l2.Rejected(); r[ReasonUnsigned]+r[ReasonBadSignature]+r[ReasonSecondKey] != 17 {
		t.Errorf("replay: rejected %v", r)
	}
}

// signedCopy is the record the cluster's writer would produce for rec.
func signedCopy(opt Options, rec Record) *kgo.Record {
	r := &kgo.Record{Topic: opt.Topic, Key: []byte(rec.Key), Value: rec.Value}
	opt.Keys.sign(r)
	return r
}

// TestConfigLogUpgrade: a config topic written by a txsink without
// signing is read as before; the records before the key record apply, an
// unsigned one after it does not.
func TestConfigLogUpgrade(t *testing.T) {
	_, opt := cluster(t)
	ctx := ctxT(t)
	old := producer(t, opt) // an older txsink's writer: no signature
	now := time.Now()
	legacy := PutConnector("legacy", map[string]string{"name": "legacy"}, now, now)
	target := PutTarget("legacy", engine.TargetPaused)
	produce(t, ctx, old, &kgo.Record{Key: []byte(legacy.Key), Value: legacy.Value}, &kgo.Record{Key: []byte(target.Key), Value: target.Value})
	opt.Keys = NewKeyring()
	l := startLog(t, opt)
	if _, err := l.ReadToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	if c, ok := l.Connector("legacy"); !ok || c.Target != engine.TargetPaused {
		t.Fatalf("legacy connector %+v %v", c, ok)
	}
	w, err := NewWriter(ctx, opt, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	key, _ := PutClusterKey()
	if _, err := w.Write(ctx, []Record{key}); err != nil {
		t.Fatal(err)
	}
	late := PutTarget("legacy", engine.TargetStopped)
	last := produce(t, ctx, old, &kgo.Record{Key: []byte(late.Key), Value: late.Value})
	if err := l.WaitFor(ctx, last+1); err != nil {
		t.Fatal(err)
	}
	if c, _ := l.Connector("legacy"); c.Target != engine.TargetPaused {
		t.Errorf("an unsigned record after the key applied: %s", c.Target)
	}
	if r := l.Rejected(); r[ReasonUnsigned] != 1 {
		t.Errorf("rejected %v", r)
	}
	off, err := w.Write(ctx, []Record{PutTarget("legacy", engine.TargetRunning)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFor(ctx, off+1); err != nil {
		t.Fatal(err)
	}
	if c, _ := l.Connector("legacy"); c.Target != engine.TargetRunning {
		t.Errorf("a signed record after the key did not apply: %s", c.Target)
	}
}

// TestStatusLogRefusesUnsigned: with the cluster's key known, statuses a
// plain producer wrote to the status topic are ignored and counted; the
// workers' signed ones apply. A worker that reads a signed status before
// it knows the key waits for the key rather than taking it unchecked.
func TestStatusLogRefusesUnsigned(t *testing.T) {
	// One partition: the log applies its records in the order they were
	// written, so once a later record is applied every earlier one was
	// read (and applied or refused).
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	writerKeys := NewKeyring()
	key, _ := PutClusterKey()
	secret, err := parseKey(key.Value)
	if err != nil {
		t.Fatal(err)
	}
	writerKeys.setKey(secret)
	opt := Options{Topic: "status", Bootstrap: c.ListenAddrs(), Log: quiet, Keys: writerKeys}
	w, err := NewStatusLog(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// The reader does not know the key yet. It starts on an unsigned
	// record (a cluster that predates signing), applied at once.
	p := producer(t, opt)
	produce(t, ctx, p, &kgo.Record{Key: []byte(StatusTaskKey("early", 0)), Value: encode(statusValue{V: Version, State: engine.StateRunning, WorkerID: "a:8083", Generation: 1})})
	readerKeys := NewKeyring()
	changes := make(chan Change, 64)
	ropt := Options{Topic: "status", Bootstrap: c.ListenAddrs(), Log: quiet, Keys: readerKeys, OnChange: func(ch Change) { changes <- ch }}
	r, err := NewStatusLog(ropt)
	if err != nil {
		t.Fatal(err)
	}
	// The highest offset the reader's Kafka client asked for, and a token
	// at each of its fetches.
	var fetchedTo atomic.Int64
	fetching := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, pp := range tp.Partitions {
				if pp.FetchOffset > fetchedTo.Load() {
					fetchedTo.Store(pp.FetchOffset)
				}
			}
		}
		select {
		case fetching <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	defer func() { cancel(); r.Close(); <-done }()
	waitApplied := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-changes:
			case <-ctx.Done():
				t.Fatalf("%s: not applied (rejected %v)", what, r.Rejected())
			}
		}
	}
	waitApplied("the unsigned status", func() bool { _, ok := r.Task("early", 0); return ok })

	// Then, in one batch, signed statuses, one of them signed with another
	// cluster's key, and a signed marker. Once the reader's client asks
	// for the offset after the marker, the reader has taken the fetch that
	// holds them all while the key is still unknown: a reader that took
	// signed records unchecked would apply the forged one; the reader
	// waits for the key, then verifies each.
	signedBy := func(k *Keyring, key string, st Status) *kgo.Record {
		r := &kgo.Record{Topic: "status", Key: []byte(key), Value: encode(statusValue{V: Version, State: st.State, Trace: st.Trace, WorkerID: st.WorkerID, Generation: st.Generation})}
		k.sign(r)
		return r
	}
	otherKeys := NewKeyring()
	otherKey, _ := PutClusterKey()
	otherSecret, _ := parseKey(otherKey.Value)
	otherKeys.setKey(otherSecret)
	good := Status{State: engine.StateRunning, WorkerID: "a:8083", Generation: 3}
	end := produce(t, ctx, p,
		signedBy(writerKeys, StatusConnectorKey("victim"), good),
		signedBy(writerKeys, StatusTaskKey("victim", 0), good),
		signedBy(otherKeys, StatusTaskKey("victim", 2), Status{State: engine.StateFailed, Trace: "forged before the key", WorkerID: "evil:1", Generation: 99}),
		signedBy(writerKeys, StatusTaskKey("victim", 3), good),
	)
	for fetchedTo.Load() <= end {
		select {
		case <-fetching:
		case <-ctx.Done():
			t.Fatal("the reader's client did not fetch the signed records")
		}
	}
	if _, ok := r.Task("victim", 2); ok {
		t.Fatal("a signed status applied before the key was known")
	}
	readerKeys.setKey(secret)
	waitApplied("the signed statuses", func() bool { _, ok := r.Task("victim", 3); return ok })
	if s, ok := r.Task("victim", 0); !ok || s.State != engine.StateRunning {
		t.Errorf("task 0 status %+v %v", s, ok)
	}
	if s, ok := r.Task("victim", 2); ok {
		t.Errorf("status signed with another key applied: %+v", s)
	}
	if rej := r.Rejected(); rej[ReasonBadSignature] != 1 {
		t.Errorf("rejected %v, want the status signed with another key", rej)
	}
	// Forged statuses: a newer generation, another worker, FAILED.
	st := encode(statusValue{V: Version, State: engine.StateFailed, Trace: "forged", WorkerID: "evil:1", Generation: 99})
	hdr := []kgo.RecordHeader{{Key: SignatureHeader, Value: bytes.Repeat([]byte{1}, 32)}}
	produce(t, ctx, p,
		&kgo.Record{Key: []byte(StatusConnectorKey("victim")), Value: st},
		&kgo.Record{Key: []byte(StatusTaskKey("victim", 0)), Value: st, Headers: hdr},
		&kgo.Record{Key: []byte(StatusTaskKey("victim", 0))},
		&kgo.Record{Key: []byte(StatusTopicKey("victim", "secret-topic")), Value: encode(topicValue{V: Version, Topic: "secret-topic", Connector: "victim"})},
	)
	// A signed status written after them marks the end.
	w.PutTask("victim", 1, Status{State: engine.StatePaused, WorkerID: "a:8083", Generation: 3})
	w.Flush(10 * time.Second)
	waitApplied("the end marker", func() bool { _, ok := r.Task("victim", 1); return ok })
	if s, _ := r.Connector("victim"); s.State != engine.StateRunning || s.WorkerID != "a:8083" {
		t.Errorf("connector status %+v: a forged status applied", s)
	}
	if s, ok := r.Task("victim", 0); !ok || s.State != engine.StateRunning {
		t.Errorf("task 0 status %+v %v: a forged status applied", s, ok)
	}
	if len(r.Topics("victim")) != 0 {
		t.Errorf("forged active topics %v", r.Topics("victim"))
	}
	if rej := r.Rejected(); rej[ReasonUnsigned] != 3 || rej[ReasonBadSignature] != 2 {
		t.Errorf("rejected %v, want 3 unsigned and 2 with a bad signature", rej)
	}
}

// TestKeyringHidesKey: the key never shows in a keyring's printed form.
func TestKeyringHidesKey(t *testing.T) {
	k := NewKeyring()
	key, _ := PutClusterKey()
	secret, _ := parseKey(key.Value)
	k.setKey(secret)
	for _, s := range []string{k.String(), strings.ReplaceAll(fmtV(k), " ", "")} {
		if strings.Contains(s, string(secret)) || strings.Contains(s, fmtHex(secret)) {
			t.Errorf("key shown: %s", s)
		}
	}
	if _, err := parseKey([]byte(`{"v":1,"algorithm":"HmacSHA256","key":"c2hvcnQ="}`)); err == nil || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("short key: %v", err)
	}
}

func fmtV(k *Keyring) string { return fmt.Sprintf("%v %+v %s", k, k, k) }
func fmtHex(b []byte) string { return hex.EncodeToString(b) }
