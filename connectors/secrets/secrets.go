// Package secrets is txsink's one place for the secrets of connector
// configurations: which settings are secret, how they are hidden in what
// the worker shows, and how a configuration change keeps or drops a stored
// secret (Bind).
//
// Everything the worker shows goes through it: the API (RedactConfig,
// ScrubString), status traces and errors (ScrubString with the connector's
// secrets, Of, and the values its config provider references resolved to,
// Provided), and the log handler (ScrubString with every connector's
// secrets). Metrics carry only connector names and fixed words (validated
// names cannot hold secrets).
package secrets

import (
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
)

// Hidden replaces every secret in what the worker shows: API responses,
// status traces, logs and metrics.
const Hidden = "[hidden]"

// Lookup finds the setting definitions that apply to a raw connector
// configuration: *connectors.Registry is one (the sink's settings after
// the common ones). A nil Lookup knows the common connector settings only.
type Lookup interface {
	DefsFor(raw map[string]string) config.Defs
}

// isSecretKey reports whether a setting is a secret: PASSWORD-typed in the
// sink's definitions, or named like one (see isSecretName), for settings a
// sink does not define.
func isSecretKey(defs config.Defs, key string) bool {
	if d, ok := defs.Lookup(key); ok && d.Type == config.Password {
		return true
	}
	return isSecretName(key)
}

