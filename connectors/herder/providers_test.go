package herder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
)

// TestValidateNamesReferencesNotValues: a configuration whose references
// resolve to invalid values is refused with errors that name each
// setting and its reference, and never show what it resolved to, whatever
// the setting (tasks.max, a sink setting whose check quotes the value, a
// short value shown bare by a range check).
func TestValidateNamesReferencesNotValues(t *testing.T) {
	reg := &connectors.Registry{}
	if err := reg.Register(connectors.Spec{Name: "nop", Class: "io.test.Nop", Defs: config.Defs{
		{Name: "nop.database", Type: config.String, Check: func(v string) error { return fmt.Errorf("database %q: no such database", v) }},
		{Name: "nop.size", Type: config.Int, Min: 1, Max: 10},
	}}); err != nil {
		t.Fatal(err)
	}
	res, err := providers.New([]config.ProviderSpec{{Name: "env", Class: config.EnvProviderClass}})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROV_TEST_TM", "Canary-Tasks")
	t.Setenv("PROV_TEST_DB", "Canary-Db")
	t.Setenv("PROV_TEST_SIZE", "0")
	w, err := NewStandalone(reg, StandaloneOptions{DataDir: t.TempDir(), Engine: engine.Options{WorkerID: "w", Resolve: res.Resolve}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{"connector.class": "nop", "topics": "t",
		"tasks.max": "${env:PROV_TEST_TM}", "nop.database": "${env:PROV_TEST_DB}", "nop.size": "${env:PROV_TEST_SIZE}"}
	_, err = w.Create(context.Background(), "a", cfg, engine.TargetStopped)
	var ferrs config.Errors
	if err == nil || !errors.As(err, &ferrs) {
		t.Fatalf("create: %v, want field errors", err)
	}
	want := map[string]string{
		"tasks.max":    "${env:PROV_TEST_TM}",
		"nop.database": "${env:PROV_TEST_DB}",
		"nop.size":     "${env:PROV_TEST_SIZE}",
	}
	for name, ref := range want {
		msgs := ferrs.For(name)
		if len(msgs) != 1 || !strings.Contains(msgs[0], "from "+ref) {
			t.Errorf("%s: %q, want one error naming %s", name, msgs, ref)
		}
	}
	if msg := err.Error(); strings.Contains(msg, "Canary") || strings.Contains(msg, "got 0") {
		t.Errorf("the errors show a resolved value: %s", msg)
	}
}

// TestActiveTopicsFromProvidersStayOff: a topic named by a config
// provider reference is not written to the status topic as an active
// topic.
func TestActiveTopicsFromProvidersStayOff(t *testing.T) {
	secs := secrets.Provided([]string{"orders-Canary"})
	if got := notSecret([]string{"orders-Canary", "plain"}, secs); len(got) != 1 || got[0] != "plain" {
		t.Errorf("notSecret = %q, want [plain]", got)
	}
}
