package integration

// Issue 25, item 2: a value resolved from a config provider is a secret
// wherever it sits, not only in a setting named as one. The tests run a
// real "txsink serve" with the env and dir providers and the harness's
// PostgreSQL, put references in tasks.max, the database and user names,
// parts of connection.url and a topic, and look for the resolved values
// in every response, the worker's log and /metrics.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/integration/harness"
)

// providerWorker starts a worker whose env provider reads PROVTEST_*
// variables (env) and whose dir provider reads the files of a directory
// laid out as Kubernetes mounts a Secret (files maps names to contents).
// It returns the worker and the directory.
func providerWorker(t *testing.T, env map[string]string, files map[string]string) (*worker, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "secret")
	ts := filepath.Join(dir, "..2026_12_03_10_00_00.000000001")
	if err := os.MkdirAll(ts, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cfgFile := filepath.Join(root, "worker.properties")
	props := "config.providers=env,dir\n" +
		"config.providers.env.param.allowlist.pattern=PROVTEST_.*\n" +
		"config.providers.dir.param.allowed.paths=" + dir + "\n"
	if err := os.WriteFile(cfgFile, []byte(props), 0o600); err != nil {
		t.Fatal(err)
	}
	var vars []string
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	return secServe(t, serveOpts{args: []string{"-config", cfgFile}, env: vars}), dir
}

// checkNotShown fails the test for every canary shown in a response the
// worker gave, its log or /metrics (fetched now), and for /ui and
// ?expand=status fetched now.
func checkNotShown(t *testing.T, w *worker, canaries []string) {
	t.Helper()
	w.call(t, "GET", "/connectors?expand=info&expand=status", nil)
	w.call(t, "GET", "/ui", nil)
	w.call(t, "GET", "/metrics", nil)
	w.mu.Lock()
	shown := strings.Join(w.bodies, "\n")
	w.mu.Unlock()
	log := w.output()
	for _, c := range canaries {
		reportShown(t, "a response", shown, c)
		reportShown(t, "the log", log, c)
	}
}

// TestSecurityProviderValuesInvalid: a reference whose value is invalid
// for its setting is refused with a 400 that names the setting and the
// reference and never shows the value: tasks.max, a range-checked setting
// (a short value shown bare by the check), and a part of connection.url,
// each spelled with the env provider and the dir provider (a file with a
// trailing newline, through Kubernetes' ..data links), on create, on
// PUT .../config and on validate.
func TestSecurityProviderValuesInvalid(t *testing.T) {
	pg := harness.Postgres(t)
	sfx := randSuffix(t)
	tm := "TmCanary" + sfx
	tmFile := "TmFileCanary" + sfx
	ct := "CtCanary" + sfx
	w, dir := providerWorker(t,
		map[string]string{"PROVTEST_TM": tm, "PROVTEST_ZERO": "0", "PROVTEST_CT": ct},
		map[string]string{"tm": tmFile + "\n", "zero": "0\n"})
	base := pgConnector(pg.NewDatabase(t))
	name := "sec-prov-" + sfx
	cases := []struct {
		setting, ref string
	}{
		{"tasks.max", "${env:PROVTEST_TM}"},
		{"tasks.max", "${dir:" + dir + ":tm}"},
		{"tasks.max", " ${env:PROVTEST_TM} "},
		{"batch.max.records", "${env:PROVTEST_ZERO}"},
		{"batch.max.records", "${dir:" + dir + ":zero}"},
		{"batch.max.records", "${env:PROVTEST_TM}"},
		{"connection.url", strings.Replace(base["connection.url"], "?", "?connect_timeout=${env:PROVTEST_CT}&", 1)},
		{"connection.url", strings.Replace(base["connection.url"], "sslmode=disable", "sslmode=${env:PROVTEST_TM}", 1)},
	}
	for _, c := range cases {
		cfg := pgConnector(base["connection.url"])
		cfg[c.setting] = c.ref
		code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
		if code != 400 || !strings.Contains(body, c.setting) {
			t.Errorf("%s=%s: %d %s, want 400 naming %s", c.setting, c.ref, code, body, c.setting)
			if code == 201 {
				w.call(t, "DELETE", "/connectors/"+name, nil)
			}
			continue
		}
		if ref := strings.TrimSpace(c.ref); c.setting != "connection.url" && !strings.Contains(body, ref) {
			t.Errorf("%s=%s: %s, want the error to name the reference", c.setting, c.ref, body)
		}
		if strings.Contains(body, "got 0") {
			t.Errorf("%s=%s: %s shows the short value", c.setting, c.ref, body)
		}
		cfg["name"] = "x"
		w.call(t, "PUT", "/connector-plugins/postgres/config/validate", cfg)
	}
	// PUT .../config of an existing connector, and PATCH.
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": base, "initial_state": "STOPPED"})
	for _, c := range cases[:2] {
		cfg := pgConnector(base["connection.url"])
		cfg[c.setting] = c.ref
		if code, body := w.call(t, "PUT", "/connectors/"+name+"/config", cfg); code != 400 {
			t.Errorf("PUT %s=%s: %d %s, want 400", c.setting, c.ref, code, body)
		}
		if code, body := w.call(t, "PATCH", "/connectors/"+name+"/config", map[string]string{c.setting: c.ref}); code != 400 {
			t.Errorf("PATCH %s=%s: %d %s, want 400", c.setting, c.ref, code, body)
		}
	}
	checkNotShown(t, w, []string{tm, tmFile, ct})
}

