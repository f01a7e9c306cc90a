package transform

import (
	"strings"

	"github.com/txsink/txsink/connectors/record"
)

// ClassReplaceField is the base of ReplaceField$Key and ReplaceField$Value.
const ClassReplaceField = "org.apache.kafka.connect.transforms.ReplaceField"

func init() { registerSides(ClassReplaceField, newReplaceField) }

// replaceField is Kafka Connect's ReplaceField: it keeps the fields that
// are not excluded and, when include is set, are included (by their
// original names), and renames fields by renames (old:new pairs). A null
// key or value passes unchanged.
type replaceField struct {
	side    side
	class   string
	exclude map[string]bool
	include map[string]bool
	renames map[string]string
	plans   cache[*record.Schema, replacePlan]
}

// replacePlan is the derived schema of one input schema, and for each
// input field the index of the output field it becomes (-1: dropped).
type replacePlan struct {
	schema *record.Schema
	to     []int
	err    error
}

func newReplaceField(s side, settings map[string]string) (Transform, error) {
	t := &replaceField{side: s, class: s.className("ReplaceField")}
	c := newConf(t.class, settings)
	// Kafka Connect 2.7 renamed blacklist and whitelist; it reads the old
	// names when the new ones are not set.
	exclude, include := c.list("exclude"), c.list("include")
	if _, ok := settings["exclude"]; !ok {
		exclude = c.list("blacklist")
	} else {
		c.list("blacklist")
	}
	if _, ok := settings["include"]; !ok {
		include = c.list("whitelist")
	} else {
		c.list("whitelist")
	}
	t.exclude, t.include = set(exclude), set(include)
	t.renames = map[string]string{}
	for _, m := range c.list("renames") {
		parts := strings.Split(m, ":")
		// Java's split drops trailing empty strings: "a:" is one part.
		for len(parts) > 0 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1]
		}
		if len(parts) != 2 {
			c.fail("renames", "invalid rename mapping %q: want old:new, as in foo:bar,abc:xyz", m)
			break
		}
		t.renames[parts[0]] = parts[1]
	}
	c.boolean("replace.null.with.default", true)
	if err := c.done(); err != nil {
		return nil, err
	}
	return t, nil
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func (t *replaceField) keep(name string) bool {
	return !t.exclude[name] && (len(t.include) == 0 || t.include[name])
}

func (t *replaceField) renamed(name string) string {
	if to, ok := t.renames[name]; ok {
		return to
	}
	return name
}

func (t *replaceField) Apply(r *record.Record) (bool, error) {
	v := t.side.get(r)
	if v.IsNull() {
		return true, nil
	}
	if err := wantStruct(t.class, t.side, v); err != nil {
		return false, err
	}
	if s := v.Schema(); s != nil {
		p := t.plans.get(s, func() replacePlan { return t.plan(s) })
		if p.err != nil {
			return false, p.err
		}
		out := make([]record.Value, len(p.schema.Fields))
		i := 0
		_ = v.Range(func(_ []byte, fv record.Value) error {
			if j := p.to[i]; j >= 0 {
				out[j] = fv
			}
			i++
			return nil
		})
		t.side.set(r, record.Struct(p.schema, out))
		return true, nil
	}
	names, vals, err := objectFields(v, 0)
	if err != nil {
		return false, err
	}
	n := 0
	for i, name := range names {
		if !t.keep(name) {
			continue
		}
		to := t.renamed(name)
		if len(t.renames) > 0 {
			for _, prev := range names[:n] {
				if prev == to {
					return false, errField(to, "%s: renames give two fields this name", t.class)
				}
			}
		}
		names[n], vals[n] = to, vals[i]
		n++
	}
	t.side.set(r, record.Object(names[:n], vals[:n]))
	return true, nil
}

func (t *replaceField) plan(s *record.Schema) replacePlan {
	var fields []*record.Field
	to := make([]int, len(s.Fields))
	for i, f := range s.Fields {
		to[i] = -1
		if t.keep(f.Name) {
			to[i] = len(fields)
			fields = append(fields, &record.Field{Name: t.renamed(f.Name), Schema: f.Schema})
		}
	}
	out, err := deriveStruct(s, fields, false)
	if err != nil {
		return replacePlan{err: errRecord("%s: %v after renames", t.class, err)}
	}
	return replacePlan{schema: out, to: to}
}
