package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/txsink/txsink/integration/harness"
)

// TestPrometheusRules runs promtool (Debian's prometheus package) on the
// alert rules: "check rules" validates them, "test rules" fires each alert
// on synthetic series and checks its labels and annotations.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		harness.Unavailable(t, "promtool (Debian package prometheus) is not installed")
	}
	for _, args := range [][]string{
		{"check", "rules", "txsink-rules.yml"},
		{"test", "rules", "txsink-rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert of the rules file has a test.
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, "prometheus/txsink-rules.yml", &rules)
	readYAML(t, "prometheus/txsink-rules.test.yml", &tests)
	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			tested[a.Alertname] = true
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !tested[r.Alert] {
				t.Errorf("alert %s has no promtool test", r.Alert)
			}
		}
	}
	if n < 7 {
		t.Errorf("only %d alert rules", n)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGrafanaDashboard checks the dashboard's structure: every panel has
// a query on the dashboard's Prometheus data source variable, a unique
// id and a place on the 24-column grid, and the panels cover what
// operators look at. integration/operations_test.go checks that every
// metric the queries name exists on a running worker.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "txsink-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name, Type string
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["connector"] != "query" || d.UID == "" {
		t.Fatalf("templating %v, uid %q", vars, d.UID)
	}
	ids := map[int]bool{}
	var exprs []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: grid position %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: no query on the ${datasource} variable", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `connector=~"$connector"`) {
				t.Errorf("panel %q: query not filtered by $connector: %s", p.Title, tg.Expr)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, m := range []string{
		"txsink_records_written_total", "txsink_partition_lag", "txsink_commit_phase_seconds_bucket",
		"txsink_in_doubt_batches", "txsink_batches_fenced_total", "txsink_records_dead_lettered_total",
		"txsink_task_restarts_total", "txsink_dependency_unavailable_total", "txsink_clickhouse_dedup_window_risk_total",
	} {
		if !regexp.MustCompile(`\b` + m + `\b`).MatchString(all) {
			t.Errorf("no panel shows %s", m)
		}
	}
}
