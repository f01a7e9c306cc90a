// Package providers resolves Kafka Connect's config provider references in
// connector configurations: ${file:/path/secrets.properties:key} (a key of
// a Java properties file), ${env:NAME} (an environment variable of the
// worker) and ${dir:/path/dir:file} (a file's content, as Kubernetes mounts
// secrets). A configuration keeps its references wherever it is stored or
// shown; a Resolver replaces them with their values only on the worker that
// runs the connector, for the sink it opens.
package providers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/txsink/txsink/config"
)

// Sentinels wrapped by the field errors Resolve returns.
var (
	// ErrUnknownProvider: a reference names a provider that is not
	// configured (config.providers).
	ErrUnknownProvider = errors.New("unknown config provider")
	// ErrNotAllowed: the reference is outside what the provider may read
	// (allowed.paths, allowlist.pattern).
	ErrNotAllowed = errors.New("not allowed")
	// ErrMissing: the file, key or environment variable does not exist.
	ErrMissing = errors.New("not found")
	// ErrMalformed: the reference lacks a part its provider needs.
	ErrMalformed = errors.New("malformed reference")
)

// refRE is Kafka Connect's variable pattern: ${provider:[path:]key}, the
// parts up to the first and second ':' (non-greedy), no '}' inside.
var refRE = regexp.MustCompile(`\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}`)

// Ref is one reference in a value.
type Ref struct {
	// Text is the reference as written, "${…}".
	Text                string
	Provider, Path, Key string
}

// Refs returns the references in a value, in order.
func Refs(v string) []Ref {
	var out []Ref
	for _, m := range refRE.FindAllStringSubmatch(v, -1) {
		out = append(out, Ref{Text: m[0], Provider: m[1], Path: m[2], Key: m[3]})
	}
	return out
}

// IsReference reports whether the whole value is one reference (what a
// secret setting holds in distributed mode).
func IsReference(v string) bool {
	loc := refRE.FindStringIndex(v)
	return loc != nil && loc[0] == 0 && loc[1] == len(v)
}

// provider reads the values of keys under one path.
type provider interface {
	get(path string, keys []string) (map[string]string, error)
}

// Resolver resolves the references of the configured providers. A nil
// *Resolver resolves nothing (no provider configured): values pass
// through as written.
type Resolver struct {
	names     []string
	providers map[string]provider
}

// New returns a resolver for the providers (config.Worker.Providers); nil
// when there are none.
func New(specs []config.ProviderSpec) (*Resolver, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	r := &Resolver{providers: map[string]provider{}}
	for _, s := range specs {
		var allowed []string
		for _, d := range (config.Values{"x": s.Params[config.ProviderAllowedPaths]}).List("x") {
			allowed = append(allowed, filepath.Clean(d))
		}
		switch s.Class {
		case config.FileProviderClass:
			r.providers[s.Name] = fileProvider{allowed: allowed}
		case config.DirProviderClass:
			r.providers[s.Name] = dirProvider{allowed: allowed}
		case config.EnvProviderClass:
			var re *regexp.Regexp
			if p := s.Params[config.ProviderAllowlistPattern]; p != "" {
				var err error
				if re, err = regexp.Compile("^(?:" + p + ")$"); err != nil {
					return nil, fmt.Errorf("config.providers.%s.param.%s: %w", s.Name, config.ProviderAllowlistPattern, err)
				}
			}
			r.providers[s.Name] = envProvider{allow: re, lookup: os.LookupEnv}
		default:
			return nil, fmt.Errorf("config.providers.%s.class: unknown class %q", s.Name, s.Class)
		}
		r.names = append(r.names, s.Name)
	}
	return r, nil
}

// Names lists the configured providers.
func (r *Resolver) Names() []string {
	if r == nil {
		return nil
	}
	return append([]string(nil), r.names...)
}

// Knows reports whether a value is exactly one reference to a configured
// provider.
func (r *Resolver) Knows(v string) bool {
	if r == nil || !IsReference(v) {
		return false
	}
	_, ok := r.providers[Refs(v)[0].Provider]
	return ok
}

// Resolve returns a copy of raw with every reference replaced by its
// value, and the values the references were replaced with (each once, in
// the order of the sorted settings): every one of them is a secret for
// scrubbing, whatever setting it sits in (see connectors/secrets.Provided).
// Errors are config.Errors naming the setting (and the reference, never a
// value). A nil Resolver returns raw unchanged and no values. Resolve reads
// files and the environment; ctx only bounds the call.
func (r *Resolver) Resolve(ctx context.Context, raw map[string]string) (map[string]string, []string, error) {
	if r == nil {
		return raw, nil, nil
	}
	out := maps.Clone(raw)
	var errs Errors
	var values []string
	seen := map[string]bool{}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		v := raw[k]
		if !strings.Contains(v, "${") {
			continue
		}
		var firstErr *Error
		var got []string
		res := refRE.ReplaceAllStringFunc(v, func(text string) string {
			ref := Refs(text)[0]
			val, err := r.lookup(ref)
			if err != nil {
				if firstErr == nil {
					firstErr = &Error{Setting: k, Ref: ref.Text, Err: err}
				}
				return text
			}
			got = append(got, val)
			return val
		})
		if firstErr != nil {
			errs = append(errs, firstErr)
			continue
		}
		for _, val := range got {
			if !seen[val] {
				seen[val] = true
				values = append(values, val)
			}
		}
		out[k] = res
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return out, values, nil
}

