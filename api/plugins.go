package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/connectors/transform"
)

// pluginsResource serves /connector-plugins.
type pluginsResource struct{ s *Server }

// Routes returns the /connector-plugins router.
func (rs pluginsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/", rs.list)
	r.Get("/{plugin}/config", rs.config)
	r.Put("/{plugin}/config/validate", rs.validate)
	return r
}

func (rs pluginsResource) reg() *connectors.Registry { return rs.s.h.Registry() }

// list is GET /connector-plugins[?connectorsOnly=false]: one entry per
// sink, by class; with connectorsOnly=false also the converters, the
// transforms and the predicates, with Connect's type names.
func (rs pluginsResource) list(w http.ResponseWriter, r *http.Request) {
	connectorsOnly := true
	if v := r.URL.Query().Get("connectorsOnly"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			rs.s.handleErr(w, badRequest("Query parameter connectorsOnly must be true or false, got %q", v), nil)
			return
		}
		connectorsOnly = b
	}
	out := []pluginInfo{}
	for _, s := range rs.reg().Specs() {
		out = append(out, pluginInfo{Class: s.Class, Type: "sink", Version: s.Version})
	}
	if !connectorsOnly {
		version := rs.s.opt.Version
		if version == "" {
			version = "unknown"
		}
		for _, c := range transform.TransformClasses() {
			out = append(out, pluginInfo{Class: c, Type: "transformation", Version: version})
		}
		for _, p := range convert.Plugins() {
			v := p.Version
			if v == "" {
				v = version
			}
			out = append(out, pluginInfo{Class: p.Class, Type: "converter", Version: v})
		}
		for _, c := range transform.PredicateClasses() {
			out = append(out, pluginInfo{Class: c, Type: "predicate", Version: version})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (rs pluginsResource) lookup(w http.ResponseWriter, r *http.Request) (connectors.Spec, bool) {
	name := chi.URLParam(r, "plugin")
	spec, ok := rs.reg().Lookup(name)
	if !ok {
		writeError(w, http.StatusNotFound, "Unknown plugin "+name+".")
	}
	return spec, ok
}

// config is GET /connector-plugins/{plugin}/config: the settings'
// definitions (hidden test-only settings left out).
func (rs pluginsResource) config(w http.ResponseWriter, r *http.Request) {
	spec, ok := rs.lookup(w, r)
	if !ok {
		return
	}
	out := []configKeyInfo{}
	for _, k := range keyInfos(spec.AllDefs()) {
		out = append(out, k)
	}
	writeJSON(w, http.StatusOK, out)
}

// keyInfos turns definitions into Connect's ConfigKeyInfo, numbering them
// within their groups.
func keyInfos(defs config.Defs) []configKeyInfo {
	var out []configKeyInfo
	inGroup := map[string]int{}
	for _, d := range defs {
		if d.Hidden {
			continue
		}
		inGroup[d.Group]++
		var def *string
		if !d.Required {
			v := d.Default
			def = &v
		}
		imp := "MEDIUM"
		if d.Required {
			imp = "HIGH"
		}
		doc := d.Doc
		if len(d.Enum) > 0 {
			doc += " One of: " + strings.Join(d.Enum, ", ") + "."
		}
		out = append(out, configKeyInfo{
			Name: d.Name, Type: string(d.Type), Required: d.Required, DefaultValue: def,
			Importance: imp, Documentation: doc, Group: d.Group,
			Width: "NONE", DisplayName: d.Name, Dependents: []string{}, Order: inGroup[d.Group],
		})
	}
	return out
}

// validate is PUT /connector-plugins/{plugin}/config/validate: Connect's
// ConfigInfos with the per-field errors. It is 200 even when the
// configuration has errors (error_count says how many).
func (rs pluginsResource) validate(w http.ResponseWriter, r *http.Request) {
	spec, ok := rs.lookup(w, r)
	if !ok {
		return
	}
	var raw settings
	if err := decode(r, &raw); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if raw == nil {
		raw = map[string]string{}
	}
	secs := secrets.Of(rs.reg(), raw)
	if c, ok := raw[config.KeyClass]; ok {
		if got, found := rs.reg().Lookup(c); !found || got.Name != spec.Name {
			rs.s.handleErr(w, badRequest("Included connector type %s does not match request type %s", c, chi.URLParam(r, "plugin")), secs)
			return
		}
	} else {
		raw[config.KeyClass] = spec.Class
	}
	writeJSON(w, http.StatusOK, Validate(rs.reg(), spec, raw))
}

// Validate builds the validate response for raw against spec.
func Validate(reg *connectors.Registry, spec connectors.Spec, raw map[string]string) configInfos {
	_, _, errs := reg.Validate(raw)
	secs := secrets.Of(reg, raw)
	shown := secrets.RedactConfig(reg, raw)
	defs := spec.AllDefs()
	out := configInfos{Name: spec.Class, Groups: []string{}, Configs: []configInfo{}}
	seenGroup := map[string]bool{}
	known := map[string]bool{}
	for _, k := range keyInfos(defs) {
		if !seenGroup[k.Group] {
			seenGroup[k.Group] = true
			out.Groups = append(out.Groups, k.Group)
		}
		known[k.Name] = true
		v := configValueInfo{Name: k.Name, RecommendedValues: []string{}, Errors: []string{}, Visible: true}
		if d, ok := defs.Lookup(k.Name); ok {
			v.RecommendedValues = append(v.RecommendedValues, d.Enum...)
		}
		if val, ok := shown[k.Name]; ok {
			v.Value = &val
		} else if k.DefaultValue != nil && *k.DefaultValue != "" {
			dv := *k.DefaultValue
			v.Value = &dv
		}
		for _, m := range errs.For(k.Name) {
			v.Errors = append(v.Errors, secrets.ScrubString(m, secs))
		}
		out.ErrorCount += len(v.Errors)
		out.Configs = append(out.Configs, configInfo{Definition: k, Value: v})
	}
	// Errors about settings that have no definition: a malformed key, a
	// misspelt one, another connector's setting that txsink refuses.
	for _, e := range errs {
		if known[e.Name] {
			continue
		}
		out.ErrorCount++
		out.Configs = append(out.Configs, configInfo{
			Definition: configKeyInfo{Name: e.Name, Type: "STRING", Importance: "LOW", Width: "NONE", DisplayName: e.Name, Dependents: []string{}},
			Value:      configValueInfo{Name: e.Name, RecommendedValues: []string{}, Errors: []string{secrets.ScrubString(e.Msg, secs)}, Visible: true},
		})
	}
	// Settings nothing defines, which a create accepts and ignores (it
	// logs them): validate reports each as an entry with an error, so a
	// client that validates first sees them (docs/api.md).
	for _, k := range config.CheckKeys(raw, defs).Unknown {
		out.ErrorCount++
		val := shown[k]
		out.Configs = append(out.Configs, configInfo{
			Definition: configKeyInfo{Name: k, Type: "STRING", Importance: "LOW", Width: "NONE", DisplayName: k, Dependents: []string{}},
			Value:      configValueInfo{Name: k, Value: &val, RecommendedValues: []string{}, Errors: []string{config.UnknownMsg}, Visible: true},
		})
	}
	return out
}
