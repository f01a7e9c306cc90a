package transform

import "github.com/txsink/txsink/connectors/record"

// ClassFilter is Kafka Connect's Filter.
const ClassFilter = "org.apache.kafka.connect.transforms.Filter"

func init() {
	registerTransform(TransformPlugin{Class: ClassFilter, Aliases: []string{"Filter"}, New: newFilter})
}

// filter is Kafka Connect's Filter: it drops every record it applies to,
// so it is used with a predicate (drop tombstones: predicate
// RecordIsTombstone; keep one topic: TopicNameMatches with negate=true).
// A dropped record writes nothing; its offset commits with the batch.
type filter struct{}

func newFilter(settings map[string]string) (Transform, error) {
	if err := newConf("Filter", settings).done(); err != nil {
		return nil, err
	}
	return filter{}, nil
}

func (filter) Apply(*record.Record) (bool, error) { return false, nil }
