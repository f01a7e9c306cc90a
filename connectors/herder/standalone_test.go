package herder

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
)

func TestStateFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	st := &storedState{Version: 1, Connectors: map[string]*storedConnector{
		"a": {Config: map[string]string{"name": "a", "connection.password": "pw"}, Target: engine.TargetPaused, State: engine.StatePaused,
			Tasks: []storedTask{{ID: 0, State: engine.StateFailed, Trace: "boom"}}},
	}}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
	fi, err := os.Stat(filepath.Join(dir, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600 (it holds passwords)", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	// A corrupt file is an error, not an empty worker.
	if err := os.WriteFile(filepath.Join(dir, storeFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(dir); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt file: %v", err)
	}
	// A missing file is an empty state.
	if st, err := loadState(t.TempDir()); err != nil || len(st.Connectors) != 0 {
		t.Errorf("missing file: %v %v", st, err)
	}
}

// TestWorkerRejectsInvalidConfig: Create validates before it stores
// anything; a name clash is ErrExists; unknown connectors are ErrNotFound.
func TestWorkerRejectsInvalidConfig(t *testing.T) {
	reg := &connectors.Registry{}
	if err := reg.Register(connectors.Spec{Name: "nop", Class: "io.test.Nop", Defs: config.Defs{{Name: "nop.secret", Type: config.Password}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := NewStandalone(reg, StandaloneOptions{DataDir: dir, Engine: engine.Options{WorkerID: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := w.Create(ctx, "a", map[string]string{"connector.class": "nop"}, engine.TargetStopped); err == nil {
		t.Fatal("missing topics accepted")
	} else if _, ok := err.(config.Errors); !ok {
		t.Fatalf("error %T %v, want config.Errors", err, err)
	}
	cfg := map[string]string{"connector.class": "nop", "topics": "t", "nop.secret": "zzz-secret"}
	if _, err := w.Create(ctx, "a", cfg, engine.TargetStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "a", cfg, engine.TargetStopped); err == nil || !strings.Contains(err.Error(), "Connector a already exists") {
		t.Fatalf("duplicate: %v", err)
	}
	if err := w.Pause(ctx, "b"); err == nil || err.Error() != "Connector b not found" {
		t.Fatalf("unknown: %v", err)
	}
	if got := w.Secrets(); len(got) == 0 || got[0] != "zzz-secret" {
		t.Errorf("Secrets() = %v", got)
	}
	st, err := w.Status(ctx, "a")
	if err != nil || st.Connector.State != engine.StateStopped || len(st.Tasks) != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	// Restored by a new worker on the same directory.
	w.Close()
	w2, err := NewStandalone(reg, StandaloneOptions{DataDir: dir, Engine: engine.Options{WorkerID: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ts, _ := w2.TargetState("a"); ts != engine.TargetStopped {
		t.Errorf("restored target %q", ts)
	}
}

// TestRegistryCredentialsBoundToRegistry: a converter's registry
// credentials stay with a change that keeps the registry, and are dropped
// by one that moves it elsewhere without sending them again, as a sink's
// password is (issue 12's rule, applied to the Schema Registry).
func TestRegistryCredentialsBoundToRegistry(t *testing.T) {
	reg := &connectors.Registry{}
	if err := reg.Register(connectors.Spec{Name: "nop", Class: "io.test.Nop"}); err != nil {
		t.Fatal(err)
	}
	w, err := NewStandalone(reg, StandaloneOptions{DataDir: t.TempDir(), Engine: engine.Options{WorkerID: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const info = "value.converter.basic.auth.user.info"
	cfg := map[string]string{"connector.class": "nop", "topics": "t",
		"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
		"value.converter.schema.registry.url": "https://sr-a.example:8081", info: "u:zzz-registry-secret"}
	if _, err := w.Create(ctx, "a", cfg, engine.TargetStopped); err != nil {
		t.Fatal(err)
	}
	set := func(k, v string) {
		t.Helper()
		if _, err := w.PatchConfig(ctx, "a", map[string]*string{k: &v}); err != nil {
			t.Fatal(err)
		}
	}
	set("topics", "t2")
	if got, _ := w.Config("a"); got[info] != "u:zzz-registry-secret" {
		t.Fatalf("an unrelated change dropped the registry secret: %q", got[info])
	}
	set("value.converter.schema.registry.url", "https://attacker.example:8081")
	if got, _ := w.Config("a"); got[info] != "" {
		t.Fatalf("moving the registry kept its secret: %q", got[info])
	}
	// Changing how the registry is authenticated (issue 25, item 7): other
	// trusted certificates, or no host name check, on the same URL.
	for _, c := range []struct{ k, v string }{
		{"value.converter.schema.registry.ssl.truststore.certificates", testPEM},
		{"value.converter.schema.registry.ssl.endpoint.identification.algorithm", ""},
	} {
		set(info, "u:zzz-registry-secret")
		set(c.k, c.v)
		if got, _ := w.Config("a"); got[info] != "" {
			t.Errorf("%s=%q kept the registry secret: %q", c.k, c.v, got[info])
		}
	}
}

// testPEM is a certificate for the trust store settings (never used to
// connect).
const testPEM = `-----BEGIN CERTIFICATE-----
MIIBfTCCASOgAwIBAgIUQ5o8a2Vc8x0gFq0uWn9kP5oJqvYwCgYIKoZIzj0EAwIw
-----END CERTIFICATE-----`