// TestSecurityProviderValuesInTraces: references in the database name and
// the user name (alone, and as parts of connection.url) that the server
// refuses fail the tasks with PostgreSQL's error, which quotes them; the
// status, ?expand=status, /ui, the log and /metrics never show them. A
// connector that runs with its user, database and topic from references
// shows none of them either (the topic in the status's partitions and the
// active topics hidden too).
func TestSecurityProviderValuesInTraces(t *testing.T) {
	pg := harness.Postgres(t)
	k := harness.Kafka(t)
	sfx := randSuffix(t)
	u, err := url.Parse(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	admin := u.User
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A role and a database of their own, named as canaries, for the
	// connector that runs.
	role, roleDB, rolePw := "rolecanary_"+sfx, "dbruncanary_"+sfx, "PwCanary-"+sfx
	if err := pg.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'`, role, rolePw)); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{roleDB}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pg.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{roleDB}.Sanitize()+" WITH (FORCE)")
		_ = pg.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	topic := "TopicCanary-" + sfx
	k.CreateTopic(t, topic, 2)

	missingDB, missingDBFile := "dbcanary_"+sfx, "dbfilecanary_"+sfx
	missingUser, missingUserFile := "usercanary_"+sfx, "userfilecanary_"+sfx
	w, dir := providerWorker(t,
		map[string]string{"PROVTEST_DB": missingDB, "PROVTEST_USER": missingUser, "PROVTEST_RUNUSER": role, "PROVTEST_RUNDB": roleDB, "PROVTEST_TOPIC": topic},
		map[string]string{"db": missingDBFile, "user": missingUserFile + "\n", "pw": rolePw})
	adminPw, _ := admin.Password()
	host := u.Host
	withUser := func(user, db string) string {
		if user != "" {
			user += "@"
		}
		return "postgres://" + user + host + "/" + db + "?sslmode=disable"
	}
	failing := map[string]map[string]string{
		// The database name.
		"db-env":      {"connection.url": withUser(admin.String(), "${env:PROVTEST_DB}")},
		"db-dir":      {"connection.url": withUser(admin.String(), "${dir:"+dir+":db}")},
		"db-jdbc":     {"connection.url": "jdbc:postgresql://" + host + "/${env:PROVTEST_DB}?sslmode=disable&user=" + admin.Username() + "&password=" + url.QueryEscape(adminPw)},
		"db-password": {"connection.url": withUser(admin.Username(), "${env:PROVTEST_DB}"), "connection.password": adminPw},
		// The user name.
		"user-setting": {"connection.url": withUser("", strings.TrimPrefix(u.Path, "/")), "connection.user": "${env:PROVTEST_USER}", "connection.password": "x-wrong"},
		"user-dir":     {"connection.url": withUser("", strings.TrimPrefix(u.Path, "/")), "connection.user": "${dir:" + dir + ":user}", "connection.password": "x-wrong"},
		"user-url":     {"connection.url": withUser("${env:PROVTEST_USER}:x-wrong", strings.TrimPrefix(u.Path, "/"))},
		"user-query":   {"connection.url": "postgres://" + host + u.Path + "?sslmode=disable&user=${dir:" + dir + ":user}&password=x-wrong"},
	}
	for n, set := range failing {
		cfg := pgConnector("")
		for k, v := range set {
			cfg[k] = v
		}
		name := "sec-prov-" + n + "-" + sfx
		if code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": cfg}); code != 201 {
			t.Errorf("%s: %d %s", n, code, body)
			continue
		}
		if state, _ := w.settle(t, name, time.Minute); state != "FAILED" {
			t.Errorf("%s: %s, want FAILED (the server must refuse the database or user for the test to prove anything)", n, state)
		}
		w.call(t, "GET", "/connectors/"+name+"/status", nil)
		w.call(t, "GET", "/connectors/"+name+"/tasks/0/status", nil)
		w.call(t, "POST", "/connectors/"+name+"/restart?includeTasks=true", nil)
	}

	// A connector that runs: user, password, database and topic from
	// references.
	run := pgConnector(withUser("${env:PROVTEST_RUNUSER}:${dir:"+dir+":pw}", "${env:PROVTEST_RUNDB}"))
	run["topics"] = "${env:PROVTEST_TOPIC}"
	name := "sec-prov-run-" + sfx
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": run})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
		var st apiStatus
		_ = json.Unmarshal([]byte(b), &st)
		parts := 0
		for _, ts := range st.Tasks {
			if ts.State == "FAILED" {
				t.Fatalf("the connector that should run failed: %s", ts.Trace)
			}
			parts += len(ts.Txsink.Partitions)
		}
		if parts == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connector's task never owned its topic's partitions: %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.call(t, "GET", "/connectors/"+name+"/topics", nil)
	w.call(t, "GET", "/connectors/"+name, nil)
	w.call(t, "GET", "/connectors/"+name+"/config", nil)
	checkNotShown(t, w, []string{missingDB, missingDBFile, missingUser, missingUserFile, role, roleDB, rolePw, topic})
}

