package clickhouse

import (
	"testing"

	"github.com/txsink/txsink/config"
)

// TestIdentitySecure (issue 25, item 7): whether the connection is TLS is
// part of what a stored password is bound to.
func TestIdentitySecure(t *testing.T) {
	id := func(url string) string {
		t.Helper()
		v, _ := Spec().AllDefs().Validate(map[string]string{config.KeyName: "c", config.KeyTopics: "t", config.KeyClass: Class, KeyURL: url})
		s, err := identity(v)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		return s
	}
	secure := id("clickhouse://u@h:9440/db?secure=true")
	for _, other := range []string{"clickhouse://u@h:9440/db", "clickhouse://u@h:9440/db?secure=false", "u@h:9440/db?dial_timeout=1s"} {
		if got := id(other); got == secure {
			t.Errorf("%s has the identity of secure=true: %q", other, got)
		}
	}
	if a, b := id("clickhouse://u@h:9440/db?secure=true&dial_timeout=5s"), secure; a != b {
		t.Errorf("dial_timeout changed the identity: %q, %q", a, b)
	}
}
