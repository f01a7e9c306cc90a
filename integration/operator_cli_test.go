package integration

// What an operator sees must be true (issue 27, items 5–7): the CLI's
// causes and hints, progress of "txsink run" and "txsink verify", and the
// /ui page's last known positions and charts, on a real worker ("txsink
// serve" or "txsink run"), a real broker and a real PostgreSQL server.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// withPassword returns the PostgreSQL URL with its password replaced.
func withPassword(t *testing.T, dbURL, pw string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// cliWaitOutput runs "txsink connectors ARGS" until its standard output
// contains want (or the deadline passes) and returns the last run.
func cliWaitOutput(t *testing.T, d time.Duration, want string, args ...string) cliResult {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r := runCLI(t, nil, args...)
		if strings.Contains(r.stdout, want) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v; last run: %v", want, d, r)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestOperatorCLIConnectCause: a wrong connection.password shows, in
// "txsink connectors status", the server's answer (SQLSTATE 28P01) and the
// setting to fix, with CLI commands, not REST calls; flags before the verb
// work; offsets -set on a running connector says to run "txsink
// connectors stop". Before issue 27 flags before the verb were refused
// ("unknown verb"), the trace cell ended at "failed to connect to
// `user=… database=…`:" with the TLS attempt of sslmode=prefer, and the
// offsets error told the user to PUT /connectors/NAME/stop.
func TestOperatorCLIConnectCause(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_cli_pw_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-cli-pw")
	name := "op-cli-pw-" + randSuffix(t)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	cfg["connection.password"] = "wrong-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})

	r := cliWaitOutput(t, 90*time.Second, "password authentication failed", "-url", w.base, "-timeout", "20s", "status", name)
	out := r.stdout
	for _, want := range []string{
		"SQLSTATE 28P01",
		"setting to fix: connection.password",
		"txsink connectors restart " + name + " -include-tasks",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// The task table's cell shows the cause too, not the driver's first line.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "0 ") && strings.HasSuffix(strings.TrimSpace(line), "`:") {
			t.Errorf("task row ends before the cause: %s", line)
		}
	}
	if strings.Contains(out, "PUT ") || strings.Contains(out, cfg["connection.password"]) {
		t.Errorf("status names a REST call or the password:\n%s", out)
	}

	// offsets -set on a connector that is not STOPPED.
	offs := filepath.Join(t.TempDir(), "offsets.json")
	os.WriteFile(offs, []byte(fmt.Sprintf(`{"offsets":[{"partition":{"kafka_topic":%q,"kafka_partition":0},"offset":{"kafka_offset":0}}]}`, topic)), 0o600)
	r = runCLI(t, nil, "--url="+w.base, "offsets", name, "-set", offs)
	if r.code != 1 || !strings.Contains(r.stderr, "txsink connectors stop "+name) || strings.Contains(r.stderr, "'PUT'") {
		t.Errorf("offsets -set on a running connector: %v", r)
	}
	t.Logf("status:\n%s", out)
}

// TestOperatorCLIBadRecordHint: a NOT NULL column without a default that
// no record sets stops the task at its first record; the CLI says every
// record will fail the same way and does not advise skipping it (before
// issue 27 the trace, shown as is, said "skip it by resetting the
// partition's offset", and the CLI cut it before the cause).
func TestOperatorCLIBadRecordHint(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "op_cli_nn_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	createEventsTable(t, pool, topic)
	if _, err := pool.Exec(context.Background(), `ALTER TABLE `+pgx.Identifier{topic}.Sanitize()+` ADD COLUMN region text NOT NULL`); err != nil {
		t.Fatal(err)
	}
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-cli-nn")
	name := "op-cli-nn-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, topic, dbURL, "exactly_once")})
	produce(t, k.Bootstrap, topic, produceOpts{Records: 20, Partitions: 1, Seed: 5}, &upstream{})

	r := cliWaitOutput(t, 90*time.Second, `NOT NULL column "region"`, "status", name, "-url", w.base)
	out := r.stdout
	if !strings.Contains(out, "fail the same way") || !strings.Contains(out, "txsink connectors restart "+name) {
		t.Errorf("status does not say every record fails alike:\n%s", out)
	}
	if strings.Contains(out, "skip it by resetting") || strings.Contains(out, "offsets "+name+" -set") {
		t.Errorf("status advises skipping a record every record would repeat:\n%s", out)
	}
	t.Logf("status:\n%s", out)
}

// TestOperatorProgressRun: "txsink run" logs progress lines with the
// records stored, the rate and the lag; after the drain a line says the
// records committed upstream and lag 0. Before issue 27 it logged nothing
// between its start and "stopping".
func TestOperatorProgressRun(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "op_prog_" + randSuffix(t)
	createTopic(t, k, topic, 2)
	createEventsTable(t, pool, topic)
	name := "op-prog-" + randSuffix(t)
	cfgPath := writeConnector(t, baseConnector(name, topic, dbURL, "exactly_once"))
	p := runTxsink(t, []string{"run", "-bootstrap", k.Bootstrap, "-config", cfgPath, "-worker-id", "op-prog", "-progress-interval", "500ms"}, "op-prog", nil)
	u := &upstream{}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 2, AbortRatio: 0.2, MaxTxn: 100, Seed: 11}, u)
	waitDrained(t, pool, name, u, 2*time.Minute, nil)
	committed := len(readRows(t, pool, topic))

	// A progress line after the drain: every record counted, lag 0.
	re := regexp.MustCompile(`msg=progress .*records=(\d+) rate_per_s=(\d+) partitions=(\d+) lag=(\d+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last []string
		for _, m := range re.FindAllStringSubmatch(p.output(), -1) {
			last = m
		}
		if last != nil && last[1] == fmt.Sprint(committed) && last[3] == "2" && last[4] == "0" {
			t.Logf("last progress line: %s", last[0])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line with records=%d partitions=2 lag=0 after the drain; last %q; output:\n%s", committed, last, tail(p.output(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Lines while records flowed had a positive rate.
	rated := false
	for _, m := range re.FindAllStringSubmatch(p.output(), -1) {
		rated = rated || m[2] != "0"
	}
	if !rated {
		t.Errorf("no progress line with a positive rate:\n%s", tail(p.output(), 4000))
	}
}

// TestOperatorProgressVerify: "txsink verify" without a terminal prints
// progress lines on standard error (the sink read, the scan, its end) and
// its report on standard output; on a table without Kafka coordinates it
// names the missing __connect_topic column and what to do. Before issue 27
// it printed nothing until its report, and the missing column was a raw
// `column "__connect_topic" does not exist`.
func TestOperatorProgressVerify(t *testing.T) {
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	topic := "op_vprog_" + randSuffix(t)
	createTopic(t, k, topic, 2)
	createEventsTable(t, pool, topic)
	name := "op-vprog-" + randSuffix(t)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "op-vprog")
	u := &upstream{}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 2000, Partitions: 2, AbortRatio: 0.2, Seed: 13}, u)
	waitDrained(t, pool, name, u, 2*time.Minute, nil)
	_ = p

	r := runCommand(t, nil, "verify", "-bootstrap", k.Bootstrap, "-config", writeConnector(t, cfg), "-progress-interval", "0s")
	if r.code != 0 {
		t.Fatalf("verify: %v", r)
	}
	for _, want := range []string{"verify: reading the sink", "verify: scanning Kafka:", "verify: scanned Kafka:"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("verify's standard error lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stdout, "verify: scanning") {
		t.Errorf("a bar without a terminal, or progress in the report:\n%v", r)
	}
	if m := regexp.MustCompile(`scanned Kafka: (\d+) offsets, (\d+) committed records`).FindStringSubmatch(r.stderr); m == nil || m[2] != fmt.Sprint(len(readRows(t, pool, topic))) {
		t.Errorf("the last progress line does not count the committed records (%d): %v", len(readRows(t, pool, topic)), m)
	}

	// A table without coordinates.
	bare := "op_bare_" + randSuffix(t)
	createTopic(t, k, bare, 1)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{bare}.Sanitize()+` (id text, body text)`); err != nil {
		t.Fatal(err)
	}
	r = runCommand(t, nil, "verify", "-bootstrap", k.Bootstrap, "-topics", bare, "-sink-url", dbURL, "-connector", "none", "-progress", "none")
	if r.code != 3 || !strings.Contains(r.stderr, `no column "__connect_topic"`) || !strings.Contains(r.stderr, "pk.mode=kafka") || !strings.Contains(r.stderr, "-topic-column") {
		t.Errorf("verify on a table without coordinates: %v", r)
	}
}

// uiSection returns the part of the /ui page about one connector.
func uiSection(page, name string) string {
	i := strings.Index(page, `id="connector-`+name+`"`)
	if i < 0 {
		return ""
	}
	s := page[i:]
	if j := strings.Index(s, "</section>"); j >= 0 {
		s = s[:j]
	}
	return s
}

// chartPoints returns the number of points of each chart's polyline in a
// section (0 for a chart without one).
func chartPoints(section string) []int {
	var n []int
	for _, fig := range strings.Split(section, `<figure class="chart"`)[1:] {
		m := regexp.MustCompile(`<polyline class="series"[^>]*points="([^"]*)"`).FindStringSubmatch(fig)
		if m == nil {
			n = append(n, 0)
			continue
		}
		n = append(n, len(strings.Fields(m[1])))
	}
	return n
}