// TestSecurityDirProviderSymlinks (issue 25, item 6): the dir provider
// refuses a file whose symbolic links lead out of its allowed directory
// (absolute, "../", chained, through ..data, a directory outside), with a
// 400 naming the setting and never the value, while Kubernetes' ..data
// layout in the same directory resolves (the connector's user comes from
// it and the connector runs).
func TestSecurityDirProviderSymlinks(t *testing.T) {
	pg := harness.Postgres(t)
	sfx := randSuffix(t)
	dbURL := pg.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	w, dir := providerWorker(t, nil, map[string]string{"user": u.User.Username(), "pw": pw})
	outside := filepath.Join(filepath.Dir(dir), "outside")
	stolen := "OutsideCanary" + sfx
	if err := os.MkdirAll(filepath.Join(outside, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(outside, "stolen"), filepath.Join(outside, "sub", "stolen")} {
		if err := os.WriteFile(f, []byte(stolen), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"abs":     filepath.Join(outside, "stolen"),
		"rel":     "../outside/stolen",
		"chain":   "rel",
		"through": "..data/../../outside/stolen",
		"subdir":  filepath.Join(outside, "sub"),
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	withUser := func(userRef string) string {
		return "postgres://" + userRef + "@" + u.Host + u.Path + "?sslmode=disable"
	}
	refs := []string{
		"${dir:" + dir + ":abs}", "${dir:" + dir + ":rel}", "${dir:" + dir + ":chain}", "${dir:" + dir + ":through}",
		"${dir:" + filepath.Join(dir, "subdir") + ":stolen}", "${dir:" + dir + "/../outside:stolen}",
	}
	for i, ref := range refs {
		for setting, cfg := range map[string]map[string]string{
			"connection.url":  {"connection.url": withUser(ref)},
			"connection.user": {"connection.url": "postgres://" + u.Host + u.Path + "?sslmode=disable", "connection.user": ref, "connection.password": "${dir:" + dir + ":pw}"},
		} {
			c := pgConnector("")
			for k, v := range cfg {
				c[k] = v
			}
			name := fmt.Sprintf("sec-dirlink-%d-%s", i, sfx)
			code, body := w.call(t, "POST", "/connectors", map[string]any{"name": name, "config": c})
			if code != 400 || !strings.Contains(body, setting) || !strings.Contains(body, "not allowed") {
				t.Errorf("%s=%s: %d %s, want 400 naming %s, not allowed", setting, ref, code, body, setting)
			}
			if code == 201 {
				w.settle(t, name, 30*time.Second)
				w.call(t, "GET", "/connectors/"+name+"/status", nil)
				w.call(t, "DELETE", "/connectors/"+name, nil)
			}
		}
	}
	// Kubernetes' layout resolves: user and password through ..data.
	ok := pgConnector(withUser("${dir:" + dir + ":user}:${dir:" + dir + ":pw}"))
	name := "sec-dirlink-k8s-" + sfx
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": ok})
	if state, trace := w.settle(t, name, time.Minute); state != "RUNNING" {
		t.Errorf("the ..data layout: %s %s, want RUNNING", state, trace)
	}
	checkNotShown(t, w, []string{stolen})
}
