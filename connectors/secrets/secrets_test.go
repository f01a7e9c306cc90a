package secrets

import (
	"reflect"
	"strings"
	"testing"
)

// TestRedactURLSpellings: every spelling a driver reads a password from is
// hidden, and the rest of the URL stays readable.
func TestRedactURLSpellings(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:Canary1@h:5432/db":                           "postgres://u:[hidden]@h:5432/db",
		"postgres://u:Can@ry1@h/db":                                "postgres://u:[hidden]@h/db",
		"postgres://127.0.0.1:5432?application_name=@127.0.0.1/db": "postgres://127.0.0.1:[hidden]@127.0.0.1/db",
		"postgres://u@h/db?pass%77ord=Canary1":                     "postgres://u@h/db?pass%77ord=[hidden]",
		"postgres://u@h/db?PASSWORD=Canary1&sslmode=disable":       "postgres://u@h/db?PASSWORD=[hidden]&sslmode=disable",
		"postgres://u@h/db?password=Can;ary1&sslmode=disable":      "postgres://u@h/db?password=[hidden]&sslmode=disable",
		"postgres://u@h/db?x=1;password=Canary1":                   "postgres://u@h/db?x=1;password=[hidden]",
		"postgres://u@h/db?password=a1b&password=Canary1":          "postgres://u@h/db?password=[hidden]&password=[hidden]",
		"postgres://u@h/db?sslpassword=Canary1":                    "postgres://u@h/db?sslpassword=[hidden]",
		"postgres://u:Canary1@[::1]:5432/db":                       "postgres://u:[hidden]@[::1]:5432/db",
		"jdbc:postgresql://h/db?user=u&password=Canary1":           "jdbc:postgresql://h/db?user=u&password=[hidden]",
		"jdbc:postgresql://u:Canary1@h/db":                         "jdbc:postgresql://u:[hidden]@h/db",
		"u:Canary1@h:9000":                                         "u:[hidden]@h:9000",
		"u:Can@ry1@h1:9000,h2:9000/db":                             "u:[hidden]@h1:9000,h2:9000/db",
		"clickhouse://u:Can@ry1@h:9000/db?secure=true":             "clickhouse://u:[hidden]@h:9000/db?secure=true",
		"tcp://u:Canary1@h:9000":                                   "tcp://u:[hidden]@h:9000",
		"clickhouse://u:Can%23ry1@h:9000":                          "clickhouse://u:[hidden]@h:9000",
		"postgres://u@h/db":                                        "postgres://u@h/db",
		"h1:9000,h2:9000":                                          "h1:9000,h2:9000",
		"orders,payments":                                          "orders,payments",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSecretsFromEveryReading: Secrets holds the password as each parser
// reads it, raw and decoded, so ScrubString removes it from free text.
func TestSecretsFromEveryReading(t *testing.T) {
	raw := map[string]string{
		"connection.url":  "postgres://u:Pw%40Canary1@h/db?pass%77ord=Qw%26Canary2",
		"connector.class": "postgres",
	}
	secrets := Of(nil, raw)
	msg := ScrubString("auth failed with Pw@Canary1 and Qw&Canary2 (raw Pw%40Canary1, Qw%26Canary2)", secrets)
	for _, s := range []string{"Canary1", "Canary2"} {
		if strings.Contains(msg, s) {
			t.Errorf("ScrubString left %s: %s", s, msg)
		}
	}
	// URLs inside free text are redacted by parsing too, even unknown ones.
	msg = ScrubString(`dial "postgres://x:Canary3@h/db" failed; see clickhouse://y:Can@ry4@h:9000/db, password=Canary5 and sslpassword='Canary6 x'`, nil)
	for _, s := range []string{"Canary3", "Can@ry4", "ry4", "Canary5", "Canary6"} {
		if strings.Contains(msg, s) {
			t.Errorf("ScrubString left %s: %s", s, msg)
		}
	}
}

// TestRestoreURLPasswords: a URL read from the API, edited elsewhere and
// sent back gets its hidden passwords back, one for one.
func TestRestoreURLPasswords(t *testing.T) {
	for _, c := range []struct{ v, old, want string }{
		{"postgres://u:[hidden]@h/db?sslmode=require", "postgres://u:p%40w@h/db?sslmode=disable", "postgres://u:p%40w@h/db?sslmode=require"},
		{"jdbc:postgresql://h/db?user=u&password=[hidden]&ssl=true", "jdbc:postgresql://h/db?user=u&password=Pw1", "jdbc:postgresql://h/db?user=u&password=Pw1&ssl=true"},
		{"u:[hidden]@h:9000", "u:Can@ry@h:9000", "u:Can@ry@h:9000"},
	} {
		if got, ok := restoreURLPasswords(c.v, c.old); !ok || got != c.want {
			t.Errorf("restoreURLPasswords(%q, %q) = %q, %v; want %q", c.v, c.old, got, ok, c.want)
		}
	}
	for _, c := range [][2]string{
		{"postgres://u:[hidden]@h/db?password=[hidden]", "postgres://u:pw@h/db"},
		{"postgres://u:typed@h/db", "postgres://u:pw@h/db"},
	} {
		if got, ok := restoreURLPasswords(c[0], c[1]); ok {
			t.Errorf("restoreURLPasswords(%q, %q) = %q, want no match", c[0], c[1], got)
		}
	}
}

func TestRedaction(t *testing.T) {
	raw := map[string]string{
		"name":                "c",
		"connector.class":     "postgres",
		"connection.url":      "jdbc:postgresql://u:s%40cret@h:5432/db?sslmode=disable&password=qpw123",
		"connection.password": "Pa55word",
		"my.api.token":        "tok-123",
		"comment":             "uses Pa55word",
	}
	got := RedactConfig(nil, raw)
	want := map[string]string{
		"name":                "c",
		"connector.class":     "postgres",
		"connection.url":      "jdbc:postgresql://u:[hidden]@h:5432/db?sslmode=disable&password=[hidden]",
		"connection.password": Hidden,
		"my.api.token":        Hidden,
		"comment":             "uses [hidden]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RedactConfig:\n got %v\nwant %v", got, want)
	}
	secrets := Of(nil, raw)
	msg := ScrubString("login as u with s@cret / s%40cret / qpw123 / Pa55word failed at postgres://x:y1z@h", secrets)
	for _, s := range []string{"s@cret", "s%40cret", "qpw123", "Pa55word", "y1z"} {
		if strings.Contains(msg, s) {
			t.Errorf("ScrubString left %q: %s", s, msg)
		}
	}
}

