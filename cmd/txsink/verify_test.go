package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/internal/pgtest"
)

// TestVerifySourceURLUsage: the comparison of replicated tables refuses
// bad settings with a usage error (exit 2) naming the setting, before
// connecting anywhere.
func TestVerifySourceURLUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-source-url", "clickhouse://h:9000/db", "-sink-url", "postgres://u@h/db"}, "source-url: the source must be PostgreSQL"},
		{[]string{"-source-url", "postgres://u@h/db"}, "sink-url: required"},
		{[]string{"-source-url", "postgres://u@h/db", "-sink-url", "postgres://u@h/db2", "-table", "${topic}"}, "needs -topic-prefix"},
		{[]string{"-source-url", "postgres://u@h/db", "-sink-url", "postgres://u@h/db2", "-output", "yaml"}, "-output: must be text or json"},
		{[]string{"-source-url", "postgres://u@h/db", "-sink-url", "mysql://h/db"}, "-sink-url: want postgres://"},
	} {
		var out, errb bytes.Buffer
		if code := cmdVerify(c.args, &out, &errb); code != exitVerifyUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), exitVerifyUsage, c.want)
		}
	}
}

// TestVerifySourceURL: against a real source and copy (local PostgreSQL),
// exit 0 when equal, 1 with the difference named, 2 for a table the
// source lacks.
func TestVerifySourceURL(t *testing.T) {
	srv := pgtest.Start(t)
	src, dst := srv.NewDatabase(t), srv.NewDatabase(t)
	for _, u := range []string{src, dst} {
		if err := pgExec(u, `CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b')`); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cmdVerify(append([]string{"-source-url", src, "-sink-url", dst}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("-tables", "t"); code != exitVerifyOK || !strings.Contains(out, "result: EQUAL — 1 tables, 2 rows") {
		t.Fatalf("equal: exit %d\n%s%s", code, out, errs)
	}
	if err := pgExec(dst, `UPDATE t SET v = 'x' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run("-tables", "t"); code != exitVerifyFault || !strings.Contains(out, "different public.t id=2: v: source b, target x") {
		t.Fatalf("different: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := run("-tables", "t", "-ignore-columns", "v"); code != exitVerifyOK {
		t.Fatalf("v ignored: exit %d\n%s", code, errs)
	}
	if code, _, errs := run("-tables", "nope"); code != exitVerifyUsage || !strings.Contains(errs, "the source has no table public.nope") {
		t.Fatalf("missing table: exit %d %s", code, errs)
	}
}

// pgExec runs sql on the database of url.
func pgExec(url, sql string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
