package connectors

import (
	"fmt"
	"strings"

	"github.com/txsink/txsink/offsets"
)

// Guarantee is a connector's delivery guarantee (delivery.guarantee) as a
// value: the runtime picks it once, a sink declares the ones it supports
// ([Sink.Guarantees]) and is preflighted for one ([Sink.Preflight]).
type Guarantee uint8

// Delivery guarantees.
const (
	// TwoPhase (exactly_once): every batch is prepared in the sink and the
	// round's decision is a Kafka transaction that commits the group's
	// offsets (KIP-447).
	TwoPhase Guarantee = iota + 1
	// SinkCAS (exactly_once_sink): rows and the compare-and-set offset
	// advance commit in one local sink transaction; no Kafka transaction.
	SinkCAS
	// AtLeastOnce: rows commit before the offset, in two transactions.
	AtLeastOnce
	// AtMostOnce: the offset commits before the rows.
	AtMostOnce
)

var guaranteeNames = [...]string{TwoPhase: "exactly_once", SinkCAS: "exactly_once_sink", AtLeastOnce: "at_least_once", AtMostOnce: "at_most_once"}

// String returns the guarantee's delivery.guarantee value.
func (g Guarantee) String() string {
	if int(g) < len(guaranteeNames) && guaranteeNames[g] != "" {
		return guaranteeNames[g]
	}
	return fmt.Sprintf("Guarantee(%d)", uint8(g))
}

// ParseGuarantee returns the guarantee of a delivery.guarantee value.
func ParseGuarantee(s string) (Guarantee, error) {
	for g := TwoPhase; g <= AtMostOnce; g++ {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("delivery.guarantee: unknown value %q", s)
}

// Pipelines reports whether rounds of g can be written ahead: only the
// guarantees whose rows and offsets commit together.
func (g Guarantee) Pipelines() bool { return g == TwoPhase || g == SinkCAS }

// Local reports whether g's rounds are one local sink transaction per
// batch ([LocalWriter]) rather than the Kafka-decided two-phase protocol.
func (g Guarantee) Local() bool { return g == SinkCAS || g == AtLeastOnce || g == AtMostOnce }

// WriteMode is how a [LocalWriter] writes a batch for a local guarantee:
// the offset guard and the commit order.
func (g Guarantee) WriteMode() (offsets.Guard, Order) {
	switch g {
	case AtLeastOnce:
		return offsets.GuardNone, RowsFirst
	case AtMostOnce:
		return offsets.GuardNone, OffsetFirst
	}
	return offsets.GuardCAS, Atomic
}

// Guarantees is a set of delivery guarantees.
type Guarantees uint8

// GuaranteesOf returns the set of gs.
func GuaranteesOf(gs ...Guarantee) Guarantees {
	var s Guarantees
	for _, g := range gs {
		s |= 1 << g
	}
	return s
}

// AllGuarantees is every delivery guarantee.
var AllGuarantees = GuaranteesOf(TwoPhase, SinkCAS, AtLeastOnce, AtMostOnce)

// Has reports whether g is in s.
func (s Guarantees) Has(g Guarantee) bool { return s&(1<<g) != 0 }

// String lists the set's delivery.guarantee values.
func (s Guarantees) String() string {
	var out []string
	for g := TwoPhase; g <= AtMostOnce; g++ {
		if s.Has(g) {
			out = append(out, g.String())
		}
	}
	return strings.Join(out, ",")
}
