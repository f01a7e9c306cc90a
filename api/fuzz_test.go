package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/connectors/secrets"
)

// FuzzConnectorConfig parses a create-connector body as the API does and
// validates it against the real PostgreSQL sink's definitions. Whatever the
// input, it must not panic, every field error must name a setting, and the
// password (connection.password, and the one inside connection.url) must
// not appear in the redacted configuration, in the validate response or in
// the invalid-configuration message. The seed corpus runs in every
// "go test"; run longer with
//
//	go test -run '^$' -fuzz FuzzConnectorConfig -fuzztime 5m ./api/
func FuzzConnectorConfig(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","config":{"connector.class":"postgres","topics":"t","connection.url":"postgres://u:Secr3tPw@h:5432/db","connection.password":"Secr3tPw"}}`,
		`{"name":"a","config":{"connector.class":"postgres","topics":"t","connection.url":"jdbc:postgresql://h/db?password=Secr3tPw&sslmode=disable"}}`,
		`{"name":"a","config":{"connector.class":"postgres","topics":"t","connection.url":"postgres://u:Secr3tPw@h:bad/db"}}`,
		`{"name":"a","config":{"connector.class":"postgres","topics":"t","connection.url":"postgres://h/db?sslkey=/etc/passwd","tasks.max":"0"}}`,
		`{"name":"a","config":{"connector.class":"nope","topics":"a b"}}`,
		`{"name":"","config":{}}`,
		`{"config":{"name":"x\u0000","batch.max.bytes":"-1","insert.mode":"upsert","pk.mode":"record_key"}}`,
		`{"name":"a","config":{"connector.class":"postgres","topics":"t","connection.url":"postgres://u:p%40ss@h/db","connection.password":"Secr3tPw","delivery.guarantee":"exactly_once","errors.tolerance":"all"}}`,
		`[1,2]`, `{`, `null`, `{"name":5}`,
	} {
		f.Add([]byte(s))
	}
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		f.Fatal(err)
	}
	spec, _ := reg.Lookup("postgres")
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createRequest
		if err := json.Unmarshal(body, &req); err != nil || req.Config == nil {
			return
		}
		raw := req.Config
		_, _, errs := reg.Validate(raw)
		for _, e := range errs {
			if e.Name == "" || e.Msg == "" {
				t.Fatalf("field error without a name or message: %+v", e)
			}
		}
		secs := secrets.Of(reg, raw)
		var pw []string
		for k, v := range raw {
			if k == postgres.KeyPassword && len(v) >= 3 {
				pw = append(pw, v)
			}
		}
		shown, _ := json.Marshal(secrets.RedactConfig(reg, raw))
		vr, _ := json.Marshal(Validate(reg, spec, raw))
		msg := ""
		if len(errs) > 0 {
			msg = secrets.ScrubString(invalidConfigMessage(errs), secs)
		}
		for _, p := range pw {
			if strings.Contains(string(shown), p) || strings.Contains(string(vr), p) || strings.Contains(msg, p) {
				t.Fatalf("password %q shown:\nconfig %s\nvalidate %s\nmessage %s", p, shown, vr, msg)
			}
		}
		if u := raw[postgres.KeyURL]; u != "" {
			// The password the driver would use, as its own parser reads it.
			if cs, err := postgres.ParseConnString(u, connectors.Policy{UnixSockets: true}); err == nil && cs.HasPassword {
				if p := cs.ConnConfig("", "", connectors.Policy{EnvCredentialHosts: []string{"*"}}).Password; len(p) >= 3 && strings.Contains(string(shown), p) {
					t.Fatalf("URL password %q shown: %s", p, shown)
				}
			}
		}
		_ = config.CheckName(raw[config.KeyName])
	})
}
