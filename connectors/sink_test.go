package connectors

import (
	"testing"

	"github.com/txsink/txsink/config"
)

// TestUnsafeSwitchesNeedTheTestPolicy: the test-only switches are refused,
// naming the setting, unless the worker's policy accepts them (a process
// started with -allow-unsafe-test-settings).
func TestUnsafeSwitchesNeedTheTestPolicy(t *testing.T) {
	for _, key := range []string{config.KeyUnsafeNoFencing, config.KeyUnsafeNoRecovery} {
		raw := map[string]string{"name": "c", "connector.class": "stub", "topics": "t", key: "true"}
		var reg Registry
		if err := reg.Register(Spec{Name: "stub", Class: "io.example.Stub"}); err != nil {
			t.Fatal(err)
		}
		_, _, errs := reg.Validate(raw)
		if len(errs.For(key)) == 0 {
			t.Errorf("%s accepted by a strict worker: %v", key, errs)
		}
		reg.SetPolicy(Policy{UnsafeTestSettings: true})
		if _, v, errs := reg.Validate(raw); len(errs) != 0 || !v.Bool(key) {
			t.Errorf("%s refused by a worker that accepts test settings: %v", key, errs)
		}
	}
}
