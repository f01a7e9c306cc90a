package engine

import (
	"testing"

	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// TestTopicLabelsHideProvidedTopics: a topic a config provider reference
// named is labelled without its name, and two such topics still get
// distinct labels (the same labels twice would fail the scrape).
func TestTopicLabelsHideProvidedTopics(t *testing.T) {
	secs := secrets.Provided([]string{"orders-Canary", "payments-Canary"})
	got := topicLabels([]offsets.Position{
		{Topic: "orders-Canary", Partition: 0}, {Topic: "orders-Canary", Partition: 1},
		{Topic: "payments-Canary", Partition: 0}, {Topic: "plain", Partition: 0},
	}, secs)
	want := map[string]string{"orders-Canary": "[hidden]", "payments-Canary": "[hidden]#2", "plain": "plain"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label of %s = %q, want %q", k, got[k], v)
		}
	}
}