// isSecretName reports whether a setting or URL parameter name names a
// secret: it contains "password", "passwd", "pwd", "secret" or "token",
// in any case.
func isSecretName(name string) bool {
	k := strings.ToLower(name)
	for _, w := range []string{"password", "passwd", "pwd", "secret", "token"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// span is a byte range [start, end) of a string.
type span struct{ start, end int }

// credentialSpans finds the passwords in a URL-like value by parsing it
// the way every driver and library txsink hands it to might:
//
//   - the user information of "scheme://user:password@host…" (also
//     "jdbc:postgresql://…") and, with schemeless, of "user:password@host:port"
//     (ClickHouse's form without a scheme). Parsers disagree on where it
//     ends: libpq and pgx take the first '@' before the first '/', even one
//     inside what looks like a query; RFC 3986 (Go's net/url) the last '@'
//     of the authority, which ends at '/', '?' or '#'. Every reading is
//     returned, and wide is the widest (from the first ':' to the last '@'
//     before the first '/');
//   - the value of every query parameter whose name, percent-decoded, names
//     a secret (password, pass%77ord, sslpassword, …), in every repetition,
//     with pairs cut at '&' and at ';' (Go's old rule), each value running
//     to the next '&' (libpq's rule, the longer one).
//
// The spans may overlap; all holds every reading, wide what is hidden
// when the value is shown.
func credentialSpans(v string, schemeless bool) (wide, all []span) {
	bodyStart := -1
	if i := strings.Index(v, "://"); i >= 0 && isSchemeLike(v[:i]) {
		bodyStart = i + 3
	} else if schemeless && !strings.Contains(v, "://") {
		bodyStart = 0
	}
	if bodyStart >= 0 {
		body := v[bodyStart:]
		slash := strings.IndexByte(body, '/')
		if slash < 0 {
			slash = len(body)
		}
		authEnd := strings.IndexAny(body, "/?#")
		if authEnd < 0 {
			authEnd = len(body)
		}
		ats := map[int]bool{}
		if i := strings.IndexByte(body[:slash], '@'); i >= 0 {
			ats[i] = true // libpq, pgx
		}
		if i := strings.LastIndexByte(body[:authEnd], '@'); i >= 0 {
			ats[i] = true // RFC 3986, net/url
		}
		last := strings.LastIndexByte(body[:slash], '@')
		if last >= 0 {
			ats[last] = true // the widest
		}
		for at := range ats {
			colon := strings.IndexByte(body[:at], ':')
			if colon < 0 || colon+1 >= at {
				continue
			}
			s := span{bodyStart + colon + 1, bodyStart + at}
			all = append(all, s)
			if at == last {
				wide = append(wide, s)
			}
		}
	}
	if q := strings.IndexByte(v, '?'); q >= 0 {
		pos := q + 1
		for pos <= len(v) {
			end := strings.IndexAny(v[pos:], "&;")
			if end < 0 {
				end = len(v)
			} else {
				end += pos
			}
			pair := v[pos:end]
			if eq := strings.IndexByte(pair, '='); eq >= 0 && isSecretName(lenientUnescape(pair[:eq])) {
				valStart := pos + eq + 1
				valEnd := strings.IndexByte(v[valStart:], '&')
				if valEnd < 0 {
					valEnd = len(v)
				} else {
					valEnd += valStart
				}
				if valEnd > valStart {
					s := span{valStart, valEnd}
					wide, all = append(wide, s), append(all, s)
				}
			}
			pos = end + 1
		}
	}
	return wide, all
}

// isSchemeLike reports whether s is a URL scheme, or several joined by
// ':' ("jdbc:postgresql").
func isSchemeLike(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !(alpha || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.' || c == ':')) {
			return false
		}
	}
	return true
}

// lenientUnescape percent-decodes what is valid percent-encoding and keeps
// the rest, trims ASCII spaces: the spelling a driver would see.
func lenientUnescape(s string) string {
	s = strings.Trim(s, " ")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					b.WriteByte(hi<<4 | lo)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hideSpans replaces the spans of v (which may overlap) with Hidden.
func hideSpans(v string, spans []span) string {
	if len(spans) == 0 {
		return v
	}
	sortSpans(spans)
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		s := spans[i]
		i++
		for i < len(spans) && spans[i].start <= s.end {
			s.end = max(s.end, spans[i].end)
			i++
		}
		if s.start < pos {
			s.start = pos
		}
		b.WriteString(v[pos:s.start])
		b.WriteString(Hidden)
		pos = s.end
	}
	b.WriteString(v[pos:])
	return b.String()
}

// RedactURL hides the credentials of a URL-like value, found by parsing it
// every way a driver might (see credentialSpans): the password of its user
// information, with or without a scheme, and secret query parameters. The
// rest stays readable.
func RedactURL(v string) string {
	wide, _ := credentialSpans(v, true)
	return hideSpans(v, wide)
}

// restoreURLPasswords puts the passwords of old back into v where v shows
// them as Hidden (a URL read from the API and sent back, perhaps edited
// elsewhere). ok is false when v's hidden passwords do not match old's one
// for one.
func restoreURLPasswords(v, old string) (string, bool) {
	vw, _ := credentialSpans(v, true)
	ow, _ := credentialSpans(old, true)
	if len(vw) == 0 || len(vw) != len(ow) {
		return v, false
	}
	sortSpans(vw)
	sortSpans(ow)
	var b strings.Builder
	pos := 0
	for i, s := range vw {
		if v[s.start:s.end] != Hidden {
			return v, false
		}
		b.WriteString(v[pos:s.start])
		b.WriteString(old[ow[i].start:ow[i].end])
		pos = s.end
	}
	b.WriteString(v[pos:])
	return b.String(), true
}

func sortSpans(spans []span) {
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
}

// urlSecrets returns the passwords a URL-like value holds, under every
// reading, raw and decoded.
func urlSecrets(v string) []string {
	_, all := credentialSpans(v, true)
	var out []string
	for _, s := range all {
		raw := v[s.start:s.end]
		if raw == Hidden {
			continue // a placeholder, not a secret
		}
		out = append(out, raw, lenientUnescape(raw))
		if u, err := url.QueryUnescape(raw); err == nil {
			out = append(out, u)
		}
	}
	return out
}

// pwParamRE finds password-like "key=value" pairs in free text (the
// keyword/value form of a PostgreSQL connection string in an error).
var pwParamRE = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z_.]*(?:password|passwd|pwd|secret|token)=)('[^']*'|[^&;\s]*)`)

