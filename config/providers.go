package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// KeyConfigProviders lists the config providers (Kafka Connect's
// config.providers); each one is configured with
// config.providers.<name>.class and config.providers.<name>.param.<param>.
const KeyConfigProviders = "config.providers"

// The config provider classes txsink implements, with Kafka Connect's names.
const (
	FileProviderClass = "org.apache.kafka.common.config.provider.FileConfigProvider"
	EnvProviderClass  = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
	DirProviderClass  = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
)

// Parameters of the config providers (config.providers.<name>.param.<p>).
const (
	// ProviderAllowedPaths (file, dir): comma-separated directories that
	// references may read below (KIP-993); empty: any path.
	ProviderAllowedPaths = "allowed.paths"
	// ProviderAllowlistPattern (env): a regular expression the whole name
	// of a referenced environment variable must match; empty: any name but
	// the worker's own settings (TXSINK_*).
	ProviderAllowlistPattern = "allowlist.pattern"
)

// defaultProviderClass is the class a provider named so gets when
// config.providers.<name>.class is unset.
var defaultProviderClass = map[string]string{"file": FileProviderClass, "env": EnvProviderClass, "dir": DirProviderClass, "directory": DirProviderClass}

var providerParams = map[string][]string{
	FileProviderClass: {ProviderAllowedPaths},
	DirProviderClass:  {ProviderAllowedPaths},
	EnvProviderClass:  {ProviderAllowlistPattern},
}

// ProviderDefs are the config provider settings (part of WorkerDefs); the
// per-provider settings are read by their prefix.
var ProviderDefs = Defs{
	{Name: KeyConfigProviders, Type: List, Group: "Config providers", Check: checkProviderNames,
		Doc: "Kafka Connect's config providers, comma-separated names (e.g. file,env,dir). A connector setting may then hold a reference instead of a value: ${file:/path/secrets.properties:key} (a key of a Java properties file), ${env:NAME} (an environment variable of the worker), ${dir:/path/dir:file} (a file's content, as Kubernetes mounts secrets). References are stored and shown as written and resolved only on the worker that runs the connector's tasks. Each provider is configured with config.providers.<name>.class (FileConfigProvider, EnvVarConfigProvider or DirectoryConfigProvider of org.apache.kafka.common.config.provider; default by the names file, env and dir) and config.providers.<name>.param.allowed.paths (file, dir: directories references may read below) or config.providers.<name>.param.allowlist.pattern (env: a regular expression names must match; default: any name but TXSINK_*). See docs/cluster.md."},
}

// ProviderSpec is one configured config provider.
type ProviderSpec struct {
	// Name is what references use (${name:…}).
	Name string
	// Class is one of FileProviderClass, EnvProviderClass,
	// DirProviderClass.
	Class string
	// Params are the provider's parameters (config.providers.<name>.param.*).
	Params map[string]string
}

// isProviderKey reports whether a worker setting configures one provider
// (config.providers.<name>.…).
func isProviderKey(k string) bool {
	return strings.HasPrefix(k, KeyConfigProviders+".")
}

// providerClassesFromEnv reads config.providers.<name>.class of the
// providers named in raw from the environment (its parameters, whose
// names hold dots, only come from a worker file).
func providerClassesFromEnv(raw map[string]string, lookup func(string) (string, bool)) {
	for _, n := range Values(raw).List(KeyConfigProviders) {
		k := KeyConfigProviders + "." + n + ".class"
		if v, ok := lookup(EnvKey(k)); ok && v != "" {
			raw[k] = v
		}
	}
}

var providerNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func checkProviderNames(v string) error {
	seen := map[string]bool{}
	for _, n := range (Values{"x": v}).List("x") {
		if !providerNameRE.MatchString(n) {
			return fmt.Errorf("%q: a provider name is letters, digits, '_' or '-'", n)
		}
		if seen[n] {
			return fmt.Errorf("%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// parseProviders reads the config providers from validated values. Every
// config.providers.<name>.… setting must belong to a listed provider and
// be one its class knows.
func parseProviders(v Values) ([]ProviderSpec, Errors) {
	var errs Errors
	add := func(name, msg string) { errs = append(errs, FieldError{Name: name, Msg: msg}) }
	byName := map[string]*ProviderSpec{}
	var out []ProviderSpec
	names := v.List(KeyConfigProviders)
	for _, n := range names {
		byName[n] = &ProviderSpec{Name: n, Params: map[string]string{}}
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		if isProviderKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		rest := strings.TrimPrefix(k, KeyConfigProviders+".")
		name, setting, _ := strings.Cut(rest, ".")
		p := byName[name]
		if p == nil {
			add(k, fmt.Sprintf("provider %q is not listed in config.providers", name))
			continue
		}
		switch {
		case setting == "class":
			p.Class = strings.TrimSpace(v[k])
		case strings.HasPrefix(setting, "param."):
			p.Params[strings.TrimPrefix(setting, "param.")] = v[k]
		default:
			add(k, "unknown setting: want config.providers.<name>.class or config.providers.<name>.param.<parameter>")
		}
	}
	for _, n := range names {
		p := byName[n]
		classKey := KeyConfigProviders + "." + n + ".class"
		if p.Class == "" {
			p.Class = defaultProviderClass[n]
		}
		known, ok := providerParams[p.Class]
		if !ok {
			if p.Class == "" {
				add(classKey, fmt.Sprintf("provider %q needs a class: %s, %s or %s", n, FileProviderClass, EnvProviderClass, DirProviderClass))
			} else {
				add(classKey, fmt.Sprintf("unknown class %q: txsink implements %s, %s and %s", p.Class, FileProviderClass, EnvProviderClass, DirProviderClass))
			}
			continue
		}
		for param, val := range p.Params {
			key := KeyConfigProviders + "." + n + ".param." + param
			switch {
			case !slices.Contains(known, param):
				add(key, fmt.Sprintf("%s has no parameter %q (it knows %s)", p.Class, param, strings.Join(known, ", ")))
			case param == ProviderAllowlistPattern:
				if _, err := regexp.Compile("^(?:" + val + ")$"); err != nil {
					add(key, fmt.Sprintf("not a regular expression: %v", err))
				}
			case param == ProviderAllowedPaths:
				for _, d := range (Values{"x": val}).List("x") {
					if !filepath.IsAbs(d) {
						add(key, fmt.Sprintf("%q: allowed paths must be absolute", d))
					}
				}
			}
		}
		out = append(out, *p)
	}
	return out, errs
}
