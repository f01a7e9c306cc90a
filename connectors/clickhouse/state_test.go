package clickhouse

import "testing"

// TestStatusCode: a later attempt's rows outrank every row of an earlier
// attempt (max(status) and the engine's merges keep the latest), attempt 0
// keeps the values of the rows written before attempts existed, and the
// SQL state expression agrees with decodeStatus.
func TestStatusCode(t *testing.T) {
	states := []uint8{statusPending, statusAborted, statusFenced, statusDone}
	for i, st := range states {
		if got := statusCode(0, st); got != uint8(i+1) {
			t.Errorf("statusCode(0, %d) = %d, want %d (old rows' meaning)", st, got, i+1)
		}
	}
	prev := uint8(0)
	for a := 0; a <= maxAttempt; a++ {
		for _, st := range states {
			c := statusCode(a, st)
			if c <= prev {
				t.Fatalf("statusCode(%d, %d) = %d, not above %d", a, st, c, prev)
			}
			prev = c
			if ga, gs := decodeStatus(c); ga != a || gs != st {
				t.Errorf("decodeStatus(%d) = %d, %d; want %d, %d", c, ga, gs, a, st)
			}
			// sqlState's formula, (code + 3) % 4 + 1, in Go.
			if gs := uint8((uint16(c)+3)%4 + 1); gs != st {
				t.Errorf("SQL state of %d = %d, want %d", c, gs, st)
			}
		}
	}
	// The abort of attempt a loses to the pending row of attempt a+1.
	if statusCode(1, statusPending) <= statusCode(0, statusAborted) {
		t.Error("a redo's pending row does not outrank the earlier abort")
	}
}
