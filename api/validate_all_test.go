package api

import (
	"encoding/json"
	"testing"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/postgres"
)

// TestValidateReportsEveryError (issue 25, item 7c): a configuration
// without a name reports every other problem too, each on its setting,
// and error_count counts them all.
func TestValidateReportsEveryError(t *testing.T) {
	e := newEnv(t)
	r := e.must(200, "PUT", "/connector-plugins/fake/config/validate", `{"connector.class":"fake","tasks.max":"0","fake.mode":"strict","delivery.guarantee":"at_most_once"}`)
	var ci configInfos
	if err := json.Unmarshal(r.body, &ci); err != nil {
		t.Fatal(err)
	}
	errsOf := map[string]int{}
	total := 0
	for _, c := range ci.Configs {
		errsOf[c.Value.Name] += len(c.Value.Errors)
		total += len(c.Value.Errors)
	}
	for _, k := range []string{"name", "fake.url", "tasks.max", "topics", "fake.mode"} {
		if errsOf[k] == 0 {
			t.Errorf("no error on %s: %s", k, r.body)
		}
	}
	if ci.ErrorCount != total {
		t.Errorf("error_count %d, errors listed %d", ci.ErrorCount, total)
	}

	// The PostgreSQL sink's own checks, all at once.
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	spec, _ := reg.Lookup(postgres.Class)
	got := Validate(reg, spec, map[string]string{"connector.class": postgres.Class, "topics": "t",
		"connection.url": "postgres://u@h/db?sslrootcert=/etc/passwd", "insert.mode": "upsert", "pk.mode": "none", "errors.tolerance": "all"})
	errsOf = map[string]int{}
	for _, c := range got.Configs {
		errsOf[c.Value.Name] += len(c.Value.Errors)
	}
	for _, k := range []string{"name", "connection.url", "pk.mode", "errors.deadletterqueue.table.name"} {
		if errsOf[k] == 0 {
			t.Errorf("postgres: no error on %s: %+v", k, errsOf)
		}
	}
}
