package connectors

import (
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/txsink/txsink/config"
)

// Hidden replaces every secret in what the worker shows: API responses,
// status traces, logs and metrics.
const Hidden = "[hidden]"

// isSecretKey reports whether a setting is a secret: PASSWORD-typed in the
// sink's definitions, or named like one (any key containing "password",
// "secret" or "token", for settings a sink does not define).
func isSecretKey(defs config.Defs, key string) bool {
	if d, ok := defs.Lookup(key); ok && d.Type == config.Password {
		return true
	}
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "token")
}

// userinfoRE finds the password of a URL's user information even in a
// string that does not parse as a URL ("scheme://user:password@host").
var userinfoRE = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^:/@\s]*:)([^@\s]*)(@)`)

// pwParamRE finds password-like query parameters ("?password=…").
var pwParamRE = regexp.MustCompile(`(?i)([?&;\s](?:password|passwd|pwd)=)([^&;\s]*)`)

// RedactValue hides the credentials inside a URL-like value (the password
// of its user information and password query parameters), leaving the rest
// readable.
func RedactValue(v string) string {
	v = userinfoRE.ReplaceAllString(v, "${1}"+Hidden+"${3}")
	return pwParamRE.ReplaceAllString(v, "${1}"+Hidden)
}

// RedactConfig returns a copy of raw in which every secret setting is
// Hidden, credentials inside URL values are Hidden, and a secret's value
// is Hidden wherever else it appears. reg, when not nil,
// supplies the sink's PASSWORD-typed settings.
func RedactConfig(reg *Registry, raw map[string]string) map[string]string {
	defs := defsFor(reg, raw)
	secrets := Secrets(reg, raw)
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch {
		case isSecretKey(defs, k):
			out[k] = Hidden
		default:
			// A secret repeated in another setting is hidden there too.
			out[k] = ScrubString(v, secrets)
		}
	}
	return out
}

// Secrets returns the secret strings of a configuration, longest first:
// the values of secret settings and the passwords inside URL values.
// ScrubString removes them from free text (error traces).
func Secrets(reg *Registry, raw map[string]string) []string {
	defs := defsFor(reg, raw)
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= 3 { // shorter strings would mangle unrelated text
			seen[s] = true
		}
	}
	for k, v := range raw {
		if isSecretKey(defs, k) {
			add(v)
			add(url.QueryEscape(v))
			continue
		}
		for _, m := range userinfoRE.FindAllStringSubmatch(v, -1) {
			add(m[2])
			if u, err := url.PathUnescape(m[2]); err == nil {
				add(u)
			}
		}
		for _, m := range pwParamRE.FindAllStringSubmatch(v, -1) {
			add(m[2])
			if u, err := url.QueryUnescape(m[2]); err == nil {
				add(u)
			}
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// ScrubString replaces every secret in s with Hidden, and hides URL
// credentials that s itself contains.
func ScrubString(s string, secrets []string) string {
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, Hidden)
	}
	return RedactValue(s)
}

func defsFor(reg *Registry, raw map[string]string) config.Defs {
	if reg != nil {
		if spec, ok := reg.Lookup(raw[config.KeyClass]); ok {
			return spec.AllDefs()
		}
	}
	return config.ConnectorDefs
}