// uiArtifactDir is where TestOperatorUI keeps its screenshot:
// $TXSINK_ARTIFACTS_DIR, else CI's $TXSINK_TEST_ARTIFACTS, else a
// temporary directory.
func uiArtifactDir(t *testing.T) string {
	for _, env := range []string{"TXSINK_ARTIFACTS_DIR", "TXSINK_TEST_ARTIFACTS"} {
		if d := os.Getenv(env); d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			abs, _ := filepath.Abs(d)
			return abs
		}
	}
	return t.TempDir()
}

// TestOperatorUI: /ui, rendered by headless Chromium, keeps the last known
// positions of a task FAILED at a bad record (next_offset at the record)
// and of a PAUSED connector's task, and draws each connector's rate and
// lag as SVG polylines. Before issue 27 a FAILED task showed "No
// partitions assigned" and the page had no chart.
func TestOperatorUI(t *testing.T) {
	chromium := findChromium(t)
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	sfx := randSuffix(t)
	failTopic, pauseTopic := "op_ui_fail_"+sfx, "op_ui_pause_"+sfx
	for _, tp := range []string{failTopic, pauseTopic} {
		createTopic(t, k, tp, 2)
		createEventsTable(t, pool, tp)
	}
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-ui")
	failName, pauseName := "op-ui-fail-"+sfx, "op-ui-pause-"+sfx
	for name, tp := range map[string]string{failName: failTopic, pauseName: pauseTopic} {
		w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, tp, dbURL, "exactly_once")})
	}
	uf, up := &upstream{}, &upstream{}
	produce(t, k.Bootstrap, failTopic, produceOpts{Records: 1500, Partitions: 2, AbortRatio: 0.2, MaxTxn: 50, Seed: 21}, uf)
	produce(t, k.Bootstrap, pauseTopic, produceOpts{Records: 800, Partitions: 2, MaxTxn: 50, Seed: 22}, up)
	waitDrained(t, pool, failName, uf, 2*time.Minute, nil)
	waitDrained(t, pool, pauseName, up, 2*time.Minute, nil)

	get := func() string {
		resp, err := http.Get(w.base + "/ui")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// Wait until the worker sampled the running connectors a few times
	// (every 5 s): both charts of each have two points or more.
	deadline := time.Now().Add(60 * time.Second)
	for {
		page := get()
		ok := true
		for _, name := range []string{failName, pauseName} {
			pts := chartPoints(uiSection(page, name))
			ok = ok && len(pts) == 2 && pts[0] >= 2 && pts[1] >= 2
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("charts without two points after 60s: %v %v", chartPoints(uiSection(page, failName)), chartPoints(uiSection(page, pauseName)))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A record the pipeline cannot read stops failName's task on partition 0.
	bad := &upstream{}
	produce(t, k.Bootstrap, failTopic, produceOpts{Records: 1, Partitions: 1, MaxTxn: 1, Seed: 23, Value: func(int, string) []byte { return []byte("not json {") }}, bad)
	badOffset := bad.committed[0][0].Offset
	drainedEnd := uf.ends()[0]
	w.must(t, 202, "PUT", "/connectors/"+pauseName+"/pause", nil)
	deadline = time.Now().Add(90 * time.Second)
	for {
		_, fb := w.call(t, "GET", "/connectors/"+failName+"/status", nil)
		_, pb := w.call(t, "GET", "/connectors/"+pauseName+"/status", nil)
		if strings.Contains(fb, `"state":"FAILED"`) && strings.Contains(pb, `"state":"PAUSED"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not FAILED and PAUSED after 90s:\n%s\n%s", fb, pb)
		}
		time.Sleep(200 * time.Millisecond)
	}

	dom := runChromium(t, chromium, "--dump-dom", w.base+"/ui")
	fs, ps := uiSection(dom, failName), uiSection(dom, pauseName)
	if fs == "" || ps == "" {
		t.Fatalf("the page lacks a connector:\n%s", dom)
	}
	if !strings.Contains(fs, `<span class="state failed">FAILED</span>`) {
		t.Errorf("the failed connector's task is not shown FAILED:\n%s", fs)
	}
	// The FAILED task's partition 0 at its stored position (everything
	// before the bad record, which may lie past a transaction marker),
	// marked last known.
	var offs struct {
		Offsets []struct {
			Partition struct {
				Partition int32 `json:"kafka_partition"`
			} `json:"partition"`
			Offset struct {
				Offset int64 `json:"kafka_offset"`
			} `json:"offset"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/"+failName+"/offsets", nil)), &offs); err != nil {
		t.Fatal(err)
	}
	stored := int64(-1)
	for _, o := range offs.Offsets {
		if o.Partition.Partition == 0 {
			stored = o.Offset.Offset
		}
	}
	if stored < drainedEnd || stored > badOffset {
		t.Fatalf("stored next offset of partition 0: %d, want from %d (drained) to %d (the bad record)", stored, drainedEnd, badOffset)
	}
	row := regexp.MustCompile(`<tr class="last-known"><td>0</td><td>` + regexp.QuoteMeta(failTopic) + `</td><td class="num">0</td><td class="num">(\d+)</td>`).FindStringSubmatch(fs)
	if row == nil || row[1] != fmt.Sprint(stored) {
		t.Errorf("the FAILED task's partition 0: %v, want last known at next_offset %d (bad record at %d):\n%s", row, stored, badOffset, fs)
	}
	if !strings.Contains(fs, "task failed") || strings.Contains(fs, "No partitions assigned") {
		t.Errorf("the FAILED task's positions are not kept:\n%s", fs)
	}
	// The PAUSED connector's positions: owned, or kept as last known.
	if strings.Count(ps, "<td>"+pauseTopic+"</td>") != 2 || strings.Contains(ps, "No partitions assigned") {
		t.Errorf("the PAUSED connector's positions:\n%s", ps)
	}
	t.Logf("PAUSED task's rows kept as last known: %v", strings.Contains(ps, "task paused"))
	for name, sec := range map[string]string{failName: fs, pauseName: ps} {
		if pts := chartPoints(sec); len(pts) != 2 || pts[0] < 2 || pts[1] < 2 || !strings.Contains(sec, "<svg") {
			t.Errorf("%s: chart points %v, want two charts of two points or more", name, pts)
		}
	}

	shot := filepath.Join(uiArtifactDir(t), "ui-operator.png")
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,1400", "--hide-scrollbars", w.base+"/ui")
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot of /ui: %s (%d bytes)", shot, fi.Size())
}
