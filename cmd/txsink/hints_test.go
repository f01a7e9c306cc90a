package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// pgAuthTrace is the trace of a wrong password under sslmode=prefer as the
// PostgreSQL sink reported it before issue 27: the refused TLS attempt
// first, the server's answer on the last line.
const pgAuthTrace = "connect to PostgreSQL at 127.0.0.1:5432 as postgres: failed to connect to `user=postgres database=sink`:\n" +
	"\t127.0.0.1:5432 (127.0.0.1): tls error: server refused TLS connection\n" +
	"\t127.0.0.1:5432 (127.0.0.1): failed SASL auth: FATAL: password authentication failed for user \"postgres\" (SQLSTATE 28P01)"

func TestAdviseTrace(t *testing.T) {
	cases := []struct {
		name, trace string
		cause       []string // substrings of the cause line
		notCause    []string
		setting     string
		hint        []string
		notHint     []string
	}{
		{"password", pgAuthTrace, []string{"password authentication failed", "28P01"}, []string{"tls error"}, "connection.password",
			[]string{"txsink connectors restart c -include-tasks"}, []string{"PUT"}},
		{"not null on every record",
			`task stopped at a bad record: topic t partition 0 offset 7: record 7: rejected by the database: ERROR: null value in column "x" of relation "t" violates not-null constraint (SQLSTATE 23502) (skip it by resetting the partition's offset to 8)`,
			[]string{"23502"}, []string{"skip it"}, "", []string{"fail the same way", "restart c"}, []string{"offsets c -set"}},
		{"a NOT NULL column no record sets",
			`task stopped at a bad record: topic t partition 0 offset 0: bad record t[0]@0 field "region": cannot convert value: no value for NOT NULL column "region", which has no default (skip it by resetting the partition's offset to 1)`,
			[]string{`NOT NULL column "region"`}, []string{"skip it"}, "", []string{"fail the same way", "restart c"}, []string{"offsets c -set"}},
		{"one bad record",
			`task stopped at a bad record: topic t partition 2 offset 7: record 7: rejected by the database: ERROR: value too long for type character varying(3) (SQLSTATE 22001) (skip it by resetting the partition's offset to 8)`,
			[]string{"22001"}, nil, "", []string{"txsink connectors stop c", "offsets c -set", `"kafka_partition":2`, `"kafka_offset":8`, "resume c"}, []string{"PUT"}},
		{"missing table", `table "public"."x": table not found (set auto.create=true to create it)`, []string{"table not found"}, nil, "auto.create", []string{"restart c"}, nil},
		{"one line", "boom", []string{"boom"}, nil, "", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := adviseTrace("c", c.trace)
			for _, w := range c.cause {
				if !strings.Contains(a.Cause, w) {
					t.Errorf("cause %q lacks %q", a.Cause, w)
				}
			}
			for _, w := range c.notCause {
				if strings.Contains(a.Cause, w) {
					t.Errorf("cause %q has %q", a.Cause, w)
				}
			}
			if a.Setting != c.setting {
				t.Errorf("setting %q, want %q", a.Setting, c.setting)
			}
			for _, w := range c.hint {
				if !strings.Contains(a.Hint, w) {
					t.Errorf("hint %q lacks %q", a.Hint, w)
				}
			}
			for _, w := range c.notHint {
				if strings.Contains(a.Hint, w) {
					t.Errorf("hint %q has %q", a.Hint, w)
				}
			}
		})
	}
}

func TestSplitVerb(t *testing.T) {
	cases := []struct {
		args []string
		verb string
		rest string
	}{
		{[]string{"status", "x"}, "status", "x"},
		{[]string{"-url", "http://h:1", "status", "x"}, "status", "-url http://h:1 x"},
		{[]string{"--output=json", "-timeout", "5s", "list"}, "list", "--output=json -timeout 5s"},
		{[]string{"-include-tasks", "restart", "x"}, "restart", "-include-tasks x"},
		{[]string{"-f", "c.json", "create"}, "create", "-f c.json"},
	}
	for _, c := range cases {
		v, rest, ok := splitVerb(c.args)
		if !ok || v != c.verb || strings.Join(rest, " ") != c.rest {
			t.Errorf("%q: verb %q rest %q ok %v, want %q %q", c.args, v, rest, ok, c.verb, c.rest)
		}
	}
	if _, _, ok := splitVerb([]string{"-url", "x"}); ok {
		t.Error("a flag and its value taken for a verb")
	}
}

func TestCLIFlagsBeforeVerbAndCause(t *testing.T) {
	code, out, errOut := runCLI(t, "-url", "http://127.0.0.1:1", "-timeout", "1s", "status", "x")
	if code != exitCLIError || strings.Contains(errOut, "unknown verb") {
		t.Fatalf("flags before the verb: exit %d\n%s%s", code, out, errOut)
	}
}

// TestStatusShowsCause: the status table shows the server's answer of a
// failed connection, not the TLS attempt before it, and the setting to
// fix. Before issue 27 it printed the first line of the trace only, which
// ends at "failed to connect to `user=postgres database=sink`:".
func TestStatusShowsCause(t *testing.T) {
	b, _ := json.Marshal(map[string]any{"name": "c", "type": "sink", "connector": map[string]any{"state": "RUNNING", "worker_id": "w"},
		"tasks": []any{map[string]any{"id": 0, "state": "FAILED", "worker_id": "w", "trace": pgAuthTrace}}})
	var out bytes.Buffer
	if err := printStatus(b, &verbFlags{}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, w := range []string{"password authentication failed for user \"postgres\" (SQLSTATE 28P01)", "setting to fix: connection.password", "txsink connectors restart c -include-tasks"} {
		if !strings.Contains(s, w) {
			t.Errorf("status lacks %q:\n%s", w, s)
		}
	}
}
