package clickhouse

import (
	"errors"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
)

func TestParseEngine(t *testing.T) {
	for in, want := range map[string]string{
		"":                                   "",
		"MergeTree":                          "MergeTree()",
		" MergeTree( ) ":                     "MergeTree()",
		"ReplacingMergeTree(version)":        "ReplacingMergeTree(`version`)",
		"ReplacingMergeTree(`ver`, \"del\")": "ReplacingMergeTree(`ver`, `del`)",
		"ReplicatedMergeTree":                "ReplicatedMergeTree()",
		"ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t', '{replica}', ver)": "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t', '{replica}', `ver`)",
		"VersionedCollapsingMergeTree(sign, ver)":                                           "VersionedCollapsingMergeTree(`sign`, `ver`)",
	} {
		got, err := ParseEngine(in)
		if err != nil || got != want {
			t.Errorf("ParseEngine(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"MergeTree AS SELECT * FROM url('http://127.0.0.1:1/x', CSV)",
		"MergeTree() AS SELECT 1",
		"MergeTree() SETTINGS allow_nullable_key = 1",
		"MergeTree() -- comment",
		"MergeTree() /* c */",
		"Memory",
		"URL('http://127.0.0.1:1/x', CSV)",
		"File(CSV, '/etc/passwd')",
		"Distributed(c, db, t)",
		"mergetree()",
		"MergeTree(x)",
		"ReplacingMergeTree(a, b, c)",
		"ReplacingMergeTree('literal')",
		"ReplacingMergeTree(ver) ORDER BY x",
		"ReplicatedMergeTree('/p')",
		"ReplicatedMergeTree('/p'' OR 1', 'r')",
		"ReplicatedMergeTree('/p\\'', 'r')",
		"ReplicatedMergeTree('/p', 'r;DROP')",
		"ReplacingMergeTree(`a``b`)",
		"ReplacingMergeTree(ver",
		"ReplacingMergeTree(ver))",
		"ReplacingMergeTree(url('http://x'))",
		"ReplacingMergeTree(a b)",
	} {
		if got, err := ParseEngine(bad); err == nil {
			t.Errorf("ParseEngine(%q) accepted: %q", bad, got)
		} else if !errors.Is(err, ErrEngine) {
			t.Errorf("ParseEngine(%q): %v does not wrap ErrEngine", bad, err)
		}
	}
}

// TestValidateEngine: the validate endpoint's check reports a bad engine
// on its setting.
func TestValidateEngine(t *testing.T) {
	v := config.Values{"name": "c", "connector.class": Class, "topics": "t", KeyURL: "127.0.0.1:9000", KeyAutoEngine: "MergeTree AS SELECT * FROM url('http://127.0.0.1:1/x', CSV)"}
	errs := validate(v, connectors.Policy{})
	if len(errs) != 1 || errs[0].Name != KeyAutoEngine {
		t.Fatalf("errors %v, want one on %s", errs, KeyAutoEngine)
	}
	v[KeyAutoEngine] = "ReplacingMergeTree(ver)"
	if errs := validate(v, connectors.Policy{}); errs != nil {
		t.Fatalf("valid engine: %v", errs)
	}
}
