package engine

// Dead letters to a Kafka topic (errors.deadletterqueue.topic.name), as
// Kafka Connect's DeadLetterQueueReporter writes them: the original key,
// value, headers and timestamp, and with
// errors.deadletterqueue.context.headers.enable its __connect.errors.*
// headers.
//
// exactly_once: the dead letters of a round's prepared batches are
// produced inside the round's Kafka transaction, the one whose commit of
// the group's offsets is the two-phase decision (dlqDecider), so a dead
// letter is visible to read_committed consumers exactly when its batch
// committed. The other modes produce them after the batch committed in
// the sink, with the idempotent producer, retrying until Kafka takes them;
// a worker that dies between the two loses them from the topic (README,
// Dead letters).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/twophase"
)

// Kafka Connect's dead-letter context headers (DeadLetterQueueReporter).
const (
	dlqHeaderPrefix     = "__connect.errors."
	dlqHeaderTopic      = dlqHeaderPrefix + "topic"
	dlqHeaderPartition  = dlqHeaderPrefix + "partition"
	dlqHeaderOffset     = dlqHeaderPrefix + "offset"
	dlqHeaderConnector  = dlqHeaderPrefix + "connector.name"
	dlqHeaderTask       = dlqHeaderPrefix + "task.id"
	dlqHeaderStage      = dlqHeaderPrefix + "stage"
	dlqHeaderClass      = dlqHeaderPrefix + "class.name"
	dlqHeaderException  = dlqHeaderPrefix + "exception.class.name"
	dlqHeaderMessage    = dlqHeaderPrefix + "exception.message"
	dlqHeaderStacktrace = dlqHeaderPrefix + "exception.stacktrace"
)

// dlqExceptionClass is the exception class name txsink writes: Kafka
// Connect's exception for bad data, which its converters and sinks throw
// for the records that end in a dead-letter queue.
const dlqExceptionClass = "org.apache.kafka.connect.errors.DataException"

// dlqStage is Connect's stage (Stage enum) of a bad record's error and the
// class that failed: a transform, a converter (decoding) or the sink's
// write (TASK_PUT).
func (t *Task) dlqStage(e *record.Error) (stage, class string) {
	switch {
	case errors.Is(e, record.ErrTransform):
		return "TRANSFORMATION", t.conn.Class
	case errors.Is(e, record.ErrDecode):
		if c := t.valueConverter; c != "" {
			return "VALUE_CONVERTER", c
		}
		return "VALUE_CONVERTER", t.conn.Class
	default:
		return "TASK_PUT", t.conn.Class
	}
}

// dlqRecord is the dead letter of one bad record.
func (t *Task) dlqRecord(l connectors.DeadLetter) *kgo.Record {
	src := l.Record
	r := &kgo.Record{
		Topic:     t.conn.DLQTopic,
		Key:       src.Key,
		Value:     src.Value,
		Timestamp: src.Timestamp,
		Headers:   append([]kgo.RecordHeader(nil), src.Headers...),
	}
	if !t.conn.DLQContextHeaders {
		return r
	}
	stage, class := t.dlqStage(l.Err)
	msg := l.Err.Error()
	trace := dlqExceptionClass + ": " + msg
	for cause := errors.Unwrap(error(l.Err)); cause != nil; cause = errors.Unwrap(cause) {
		trace += "\nCaused by: " + cause.Error()
	}
	add := func(k, v string) { r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(dlqHeaderTopic, src.Topic)
	add(dlqHeaderPartition, strconv.Itoa(int(src.Partition)))
	add(dlqHeaderOffset, strconv.FormatInt(src.Offset, 10))
	add(dlqHeaderConnector, t.conn.Name)
	add(dlqHeaderTask, strconv.Itoa(t.id))
	add(dlqHeaderStage, stage)
	add(dlqHeaderClass, class)
	add(dlqHeaderException, dlqExceptionClass)
	add(dlqHeaderMessage, msg)
	add(dlqHeaderStacktrace, trace)
	return r
}

// ensureDLQTopic creates the dead-letter topic when it is missing, with
// one partition and errors.deadletterqueue.topic.replication.factor, as
// Connect does. Cancelling ctx abandons the creation.
func (t *Task) ensureDLQTopic(ctx context.Context, cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	res, err := adm.CreateTopic(ctx, 1, int16(t.conn.DLQReplication), nil, t.conn.DLQTopic)
	if err == nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating the dead-letter topic %s: %w", t.conn.DLQTopic, err)
	}
	return nil
}

// dlqDecider produces a round's dead letters inside the round's Kafka
// transaction just before the decision commits it. A dead letter that
// Kafka refuses aborts the round (nothing of it becomes visible), which is
// then retried from the stored offsets.
type dlqDecider struct {
	twophase.Decider
	t       *Task
	cl      *kgo.Client
	batches []*twophase.Batch // the round's batches (set before each round)
	sent    int               // dead letters produced in the round
}

// Decide implements twophase.Decider.
func (d *dlqDecider) Decide(ctx context.Context, commit bool) (bool, error) {
	d.sent = 0
	if commit {
		letters := connectors.DeadLettersOf(d.batches)
		if len(letters) > 0 {
			recs := make([]*kgo.Record, len(letters))
			for i, l := range letters {
				recs[i] = d.t.dlqRecord(l)
			}
			if err := d.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				d.t.log.Warn("producing the round's dead letters failed; aborting the round", "topic", d.t.conn.DLQTopic, "dead_letters", len(recs), "err", err)
				commit = false
			} else {
				d.sent = len(recs)
			}
		}
	}
	committed, err := d.Decider.Decide(ctx, commit)
	if !committed {
		d.sent = 0
	}
	return committed, err
}

// produceDeadLetters produces the dead letters of batches that committed
// in the sink (the modes without a Kafka transaction), retrying until
// Kafka takes them or ctx ends. It returns how many it produced.
func (t *Task) produceDeadLetters(ctx context.Context, cl *kgo.Client, letters []connectors.DeadLetter) int {
	if len(letters) == 0 {
		return 0
	}
	recs := make([]*kgo.Record, len(letters))
	for i, l := range letters {
		recs[i] = t.dlqRecord(l)
	}
	for attempt := 0; ; attempt++ {
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil {
			return len(recs)
		}
		t.log.Warn("producing dead letters failed; retrying", "topic", t.conn.DLQTopic, "dead_letters", len(recs), "err", err)
		if sleepCtx(ctx, backoffFor(attempt)) != nil {
			return 0
		}
		// Records of a failed ProduceSync are produced again whole.
		for _, r := range recs {
			r.Partition, r.Offset = 0, 0
		}
	}
}
