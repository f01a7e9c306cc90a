package config

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// KeyIgnoreUnsupported lists the settings of other sink connectors
// (ForeignKeys) that txsink does not implement, that would change what is
// written, and that a connector nonetheless keeps: txsink then runs as if
// they were absent. It names keys one by one, not all at once, so that a
// key added to a configuration later is still refused until someone
// decides it may be ignored.
const KeyIgnoreUnsupported = "config.ignore.unsupported"

// MigrationPage is the documentation page that maps other connectors'
// settings to txsink's.
const MigrationPage = "docs/migrating.md"

// connectKeys are Kafka Connect's own connector settings that txsink does
// not define but accepts: they configure the framework, not the sink, and
// txsink's runtime covers what they do (docs/migrating.md says how).
var connectKeys = []string{
	"header.converter",
	"config.action.reload",
	"tasks.max.enforce",
	"errors.retry.timeout",
	"errors.retry.delay.max.ms",
	"errors.log.enable",
	"errors.log.include.messages",
}

// acceptedPrefixes are the plugin-agnostic families of settings: Kafka
// Connect's own (client overrides, error handling) and those a transform,
// predicate or converter defines for itself. Settings under them are
// accepted whatever their name, as Kafka Connect accepts them.
var acceptedPrefixes = []string{
	"transforms.", "predicates.",
	"key.converter.", "value.converter.", "header.converter.",
	"consumer.override.", "producer.override.", "admin.override.",
	"errors.",
}

// KeyReport is what CheckKeys found in a configuration's setting names.
type KeyReport struct {
	// Refused are errors that make the configuration invalid: a name
	// within a small edit distance of a setting (a misspelling), and a
	// setting of another connector that txsink does not implement and
	// that would change what is written.
	Refused Errors
	// Unknown are names nothing defines, sorted: txsink ignores them.
	Unknown []string
	// Ignored are other connectors' settings that are accepted without
	// effect (not needed in txsink, or listed in config.ignore.unsupported,
	// or set to what txsink does anyway), sorted.
	Ignored []string
}

// CheckKeys classifies the setting names of raw against defs (all the
// definitions of the connector's sink, Spec.AllDefs), Kafka Connect's own
// settings and the settings of the Confluent and Debezium JDBC sinks
// (ForeignKeys).
func CheckKeys(raw map[string]string, defs Defs) KeyReport {
	var rep KeyReport
	known := map[string]bool{}
	var candidates []string
	for _, d := range defs {
		known[d.Name] = true
		if !d.Hidden {
			candidates = append(candidates, d.Name)
		}
	}
	for _, k := range connectKeys {
		known[k] = true
		candidates = append(candidates, k)
	}
	ignore := map[string]bool{}
	for _, k := range Values(raw).List(KeyIgnoreUnsupported) {
		ignore[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if known[k] {
			continue
		}
		if f, ok := LookupForeign(k); ok {
			switch {
			case f.Kind == Native:
				// Defined by txsink's other sink, not this one.
				rep.Unknown = append(rep.Unknown, k)
			case f.Kind == Redundant, f.Same != nil && f.Same(strings.TrimSpace(raw[k])), ignore[k]:
				rep.Ignored = append(rep.Ignored, k)
			default:
				rep.Refused = append(rep.Refused, FieldError{Name: k, Msg: f.refusal()})
			}
			continue
		}
		if s := nearest(k, candidates); s != "" {
			rep.Refused = append(rep.Refused, FieldError{Name: k, Msg: fmt.Sprintf("not a setting of this connector: did you mean `%s`?", s)})
			continue
		}
		if foreignPrefix(k) != nil {
			rep.Ignored = append(rep.Ignored, k)
			continue
		}
		if acceptedPrefix(k) {
			continue
		}
		rep.Unknown = append(rep.Unknown, k)
	}
	return rep
}

// UnknownMsg is the message validate shows on a setting nothing defines.
const UnknownMsg = "not a setting of this connector: txsink ignores it (other connectors' settings: " + MigrationPage + ")"

func acceptedPrefix(k string) bool {
	for _, p := range acceptedPrefixes {
		if strings.HasPrefix(k, p) && len(k) > len(p) {
			return true
		}
	}
	return false
}

// nearest returns the candidate a misspelt name most likely meant: one
// within a small edit distance (adjacent transpositions count as one
// edit; case is ignored), or "" when none is that close. Short names
// allow fewer edits, so that short unrelated names are not taken for
// each other.
func nearest(k string, candidates []string) string {
	lk := strings.ToLower(k)
	limit := 2
	switch {
	case len(lk) < 4:
		limit = 0
	case len(lk) < 8:
		limit = 1
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(lk, strings.ToLower(c)); d < bestD || d == bestD && best != "" && c < best {
			best, bestD = c, d
		}
	}
	if bestD > limit || best == k {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent characters.
func editDistance(a, b string) int {
	if len(a) > len(b)+3 || len(b) > len(a)+3 {
		return 4 // further than any limit nearest uses
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// checkIgnoreList is config.ignore.unsupported's check: it may only name
// settings txsink would otherwise refuse.
func checkIgnoreList(v string) error {
	var bad []string
	for _, k := range (Values{"l": v}).List("l") {
		if f, ok := LookupForeign(k); !ok || f.Kind != Unsupported {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%s: not a setting txsink refuses; this list may only name other connectors' settings that txsink does not implement (see %s)", strings.Join(bad, ", "), MigrationPage)
	}
	return nil
}
