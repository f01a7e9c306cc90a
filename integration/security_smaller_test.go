package integration

// Issue 25, item 7: three smaller holes, each against a real "txsink
// serve" and the harness's PostgreSQL.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/harness"
)

// waitDropped polls the connector until its trace says a stored secret
// was dropped, or it runs (the connection was made with what was stored),
// or d passes; it returns the last state and trace.
func (w *worker) waitDropped(t *testing.T, name string, d time.Duration) (string, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		state, trace := w.connectorState(t, name)
		if state == "RUNNING" || strings.Contains(trace, "dropped") || time.Now().After(deadline) {
			return state, trace
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// awaitState polls the connector until it is in state want (or d passes).
func (w *worker) awaitState(t *testing.T, name, want string, d time.Duration) (string, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		state, trace := w.connectorState(t, name)
		if state == want || time.Now().After(deadline) {
			return state, trace
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSecuritySmallerTLSDowngrade (item 7a): how the connection to the
// database is protected (sslmode, sslnegotiation, channel_binding, JDBC's
// ssl=true) is part of what a stored password is bound to. A PUT or PATCH
// that weakens it without sending the password again drops the password:
// the connector fails naming it. The harness's PostgreSQL has no TLS, so
// the stored modes below cannot log in; before the fix every downgrade
// below logged in with the stored password (RUNNING), in clear text. A
// stand-in server shows the password on the wire.
func TestSecuritySmallerTLSDowngrade(t *testing.T) {
	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	dbURL := canaryURL(t, pg, db)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	role := u.User.Username()
	u.RawQuery = ""
	withPassword := *u // the password inside the URL
	u.User = url.User(role)
	at := func(query string) string { v := *u; v.RawQuery = query; return v.String() }
	jdbc := func(query string) string {
		return "jdbc:postgresql://" + u.Host + u.Path + "?user=" + role + query
	}
	capture := startCapture(t)

	w := secServe(t, serveOpts{})
	// create makes a connector whose stored mode the server cannot meet:
	// it fails without logging in.
	create := func(name string, cfg map[string]string) {
		t.Helper()
		cfg["name"] = name
		w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
		if state, trace := w.settle(t, name, time.Minute); state != "FAILED" {
			t.Fatalf("%s: %s %s; want FAILED (the stored mode needs TLS, which the server lacks)", name, state, tail(trace, 300))
		}
	}
	// expectDropped checks that the connector failed saying the stored
	// secret of key was dropped.
	expectDropped := func(name, key, how string) {
		t.Helper()
		state, trace := w.waitDropped(t, name, time.Minute)
		switch {
		case state == "RUNNING":
			t.Errorf("%s: RUNNING: the downgraded connection logged in with the stored password", how)
		case state != "FAILED" || !strings.Contains(trace, "stored secret of "+key+" was dropped") || !strings.Contains(trace, "sslmode="):
			t.Errorf("%s: %s %q, want FAILED saying the stored secret of %s was dropped and naming the TLS mode", how, state, tail(trace, 400), key)
		}
		if strings.Contains(trace, apiCanary) {
			t.Errorf("%s: the trace shows the password", how)
		}
	}

	type downgrade struct {
		name, from, to string
		extra          map[string]string // other settings of the connector
	}
	for _, c := range []downgrade{
		{"tls-disable", at("sslmode=require"), at("sslmode=disable"), nil},
		{"tls-allow", at("sslmode=require"), at("sslmode=allow"), nil},
		{"tls-prefer", at("sslmode=verify-full"), at("sslmode=prefer"), nil},
		{"tls-default", at("sslmode=require"), at(""), nil},
		{"tls-encoded-key", at("sslmode=require"), at("ssl%6Dode=disable"), nil},
		{"tls-repeated-key", at("sslmode=require"), at("sslmode=require&sslmode=disable"), nil},
		{"tls-jdbc-ssl", jdbc("&ssl=true"), jdbc(""), nil},
		{"tls-channel-binding", at("channel_binding=require"), at("channel_binding=disable"), nil},
		{"tls-direct", at("sslnegotiation=direct"), at("sslnegotiation=postgres"), nil},
	} {
		cfg := pgConnector(c.from)
		cfg["connection.password"] = apiCanary
		create(c.name, cfg)
		// A PATCH of connection.url alone.
		w.must(t, 200, "PATCH", "/connectors/"+c.name+"/config", map[string]string{"connection.url": c.to})
		expectDropped(c.name, "connection.password", "PATCH "+c.from+" -> "+c.to)
	}

	// JDBC's ssl=false is not a key the worker accepts at all: 400, and
	// the stored configuration keeps its mode and password.
	{
		cfg := pgConnector(jdbc("&ssl=true"))
		cfg["connection.password"] = apiCanary
		create("tls-jdbc-false", cfg)
		code, body := w.call(t, "PATCH", "/connectors/tls-jdbc-false/config", map[string]string{"connection.url": jdbc("&ssl=false")})
		if code != 400 || !strings.Contains(body, "connection.url") {
			t.Errorf("PATCH ssl=false: %d %s, want 400 naming connection.url", code, body)
		}
		var shown map[string]string
		_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/tls-jdbc-false/config", nil)), &shown)
		if !strings.Contains(shown["connection.url"], "ssl=true") || shown["connection.password"] == "" {
			t.Errorf("after the refused PATCH: %v", shown)
		}
	}

	// A PUT of what GET .../config shows (the URL's password "[hidden]",
	// connection.password "[hidden]") with only the mode changed.
	for name, c := range map[string]struct {
		url, password, secret string
	}{
		"tls-put-url":      {func() string { v := withPassword; v.RawQuery = "sslmode=require"; return v.String() }(), "", "connection.url"},
		"tls-put-password": {at("sslmode=require"), apiCanary, "connection.password"},
	} {
		cfg := pgConnector(c.url)
		if c.password != "" {
			cfg["connection.password"] = c.password
		}
		create(name, cfg)
		var shown map[string]string
		_ = json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/"+name+"/config", nil)), &shown)
		if !strings.Contains(fmt.Sprint(shown), "[hidden]") || !strings.Contains(shown["connection.url"], "sslmode=require") {
			t.Fatalf("%s: GET shows %v", name, shown)
		}
		shown["connection.url"] = strings.Replace(shown["connection.url"], "sslmode=require", "sslmode=disable", 1)
		w.must(t, 200, "PUT", "/connectors/"+name+"/config", shown)
		expectDropped(name, c.secret, "PUT of GET's output with sslmode=disable ("+name+")")
	}

	// Sending the password again with the downgrade is an explicit choice:
	// the connector logs in (what the downgrade alone did before the fix).
	w.must(t, 200, "PATCH", "/connectors/tls-disable/config", map[string]string{"connection.url": at("sslmode=disable"), "connection.password": apiCanary})
	if state, trace := w.awaitState(t, "tls-disable", "RUNNING", time.Minute); state != "RUNNING" {
		t.Errorf("after sending the password again: %s %s", state, tail(trace, 300))
	}
	// A change that keeps the mode keeps the password: require spelled
	// as JDBC's ssl=true is still require.
	cfg := pgConnector(at("sslmode=disable"))
	cfg["connection.password"] = apiCanary
	cfg["name"] = "tls-same"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": "tls-same", "config": cfg})
	w.must(t, 200, "PATCH", "/connectors/tls-same/config", map[string]string{"connection.url": at("ssl%6Dode=disable&application_name=x")})
	if state, trace := w.awaitState(t, "tls-same", "RUNNING", time.Minute); state != "RUNNING" {
		t.Errorf("the same mode spelled otherwise: %s %s", state, tail(trace, 300))
	}

	// On the wire: a stand-in server on the same host and port for both
	// modes. With sslmode=require the driver stops at the refused TLS
	// request; after the downgrade, the stored password must not follow.
	captured := "postgres://" + role + "@" + capture.addr() + "/x"
	cfg = pgConnector(captured + "?sslmode=require")
	cfg["connection.password"] = apiCanary
	create("tls-wire", cfg)
	since := len(capture.got())
	w.must(t, 200, "PATCH", "/connectors/tls-wire/config", map[string]string{"connection.url": captured + "?sslmode=disable"})
	state, trace := w.waitDropped(t, "tls-wire", time.Minute)
	if !strings.Contains(trace, "dropped") {
		// Before the fix the driver logged in again and again with the
		// stored password; wait for one attempt to show it.
		deadline := time.Now().Add(20 * time.Second)
		for len(capture.got()) == since && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("stand-in server: %s %q, want the password dropped", state, tail(trace, 300))
	}
	leaked := 0
	for _, s := range capture.got()[since:] {
		if strings.HasSuffix(s, ":"+apiCanary) {
			leaked++
		}
	}
	if leaked > 0 {
		t.Errorf("the stored password went in clear text to the server after the downgrade (%d logins)", leaked)
	}
}

// TestSecuritySmallerValidateAll (item 7c): validate on a real worker
// reports every error of a configuration without a name, each on its
// setting, with error_count counting them all.
func TestSecuritySmallerValidateAll(t *testing.T) {
	w := secServe(t, serveOpts{})
	for _, body := range []map[string]string{
		{"connector.class": "postgres", "topics": "t", "connection.url": "postgres://u@127.0.0.1/db?sslrootcert=/etc/passwd", "insert.mode": "upsert", "pk.mode": "none", "errors.tolerance": "all"},
		{"connector.class": "postgres", "topics": "t", "connection.url": "postgres://u@127.0.0.1/db?ssl=false", "insert.mode": "upsert", "pk.mode": "none", "errors.tolerance": "all"},
	} {
		var ci validateAnswer
		_ = json.Unmarshal([]byte(w.must(t, 200, "PUT", "/connector-plugins/postgres/config/validate", body)), &ci)
		errsOf, total := map[string]int{}, 0
		for _, c := range ci.Configs {
			errsOf[c.Value.Name] += len(c.Value.Errors)
			total += len(c.Value.Errors)
		}
		for _, k := range []string{"name", "connection.url", "pk.mode", "errors.deadletterqueue.table.name"} {
			if errsOf[k] == 0 {
				t.Errorf("%s: no error on %s (errors: %v)", body["connection.url"], k, errsOf)
			}
		}
		if ci.ErrorCount != total || total < 4 {
			t.Errorf("error_count %d, errors listed %d", ci.ErrorCount, total)
		}
	}
}

// TestSecuritySmallerColumnName (item 7b): a record whose field name
// cannot be a PostgreSQL column (over 63 bytes, a NUL byte) goes to the
// dead-letter table exactly once with errors.tolerance=all, its error
// naming the field, and the rest of the batch is written; with none the
// partition stops at exactly that record, the trace naming the field.
func TestSecuritySmallerColumnName(t *testing.T) {
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	dbURL := pg.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	long := strings.Repeat("c", 64)
	values := []string{`{"id":0}`, `{"id":1,"` + long + `":1}`, `{"id":2,"color":"red"}`, `{"id":3,"a\u0000b":1}`, `{"id":4}`}
	sfx := randSuffix(t)
	produceTo := func(topic string) {
		k.CreateTopic(t, topic, 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, v := range values {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(sql string) int {
		var n int
		if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	w := secServe(t, serveOpts{})

	// errors.tolerance=all.
	topic, dlq := "colname-all-"+sfx, "dlq_colname_"+sfx
	produceTo(topic)
	cfg := baseConnector("colname-all-"+sfx, topic, dbURL, "exactly_once_sink")
	cfg["auto.create"], cfg["auto.evolve"] = "true", "true"
	cfg["errors.tolerance"], cfg["errors.deadletterqueue.table.name"] = "all", dlq
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": cfg["name"], "config": cfg})
	deadline := time.Now().Add(time.Minute)
	for count(`SELECT count(*) FROM "`+topic+`"`) < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := count(`SELECT count(*) FROM "` + topic + `"`); n != 3 {
		state, trace := w.connectorState(t, cfg["name"])
		t.Fatalf("tolerance=all: %d rows, want 3 (%s %s)", n, state, tail(trace, 400))
	}
	rows, err := pool.Query(context.Background(), `SELECT kafka_offset, error FROM "`+dlq+`" ORDER BY kafka_offset`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var off int64
		var msg string
		if err := rows.Scan(&off, &msg); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(off))
		if !strings.Contains(msg, "cannot be a PostgreSQL column name") || off == 1 && !strings.Contains(msg, long) {
			t.Errorf("dead letter @%d: %q, want it to name the field", off, msg)
		}
	}
	if fmt.Sprint(got) != "[1 3]" {
		t.Errorf("dead letters at %v, want [1 3], each once", got)
	}
	if state, trace := w.connectorState(t, cfg["name"]); state != "RUNNING" {
		t.Errorf("tolerance=all: %s %s", state, tail(trace, 400))
	}

	// errors.tolerance=none.
	topic = "colname-none-" + sfx
	produceTo(topic)
	cfg = baseConnector("colname-none-"+sfx, topic, dbURL, "exactly_once_sink")
	cfg["auto.create"], cfg["auto.evolve"] = "true", "true"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": cfg["name"], "config": cfg})
	state, trace := w.awaitState(t, cfg["name"], "FAILED", time.Minute)
	if state != "FAILED" || !strings.Contains(trace, "["+"0]@1") || !strings.Contains(trace, long) {
		t.Errorf("tolerance=none: %s %q, want FAILED at offset 1 naming the field", state, tail(trace, 400))
	}
	if n := count(`SELECT count(*) FROM "` + topic + `"`); n != 1 {
		t.Errorf("tolerance=none: %d rows, want 1 (the record before the bad one)", n)
	}
}