// TestProviderReferences: a config provider reference in a secret setting
// is shown (it is where the secret is, not the secret), is not scrubbed
// from text, and is not a secret in clear; a literal password is.
func TestProviderReferences(t *testing.T) {
	raw := map[string]string{
		"name":                "c",
		"connection.url":      "postgres://u@h:5432/db",
		"connection.password": "${file:/etc/txsink/secrets.properties:pg}",
		"my.api.token":        "${env:API_TOKEN}",
	}
	got := RedactConfig(nil, raw)
	if got["connection.password"] != raw["connection.password"] || got["my.api.token"] != raw["my.api.token"] {
		t.Errorf("references hidden: %v", got)
	}
	if secs := Of(nil, raw); len(secs) != 0 {
		t.Errorf("references counted as secrets: %q", secs)
	}
	if c := InClear(nil, raw); len(c) != 0 {
		t.Errorf("references counted as secrets in clear: %v", c)
	}
	raw["connection.password"] = "Pa55word"
	raw["connection.url"] = "postgres://u:pw123@h:5432/db"
	raw["other.url"] = "http://x/?token=abc123"
	if c := InClear(nil, raw); !reflect.DeepEqual(c, []string{"connection.password", "connection.url", "other.url"}) {
		t.Errorf("InClear = %v", c)
	}
}