// redactText hides the credentials of every URL inside free text (a token
// holding "://", ending at white space or a quote) and of password-like
// key=value pairs.
func redactText(s string) string {
	if strings.Contains(s, "://") {
		var b strings.Builder
		for len(s) > 0 {
			i := strings.Index(s, "://")
			if i < 0 {
				b.WriteString(s)
				break
			}
			start := strings.LastIndexAny(s[:i], " \t\r\n\"'`<>(),=") + 1
			end := strings.IndexAny(s[i:], " \t\r\n\"'`<>") // commas may be hosts
			if end < 0 {
				end = len(s)
			} else {
				end += i
			}
			b.WriteString(s[:start])
			b.WriteString(RedactURL(s[start:end]))
			s = s[end:]
		}
		s = b.String()
	}
	return pwParamRE.ReplaceAllString(s, "${1}"+Hidden)
}

// RedactConfig returns a copy of raw in which every secret setting is
// Hidden, credentials inside URL values are Hidden (RedactURL), and a
// secret's value is Hidden wherever else it appears. l, when not nil,
// supplies the sink's PASSWORD-typed settings.
func RedactConfig(l Lookup, raw map[string]string) map[string]string {
	defs := defsFor(l, raw)
	secrets := Of(l, raw)
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if isSecretKey(defs, k) && !providers.IsReference(v) {
			out[k] = Hidden
			continue
		}
		out[k] = redactSetting(v, secrets)
	}
	return out
}

// redactSetting is how RedactConfig shows a setting that is not itself a
// secret.
func redactSetting(v string, secrets []string) string {
	return RedactURL(ScrubString(v, secrets))
}

// Of returns the secret strings of a configuration, longest first: the
// values of secret settings and the passwords inside URL values, raw and
// decoded. ScrubString removes them from free text (error traces). A
// value that is a config provider reference (${file:…}, see
// config/providers) is not a secret: it only says where the secret is,
// and RedactConfig shows it; what it resolves to is (Provided).
func Of(l Lookup, raw map[string]string) []string {
	defs := defsFor(l, raw)
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= MinLen && s != Hidden && !providers.IsReference(s) { // shorter strings would mangle unrelated text
			seen[s] = true
		}
	}
	for k, v := range raw {
		if providers.IsReference(v) {
			continue
		}
		if isSecretKey(defs, k) {
			add(v)
			add(url.QueryEscape(v))
			add(url.PathEscape(v))
			continue
		}
		for _, s := range urlSecrets(v) {
			add(s)
		}
	}
	return sortedLongestFirst(seen)
}

