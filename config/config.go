// Package config holds txsink's configuration definitions: every worker and
// connector setting with its type, default, documentation and validation,
// so that parsing, the REST validate endpoint and the generated reference
// share one source.
package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Type is a setting's type, named as Kafka Connect names them.
type Type string

// Setting types.
const (
	String   Type = "STRING"
	Int      Type = "INT"
	Long     Type = "LONG"
	Boolean  Type = "BOOLEAN"
	List     Type = "LIST"
	Password Type = "PASSWORD"
)

// Def defines one setting.
type Def struct {
	Name     string
	Type     Type
	Default  string // "" with Required=false means "no default"
	Required bool
	Doc      string
	// Enum, when set, lists the accepted values.
	Enum []string
	// Min and Max bound INT and LONG values (inclusive) when Max > Min.
	Min, Max int64
	// Group names the documentation section (Kafka Connect's "group").
	Group string
	// Check validates a non-empty value beyond type, enum and range.
	Check func(v string) error
	// Hidden settings are not listed in the reference (test-only switches).
	Hidden bool
}

// Defs is an ordered set of definitions.
type Defs []Def

// Lookup finds a definition by name.
func (ds Defs) Lookup(name string) (Def, bool) {
	for _, d := range ds {
		if d.Name == name {
			return d, true
		}
	}
	return Def{}, false
}

// FieldError is a validation error for one setting, shaped after Kafka
// Connect's per-field validation errors.
type FieldError struct {
	Name string
	Msg  string
}

func (e FieldError) Error() string { return e.Name + ": " + e.Msg }

// Errors is a list of field errors; it is an error itself.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// For returns the messages for one field.
func (es Errors) For(name string) []string {
	var out []string
	for _, e := range es {
		if e.Name == name {
			out = append(out, e.Msg)
		}
	}
	return out
}

// Values is a parsed configuration: raw strings with defaults applied.
type Values map[string]string

// Validate applies defaults and checks every defined setting, returning the
// effective values and all field errors (nil when valid). Unknown keys are
// kept (Kafka Connect passes them through) except that keys are checked
// for control characters.
func (ds Defs) Validate(raw map[string]string) (Values, Errors) {
	v := make(Values, len(raw)+len(ds))
	var errs Errors
	for k, val := range raw {
		if strings.ContainsAny(k, "\x00\r\n") {
			errs = append(errs, FieldError{Name: strconv.Quote(k), Msg: "setting names must not contain control characters"})
			continue
		}
		v[k] = val
	}
	for _, d := range ds {
		val, ok := v[d.Name]
		if !ok || val == "" {
			if d.Required {
				errs = append(errs, FieldError{Name: d.Name, Msg: "missing required configuration \"" + d.Name + "\" which has no default value"})
				continue
			}
			if d.Default != "" {
				v[d.Name] = d.Default
			}
			if !ok || d.Default == "" {
				continue
			}
			val = d.Default
		}
		if err := d.check(val); err != nil {
			errs = append(errs, FieldError{Name: d.Name, Msg: err.Error()})
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Name < errs[j].Name })
	if len(errs) == 0 {
		return v, nil
	}
	return v, errs
}

func (d Def) check(val string) error {
	if strings.ContainsRune(val, 0) {
		return fmt.Errorf("must not contain NUL bytes")
	}
	switch d.Type {
	case Int, Long:
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return fmt.Errorf("invalid value %q: must be an integer", val)
		}
		if d.Max > d.Min && (n < d.Min || n > d.Max) {
			return fmt.Errorf("must be between %d and %d, got %d", d.Min, d.Max, n)
		}
	case Boolean:
		if _, err := strconv.ParseBool(strings.TrimSpace(val)); err != nil {
			return fmt.Errorf("invalid value %q: must be true or false", val)
		}
	}
	if len(d.Enum) > 0 {
		found := false
		for _, e := range d.Enum {
			if val == e {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("invalid value %q: must be one of %s", val, strings.Join(d.Enum, ", "))
		}
	}
	if d.Check != nil {
		return d.Check(val)
	}
	return nil
}

// Int returns an integer setting (validated before).
func (v Values) Int(name string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(v[name]), 10, 64)
	return n
}

// Bool returns a boolean setting (validated before).
func (v Values) Bool(name string) bool {
	b, _ := strconv.ParseBool(strings.TrimSpace(v[name]))
	return b
}

// List returns a comma-separated setting, trimmed, without empty items.
func (v Values) List(name string) []string {
	var out []string
	for _, s := range strings.Split(v[name], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// CheckName validates a connector name: 1 to 200 characters of letters,
// digits, '.', '_' and '-', other than "." and "..". (Kafka Connect allows more; txsink stores the
// name in group ids and database rows, so it keeps to a safe set.)
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("connector name %q is invalid: use 1 to 200 letters, digits, '.', '_' or '-'", name)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("connector name %q is invalid: it is a path segment that HTTP clients remove from /connectors/%s", name, name)
	}
	return nil
}
