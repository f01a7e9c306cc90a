package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

// JSONSchemaClass is Confluent's JSON Schema converter.
const JSONSchemaClass = "io.confluent.connect.json.JsonSchemaConverter"

func init() {
	register(Plugin{Class: JSONSchemaClass, Aliases: []string{"JsonSchemaConverter", "jsonschema"}, Version: "7.9.0", New: newJSONSchemaConverter})
}

// JSONSchema is Confluent's JsonSchemaConverter: a JSON payload after the
// wire header, typed by the JSON Schema its id names (objects with
// properties become structs, integers int64, numbers float64, Kafka
// Connect's connect.type and logical names as Confluent's JsonSchemaData
// writes them), and, with json.fail.invalid.schema=true, validated against
// that schema first. docs/formats.md has the mapping table.
type JSONSchema struct {
	reg      *registry
	validate bool
	progs    idCache[*jsonSchemaProg]
}

func newJSONSchemaConverter(settings map[string]string, _ bool, rp RegistryPolicy) (Converter, error) {
	reg, err := newRegistry(settings, rp)
	if err != nil {
		return nil, err
	}
	c := &JSONSchema{reg: reg}
	if v, ok := settings[SettingJSONSchemaValidate]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return nil, config.FieldError{Name: SettingJSONSchemaValidate, Msg: fmt.Sprintf("invalid value %q: must be true or false", v)}
		}
		c.validate = b
	}
	return c, nil
}

// Convert decodes one record. See the type's documentation and Converter.
// Strings and nested schemaless values refer to data.
func (c *JSONSchema) Convert(ctx context.Context, _ string, _ []kgo.RecordHeader, data []byte, _ *Buffer) (record.Value, error) {
	if data == nil {
		return record.Value{}, nil
	}
	id, payload, err := wireHeader(data)
	if err != nil {
		return record.Value{}, err
	}
	kind := "jsonschema"
	if c.validate {
		kind = "jsonschema+validate"
	}
	validate := c.validate
	p, err := compiledSchema(ctx, c.reg, &c.progs, kind, id, func(s *regSchema) (*jsonSchemaProg, error) {
		return compileJSONSchema(s, validate)
	})
	if err != nil {
		return record.Value{}, err
	}
	return p.convert(payload)
}

// jsonSchemaProg types the payloads of one schema id.
type jsonSchemaProg struct {
	id        uint32
	root      *jsNode
	validator *jsonschema.Schema // nil: no validation
}

func (p *jsonSchemaProg) convert(payload []byte) (record.Value, error) {
	v, err := record.ParseJSON(payload)
	if err != nil {
		return record.Value{}, err
	}
	if p.validator != nil {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		if err != nil {
			return record.Value{}, record.Errorf(record.ErrDecode, "invalid JSON: %v", err)
		}
		if err := p.validator.Validate(inst); err != nil {
			return record.Value{}, validationError(err)
		}
	}
	return p.root.convert(v, bytes.TrimSpace(payload))
}

var englishPrinter = message.NewPrinter(language.English)

// validationError names the first failing location of a payload.
func validationError(err error) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return record.Errorf(record.ErrDecode, "does not match its JSON Schema: %v", err)
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	field := strings.Join(ve.InstanceLocation, ".")
	msg := record.Errorf(record.ErrDecode, "does not match its JSON Schema at /%s: %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(englishPrinter))
	if field == "" {
		return msg
	}
	return &record.FieldError{Field: field, Err: msg}
}

// jsKind is what a JSON Schema node maps to.
type jsKind uint8

const (
	jsAny jsKind = iota // schemaless JSON: the value as written
	jsNull
	jsBoolean
	jsInteger
	jsNumber
	jsDecimal
	jsString
	jsBytes
	jsDate
	jsTime
	jsTimestamp
	jsStruct
	jsMap
	jsArray
)

// jsNode types one JSON Schema node.
type jsNode struct {
	kind     jsKind
	sch      *record.Schema
	bits     int  // integer: 8, 16, 32 or 64
	float32  bool // number: connect.type float32
	scale    int32
	hasScale bool
	props    []jsProp
	byName   map[string]int
	required map[string]bool
	elem     *jsNode
	entries  bool // a map written as an array of {"key": …, "value": …}
}

