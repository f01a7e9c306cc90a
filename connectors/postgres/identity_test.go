package postgres

import (
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/secrets"
)

// TestConnStringTLS: the TLS part of a stored password's identity is the
// mode pgx applies, whatever the spelling.
func TestConnStringTLS(t *testing.T) {
	cleanPGEnv(t)
	for raw, want := range map[string]string{
		"postgres://u@h/db":                                         "sslmode=prefer sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=prefer":                          "sslmode=prefer sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=disable":                         "sslmode=disable sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?ssl%6dode=disable":                       "sslmode=disable sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=require&sslmode=allow":           "sslmode=allow sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h1,h2/db?sslmode=allow":                       "sslmode=allow sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h,h/db?sslmode=prefer":                        "sslmode=prefer sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h,h/db?sslmode=disable":                       "sslmode=disable sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=require":                         "sslmode=require sslnegotiation=postgres channel_binding=prefer",
		"jdbc:postgresql://h/db?user=u&ssl=true":                    "sslmode=require sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=verify-ca":                       "sslmode=verify-ca sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslmode=verify-full":                     "sslmode=verify-full sslnegotiation=postgres channel_binding=prefer",
		"postgres://u@h/db?sslnegotiation=direct":                   "sslmode=require sslnegotiation=direct channel_binding=prefer",
		"postgres://u@h/db?sslmode=require&channel_binding=require": "sslmode=require sslnegotiation=postgres channel_binding=require",
		"postgres://u@h/db?channel_binding=disable":                 "sslmode=prefer sslnegotiation=postgres channel_binding=disable",
	} {
		cs, err := ParseConnString(raw, connectors.Policy{})
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if got := cs.TLS(); got != want {
			t.Errorf("%s: TLS %q, want %q", raw, got, want)
		}
	}
	// The worker's PGSSLMODE is the mode of a URL that names none.
	t.Setenv("PGSSLMODE", "disable")
	cs, err := ParseConnString("postgres://u@h/db", connectors.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.TLS(); !strings.HasPrefix(got, "sslmode=disable ") {
		t.Errorf("PGSSLMODE=disable: TLS %q", got)
	}
}

// defsLookup serves the sink's definitions to secrets.Bind.
type defsLookup struct{}

func (defsLookup) DefsFor(map[string]string) config.Defs { return Spec().AllDefs() }

// TestStoredPasswordBoundToTLS (issue 25, item 7): a change of how the
// connection is protected, sent without the password, drops the stored
// password as a change of host does; a change that keeps the mode in
// another spelling keeps it.
func TestStoredPasswordBoundToTLS(t *testing.T) {
	cleanPGEnv(t)
	id := func(raw map[string]string) (string, error) {
		v, _ := Spec().AllDefs().Validate(raw)
		return identity(v)
	}
	base := func(url string) map[string]string {
		return map[string]string{"connector.class": Class, "name": "c", "topics": "t", "connection.url": url, "connection.password": "s3cret-pw"}
	}
	for _, c := range []struct {
		from, to string
		drop     bool
	}{
		{"postgres://u@h/db?sslmode=require", "postgres://u@h/db?sslmode=disable", true},
		{"postgres://u@h/db?sslmode=require", "postgres://u@h/db?sslmode=allow", true},
		{"postgres://u@h/db?sslmode=require", "postgres://u@h/db?sslmode=prefer", true},
		{"postgres://u@h/db?sslmode=require", "postgres://u@h/db?ssl%6Dode=disable", true},
		{"postgres://u@h/db?sslmode=verify-full", "postgres://u@h/db?sslmode=require", true},
		{"postgres://u@h/db", "postgres://u@h/db?sslmode=disable", true},
		{"jdbc:postgresql://h/db?user=u&ssl=true", "jdbc:postgresql://h/db?user=u", true},
		{"postgres://u@h/db?sslmode=require&channel_binding=require", "postgres://u@h/db?sslmode=require", true},
		{"postgres://u@h/db?sslnegotiation=direct", "postgres://u@h/db?sslmode=require", true},
		// Strengthening drops it too: any change of the mode is a new target.
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=verify-full", true},
		// The same mode, spelled otherwise.
		{"postgres://u@h/db", "postgres://u@h/db?sslmode=prefer", false},
		{"jdbc:postgresql://h/db?user=u&ssl=true", "postgres://u@h/db?sslmode=require", false},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?ssl%6dode=disable&application_name=x", false},
	} {
		next, dropped, note := secrets.Bind(defsLookup{}, id, "c", base(c.from), secrets.Change{Set: map[string]string{"connection.url": c.to}}, "")
		kept := next["connection.password"] == "s3cret-pw"
		if c.drop && (kept || len(dropped) != 1 || dropped[0] != "connection.password" || !strings.Contains(note, "sslmode=")) {
			t.Errorf("%s -> %s: kept %v, dropped %v, note %q; want the password dropped, the note naming the mode", c.from, c.to, kept, dropped, note)
		}
		if !c.drop && (!kept || len(dropped) > 0) {
			t.Errorf("%s -> %s: dropped %v; the mode did not change", c.from, c.to, dropped)
		}
		if strings.Contains(note, "s3cret-pw") {
			t.Errorf("the note shows the password: %q", note)
		}
	}
}
