// Package transform holds txsink's single message transforms (SMTs) and
// predicates, configured with Kafka Connect's names (transforms=…,
// transforms.<alias>.type=<class>, predicates=…), so that an existing sink
// connector's configuration runs unchanged. They run in the runtime after
// the converters and before the sink, with one implementation for both
// sinks (convert.Pipeline calls the Chain).
//
// A transform is a pure function of the record (and of its settings), so
// a redo of a batch transforms to the same rows (invariant 6). A transform
// that cannot apply to a record (a field it must read is missing, a value
// of the wrong type) fails with an error wrapping record.ErrTransform: a
// bad record, handled by errors.tolerance (invariant 8).
package transform

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

// Transform is one single message transform (Kafka Connect's
// Transformation).
type Transform interface {
	// Apply transforms r in place. keep is false when r is to be dropped
	// (filtered): the sink then writes nothing for it and its offset is
	// committed with the batch. An error wrapping record.ErrTransform
	// makes r a bad record.
	Apply(r *record.Record) (keep bool, err error)
}

// Predicate decides whether a transform applies to a record (Kafka
// Connect's Predicate).
type Predicate interface {
	Test(r *record.Record) bool
}

// Chain is a connector's transforms in order, each with its optional
// predicate. The nil *Chain applies nothing.
type Chain struct {
	steps   []step
	needKey bool
}

type step struct {
	alias  string
	t      Transform
	pred   Predicate
	negate bool
}

// Apply runs the chain on r; keep is false when a transform dropped it.
// An error names the transform's alias.
func (c *Chain) Apply(r *record.Record) (keep bool, err error) {
	if c == nil {
		return true, nil
	}
	for _, s := range c.steps {
		if s.pred != nil && s.pred.Test(r) == s.negate {
			continue
		}
		keep, err := s.t.Apply(r)
		if err != nil {
			return false, inTransform(s.alias, err)
		}
		if !keep {
			return false, nil
		}
	}
	return true, nil
}

// inTransform names the transform's alias in err. A field the error
// names stays a *record.FieldError on the outside, so that
// record.NewError still finds it and keeps the alias in the cause.
func inTransform(alias string, err error) error {
	var fe *record.FieldError
	if errors.As(err, &fe) {
		return &record.FieldError{Field: fe.Field, Err: fmt.Errorf("transform %q: %w", alias, fe.Err)}
	}
	return fmt.Errorf("transform %q: %w", alias, err)
}

// NeedsKey reports whether a transform reads or writes record keys, so
// the pipeline must convert them.
func (c *Chain) NeedsKey() bool { return c != nil && c.needKey }

// Len returns the number of transforms.
func (c *Chain) Len() int {
	if c == nil {
		return 0
	}
	return len(c.steps)
}

// Setting names (Kafka Connect's).
const (
	KeyTransforms = "transforms"
	KeyPredicates = "predicates"
)

// Defs are the documented transform settings of every connector; each
// transform's and predicate's own settings are under
// transforms.<alias>. and predicates.<alias>. (see docs/transforms.md).
var Defs = config.Defs{
	{Name: KeyTransforms, Type: config.List, Group: "Transforms", Doc: "Aliases of the transforms to apply, in order; each is configured by transforms.<alias>.type (a Kafka Connect class name, see docs/transforms.md) and its own settings under transforms.<alias>., with transforms.<alias>.predicate and transforms.<alias>.negate."},
	{Name: KeyPredicates, Type: config.List, Group: "Transforms", Doc: "Aliases of predicates, each configured by predicates.<alias>.type and its settings under predicates.<alias>."},
}

// TransformPlugin describes a transform class.
type TransformPlugin struct {
	Class   string
	Aliases []string
	// NeedsKey: the transform reads or writes keys.
	NeedsKey bool
	// New builds the transform from its settings (the prefix removed); a
	// bad setting is a config.FieldError naming it under the prefix.
	New func(settings map[string]string) (Transform, error)
}

// PredicatePlugin describes a predicate class.
type PredicatePlugin struct {
	Class   string
	Aliases []string
	New     func(settings map[string]string) (Predicate, error)
}

var (
	transforms = map[string]TransformPlugin{}
	predicates = map[string]PredicatePlugin{}
)

