package engine

import (
	"testing"
	"time"
)

func TestRestartPolicyDelay(t *testing.T) {
	p := RestartPolicy{Enabled: true, Initial: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := p.delay(i); got != w*time.Millisecond {
			t.Errorf("delay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
}
