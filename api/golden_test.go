package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// shapeOptional are fields Connect includes only when set.
var shapeOptional = map[string]bool{"trace": true}

// freeForm are objects whose keys are data, not fields (configurations).
var freeForm = map[string]bool{"config": true}

// sameShape reports the differences between the field structure of got
// (txsink) and want (Connect's example): every Connect field must be
// present (unless optional) and no other field may appear, except the
// "txsink" extension key.
func sameShape(path string, got, want any) []string {
	var diffs []string
	if got == nil {
		return nil // Connect's fields are nullable (a required setting's default_value, an unmodified logger's last_modified)
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path + ": want an object"}
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if !shapeOptional[k] {
					diffs = append(diffs, path+"."+k+": missing")
				}
				continue
			}
			if freeForm[k] {
				if _, ok := gv.(map[string]any); !ok {
					diffs = append(diffs, path+"."+k+": want an object")
				}
				continue
			}
			diffs = append(diffs, sameShape(path+"."+k, gv, wv)...)
		}
		for k := range g {
			if _, ok := w[k]; !ok && k != "txsink" {
				diffs = append(diffs, path+"."+k+": not in Connect's shape")
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{path + ": want an array"}
		}
		if len(w) > 0 {
			for i, gv := range g {
				diffs = append(diffs, sameShape(path+"[]", gv, w[0])...)
				if i > 0 {
					break
				}
			}
		}
	case string:
		if _, ok := got.(string); !ok {
			diffs = append(diffs, path+": want a string")
		}
	case float64:
		if _, ok := got.(float64); !ok {
			diffs = append(diffs, path+": want a number")
		}
	case bool:
		if _, ok := got.(bool); !ok {
			diffs = append(diffs, path+": want a boolean")
		}
	case nil:
		// null in the example: any value (or null) is fine.
	}
	return diffs
}

// normalize replaces volatile values (times) so golden files are stable.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			switch k {
			case "at", "since", "next_restart", "last_modified":
				if val != nil {
					x[k] = "<time>"
				}
			default:
				x[k] = normalize(val)
			}
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

func loadJSON(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestShapesMatchConnect: the responses of create, get, status, task
// status, tasks, offsets, offsets edits, validate, plugins, plugin config,
// root, errors, loggers and health have exactly the fields of Kafka
// Connect 3.9's documented examples (testdata/connect), and equal the
// golden files (testdata/golden; go test -run TestShapesMatchConnect
// -update rewrites them).
func TestShapesMatchConnect(t *testing.T) {
	e := newEnv(t)
	cfg := fakeConfig("golden")
	calls := []struct {
		name, method, path string
		body               any
		code               int
		connect            string
	}{
		{"create", "POST", "/connectors", map[string]any{"name": "golden", "config": cfg, "initial_state": "PAUSED"}, 201, "create.json"},
		{"get", "GET", "/connectors/golden", nil, 200, "get.json"},
		{"status", "GET", "/connectors/golden/status", nil, 200, "status.json"},
		{"task-status", "GET", "/connectors/golden/tasks/0/status", nil, 200, "task-status.json"},
		{"tasks", "GET", "/connectors/golden/tasks", nil, 200, "tasks.json"},
		{"stop", "PUT", "/connectors/golden/stop", nil, 204, ""},
		// The PAUSED task joined the group and may have stored its
		// partitions' first offsets: start from none.
		{"offsets-reset", "DELETE", "/connectors/golden/offsets", nil, 200, ""},
		{"offsets-alter", "PATCH", "/connectors/golden/offsets", `{"offsets":[{"partition":{"kafka_topic":"orders","kafka_partition":1},"offset":{"kafka_offset":42}}]}`, 200, "offsets-message.json"},
		{"offsets", "GET", "/connectors/golden/offsets", nil, 200, "offsets.json"},
		{"validate", "PUT", "/connector-plugins/fake/config/validate", map[string]string{"connector.class": "fake", "topics": "orders", "tasks.max": "0", "fake.secret": canary}, 200, "validate.json"},
		{"plugins", "GET", "/connector-plugins", nil, 200, "plugins.json"},
		{"plugin-config", "GET", "/connector-plugins/io.txsink.test.FakeSink/config", nil, 200, "plugin-config.json"},
		{"root", "GET", "/", nil, 200, "root.json"},
		{"error", "GET", "/connectors/ghost", nil, 404, "error.json"},
		{"logger", "GET", "/admin/loggers/root", nil, 200, "logger.json"},
		{"health", "GET", "/health", nil, 200, "health.json"},
	}
	for _, c := range calls {
		r := e.do(c.method, c.path, c.body)
		if r.code != c.code {
			t.Fatalf("%s: status %d, want %d: %s", c.name, r.code, c.code, r.body)
		}
		if c.name == "create" {
			// A PAUSED task joins the group and holds its partitions
			// without fetching: wait for both, so the status is stable.
			e.waitPartitions("golden", 2)
		}
		if c.connect == "" {
			continue
		}
		got := normalize(r.json(t))
		want := loadJSON(t, filepath.Join("testdata", "connect", c.connect))
		if diffs := sameShape(c.name, got, want); len(diffs) > 0 {
			sort.Strings(diffs)
			t.Errorf("%s differs from Connect's shape:\n  %s", c.name, strings.Join(diffs, "\n  "))
		}
		gb, _ := json.MarshalIndent(got, "", "  ")
		golden := filepath.Join("testdata", "golden", c.name+".json")
		if *update {
			_ = os.MkdirAll(filepath.Dir(golden), 0o755)
			if err := os.WriteFile(golden, append(gb, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wb, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(bytes.TrimSpace(wb), bytes.TrimSpace(gb)) {
			t.Errorf("%s differs from %s:\n got %s\nwant %s", c.name, golden, gb, wb)
		}
	}
}