// InClear returns the settings of raw, sorted, that hold a secret in clear
// rather than as a config provider reference: a secret setting with a
// value that is not a reference, or a URL with a password in it. (In
// distributed mode configurations are stored in a Kafka topic, where
// secrets must not go in clear.)
func InClear(l Lookup, raw map[string]string) []string {
	defs := defsFor(l, raw)
	var out []string
	for k, v := range raw {
		switch {
		case isSecretKey(defs, k):
			if v != "" && v != Hidden && !providers.IsReference(v) {
				out = append(out, k)
			}
		default:
			for _, s := range urlSecrets(v) {
				if !providers.IsReference(s) {
					out = append(out, k)
					break
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// MinLen is the length from which a secret is removed wherever it appears
// in free text. A shorter string ("1", "db") would turn every message into
// noise if every occurrence went; a secret setting's value that short is
// not removed at all (Of), and a shorter value from a config provider is
// removed only where it stands quoted (Provided).
const MinLen = 3

// Provided returns the strings to scrub for values that config provider
// references were replaced with (providers.Resolver.Resolve): every such
// value is a secret, whatever setting it sits in (a database or user
// name, tasks.max, a topic). Each value counts as written, trimmed of
// surrounding white space, percent-encoded (query and path) and escaped
// as Go's %q shows it. A form of MinLen bytes or more is removed wherever
// it appears; a shorter one only where it stands between double, single
// or back quotes, as error messages quote values (`database "db" does not
// exist`), the quotes included.
func Provided(values []string) []string {
	seen := map[string]bool{}
	add := func(s string) {
		switch {
		case s == "" || s == Hidden || seen[s]:
		case len(s) >= MinLen:
			seen[s] = true
		default:
			for _, q := range []string{`"`, `'`, "`"} {
				seen[q+s+q] = true
			}
		}
	}
	for _, v := range values {
		for _, f := range []string{v, strings.TrimSpace(v)} {
			add(f)
			add(url.QueryEscape(f))
			add(url.PathEscape(f))
			if q := strconv.Quote(f); q[1:len(q)-1] != f {
				add(q[1 : len(q)-1])
			}
		}
	}
	return sortedLongestFirst(seen)
}

func sortedLongestFirst(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// ScrubString is the redaction of free text (errors, status traces, log
// lines): it replaces every secret in s with Hidden, then hides the
// credentials of URLs and password-like key=value pairs that s itself
// contains.
func ScrubString(s string, secrets []string) string {
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, Hidden)
	}
	return redactText(s)
}

func defsFor(l Lookup, raw map[string]string) config.Defs {
	if l == nil {
		return config.ConnectorDefs
	}
	return l.DefsFor(raw)
}

// ResolvedErrors rewrites the field errors of a configuration validated
// with its config provider references resolved (raw as written, resolved
// as checked, values what the references resolved to): an error about a
// setting that holds references names them instead of showing its value
// ("tasks.max: invalid value from ${env:X}: must be an integer"), and every secret, resolved values included, is removed from
// every message (Of, Provided). In the message of the setting itself a
// resolved value shorter than MinLen is removed as a whole word too (an
// error about a value is likely to show it bare: "got 0").
func ResolvedErrors(l Lookup, errs config.Errors, raw, resolved map[string]string, values []string) config.Errors {
	if len(errs) == 0 {
		return errs
	}
	secs := append(Of(l, resolved), Provided(values)...)
	const mark = "\x00ref\x00"
	out := make(config.Errors, len(errs))
	for i, e := range errs {
		refs := providers.Refs(raw[e.Name])
		if len(refs) == 0 {
			out[i] = config.FieldError{Name: e.Name, Msg: ScrubString(e.Msg, secs)}
			continue
		}
		msg := e.Msg
		if v := resolved[e.Name]; v != "" && strings.Contains(msg, strconv.Quote(v)) {
			msg = strings.ReplaceAll(msg, strconv.Quote(v), "from "+mark)
		} else {
			msg = "value from " + mark + ": " + msg
		}
		msg = ScrubString(scrubWords(msg, values), secs)
		shown := make([]string, len(refs))
		for j, r := range refs {
			shown[j] = r.Text
		}
		out[i] = config.FieldError{Name: e.Name, Msg: strings.ReplaceAll(msg, mark, strings.Join(shown, ", "))}
	}
	return out
}

// scrubWords replaces the values shorter than MinLen that stand in s as
// whole words (not next to a letter, digit or '_') with Hidden.
func scrubWords(s string, values []string) string {
	for _, v := range values {
		for _, f := range []string{v, strings.TrimSpace(v)} {
			if f == "" || len(f) >= MinLen {
				continue
			}
			var b strings.Builder
			pos := 0
			for from := 0; ; {
				i := strings.Index(s[from:], f)
				if i < 0 {
					break
				}
				i += from
				end := i + len(f)
				if (i == 0 || !isWordByte(s[i-1])) && (end == len(s) || !isWordByte(s[end])) {
					b.WriteString(s[pos:i])
					b.WriteString(Hidden)
					pos = end
				}
				from = end
			}
			b.WriteString(s[pos:])
			s = b.String()
		}
	}
	return s
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