func registerTransform(p TransformPlugin) {
	for _, n := range append([]string{p.Class}, p.Aliases...) {
		if _, dup := transforms[n]; dup {
			panic("transform: " + n + " registered twice")
		}
		transforms[n] = p
	}
}

func registerPredicate(p PredicatePlugin) {
	for _, n := range append([]string{p.Class}, p.Aliases...) {
		if _, dup := predicates[n]; dup {
			panic("transform: predicate " + n + " registered twice")
		}
		predicates[n] = p
	}
}

// TransformClasses lists the transform classes, sorted.
func TransformClasses() []string { return classesOf(transforms) }

// PredicateClasses lists the predicate classes, sorted.
func PredicateClasses() []string { return classesOf(predicates) }

func classesOf[P TransformPlugin | PredicatePlugin](m map[string]P) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range m {
		var class string
		switch p := any(p).(type) {
		case TransformPlugin:
			class = p.Class
		case PredicatePlugin:
			class = p.Class
		}
		if !seen[class] {
			seen[class] = true
			out = append(out, class)
		}
	}
	sort.Strings(out)
	return out
}

// NewChain builds a connector's chain from its settings; nil when it has
// no transforms. Errors are config.FieldErrors naming the setting.
func NewChain(v config.Values) (*Chain, error) {
	aliases := v.List(KeyTransforms)
	if len(aliases) == 0 {
		return nil, nil
	}
	preds := map[string]Predicate{}
	for _, a := range v.List(KeyPredicates) {
		prefix := KeyPredicates + "." + a + "."
		class := strings.TrimSpace(v[prefix+"type"])
		p, ok := predicates[class]
		if !ok {
			return nil, config.FieldError{Name: prefix + "type", Msg: unknown("predicate", class, PredicateClasses())}
		}
		settings := settingsUnder(v, prefix)
		delete(settings, "type")
		pr, err := p.New(settings)
		if err != nil {
			return nil, under(prefix, err)
		}
		preds[a] = pr
	}
	c := &Chain{}
	seen := map[string]bool{}
	for _, a := range aliases {
		if seen[a] {
			return nil, config.FieldError{Name: KeyTransforms, Msg: fmt.Sprintf("alias %q is listed twice", a)}
		}
		seen[a] = true
		prefix := KeyTransforms + "." + a + "."
		class := strings.TrimSpace(v[prefix+"type"])
		p, ok := transforms[class]
		if !ok {
			return nil, config.FieldError{Name: prefix + "type", Msg: unknown("transform", class, TransformClasses())}
		}
		settings := settingsUnder(v, prefix)
		s := step{alias: a}
		if name := strings.TrimSpace(settings["predicate"]); name != "" {
			pr, ok := preds[name]
			if !ok {
				return nil, config.FieldError{Name: prefix + "predicate", Msg: fmt.Sprintf("predicate %q is not listed in %s", name, KeyPredicates)}
			}
			s.pred = pr
		}
		if neg := strings.TrimSpace(settings["negate"]); neg != "" {
			switch strings.ToLower(neg) {
			case "true":
				s.negate = true
			case "false":
			default:
				return nil, config.FieldError{Name: prefix + "negate", Msg: fmt.Sprintf("invalid value %q: must be true or false", neg)}
			}
		}
		delete(settings, "type")
		delete(settings, "predicate")
		delete(settings, "negate")
		t, err := p.New(settings)
		if err != nil {
			return nil, under(prefix, err)
		}
		s.t = t
		c.needKey = c.needKey || p.NeedsKey
		c.steps = append(c.steps, s)
	}
	return c, nil
}

func unknown(what, class string, known []string) string {
	if class == "" {
		return fmt.Sprintf("missing %s class", what)
	}
	return fmt.Sprintf("unknown %s class %q; supported: %s", what, class, strings.Join(known, ", "))
}

func settingsUnder(v config.Values, prefix string) map[string]string {
	out := map[string]string{}
	for k, val := range v {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out[rest] = val
		}
	}
	return out
}

func under(prefix string, err error) error {
	if fe, ok := err.(config.FieldError); ok {
		return config.FieldError{Name: prefix + fe.Name, Msg: fe.Msg}
	}
	return config.FieldError{Name: strings.TrimSuffix(prefix, "."), Msg: err.Error()}
}
