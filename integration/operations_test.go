package integration

// What operators look at, on a running worker: every metric the Grafana
// dashboard and the Prometheus alert rules name exists on /metrics, and
// the /ui status page, loaded in headless Chromium, shows the connectors,
// their tasks and partitions with next_offset and lag, and their last
// rounds (a screenshot is kept among the test artifacts).

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/txsink/txsink/integration/harness"
)

func TestOperations(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	ch := harness.ClickHouse(t)
	db := pg.NewDatabase(t)
	chDB := ch.NewDatabase(t)
	sfx := randSuffix(t)
	topic := "ops-" + sfx
	k.CreateTopic(t, topic, 3)
	pool := connectPool(t, db)
	createEventsTable(t, pool, topic)
	chConn := ch.Conn(t, chDB)
	createCHEvents(t, chConn, topic, chEngine(ch, chDB, topic, 100))
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 3, AbortRatio: 0.1, MaxTxn: 100, Seed: 91}, &u)

	w := startServe(t, k.Bootstrap, freeAddr(t), t.TempDir(), "ops-"+sfx)
	pgName, chName, idle := "orders-pg-"+sfx, "orders-ch-"+sfx, "orders-paused-"+sfx
	pgCfg := baseConnector(pgName, topic, db, "exactly_once")
	pgCfg["batch.max.records"] = "500"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": pgName, "config": pgCfg})
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": chName, "config": chConnector(chName, topic, ch, chDB, "exactly_once")})
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": idle, "config": baseConnector(idle, topic, db, "exactly_once"), "initial_state": "PAUSED"})
	w.waitState(t, pgName, "RUNNING", 1, time.Minute)
	w.waitState(t, chName, "RUNNING", 1, time.Minute)
	deadline := time.Now().Add(2 * time.Minute)
	for rowCount(t, pool, topic) < u.total() {
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL holds %d of %d rows", rowCount(t, pool, topic), u.total())
		}
		time.Sleep(200 * time.Millisecond)
	}

	t.Run("metrics of the dashboard and the rules exist", func(t *testing.T) {
		_, body := w.call(t, "GET", "/metrics", nil)
		exposed := map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name := line
			if i := strings.IndexAny(line, "{ "); i > 0 {
				name = line[:i]
			}
			exposed[name] = true
		}
		named := metricsNamed(t)
		if len(named) < 15 {
			t.Fatalf("only %d metrics named by the dashboard and the rules: %v", len(named), named)
		}
		var missing []string
		for _, m := range named {
			if !exposed[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("named by the dashboard or the rules but not on /metrics of a running worker: %v", missing)
		}
		t.Logf("%d metrics named by deploy/grafana and deploy/prometheus, all on /metrics", len(named))
	})

	t.Run("status page in headless Chromium", func(t *testing.T) {
		chromium := findChromium(t)
		// Let a few ClickHouse rounds commit too.
		chDeadline := time.Now().Add(time.Minute)
		for {
			_, b := w.call(t, "GET", "/connectors/"+chName+"/status", nil)
			if strings.Contains(b, `"outcome":"committed"`) || time.Now().After(chDeadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		url := w.base + "/ui"
		dom := runChromium(t, chromium, "--dump-dom", url)
		for _, want := range []string{
			`id="connector-` + pgName + `"`, `id="connector-` + chName + `"`, `id="connector-` + idle + `"`,
			`<span class="state running">RUNNING</span>`, `<span class="state paused">PAUSED</span>`,
			"next_offset", "<td>" + topic + "</td>", "In-doubt batches", "Last rounds", "<td>committed</td>",
		} {
			if !strings.Contains(dom, want) {
				t.Errorf("the page as Chromium rendered it lacks %q", want)
			}
		}
		// The partition rows of task 0 of both running connectors, with
		// next_offset, end offset and lag.
		rows := regexp.MustCompile(`<tr><td>0</td><td>`+regexp.QuoteMeta(topic)+`</td><td class="num">(\d)</td><td class="num">(\d+)</td>\s*<td class="num">(\d+)</td><td class="num">(\d+)</td></tr>`).FindAllStringSubmatch(dom, -1)
		if len(rows) < 3 {
			t.Errorf("partition rows with next_offset and lag: %d, want 3 per running connector", len(rows))
		}
		shot := filepath.Join(artifactDir(t), "ui.png")
		runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,1500", "--hide-scrollbars", url)
		fi, err := os.Stat(shot)
		if err != nil || fi.Size() < 10_000 {
			t.Fatalf("screenshot %s: %v", shot, err)
		}
		t.Logf("screenshot of /ui: %s (%d bytes)", shot, fi.Size())
	})

	// The page has no write actions: only GET (and HEAD) are routed.
	res, err := http.Post(w.base+"/ui", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 405 {
		t.Errorf("POST /ui: %d", res.StatusCode)
	}
}

// metricsNamed returns the txsink metrics that the Grafana dashboard's
// queries and the Prometheus rules' expressions name.
func metricsNamed(t *testing.T) []string {
	t.Helper()
	var exprs []string
	b, err := os.ReadFile("../deploy/grafana/txsink-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	b, err = os.ReadFile("../deploy/prometheus/txsink-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Groups []struct {
			Rules []struct {
				Expr string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`\btxsink_[a-z_]+\b`).FindAllString(strings.Join(exprs, "\n"), -1) {
		set[m] = true
	}
	var out []string
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// findChromium returns Debian's chromium (or skips: harness.Unavailable).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	harness.Unavailable(t, "no headless Chromium (Debian package chromium)")
	return ""
}

// runChromium runs headless Chromium with the flags that keep it off the
// network (it reaches only the page's 127.0.0.1 address) and returns its
// standard output.
func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromium, append(flags, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, tail(stderr.String(), 3000))
	}
	return string(out)
}
