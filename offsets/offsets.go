// Package offsets is txsink's sink-side offset store: for every (connector,
// topic, partition) the sink holds next_offset (the offset of the next record
// to write) and a fence epoch. It implements create-on-first-use,
// fence-on-assign, compare-and-set advance, reads and administrative resets
// for PostgreSQL (invariants 1, 3 and 4 of DESIGN.md).
package offsets

import (
	"errors"
	"fmt"
	"time"

	"github.com/txsink/txsink/twophase"
)

// Sentinel errors.
var (
	// ErrFenced means a compare-and-set advance found a different fence or
	// next_offset than the owner expected: another owner (or an
	// administrative reset) took the partition. The owner must drop the
	// batch and the partition, never retry blindly.
	// It is the same value as twophase.ErrFenced.
	ErrFenced = twophase.ErrFenced
	// ErrBusy means the offsets row is locked by another transaction, for
	// example a prepared (in-doubt) batch; run recovery and try again.
	ErrBusy = errors.New("offsets: row locked by another transaction (in-doubt batch?)")
)

// Unset is the Next value of a position that has no stored offset yet: the
// partition has never been written and offsets.initial decides where to
// start.
const Unset int64 = -1

// Position is the stored progress of one partition.
type Position struct {
	Topic     string
	Partition int32
	// Next is the offset of the next record to write, or Unset.
	Next int64
	// Fence is the epoch of the partition's current owner.
	Fence     int64
	UpdatedAt time.Time
}

// Initial says where a partition with no stored offset starts.
type Initial string

// Initial values (config key offsets.initial).
const (
	InitialEarliest Initial = "earliest"
	InitialLatest   Initial = "latest"
)

// ParseInitial validates an offsets.initial value.
func ParseInitial(s string) (Initial, error) {
	switch Initial(s) {
	case InitialEarliest, "":
		return InitialEarliest, nil
	case InitialLatest:
		return InitialLatest, nil
	}
	return "", fmt.Errorf("offsets.initial: must be earliest or latest, got %q", s)
}

// Guard says how an advance checks ownership.
type Guard int

const (
	// GuardCAS advances only from the expected next_offset and only while
	// the fence is unchanged (invariant 3). The default.
	GuardCAS Guard = iota
	// GuardNone writes next_offset blindly. Used by at_least_once and
	// at_most_once, and by the test-only "no fencing" negative control.
	GuardNone
)

// FencedError details a failed compare-and-set.
type FencedError struct {
	Connector, Topic string
	Partition        int32
	WantNext, Fence  int64 // what the owner expected
	GotNext, GotFenc int64 // what the store holds (-1 when unknown)
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("offsets: %s/%s[%d] fenced: expected next_offset=%d fence=%d, store has next_offset=%d fence=%d",
		e.Connector, e.Topic, e.Partition, e.WantNext, e.Fence, e.GotNext, e.GotFenc)
}

// Unwrap makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Unwrap() error { return ErrFenced }
