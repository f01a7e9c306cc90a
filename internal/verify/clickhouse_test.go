package verify

import (
	"testing"
	"time"
)

func TestIsClickHouseURL(t *testing.T) {
	for u, want := range map[string]bool{
		"clickhouse://127.0.0.1:9000/db": true,
		"tcp://h:9000/db":                true,
		"CLICKHOUSE://h:9000":            true,
		"postgres://u@h/db":              false,
		"jdbc:postgresql://h/db":         false,
		"":                               false,
	} {
		if got := IsClickHouseURL(u); got != want {
			t.Errorf("IsClickHouseURL(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestClickHouseOptions(t *testing.T) {
	o, db, err := clickhouseOptions(SinkOptions{URL: "clickhouse://a:b@h1:9000,h2:9000/shop?dial_timeout=3s", Password: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if db != "shop" || len(o.Addr) != 2 || o.Auth.Username != "a" || o.Auth.Password != "c" || o.DialTimeout != 3*time.Second {
		t.Fatalf("db %q, options %+v", db, o)
	}
	if _, _, err := clickhouseOptions(SinkOptions{URL: "http://h:8123/db"}); err == nil {
		t.Fatal("HTTP URL accepted")
	}
}

// TestIntentLeftover: an unfinished ClickHouse intent older than the grace
// is a sink fault of its own kind; a younger one is in flight.
func TestIntentLeftover(t *testing.T) {
	r := Analyze(Input{Connector: "c", PreparedGrace: time.Minute, Prepared: []Prepared{
		{GID: "intent t[0] 0..9 fence 1", Age: time.Hour, Ours: true, Intent: true},
		{GID: "intent t[1] 0..9 fence 1", Age: time.Second, Ours: true, Intent: true},
	}})
	if r.OK() || r.Counts[IntentLeft] != 1 || r.Counts[PreparedLeft] != 0 || len(r.Notes) != 1 {
		t.Fatalf("counts %v notes %v", r.Counts, r.Notes)
	}
}
