package transform

import (
	"fmt"
	"sort"
	"strings"

	"github.com/txsink/txsink/config"
)

// conf reads the settings of one transform or predicate the way Kafka
// Connect's ConfigDef does (strings and list items trimmed, booleans
// true/false in any case) and remembers the first error, so a
// constructor reads every setting and checks once at the end. Its errors
// are config.FieldErrors naming the setting; NewChain puts the
// transforms.<alias>. prefix in front.
//
// Unlike Connect, which ignores settings it does not define, a setting
// conf was never asked about is an error: a misspelt or unsupported
// setting would otherwise change nothing, silently.
type conf struct {
	class string
	m     map[string]string
	known []string
	// hints explain settings that are known not to be supported.
	hints map[string]string
	err   error
}

func newConf(class string, m map[string]string) *conf {
	return &conf{class: class, m: m}
}

func (c *conf) fail(name, format string, args ...any) {
	if c.err == nil {
		c.err = config.FieldError{Name: name, Msg: fmt.Sprintf(format, args...)}
	}
}

// raw returns the trimmed value of name and whether it is set.
func (c *conf) raw(name string) (string, bool) {
	c.known = append(c.known, name)
	v, ok := c.m[name]
	return strings.TrimSpace(v), ok
}

// str returns a string setting, def when it is not set.
func (c *conf) str(name, def string) string {
	if v, ok := c.raw(name); ok {
		return v
	}
	return def
}

// required returns a string setting that has no default.
func (c *conf) required(name string) string {
	v, ok := c.raw(name)
	if !ok {
		c.fail(name, "missing required setting %q, which has no default", name)
	}
	return v
}

// nonEmpty is required for a setting that must not be empty either.
func (c *conf) nonEmpty(name string) string {
	v := c.required(name)
	if v == "" {
		c.fail(name, "must not be empty")
	}
	return v
}

// list returns a comma-separated list setting, items trimmed, no
// empty items (Connect's LIST).
func (c *conf) list(name string) []string {
	v, _ := c.raw(name)
	return splitList(v)
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// boolean returns a boolean setting.
func (c *conf) boolean(name string, def bool) bool {
	v, ok := c.raw(name)
	if !ok || v == "" {
		return def
	}
	switch strings.ToLower(v) {
	case "true":
		return true
	case "false":
		return false
	}
	c.fail(name, "invalid value %q: must be true or false", v)
	return def
}

// oneOf returns a setting whose value must be one of allowed (compared
// as written, as Connect's ValidString does; fold compares without
// case, as Debezium's enumerations do).
func (c *conf) oneOf(name, def string, fold bool, allowed ...string) string {
	v, ok := c.raw(name)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a || fold && strings.EqualFold(v, a) {
			return a
		}
	}
	c.fail(name, "invalid value %q: must be one of %s", v, strings.Join(allowed, ", "))
	return def
}

// unsupported marks a setting the original class has and txsink does
// not implement: setting it is an error that says why.
func (c *conf) unsupported(name, why string) {
	if c.hints == nil {
		c.hints = map[string]string{}
	}
	c.hints[name] = why
}

// done returns the first error, or an error for the first setting
// (sorted) that no one asked about.
func (c *conf) done() error {
	if c.err != nil {
		return c.err
	}
	known := map[string]bool{}
	for _, k := range c.known {
		known[k] = true
	}
	var unknown []string
	for k := range c.m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	k := unknown[0]
	if why, ok := c.hints[k]; ok {
		return config.FieldError{Name: k, Msg: "not supported by txsink's " + c.class + ": " + why}
	}
	names := append([]string(nil), c.known...)
	sort.Strings(names)
	names = dedupSorted(names)
	supported := "none"
	if len(names) > 0 {
		supported = strings.Join(names, ", ")
	}
	return config.FieldError{Name: k, Msg: fmt.Sprintf("unknown setting for %s (its settings: %s)", c.class, supported)}
}

func dedupSorted(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