type jsProp struct {
	name string
	node *jsNode
}

// oj is a JSON Schema object with its keys in text order (property order
// is field order, as in Confluent's JsonSchemaData).
type oj struct {
	keys []string
	m    map[string]any
}

// parseOrdered parses JSON keeping object key order; numbers stay
// json.Number.
func parseOrdered(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := ordValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("text after the schema")
	}
	return v, nil
}

func ordValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 200 {
		return nil, errors.New("schema nested deeper than 200 levels")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &oj{m: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := ordValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.m[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.m[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := ordValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
	}
	return tok, nil
}

// jsBuilder maps a schema and its references to nodes.
type jsBuilder struct {
	id   uint32
	docs map[string]any // document URL (no fragment) → parsed document
	refs []string       // $refs being expanded (recursion turns schemaless)
}

// jsBase is the URL the main schema of an id is known by, against which
// relative references resolve when the schema has no $id.
func jsBase(id uint32) string { return fmt.Sprintf("txsink://schema-registry/ids/%d.json", id) }

func compileJSONSchema(s *regSchema, validate bool) (*jsonSchemaProg, error) {
	id := uint32(s.ID)
	if s.Type != sr.TypeJSON {
		return nil, badSchema(id, "is a %s schema, not JSON Schema", s.Type)
	}
	b := &jsBuilder{id: id, docs: map[string]any{}}
	main, err := parseOrdered(s.Text)
	if err != nil {
		return nil, badSchema(id, "JSON Schema: %v", err)
	}
	base := jsBase(id)
	if o, ok := main.(*oj); ok {
		if sid, ok := o.m["$id"].(string); ok && sid != "" {
			base = stripFragment(sid)
		}
	}
	b.docs[base] = main
	// References: by their name, resolved against the main schema's base
	// and, if the name has a $id, by that too.
	type res struct {
		url string
		doc string
	}
	var resources []res
	for _, ref := range s.Refs {
		if ref.Type != sr.TypeJSON {
			return nil, badSchema(id, "reference %q is a %s schema, not JSON Schema", ref.Name, ref.Type)
		}
		doc, err := parseOrdered(ref.Text)
		if err != nil {
			return nil, badSchema(id, "referenced JSON Schema %q: %v", ref.Name, err)
		}
		u := resolveURL(base, ref.Name)
		b.docs[u] = doc
		resources = append(resources, res{u, ref.Text})
		if o, ok := doc.(*oj); ok {
			if sid, ok := o.m["$id"].(string); ok && sid != "" && stripFragment(sid) != u {
				b.docs[stripFragment(sid)] = doc
			}
		}
	}
	root, err := b.node(main, base, false, 0)
	if err != nil {
		return nil, err
	}
	root.sealAll()
	p := &jsonSchemaProg{id: id, root: root}
	if validate {
		c := jsonschema.NewCompiler()
		c.UseLoader(noLoader{})
		add := func(u, text string) error {
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
			if err != nil {
				return err
			}
			return c.AddResource(u, doc)
		}
		if err := add(base, s.Text); err != nil {
			return nil, badSchema(id, "JSON Schema: %v", err)
		}
		for _, r := range resources {
			if err := add(r.url, r.doc); err != nil {
				return nil, badSchema(id, "referenced JSON Schema %q: %v", r.url, err)
			}
		}
		if p.validator, err = c.Compile(base); err != nil {
			return nil, badSchema(id, "JSON Schema does not compile for validation: %v", err)
		}
	}
	return p, nil
}

// noLoader refuses to load any schema not given by the registry: a
// converter never fetches URLs or reads files named by a schema.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("schema %s is not among the registry's references", u)
}

func stripFragment(u string) string {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		return u[:i]
	}
	return u
}

func resolveURL(base, ref string) string {
	bu, err := url.Parse(base)
	if err != nil {
		return ref
	}
	ru, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	return stripFragment(bu.ResolveReference(ru).String())
}

