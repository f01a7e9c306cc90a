package transform

import (
	"fmt"
	"strings"

	"github.com/txsink/txsink/connectors/record"
)

// ClassExtractField is the base of ExtractField$Key and ExtractField$Value.
const ClassExtractField = "org.apache.kafka.connect.transforms.ExtractField"

func init() { registerSides(ClassExtractField, newExtractField) }

// extractField is Kafka Connect's ExtractField: the key or value becomes
// one of its fields. Without a schema a null passes as null and a
// missing field gives null; with a schema the field must be in it (even
// for a null value, which becomes a null of the field's schema).
// field.syntax.version=V2 reads a nested field by a dotted path
// (KIP-821, with backticks around names that hold dots).
type extractField struct {
	side  side
	class string
	path  []string
	field string // the setting, for messages
}

func newExtractField(s side, settings map[string]string) (Transform, error) {
	t := &extractField{side: s, class: s.className("ExtractField")}
	c := newConf(t.class, settings)
	t.field = c.required("field")
	version := strings.ToUpper(c.oneOf("field.syntax.version", "V1", true, "V1", "V2"))
	c.boolean("replace.null.with.default", true)
	if version == "V2" {
		path, err := parseFieldPath(t.field)
		if err != nil {
			c.fail("field", "%v", err)
		}
		t.path = path
	} else {
		t.path = []string{t.field}
	}
	if err := c.done(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *extractField) Apply(r *record.Record) (bool, error) {
	v := t.side.get(r)
	s := v.Schema()
	var f *record.Field
	if s != nil {
		var err error
		if f, err = fieldAt(s, t.path); err != nil {
			return false, errField(t.field, "%s: %v", t.class, err)
		}
	}
	if v.IsNull() {
		if f != nil {
			t.side.set(r, record.Null(f.Schema))
		}
		return true, nil
	}
	if err := wantStruct(t.class, t.side, v); err != nil {
		return false, err
	}
	out, err := valueAt(v, t.path)
	if err != nil {
		return false, errField(t.field, "%s: %v", t.class, err)
	}
	if f != nil {
		if out.IsNull() {
			out = record.Null(f.Schema)
		}
		out = out.WithSchema(f.Schema)
	}
	t.side.set(r, out)
	return true, nil
}

// fieldAt finds the field at path in a struct schema (Connect's
// SingleFieldPath.fieldFrom); a missing field is an error, as Connect's
// "Unknown field".
func fieldAt(s *record.Schema, path []string) (*record.Field, error) {
	for i, step := range path {
		if s.Type != record.TypeStruct {
			return nil, fmt.Errorf("cannot look up field %q in %s", step, s)
		}
		f := s.Field(step)
		if f == nil {
			return nil, fmt.Errorf("unknown field %q", strings.Join(path[:i+1], "."))
		}
		if i == len(path)-1 {
			return f, nil
		}
		s = f.Schema
	}
	return nil, fmt.Errorf("empty field path")
}

// valueAt reads the value at path in a struct (Connect's
// SingleFieldPath.valueFrom): a missing or null step gives null; a step
// through something that is not a struct is an error.
func valueAt(v record.Value, path []string) (record.Value, error) {
	for i, step := range path {
		if v.IsNull() {
			return record.Value{}, nil
		}
		if v.Kind() != record.KindStruct {
			return record.Value{}, fmt.Errorf("%q is %s, not a struct", strings.Join(path[:i], "."), v.Describe())
		}
		fv, ok := v.Get(step)
		if !ok {
			return record.Value{}, nil
		}
		v = fv
	}
	return v, nil
}

// parseFieldPath splits a field.syntax.version=V2 path as Connect's
// SingleFieldPath does: steps separated by dots; a step wrapped in
// backticks may hold dots, and a backtick inside it is escaped with a
// backslash when a dot follows it; a trailing dot adds an empty step.
func parseFieldPath(path string) ([]string, error) {
	var steps []string
	i := 0
	for i < len(path) {
		if path[i] != '`' {
			dot := strings.IndexByte(path[i:], '.')
			if dot < 0 {
				steps = append(steps, path[i:])
				i = len(path)
				break
			}
			steps = append(steps, path[i:i+dot])
			i += dot + 1
			continue
		}
		open := i
		i++
		start := i
		var field strings.Builder
		for {
			bt := strings.IndexByte(path[i:], '`')
			if bt < 0 {
				return nil, incompleteBacktick(path, open)
			}
			i += bt
			escaped := path[i-1] == '\\'
			if i >= len(path)-1 {
				if escaped {
					return nil, incompleteBacktick(path, open)
				}
				field.WriteString(path[start:i])
				steps = append(steps, field.String())
				i++
				break
			}
			if path[i+1] != '.' {
				i++
				continue
			}
			if escaped {
				field.WriteString(path[start : i-1])
				field.WriteByte('`')
				i++
				start = i
				continue
			}
			field.WriteString(path[start:i])
			steps = append(steps, field.String())
			i += 2
			break
		}
	}
	if strings.HasSuffix(path, ".") {
		steps = append(steps, "")
	}
	if len(steps) == 0 {
		steps = []string{""}
	}
	return steps, nil
}

func incompleteBacktick(path string, at int) error {
	return fmt.Errorf("incomplete backtick pair in path %q, consider adding a backslash before the backtick at position %d to escape it", path, at)
}
