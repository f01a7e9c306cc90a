package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
)

// TestConfigDocsUpToDate fails when docs/configuration.md differs from what
// the definitions generate.
func TestConfigDocsUpToDate(t *testing.T) {
	var gen, errb bytes.Buffer
	if code := run([]string{"config-docs"}, &gen, &errb); code != 0 {
		t.Fatalf("config-docs exited %d: %s", code, errb.String())
	}
	path := filepath.Join("..", "..", "docs", "configuration.md")
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v\nregenerate it from the repository root with:\n  %s", err, configDocsCommand)
	}
	if !bytes.Equal(have, gen.Bytes()) {
		t.Fatalf("docs/configuration.md is stale (first difference at line %d); regenerate it from the repository root with:\n  %s",
			firstDiffLine(have, gen.Bytes()), configDocsCommand)
	}
}

func firstDiffLine(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// TestConfigDocsContent checks that every visible setting is documented
// with its type and default, and that hidden ones are not.
func TestConfigDocsContent(t *testing.T) {
	var b bytes.Buffer
	writeConfigDocs(&b)
	doc := b.String()
	defs := append(append(config.Defs{}, config.WorkerDefs...), config.ConnectorDefs...)
	for _, s := range registry().Specs() {
		defs = append(defs, s.Defs...)
	}
	for _, d := range defs {
		row := "| `" + d.Name + "` |"
		if d.Hidden {
			if strings.Contains(doc, row) {
				t.Errorf("hidden setting %s is documented", d.Name)
			}
			continue
		}
		i := strings.Index(doc, row)
		if i < 0 {
			t.Errorf("setting %s is missing", d.Name)
			continue
		}
		line, _, _ := strings.Cut(doc[i:], "\n")
		if !strings.Contains(line, " "+string(d.Type)+" ") {
			t.Errorf("setting %s: type %s missing in %q", d.Name, d.Type, line)
		}
		if d.Default != "" && !strings.Contains(line, "`"+cell(d.Default)+"`") {
			t.Errorf("setting %s: default %q missing in %q", d.Name, d.Default, line)
		}
		for _, e := range d.Enum {
			if !strings.Contains(line, "`"+e+"`") {
				t.Errorf("setting %s: allowed value %q missing", d.Name, e)
			}
		}
	}
	// The output must not depend on the environment (host name, TXSINK_*).
	t.Setenv("TXSINK_BOOTSTRAP_SERVERS", "elsewhere:1")
	var again bytes.Buffer
	writeConfigDocs(&again)
	if again.String() != doc {
		t.Error("config-docs output depends on the environment")
	}
}
