package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

// TestDebeziumUnchangedToast: under PostgreSQL's default REPLICA IDENTITY,
// an update that leaves a value stored out of line (TOAST) unchanged
// reaches Kafka from the real Debezium connector with Debezium's
// placeholder instead of the value (the test checks that it does). The
// PostgreSQL copy keeps the value: txsink verify -source-url finds it
// equal to the source. The ClickHouse connector, whose rows are replaced
// whole, refuses those records into its dead-letter table naming the
// field, and its copy keeps the previous version of the rows. The negative
// control, a PostgreSQL connector told another placeholder, writes
// Debezium's into its copy, and verify finds those rows different.
func TestDebeziumUnchangedToast(t *testing.T) {
	k := harness.Kafka(t)
	source := harness.PostgresSource(t)
	target := harness.Postgres(t)
	ch := harness.ClickHouse(t)
	ctx := context.Background()

	srcURL := source.NewDatabase(t)
	// body: 8 kB of hex (about 4 kB compressed), blob: 4 kB of random
	// bytes; both are stored out of line.
	for _, s := range []string{
		`CREATE TABLE docs (id integer PRIMARY KEY, title text NOT NULL, body text NOT NULL, blob bytea)`,
		`INSERT INTO docs SELECT i, 'title ' || i, b, decode(b, 'hex')
		   FROM generate_series(1, 3) i, LATERAL (SELECT string_agg(md5(random()::text || i || g), '') AS b FROM generate_series(1, 256) g) r`,
	} {
		if err := execSQL(ctx, srcURL, s); err != nil {
			t.Fatal(err)
		}
	}
	prefix := "tst" + randSuffix(t)
	topic := prefix + ".public.docs"
	k.CreateTopic(t, topic, 1)
	dbz := startDebezium(t, k, debeziumOptions{SourceURL: srcURL, Prefix: prefix, Tables: []string{"public.docs"},
		Slot: "slot_" + prefix, Publication: "pub_" + prefix})

	pgDB, offDB, chDB := target.NewDatabase(t), target.NewDatabase(t), ch.NewDatabase(t)
	pgCfg := replPostgresConnector("toast-pg", pgDB, prefix, nil)
	offCfg := replPostgresConnector("toast-pg-off", offDB, prefix, map[string]string{convert.KeyCDCUnavailable: "not-what-debezium-sends"})
	chCfg := replClickHouseConnector("toast-ch", ch, chDB, prefix, map[string]string{
		"errors.tolerance": "all", "errors.deadletterqueue.table.name": "dlq",
	})
	w := startServeWorker(t, k.Bootstrap, "toast-w1", []string{writeConnector(t, pgCfg), writeConnector(t, offCfg), writeConnector(t, chCfg)})
	pg := connectPool(t, pgDB)
	chConn := ch.Conn(t, chDB)

	pgCount := func(q string) int {
		var n int
		if err := pg.QueryRow(ctx, q).Scan(&n); err != nil {
			return -1 // the table may not exist yet
		}
		return n
	}
	chCount := func(q string) uint64 {
		var n uint64
		if err := chConn.QueryRow(ctx, q).Scan(&n); err != nil {
			return 0
		}
		return n
	}
	waitFor(t, 3*time.Minute, "the snapshot in both copies", func() (bool, string) {
		if err := dbz.alive(); err != nil {
			t.Fatal(err)
		}
		if ok, code := w.p.exited(); ok {
			t.Fatalf("txsink exited with %d:\n%s", code, tail(w.p.output(), 4000))
		}
		p, c := pgCount(`SELECT count(*) FROM docs`), chCount(`SELECT count() FROM docs FINAL`)
		return p == 3 && c == 3, fmt.Sprintf("PostgreSQL %d rows, ClickHouse %d", p, c)
	})

	// Two updates that leave body and blob unchanged.
	if err := execSQL(ctx, srcURL, `UPDATE docs SET title = title || ' v2' WHERE id IN (1, 2)`); err != nil {
		t.Fatal(err)
	}
	off := connectPool(t, offDB)
	waitFor(t, 3*time.Minute, "the updates applied (PostgreSQL) and dead-lettered (ClickHouse)", func() (bool, string) {
		p := pgCount(`SELECT count(*) FROM docs WHERE title LIKE '% v2'`)
		var o int
		if err := off.QueryRow(ctx, `SELECT count(*) FROM docs WHERE title LIKE '% v2'`).Scan(&o); err != nil {
			o = -1
		}
		d := chCount(`SELECT count() FROM dlq`)
		return p == 2 && o == 2 && d == 2, fmt.Sprintf("PostgreSQL %d updated rows (control %d), ClickHouse dead letters %d", p, o, d)
	})

	// Debezium did send its placeholder: the precondition of this test.
	placeholders := 0
	cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for seen := 0; seen < 5; {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("read %d of the 5 change events of %s", seen, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			if bytes.Contains(r.Value, []byte(convert.DefaultUnavailable)) {
				placeholders++
			}
		})
	}
	if placeholders != 2 {
		t.Fatalf("%d of Debezium's events carry %s, want the 2 updates: the source did not exercise the case", placeholders, convert.DefaultUnavailable)
	}

	// PostgreSQL: the copy equals the source, values included; the
	// control's copy holds the placeholder in the two updated rows.
	verifyCopy := func(db, name string) (verify.ReplicaReport, int) {
		args := []string{"verify", "-source-url", srcURL, "-sink-url", db, "-connector", name, "-bootstrap", k.Bootstrap, "-output", "json"}
		out, code := runVerifyCLI(t, args...)
		var r verify.ReplicaReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: verify output: %v\n%s", name, err, out)
		}
		return r, code
	}
	r, code := verifyCopy(pgDB, "toast-pg")
	if code != 0 || !r.OK() || r.SourceRows != 3 || r.TargetRows != 3 {
		t.Errorf("PostgreSQL copy: verify exited %d: %d source rows, %d target rows, missing %d, extra %d, different %d",
			code, r.SourceRows, r.TargetRows, r.Missing, r.Extra, r.Different)
	}
	if r, code := verifyCopy(offDB, "toast-pg-off"); code == 0 || r.Different != 2 {
		t.Errorf("negative control: verify exited %d with %d different rows, want the 2 rows holding the placeholder", code, r.Different)
	}
	src := pgTexts(t, srcURL, `SELECT string_agg(id || ':' || title || ':' || md5(body) || ':' || md5(blob), ' ' ORDER BY id) FROM docs`)
	dst := pgTexts(t, pgDB, `SELECT string_agg(id || ':' || title || ':' || md5(body) || ':' || md5(blob), ' ' ORDER BY id) FROM docs`)
	if *src[0][0] != *dst[0][0] {
		t.Errorf("PostgreSQL copy\n%s\nsource\n%s", *dst[0][0], *src[0][0])
	}

	// ClickHouse: the two updates are dead letters naming the field; the
	// rows keep their previous version, values intact.
	rows, err := chConn.Query(ctx, `SELECT error FROM dlq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e, `"body"`) || !strings.Contains(e, "REPLICA IDENTITY FULL") {
			t.Errorf("ClickHouse dead letter: %s", e)
		}
	}
	rows.Close()
	var chTitles string
	if err := chConn.QueryRow(ctx, `SELECT arrayStringConcat(groupArray(t), ' ') FROM (SELECT title AS t FROM docs FINAL ORDER BY id)`).Scan(&chTitles); err != nil {
		t.Fatal(err)
	}
	if chTitles != "title 1 title 2 title 3" {
		t.Errorf("ClickHouse copy titles %q, want the rows before the refused updates", chTitles)
	}
	if n := chCount(`SELECT count() FROM docs FINAL WHERE body = '` + convert.DefaultUnavailable + `'`); n != 0 {
		t.Errorf("ClickHouse copy: %d rows hold the placeholder", n)
	}
}
