package connectors_test

import (
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/postgres"
)

// TestDeadLetterTopicSettings: errors.tolerance=all needs a dead-letter
// table or topic; the topic may not be one the connector reads; a
// replication factor of 0 is refused, each naming the setting.
func TestDeadLetterTopicSettings(t *testing.T) {
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	base := func() map[string]string {
		return map[string]string{"name": "c", "connector.class": "postgres", "topics": "orders",
			"connection.url": "postgres://u@db.example/app", "errors.tolerance": "all"}
	}
	field := func(raw map[string]string) string {
		_, _, errs := reg.Validate(raw)
		if len(errs) == 0 {
			return ""
		}
		return errs[0].Name
	}
	if f := field(base()); f != postgres.KeyDLQTable {
		t.Errorf("tolerance=all without a destination: error on %q, want %s", f, postgres.KeyDLQTable)
	}
	topicOnly := base()
	topicOnly[config.KeyDLQTopic] = "orders-dlq"
	if f := field(topicOnly); f != "" {
		t.Errorf("tolerance=all with a dead-letter topic only: error on %q", f)
	}
	both := base()
	both[config.KeyDLQTopic], both[postgres.KeyDLQTable] = "orders-dlq", "dlq"
	if f := field(both); f != "" {
		t.Errorf("table and topic: error on %q", f)
	}
	loop := base()
	loop[config.KeyDLQTopic] = "orders"
	if f := field(loop); f != config.KeyDLQTopic {
		t.Errorf("dead-letter topic among the topics: error on %q", f)
	}
	zero := base()
	zero[config.KeyDLQTopic], zero[config.KeyDLQReplication] = "orders-dlq", "0"
	if f := field(zero); f != config.KeyDLQReplication {
		t.Errorf("replication factor 0: error on %q", f)
	}
}

// TestReservedTopicsPolicy: the registry refuses the worker's own topics
// (its policy's ReservedTopics) as a dead-letter or consumed topic, on the
// setting, the path both PUT and validate take.
func TestReservedTopicsPolicy(t *testing.T) {
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	reg.SetPolicy(connectors.Policy{ReservedTopics: config.Cluster{ConfigTopic: "cfg", StatusTopic: "st"}.Topics()})
	for _, c := range []struct{ key, value, field string }{
		{config.KeyDLQTopic, "cfg", config.KeyDLQTopic},
		{config.KeyDLQTopic, "st", config.KeyDLQTopic},
		{config.KeyDLQTopic, "__transaction_state", config.KeyDLQTopic},
		{config.KeyTopics, "orders,st", config.KeyTopics},
		{config.KeyDLQTopic, "orders-dlq", ""},
	} {
		raw := map[string]string{"name": "c", "connector.class": "postgres", "topics": "orders",
			"connection.url": "postgres://u@db.example/app", "errors.tolerance": "all", c.key: c.value}
		_, _, errs := reg.Validate(raw)
		if c.field == "" && len(errs) > 0 || c.field != "" && len(errs.For(c.field)) == 0 {
			t.Errorf("%s=%s: %v, want an error on %q", c.key, c.value, errs, c.field)
		}
	}
}
