package transform_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

// The cases of Connect's RegexRouterTest, and Java's replacement syntax.
func TestRegexRouter(t *testing.T) {
	for _, tc := range []struct{ regex, replacement, topic, want string }{
		{"foo", "bar", "foo", "bar"},                                 // staticReplacement
		{"foo", "bar", "orig", "orig"},                               // doesntMatch
		{"(.*)", "$1", "orig", "orig"},                               // identity
		{"(.*)", "prefix-$1", "orig", "prefix-orig"},                 // addPrefix
		{"(.*)", "$1-suffix", "orig", "orig-suffix"},                 // addSuffix
		{`(.*)-(\d\d\d\d\d\d\d\d)`, "$1", "index-20160117", "index"}, // slice
		// matches() needs the whole topic; a partial match does not route.
		{"foo", "bar", "foobar", "foobar"},
		// Debezium's server.schema.table to table.
		{`([^.]+)\.([^.]+)\.([^.]+)`, "$3", "dbserver1.inventory.customers", "customers"},
		// $ followed by digits takes as many as still name a group.
		{"(a)(b)", "$12", "ab", "a2"},
		{"(.*)", "$10", "x", "x0"},
		// Named groups, escapes.
		{"(?<db>[^.]+)[.](?<table>.+)", "${table}_of_${db}", "shop.orders", "orders_of_shop"},
		{"(.*)", `\$$1\\`, "t", `$t\`},
		// An unmatched group adds nothing.
		{"(a)|(b)", "[$1$2]", "b", "[b]"},
		// replaceFirst after matches(): the first match of a lazy pattern
		// is the empty string at 0.
		{"(.*?)", "x", "abc", "xabc"},
	} {
		c := one(t, transform.ClassRegexRouter, "regex", tc.regex, "replacement", tc.replacement)
		r := rec(record.Value{})
		r.Topic = tc.topic
		apply(t, c, r)
		if r.Topic != tc.want {
			t.Errorf("RegexRouter(%q, %q) on %q = %q, want %q", tc.regex, tc.replacement, tc.topic, r.Topic, tc.want)
		}
		// Cached per topic: the second record gets the same route.
		r2 := rec(record.Value{})
		r2.Topic = tc.topic
		apply(t, c, r2)
		if r2.Topic != r.Topic {
			t.Errorf("second record routed to %q, first to %q", r2.Topic, r.Topic)
		}
	}
}

func TestRegexRouterConfig(t *testing.T) {
	checkConfigErrors(t, transform.ClassRegexRouter, []configCase{
		{[]string{"replacement", "x"}, "transforms.x.regex", "missing required"},
		{[]string{"regex", "a"}, "transforms.x.replacement", "missing required"},
		{[]string{"regex", "(?=a)", "replacement", "x"}, "transforms.x.regex", "RE2"},
		{[]string{"regex", `(a)\1`, "replacement", "x"}, "transforms.x.regex", "invalid regular expression"},
		{[]string{"regex", "(a)", "replacement", "$2"}, "transforms.x.replacement", "no group 2"},
		{[]string{"regex", "(a)", "replacement", "$x"}, "transforms.x.replacement", "illegal group reference"},
		{[]string{"regex", "(a)", "replacement", "${nope}"}, "transforms.x.replacement", "no group with name"},
		{[]string{"regex", "(a)", "replacement", `a\`}, "transforms.x.replacement", "escaped"},
		{[]string{"regex", "a", "replacement", "b", "regexp", "c"}, "transforms.x.regexp", "unknown setting"},
	})
}

func TestRegexRouterEmptyTopic(t *testing.T) {
	c := one(t, "RegexRouter", "regex", "drop-(.*)", "replacement", "")
	r := rec(record.Value{})
	r.Topic = "drop-me"
	err := applyErr(t, c, r)
	contains(t, "error", err.Error(), `transform "x"`, "drop-me", "empty")
}

func TestPredicates(t *testing.T) {
	// An InsertField that marks the records it applied to.
	mark := func(pred string, negate string, kv ...string) *transform.Chain {
		s := []string{"transforms", "mark", "transforms.mark.type", transform.ClassInsertField + "$Value",
			"transforms.mark.static.field", "marked", "transforms.mark.static.value", "yes",
			"transforms.mark.predicate", "p", "predicates", "p", "predicates.p.type", pred}
		if negate != "" {
			s = append(s, "transforms.mark.negate", negate)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, "predicates.p."+kv[i], kv[i+1])
		}
		return chainOf(t, s...)
	}
	marked := func(c *transform.Chain, r *record.Record) bool {
		apply(t, c, r)
		if r.Value.IsNull() {
			return false
		}
		_, ok := r.Value.Get("marked")
		return ok
	}
	withTopic := func(topic string) *record.Record {
		r := rec(schemaless(t, `{"a":1}`))
		r.Topic = topic
		return r
	}
	withHeader := func(keys ...string) *record.Record {
		r := rec(schemaless(t, `{"a":1}`))
		for _, k := range keys {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k})
		}
		return r
	}

	// TopicNameMatches: the whole name must match (Connect's
	// TopicNameMatchesTest).
	tm := mark(transform.ClassTopicNameMatches, "", "pattern", "my-prefix-.*")
	for topic, want := range map[string]bool{"my-prefix-": true, "my-prefix-foo": true, "x-my-prefix-": false, "x-my-prefix-foo": false, "your-prefix-": false} {
		if got := marked(tm, withTopic(topic)); got != want {
			t.Errorf("TopicNameMatches(my-prefix-.*) on %q = %v, want %v", topic, got, want)
		}
	}
	neg := mark("TopicNameMatches", "true", "pattern", "my-prefix-.*")
	if marked(neg, withTopic("my-prefix-foo")) || !marked(neg, withTopic("other")) {
		t.Error("negate=true does not invert TopicNameMatches")
	}

	// HasHeaderKey (Connect's HasHeaderKeyTest).
	hk := mark(transform.ClassHasHeaderKey, "", "name", "headerName")
	for _, tc := range []struct {
		keys []string
		want bool
	}{{nil, false}, {[]string{"foo"}, false}, {[]string{"headerName"}, true}, {[]string{"foo", "headerName", "headerName"}, true}} {
		if got := marked(hk, withHeader(tc.keys...)); got != tc.want {
			t.Errorf("HasHeaderKey(headerName) with headers %v = %v, want %v", tc.keys, got, tc.want)
		}
	}

	// RecordIsTombstone, negated as people use it: skip tombstones.
	notTomb := mark(transform.ClassRecordIsTombstone, "true")
	if !marked(notTomb, rec(schemaless(t, `{"a":1}`))) {
		t.Error("negated RecordIsTombstone skipped a record with a value")
	}
	tomb := rec(record.Value{})
	if keep := apply(t, notTomb, tomb); !keep || !tomb.Value.IsNull() {
		t.Error("negated RecordIsTombstone applied InsertField to a tombstone")
	}
}

func TestPredicateConfig(t *testing.T) {
	for _, tc := range []struct {
		kv        []string
		name, msg string
	}{
		{[]string{"predicates.p.type", transform.ClassTopicNameMatches}, "predicates.p.pattern", "missing required"},
		{[]string{"predicates.p.type", transform.ClassTopicNameMatches, "predicates.p.pattern", ""}, "predicates.p.pattern", "must not be empty"},
		{[]string{"predicates.p.type", transform.ClassTopicNameMatches, "predicates.p.pattern", "a(?!b)"}, "predicates.p.pattern", "invalid regular expression"},
		{[]string{"predicates.p.type", transform.ClassHasHeaderKey}, "predicates.p.name", "missing required"},
		{[]string{"predicates.p.type", transform.ClassRecordIsTombstone, "predicates.p.pattern", "x"}, "predicates.p.pattern", "unknown setting"},
		{[]string{"predicates.p.type", "org.apache.kafka.connect.transforms.predicates.Nope"}, "predicates.p.type", "unknown predicate class"},
	} {
		kv := append([]string{"transforms", "x", "transforms.x.type", transform.ClassRegexRouter, "transforms.x.regex", "a", "transforms.x.replacement", "b",
			"transforms.x.predicate", "p", "predicates", "p"}, tc.kv...)
		_, err := transform.NewChain(values(kv...))
		if err == nil || !strings.HasPrefix(err.Error(), tc.name+": ") || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: error %v, want %s: …%s…", tc.kv, err, tc.name, tc.msg)
		}
	}
}

// Filter with RecordIsTombstone, the way connectors drop tombstones.
func TestFilter(t *testing.T) {
	c := chainOf(t, "transforms", "dropTombstones", "transforms.dropTombstones.type", transform.ClassFilter,
		"transforms.dropTombstones.predicate", "isTombstone",
		"predicates", "isTombstone", "predicates.isTombstone.type", transform.ClassRecordIsTombstone)
	if apply(t, c, rec(record.Value{})) {
		t.Error("tombstone kept")
	}
	if !apply(t, c, rec(schemaless(t, `{"a":1}`))) {
		t.Error("record with a value dropped")
	}
	// Unconditionally, it drops everything.
	if apply(t, one(t, "Filter"), rec(schemaless(t, `{"a":1}`))) {
		t.Error("Filter without a predicate kept a record")
	}
	if fe := configErr(t, transform.ClassFilter, "pattern", "x"); fe.Name != "transforms.x.pattern" {
		t.Errorf("error %v", fe)
	}
}