// deref resolves a $ref against base: another document (a reference) or
// a JSON pointer within one.
func (b *jsBuilder) deref(base, ref string) (any, string, error) {
	docURL, frag := base, ""
	if i := strings.IndexByte(ref, '#'); i >= 0 {
		frag = ref[i+1:]
		if ref[:i] != "" {
			docURL = resolveURL(base, ref[:i])
		}
	} else {
		docURL = resolveURL(base, ref)
	}
	doc, ok := b.docs[docURL]
	if !ok {
		return nil, "", badSchema(b.id, "JSON Schema $ref %q names a schema that is not among the registry's references", ref)
	}
	if frag == "" {
		return doc, docURL, nil
	}
	if frag[0] != '/' {
		return nil, "", badSchema(b.id, "JSON Schema $ref %q: only JSON pointers are supported", ref)
	}
	cur := doc
	for _, part := range strings.Split(frag[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if p, err := url.PathUnescape(part); err == nil {
			part = p
		}
		switch c := cur.(type) {
		case *oj:
			cur, ok = c.m[part]
		case []any:
			i, err := strconv.Atoi(part)
			ok = err == nil && i >= 0 && i < len(c)
			if ok {
				cur = c[i]
			}
		default:
			ok = false
		}
		if !ok {
			return nil, "", badSchema(b.id, "JSON Schema $ref %q points at nothing", ref)
		}
	}
	return cur, docURL, nil
}

// Names of Confluent's JsonSchemaData annotations.
const (
	connectTypeKey   = "connect.type"
	connectNameKey   = "connect.name"
	connectParamsKey = "connect.parameters"
	connectIndexKey  = "connect.index"
)

func (b *jsBuilder) node(raw any, base string, optional bool, depth int) (*jsNode, error) {
	if depth > 100 {
		return nil, badSchema(b.id, "JSON Schema nested deeper than 100 levels")
	}
	anyNode := func() *jsNode {
		return &jsNode{kind: jsAny, sch: &record.Schema{Type: record.TypeString, Name: record.DebeziumJSON, Optional: true}}
	}
	o, ok := raw.(*oj)
	if !ok {
		// true, false or something else: no constraint we can type.
		return anyNode(), nil
	}
	if ref, ok := o.m["$ref"].(string); ok {
		key := base + "|" + ref
		for _, r := range b.refs {
			if r == key {
				// Recursive: the value stays schemaless JSON below here.
				return anyNode(), nil
			}
		}
		target, tbase, err := b.deref(base, ref)
		if err != nil {
			return nil, err
		}
		b.refs = append(b.refs, key)
		n, err := b.node(target, tbase, optional, depth+1)
		b.refs = b.refs[:len(b.refs)-1]
		return n, err
	}
	if sid, ok := o.m["$id"].(string); ok && sid != "" && depth > 0 {
		base = resolveURL(base, sid)
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts, ok := o.m[k].([]any); ok {
			var nonNull []any
			for _, a := range alts {
				if ao, ok := a.(*oj); ok && ao.m["type"] == "null" && len(ao.keys) == 1 {
					optional = true
					continue
				}
				nonNull = append(nonNull, a)
			}
			if len(nonNull) == 1 {
				return b.node(nonNull[0], base, optional, depth+1)
			}
			return anyNode(), nil
		}
	}
	if all, ok := o.m["allOf"].([]any); ok {
		if len(all) == 1 {
			return b.node(all[0], base, optional, depth+1)
		}
		return anyNode(), nil
	}
	typ, _ := o.m["type"].(string)
	if types, ok := o.m["type"].([]any); ok {
		var nonNull []string
		for _, t := range types {
			if s, _ := t.(string); s == "null" {
				optional = true
			} else if s != "" {
				nonNull = append(nonNull, s)
			}
		}
		if len(nonNull) != 1 {
			return anyNode(), nil
		}
		typ = nonNull[0]
	}
	if typ == "" {
		if _, ok := o.m["properties"]; ok {
			typ = "object"
		}
	}
	name, _ := o.m["title"].(string)
	if cn, ok := o.m[connectNameKey].(string); ok {
		name = cn
	}
	ctype, _ := o.m[connectTypeKey].(string)
	sch := &record.Schema{Optional: optional}
	if d, ok := o.m["description"].(string); ok {
		sch.Doc = d
	}
	if params, ok := o.m[connectParamsKey].(*oj); ok {
		sch.Params = map[string]string{}
		for _, k := range params.keys {
			if s, ok := params.m[k].(string); ok {
				sch.Params[k] = s
			}
		}
	}
	n := &jsNode{sch: sch}
	switch typ {
	case "null":
		n.kind, sch.Type, sch.Optional = jsNull, record.TypeString, true
	case "boolean":
		n.kind, sch.Type = jsBoolean, record.TypeBoolean
	case "integer", "number":
		switch {
		case name == record.LogicalDecimal:
			n.kind, sch.Type, sch.Name = jsDecimal, record.TypeBytes, name
			if err := b.decimalScale(n); err != nil {
				return nil, err
			}
		case name == record.LogicalDate:
			n.kind, sch.Type, sch.Name = jsDate, record.TypeInt32, name
		case name == record.LogicalTime:
			n.kind, sch.Type, sch.Name = jsTime, record.TypeInt32, name
		case name == record.LogicalTimestamp:
			n.kind, sch.Type, sch.Name = jsTimestamp, record.TypeInt64, name
		case ctype == "float32" || ctype == "float64" || (typ == "number" && ctype == ""):
			n.kind, sch.Type, n.float32 = jsNumber, record.TypeFloat64, ctype == "float32"
			if n.float32 {
				sch.Type = record.TypeFloat32
			}
		default:
			n.kind, n.bits, sch.Type = jsInteger, 64, record.TypeInt64
			switch ctype {
			case "int8":
				n.bits, sch.Type = 8, record.TypeInt8
			case "int16":
				n.bits, sch.Type = 16, record.TypeInt16
			case "int32":
				n.bits, sch.Type = 32, record.TypeInt32
			}
		}
	case "string":
		if ctype == "bytes" {
			n.kind, sch.Type = jsBytes, record.TypeBytes
		} else {
			n.kind, sch.Type = jsString, record.TypeString
		}
		if name == record.LogicalDecimal {
			n.kind, sch.Type, sch.Name = jsDecimal, record.TypeBytes, name
			if err := b.decimalScale(n); err != nil {
				return nil, err
			}
		}
	case "array":
		items, ok := o.m["items"]
		if !ok {
			items = true
		}
		e, err := b.node(items, base, false, depth+1)
		if err != nil {
			return nil, err
		}
		e.sch.Seal()
		if ctype == "map" && e.kind == jsStruct && len(e.props) == 2 && e.byName["key"] == 0 && e.byName["value"] == 1 {
			n.kind, sch.Type, sch.Key, sch.Elem, n.elem, n.entries = jsMap, record.TypeMap, e.props[0].node.sch, e.props[1].node.sch, e, true
			break
		}
		n.kind, sch.Type, sch.Elem, n.elem = jsArray, record.TypeArray, e.sch, e
	case "object":
		props, _ := o.m["properties"].(*oj)
		if props == nil || ctype == "map" {
			addl, ok := o.m["additionalProperties"].(*oj)
			if !ok {
				return anyNode(), nil
			}
			e, err := b.node(addl, base, false, depth+1)
			if err != nil {
				return nil, err
			}
			n.kind, n.elem, sch.Type, sch.Key, sch.Elem = jsMap, e, record.TypeMap, &record.Schema{Type: record.TypeString}, e.sch
			break
		}
		n.kind, sch.Type, sch.Name = jsStruct, record.TypeStruct, name
		n.required = map[string]bool{}
		if req, ok := o.m["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					n.required[s] = true
				}
			}
		}
		keys := append([]string(nil), props.keys...)
		index := func(k string) (int64, bool) {
			po, ok := props.m[k].(*oj)
			if !ok {
				return 0, false
			}
			num, ok := po.m[connectIndexKey].(json.Number)
			if !ok {
				return 0, false
			}
			i, err := num.Int64()
			return i, err == nil
		}
		sort.SliceStable(keys, func(i, j int) bool {
			a, aok := index(keys[i])
			c, cok := index(keys[j])
			return aok && cok && a < c
		})
		n.byName = map[string]int{}
		for _, k := range keys {
			pn, err := b.node(props.m[k], base, !n.required[k], depth+1)
			if err != nil {
				return nil, err
			}
			n.byName[k] = len(n.props)
			n.props = append(n.props, jsProp{k, pn})
			sch.Fields = append(sch.Fields, &record.Field{Name: k, Schema: pn.sch})
		}
	default:
		return anyNode(), nil
	}
	if sch.Name == "" && name != "" && n.kind != jsAny {
		sch.Name = name
	}
	return n, nil
}

