package secrets

import (
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
)

// TestProvidedScrubsEveryForm: a value from a config provider is removed
// from free text as written, trimmed, percent-encoded and %q-escaped; one
// shorter than MinLen only where it stands quoted, so that "1" or "db" do
// not turn every message into noise.
func TestProvidedScrubsEveryForm(t *testing.T) {
	secs := Provided([]string{"db-Canary 7\n", "ab", "x", ""})
	for _, c := range []struct{ in, want string }{
		{`database "db-Canary 7" does not exist`, `database "[hidden]" does not exist`},
		{`invalid value "db-Canary 7\n"`, `invalid value "[hidden]"`},
		{"dbname=db-Canary%207 sslmode=disable", "dbname=[hidden] sslmode=disable"},
		{"postgres://h/db-Canary+7", "postgres://h/[hidden]"},
		{`password authentication failed for user "ab"`, `password authentication failed for user [hidden]`},
		{`role 'x' does not exist`, `role [hidden] does not exist`},
		{"task 1 of abc: about x", "task 1 of abc: about x"}, // short values stay unless quoted
	} {
		if got := ScrubString(c.in, secs); got != c.want {
			t.Errorf("ScrubString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, s := range secs {
		if s == "" || len(s) < MinLen {
			t.Errorf("Provided returned %q, shorter than MinLen", s)
		}
	}
}

// TestResolvedErrorsNameTheReference: a field error about a setting that
// holds a reference shows the reference, never the value it resolved to,
// in any setting and whatever the check quotes; other messages lose the
// resolved values too.
func TestResolvedErrorsNameTheReference(t *testing.T) {
	raw := map[string]string{
		"tasks.max":         "${env:TM}",
		"batch.max.records": "${env:SHORT}",
		"connection.url":    "postgres://${env:USER}@h/${env:DB}",
		"topics":            "${env:TOPIC}",
	}
	resolved := map[string]string{
		"tasks.max":         "Canary-TM",
		"batch.max.records": "0",
		"connection.url":    "postgres://Canary-User@h/Canary-DB",
		"topics":            "Canary-Topic",
	}
	values := []string{"Canary-TM", "0", "Canary-User", "Canary-DB", "Canary-Topic"}
	errs := config.Errors{
		{Name: "tasks.max", Msg: `invalid value "Canary-TM": must be an integer`},
		{Name: "batch.max.records", Msg: "must be between 1 and 1000000, got 0"},
		{Name: "connection.url", Msg: `user "Canary-User" may not connect to database Canary-DB`},
		{Name: "topics", Msg: `topic names must not start with "__", got Canary-Topic`},
		{Name: "pk.fields", Msg: "column Canary-Topic not found"},
	}
	got := ResolvedErrors(nil, errs, raw, resolved, values)
	want := config.Errors{
		{Name: "tasks.max", Msg: "invalid value from ${env:TM}: must be an integer"},
		{Name: "batch.max.records", Msg: "value from ${env:SHORT}: must be between 1 and 1000000, got [hidden]"},
		{Name: "connection.url", Msg: `value from ${env:USER}, ${env:DB}: user "[hidden]" may not connect to database [hidden]`},
		{Name: "topics", Msg: `value from ${env:TOPIC}: topic names must not start with "__", got [hidden]`},
		{Name: "pk.fields", Msg: "column [hidden] not found"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got  %s\nwant %s", got[i], want[i])
		}
	}
	for _, e := range got {
		if strings.Contains(e.Msg, "Canary") {
			t.Errorf("%s shows a resolved value", e)
		}
	}
	if errs[0].Msg != `invalid value "Canary-TM": must be an integer` {
		t.Error("ResolvedErrors changed its input")
	}
}
