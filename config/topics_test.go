package config

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReservedTopics: a dead-letter topic or a consumed topic may not be
// one of the worker's own topics, a name starting __, "." or "..", in
// every setting that names topics; the error names the setting and says
// why. Patterns that single them out are refused; a wildcard is accepted
// and never consumes them.
func TestReservedTopics(t *testing.T) {
	worker := Cluster{ConfigTopic: "connect-configs", StatusTopic: "connect-status", OffsetTopic: "connect-offsets"}.Topics()
	for _, c := range []struct {
		raw   map[string]string
		field string // "" when accepted
		says  string
	}{
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "orders-dlq"}, "", ""},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "connect-configs"}, KeyDLQTopic, "config.storage.topic"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "connect-status"}, KeyDLQTopic, "status.storage.topic"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "connect-offsets"}, KeyDLQTopic, "offset.storage.topic"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "__consumer_offsets"}, KeyDLQTopic, "__"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "__transaction_state"}, KeyDLQTopic, "__"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "__anything"}, KeyDLQTopic, "__"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: "."}, KeyDLQTopic, "not a topic name"},
		{map[string]string{KeyTopics: "orders", KeyDLQTopic: ".."}, KeyDLQTopic, "not a topic name"},
		{map[string]string{KeyTopics: "orders,connect-configs"}, KeyTopics, "config.storage.topic"},
		{map[string]string{KeyTopics: " connect-status "}, KeyTopics, "status.storage.topic"},
		{map[string]string{KeyTopics: "__transaction_state"}, KeyTopics, "__"},
		{map[string]string{KeyTopics: "orders,.."}, KeyTopics, "not a topic name"},
		{map[string]string{KeyTopicsRegex: "connect-configs"}, KeyTopicsRegex, "config.storage.topic"},
		{map[string]string{KeyTopicsRegex: "connect-.*"}, KeyTopicsRegex, "this worker's"},
		{map[string]string{KeyTopicsRegex: "(orders|connect-status)"}, KeyTopicsRegex, "status.storage.topic"},
		{map[string]string{KeyTopicsRegex: "connect-offset[s]"}, KeyTopicsRegex, "offset.storage.topic"},
		{map[string]string{KeyTopicsRegex: "__transaction_state"}, KeyTopicsRegex, "__"},
		{map[string]string{KeyTopicsRegex: "__consumer.*"}, KeyTopicsRegex, "__"},
		{map[string]string{KeyTopicsRegex: "__mine.*"}, KeyTopicsRegex, "__"},
		{map[string]string{KeyTopicsRegex: `\.\.?`}, KeyTopicsRegex, "not a topic name"},
		{map[string]string{KeyTopicsRegex: "orders-.*"}, "", ""},
		{map[string]string{KeyTopicsRegex: ".*"}, "", ""},
	} {
		raw := map[string]string{KeyName: "n", KeyClass: "postgres"}
		for k, v := range c.raw {
			raw[k] = v
		}
		v, errs := ConnectorDefs.Validate(raw)
		if errs != nil {
			t.Fatalf("%v: %v", c.raw, errs)
		}
		errs = CheckTopicNames(v, worker)
		if c.field == "" {
			if errs != nil {
				t.Errorf("%v: refused: %v", c.raw, errs)
			}
			continue
		}
		got := errs.For(c.field)
		if len(got) == 0 || !strings.Contains(got[0], c.says) {
			t.Errorf("%v: %v, want an error on %s saying %q", c.raw, errs, c.field, c.says)
		}
	}
	// Standalone mode has no topics of its own; __, . and .. still apply.
	v, _ := ConnectorDefs.Validate(map[string]string{KeyName: "n", KeyClass: "p", KeyTopics: "connect-configs", KeyDLQTopic: "__consumer_offsets"})
	if errs := CheckTopicNames(v, nil); len(errs.For(KeyDLQTopic)) != 1 || len(errs.For(KeyTopics)) != 0 {
		t.Errorf("standalone: %v", errs)
	}
}

// TestExcludedTopics: a wildcard pattern leaves out the worker's topics
// and every name starting __; a narrower one that matches none has no
// exclusions (its consumer is unchanged).
func TestExcludedTopics(t *testing.T) {
	worker := Cluster{ConfigTopic: "connect-configs", StatusTopic: "connect-status"}.Topics()
	ex := ExcludedTopics(ParseConnector(Values{KeyTopicsRegex: ".*"}).TopicsPattern(), worker)
	if !slices.Equal(ex, []string{"^connect-configs$", "^connect-status$", "^__"}) {
		t.Fatalf("excluded %v", ex)
	}
	match := func(name string) bool {
		for _, e := range ex {
			if regexp.MustCompile(e).MatchString(name) {
				return true
			}
		}
		return false
	}
	for name, want := range map[string]bool{"connect-configs": true, "connect-status": true, "__transaction_state": true, "__x": true, "orders": false, "connect-configs2": false, "x__": false} {
		if match(name) != want {
			t.Errorf("%s excluded: %v, want %v", name, !want, want)
		}
	}
	if ex := ExcludedTopics(ParseConnector(Values{KeyTopicsRegex: "orders-.*"}).TopicsPattern(), worker); ex != nil {
		t.Errorf("orders-.*: excluded %v", ex)
	}
}
