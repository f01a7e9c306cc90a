package clickhouse

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestWaitColumn: auto.evolve waits until the added column shows (an
// ALTER of a Replicated table on 18.16 can return before it does), and
// gives up with an error naming the column once the bound passes.
func TestWaitColumn(t *testing.T) {
	calls := 0
	err := waitColumn(context.Background(), "tier", columnVisibleWait, func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("visible at the third look: err %v after %d looks, want nil after 3", err, calls)
	}

	calls = 0
	err = waitColumn(context.Background(), "tier", 0, func() (bool, error) {
		calls++
		return false, nil
	})
	if err == nil || !strings.Contains(err.Error(), `column "tier" added but not visible`) || calls != 1 {
		t.Fatalf("never visible, no time left: err %v after %d looks", err, calls)
	}

	boom := errors.New("connection reset")
	err = waitColumn(context.Background(), "tier", 0, func() (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("a failing look: err %v, want it wrapped", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = waitColumn(ctx, "tier", columnVisibleWait, func() (bool, error) { return false, nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v", err)
	}
}