// decimalScale reads a Decimal node's scale parameter.
func (b *jsBuilder) decimalScale(n *jsNode) error {
	s, ok := n.sch.Params[record.DecimalScaleParam]
	if !ok {
		return nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < -1000 || v > 1000 {
		return badSchema(b.id, "Decimal with an invalid scale %q", s)
	}
	n.scale, n.hasScale = int32(v), true
	return nil
}

// sealAll indexes the struct schemas once, before the program is shared.
func (n *jsNode) sealAll() { n.sch.Seal() }

// convert types a schemaless JSON value; raw is its text.
func (n *jsNode) convert(v record.Value, raw []byte) (record.Value, error) {
	if v.IsNull() {
		if !n.sch.Optional {
			return record.Value{}, record.Errorf(record.ErrDecode, "null for a required %s", n.sch.Type)
		}
		if n.kind == jsAny {
			return record.Value{}, nil
		}
		return record.Null(n.sch), nil
	}
	bad := func(format string, args ...any) (record.Value, error) {
		return record.Value{}, record.Errorf(record.ErrDecode, format, args...)
	}
	want := func(what string) (record.Value, error) {
		return bad("want %s, got %s", what, v.Describe())
	}
	switch n.kind {
	case jsAny:
		return v, nil
	case jsNull:
		return want("null")
	case jsBoolean:
		if v.Kind() != record.KindBool {
			return want("a boolean")
		}
		b, _ := v.AsBool()
		return record.Bool(b).WithSchema(n.sch), nil
	case jsInteger, jsDate, jsTime, jsTimestamp:
		if v.Kind() != record.KindNumber {
			return want("an integer")
		}
		i, err := v.AsInt64()
		if err != nil {
			return bad("%s is not a 64-bit integer", record.Truncate(string(raw), 40))
		}
		switch n.kind {
		case jsDate:
			return record.Date(i).WithSchema(n.sch), nil
		case jsTime:
			if i < 0 || i > 86_400_000 {
				return record.Value{}, outOfDomain("time of day %d ms is outside 00:00-24:00", i)
			}
			return record.TimeOfDay(i * 1e6).WithSchema(n.sch), nil
		case jsTimestamp:
			t := time.UnixMilli(i).UTC()
			if t.Before(record.MinTime) || t.After(record.MaxTime) {
				return record.Value{}, outOfDomain("timestamp %d ms is out of range", i)
			}
			return record.Timestamp(t).WithSchema(n.sch), nil
		}
		if n.bits < 64 && (i < -1<<(n.bits-1) || i >= 1<<(n.bits-1)) {
			return bad("%d is out of range for %s", i, n.sch.Type)
		}
		return record.Int(i).WithSchema(n.sch), nil
	case jsNumber:
		if v.Kind() != record.KindNumber {
			return want("a number")
		}
		bits := 64
		if n.float32 {
			bits = 32
		}
		f, err := v.AsFloat(bits)
		if err != nil || math.IsInf(f, 0) {
			return bad("%s is out of range for %s", record.Truncate(string(raw), 40), n.sch.Type)
		}
		if n.float32 {
			return record.Float32(float32(f)).WithSchema(n.sch), nil
		}
		return record.Float64(f).WithSchema(n.sch), nil
	case jsDecimal:
		var d record.Dec
		switch v.Kind() {
		case record.KindNumber:
			var err error
			if d, err = v.AsDecimal(); err != nil {
				return bad("%v", err)
			}
		case record.KindString:
			b, err := v.AsBytes()
			if err != nil {
				return want("a number or base64 unscaled bytes")
			}
			return record.Decimal(record.TwosComplement(b), n.scale).WithSchema(n.sch), nil
		default:
			return want("a number")
		}
		scale := n.scale
		if !n.hasScale {
			scale = max(0, -d.Exp)
		}
		unscaled, ok := d.AtScale(scale)
		if !ok {
			return bad("%s has more than %d decimal places", record.Truncate(string(raw), 40), scale)
		}
		return record.Decimal(unscaled, scale).WithSchema(n.sch), nil
	case jsString, jsBytes:
		if v.Kind() != record.KindString {
			return want("a string")
		}
		if n.kind == jsBytes {
			b, err := v.AsBytes()
			if err != nil {
				return bad("%v", err)
			}
			return record.Bytes(b).WithSchema(n.sch), nil
		}
		s, err := v.AsString()
		if err != nil {
			return bad("%v", err)
		}
		return record.String(s).WithSchema(n.sch), nil
	case jsArray:
		if v.Kind() != record.KindArray {
			return want("an array")
		}
		var elems []record.Value
		err := v.Elems(func(i int, e record.Value) error {
			text, _ := e.JSONText()
			ev, err := n.elem.convert(e, text)
			if err != nil {
				return inPath("["+strconv.Itoa(i)+"]", err)
			}
			elems = append(elems, ev)
			return nil
		})
		if err != nil {
			return record.Value{}, err
		}
		return record.Array(n.sch, elems), nil
	case jsMap:
		return n.convertMap(v)
	case jsStruct:
		if v.Kind() != record.KindStruct {
			return want("an object")
		}
		fields := make([]record.Value, len(n.props))
		seen := make([]bool, len(n.props))
		err := v.Range(func(name []byte, fv record.Value) error {
			i, ok := n.byName[string(name)]
			if !ok {
				return nil // like Confluent, properties the schema does not name are dropped
			}
			text, _ := fv.JSONText()
			pv, err := n.props[i].node.convert(fv, text)
			if err != nil {
				return inPath(n.props[i].name, err)
			}
			fields[i], seen[i] = pv, true
			return nil
		})
		if err != nil {
			return record.Value{}, err
		}
		for i, p := range n.props {
			if seen[i] {
				continue
			}
			if n.required[p.name] {
				return record.Value{}, record.FieldErrorf(p.name, record.ErrDecode, "required property missing")
			}
			fields[i] = record.Null(p.node.sch)
		}
		return record.Struct(n.sch, fields), nil
	}
	return bad("unsupported JSON Schema node")
}

// convertMap types an object (string keys) or, for Connect's maps with
// other keys, an array of {"key": …, "value": …} objects. Entries keep
// their text order; a repeated key keeps its first position and its last
// value.
func (n *jsNode) convertMap(v record.Value) (record.Value, error) {
	var kv []record.Value
	put := func(k, val record.Value) {
		kt, _ := k.JSONText()
		for i := 0; i < len(kv); i += 2 {
			if et, _ := kv[i].JSONText(); string(et) == string(kt) {
				kv[i+1] = val
				return
			}
		}
		kv = append(kv, k, val)
	}
	if n.entries {
		if v.Kind() != record.KindArray {
			return record.Value{}, record.Errorf(record.ErrDecode, "want an array of map entries, got %s", v.Describe())
		}
		err := v.Elems(func(i int, e record.Value) error {
			text, _ := e.JSONText()
			ev, err := n.elem.convert(e, text)
			if err != nil {
				return inPath("["+strconv.Itoa(i)+"]", err)
			}
			k, _ := ev.Get("key")
			val, _ := ev.Get("value")
			put(k, val)
			return nil
		})
		if err != nil {
			return record.Value{}, err
		}
		return record.Map(n.sch, kv), nil
	}
	if v.Kind() != record.KindStruct {
		return record.Value{}, record.Errorf(record.ErrDecode, "want an object, got %s", v.Describe())
	}
	err := v.Range(func(name []byte, fv record.Value) error {
		text, _ := fv.JSONText()
		ev, err := n.elem.convert(fv, text)
		if err != nil {
			return inPath(string(name), err)
		}
		put(record.String(string(name)).WithSchema(n.sch.Key), ev)
		return nil
	})
	if err != nil {
		return record.Value{}, err
	}
	return record.Map(n.sch, kv), nil
}
