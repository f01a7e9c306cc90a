package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
)

// TestDeadLetterRecord: a dead letter carries the original key, value,
// headers and timestamp and, with context headers on, Kafka Connect's
// __connect.errors.* headers with its values (DeadLetterQueueReporter).
func TestDeadLetterRecord(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	src := &kgo.Record{Topic: "orders", Partition: 2, Offset: 41, Key: []byte("k"), Value: []byte("{oops"), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("abc")}}}
	cases := []struct {
		name, stage, class string
		err                error
	}{
		{"decode", "VALUE_CONVERTER", "org.apache.kafka.connect.json.JsonConverter", fmt.Errorf("%w: invalid character", record.ErrDecode)},
		{"transform", "TRANSFORMATION", "postgres", fmt.Errorf("%w: field x missing", record.ErrTransform)},
		{"write", "TASK_PUT", "postgres", &record.FieldError{Field: "qty", Err: fmt.Errorf("%w: not a number", record.ErrCoerce)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := NewTask(config.Connector{Name: "sink-1", Class: "postgres", DLQTopic: "dlq", DLQContextHeaders: true}, 3, nil, TaskOptions{})
			task.valueConverter = "org.apache.kafka.connect.json.JsonConverter"
			e := record.NewError(src, c.err)
			r := task.dlqRecord(connectors.DeadLetter{Record: src, Err: e})
			if r.Topic != "dlq" || string(r.Key) != "k" || string(r.Value) != "{oops" || !r.Timestamp.Equal(ts) {
				t.Fatalf("dead letter %+v", r)
			}
			got := map[string]string{}
			for i, h := range r.Headers {
				if i == 0 && h.Key != "trace-id" {
					t.Errorf("the original header is not kept first: %v", r.Headers)
				}
				got[h.Key] = string(h.Value)
			}
			want := map[string]string{
				"trace-id":                              "abc",
				"__connect.errors.topic":                "orders",
				"__connect.errors.partition":            "2",
				"__connect.errors.offset":               "41",
				"__connect.errors.connector.name":       "sink-1",
				"__connect.errors.task.id":              "3",
				"__connect.errors.stage":                c.stage,
				"__connect.errors.class.name":           c.class,
				"__connect.errors.exception.class.name": "org.apache.kafka.connect.errors.DataException",
				"__connect.errors.exception.message":    e.Error(),
				"__connect.errors.exception.stacktrace": "org.apache.kafka.connect.errors.DataException: " + e.Error() + "\nCaused by: " + e.Err.Error(),
			}
			for k, v := range want {
				if k == "__connect.errors.exception.stacktrace" {
					if len(got[k]) < len(v) || got[k][:len(v)] != v {
						t.Errorf("%s = %q, want it to start with %q", k, got[k], v)
					}
					continue
				}
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if len(got) != len(want) {
				t.Errorf("headers %v", got)
			}
		})
	}
	// Without context headers: only the original ones.
	task := NewTask(config.Connector{Name: "sink-1", DLQTopic: "dlq"}, 0, nil, TaskOptions{})
	r := task.dlqRecord(connectors.DeadLetter{Record: src, Err: record.NewError(src, record.ErrDecode)})
	if len(r.Headers) != 1 || r.Headers[0].Key != "trace-id" {
		t.Errorf("headers without context: %v", r.Headers)
	}
}
