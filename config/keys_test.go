package config

import (
	"strings"
	"testing"
)

func TestCheckKeys(t *testing.T) {
	defs := append(append(Defs{}, ConnectorDefs...),
		Def{Name: "auto.create", Type: Boolean}, Def{Name: "transforms", Type: List}, Def{Name: "connection.url", Type: String}, Def{Name: "connection.password", Type: Password})
	base := map[string]string{KeyName: "n", KeyClass: "postgres", KeyTopics: "t", "connection.url": "postgres://h/db"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		raw              map[string]string
		refused, want    string // refused: the key refused ("" none); want: in its message
		unknown, ignored string
	}{
		{raw: with("auto.craete", "true"), refused: "auto.craete", want: "did you mean `auto.create`?"},
		{raw: with("delivery.guarentee", "at_least_once"), refused: "delivery.guarentee", want: "did you mean `delivery.guarantee`?"},
		{raw: with("Auto.Create", "true"), refused: "Auto.Create", want: "did you mean `auto.create`?"},
		{raw: with("topic", "x"), refused: "topic", want: "did you mean `topics`?"},
		{raw: with("connection.pasword", "x"), refused: "connection.pasword", want: "`connection.password`"},
		{raw: with("errors.tolerence", "all"), refused: "errors.tolerence", want: "`errors.tolerance`"},
		{raw: with("fields.whitelist", "a,b"), refused: "fields.whitelist", want: "ReplaceField"},
		{raw: with("db.timezone", "Europe/Paris"), refused: "db.timezone", want: "AT TIME ZONE"},
		{raw: with("db.timezone", "UTC"), ignored: "db.timezone"},
		{raw: with("fields.whitelist", "a", KeyIgnoreUnsupported, "fields.whitelist"), ignored: "fields.whitelist"},
		{raw: with("batch.size", "3000"), refused: "batch.size", want: "batch.max.records"},
		{raw: with("max.retries", "10"), ignored: "max.retries"},
		{raw: with("connection.loginTimeout", "10"), ignored: "connection.loginTimeout"},
		{raw: with("my.label", "x"), unknown: "my.label"},
		{raw: with("transforms", "a", "transforms.a.type", "org.apache.kafka.connect.transforms.RegexRouter", "transforms.a.regex", "x")},
		{raw: with("consumer.override.max.poll.records", "5", "errors.log.enable", "true", "value.converter.auto.register.schemas", "false", "header.converter", "x")},
	} {
		rep := CheckKeys(c.raw, defs)
		if c.refused == "" && len(rep.Refused) > 0 || c.refused != "" && (len(rep.Refused) != 1 || rep.Refused[0].Name != c.refused || !strings.Contains(rep.Refused[0].Msg, c.want)) {
			t.Errorf("%v: refused %v, want %q with %q", c.raw, rep.Refused, c.refused, c.want)
		}
		if got := strings.Join(rep.Unknown, ","); got != c.unknown {
			t.Errorf("%v: unknown %q, want %q", c.raw, got, c.unknown)
		}
		if got := strings.Join(rep.Ignored, ","); got != c.ignored {
			t.Errorf("%v: ignored %q, want %q", c.raw, got, c.ignored)
		}
	}
	// The ignore list names only settings txsink would refuse.
	_, errs := ConnectorDefs.Validate(with(KeyIgnoreUnsupported, "fields.whitelist,auto.craete"))
	if m := errs.For(KeyIgnoreUnsupported); len(m) != 1 || !strings.Contains(m[0], "auto.craete") {
		t.Errorf("ignore list naming a typo: %v", errs)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"auto.craete", "auto.create", 1}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"kitten", "sitting", 3}, {"", "ab", 2}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("%q %q: %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestForeignKeysWellFormed: each foreign setting is listed once, has
// advice, and only Unsupported ones have values accepted as the same.
func TestForeignKeysWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range ForeignKeys {
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Advice == "" || len(f.Vendors) == 0 {
			t.Errorf("%s: no advice or vendor", f.Name)
		}
		if f.Same != nil && f.Kind != Unsupported {
			t.Errorf("%s: Same on a setting that is not Unsupported", f.Name)
		}
	}
}