// Error is a reference that could not be resolved. Its message names the
// setting and the reference, never a value.
type Error struct {
	// Setting holds the reference Ref.
	Setting, Ref string
	// Err wraps one of the sentinels (ErrUnknownProvider, ErrNotAllowed,
	// ErrMissing, ErrMalformed) or a read error.
	Err error
}

func (e *Error) Error() string { return e.Setting + ": " + e.Ref + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errors are the references of a configuration that could not be
// resolved. errors.Is finds the sentinels of each; errors.As finds them as
// config.Errors too (an invalid configuration, HTTP 400, naming the
// settings).
type Errors []*Error

func (es Errors) Error() string { return es.fields().Error() }

// Unwrap returns every error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// As sets a *config.Errors target.
func (es Errors) As(target any) bool {
	if t, ok := target.(*config.Errors); ok {
		*t = es.fields()
		return true
	}
	return false
}

func (es Errors) fields() config.Errors {
	out := make(config.Errors, len(es))
	for i, e := range es {
		out[i] = config.FieldError{Name: e.Setting, Msg: e.Ref + ": " + e.Err.Error()}
	}
	return out
}

func (r *Resolver) lookup(ref Ref) (string, error) {
	p, ok := r.providers[ref.Provider]
	if !ok {
		return "", fmt.Errorf("%w %q (config.providers is %s)", ErrUnknownProvider, ref.Provider, strings.Join(r.names, ","))
	}
	vals, err := p.get(ref.Path, []string{ref.Key})
	if err != nil {
		return "", err
	}
	return vals[ref.Key], nil
}

// within reports whether path lies below one of the allowed directories
// (any path when none is given), also after following symbolic links. It
// returns the path with its links resolved, which is what the caller
// reads: a link that was checked is not followed a second time. A link
// that stays inside an allowed directory (Kubernetes' Secret volumes:
// dir/KEY -> ..data/KEY, ..data -> ..2026_12_03_10_00_00.123) is fine; one
// that leaves it (absolute, "../", chained, to a directory) is refused.
// The error names the path of the reference, never where a link points.
func within(path string, allowed []string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrMalformed, path)
	}
	clean := filepath.Clean(path)
	if len(allowed) > 0 && !under(clean, allowed...) {
		return "", fmt.Errorf("%w: %q is outside allowed.paths", ErrNotAllowed, path)
	}
	real, err := filepath.EvalSymlinks(clean)
	switch {
	case err != nil && len(allowed) == 0:
		return clean, nil // the read reports it
	case err != nil:
		// Missing, or a dangling link: nothing is read (a link checked
		// now could lead elsewhere by the time it is read).
		return "", fmt.Errorf("%w: %s", ErrMissing, path)
	case len(allowed) == 0:
		return real, nil
	}
	for _, a := range allowed {
		ra, err := filepath.EvalSymlinks(a)
		if err != nil {
			ra = a
		}
		if under(clean, a) && under(real, ra) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %q is a symbolic link, or lies under one, that leads outside allowed.paths", ErrNotAllowed, path)
}

// under reports whether p is one of dirs or lies below one.
func under(p string, dirs ...string) bool {
	for _, dir := range dirs {
		if p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// fileProvider is FileConfigProvider: keys of a Java properties file.
type fileProvider struct{ allowed []string }

func (f fileProvider) get(path string, keys []string) (map[string]string, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: want ${file:/path/file.properties:key}", ErrMalformed)
	}
	real, err := within(path, f.allowed)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(real)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: file %s", ErrMissing, path)
		}
		return nil, fmt.Errorf("reading %s: %w", path, errors.Unwrap(err))
	}
	props, err := config.ParseProperties(b)
	if err != nil {
		return nil, fmt.Errorf("%s is not a properties file: %w", path, err)
	}
	out := map[string]string{}
	for _, k := range keys {
		v, ok := props[k]
		if !ok {
			return nil, fmt.Errorf("%w: key %q in %s", ErrMissing, k, path)
		}
		out[k] = v
	}
	return out, nil
}

// dirProvider is DirectoryConfigProvider: the content of files in a
// directory, by name.
type dirProvider struct{ allowed []string }

func (d dirProvider) get(path string, keys []string) (map[string]string, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: want ${dir:/path/dir:file}", ErrMalformed)
	}
	if _, err := within(path, d.allowed); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range keys {
		if k == "" || k == "." || k == ".." || strings.ContainsRune(k, filepath.Separator) {
			return nil, fmt.Errorf("%w: %q is not a file name", ErrMalformed, k)
		}
		file := filepath.Join(path, k)
		// The file itself may be a link (Kubernetes' KEY -> ..data/KEY):
		// the rule applies to where it leads.
		real, err := within(file, d.allowed)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: file %s", ErrMissing, file)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, errors.Unwrap(err))
		}
		out[k] = string(b)
	}
	return out, nil
}

// envProvider is EnvVarConfigProvider: the worker's environment variables.
type envProvider struct {
	allow  *regexp.Regexp // nil: any name but the worker's own settings
	lookup func(string) (string, bool)
}

func (e envProvider) get(path string, keys []string) (map[string]string, error) {
	if path != "" {
		return nil, fmt.Errorf("%w: want ${env:NAME}", ErrMalformed)
	}
	out := map[string]string{}
	for _, k := range keys {
		if e.allow != nil && !e.allow.MatchString(k) || e.allow == nil && strings.HasPrefix(k, "TXSINK_") {
			return nil, fmt.Errorf("%w: environment variable %s (allowlist.pattern)", ErrNotAllowed, k)
		}
		v, ok := e.lookup(k)
		if !ok {
			return nil, fmt.Errorf("%w: environment variable %s is not set", ErrMissing, k)
		}
		out[k] = v
	}
	return out, nil
}
