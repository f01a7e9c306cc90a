package transform_test

import (
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

const (
	replaceValue = transform.ClassReplaceField + "$Value"
	replaceKey   = transform.ClassReplaceField + "$Key"
	extractValue = transform.ClassExtractField + "$Value"
	extractKey   = transform.ClassExtractField + "$Key"
	insertValue  = transform.ClassInsertField + "$Value"
	insertKey    = transform.ClassInsertField + "$Key"
)

// A struct schema with the fields of Connect's ReplaceFieldTest.
const replaceSchema = `{"type":"struct","name":"row","version":3,"fields":[
	{"field":"dont","type":"string"},{"field":"abc","type":"int32"},
	{"field":"foo","type":"boolean"},{"field":"etc","type":"string"}]}`

func TestReplaceField(t *testing.T) {
	t.Run("schemaless", func(t *testing.T) {
		c := one(t, replaceValue, "exclude", "dont", "renames", "abc:xyz,foo:bar")
		r := rec(schemaless(t, `{"dont":"whatever","abc":42,"foo":true,"etc":"etc"}`))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"xyz":42,"bar":true,"etc":"etc"}`)
		if r.Value.Schema() != nil {
			t.Errorf("schemaless value got schema %s", r.Value.Schema())
		}
	})
	t.Run("withSchema", func(t *testing.T) {
		c := one(t, replaceValue, "include", "abc,foo", "renames", "abc:xyz,foo:bar")
		in := typed(t, replaceSchema, `{"dont":"whatever","abc":42,"foo":true,"etc":"etc"}`)
		r := rec(in)
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"xyz":42,"bar":true}`)
		wantSchema(t, "value", r.Value, "struct{xyz int32, bar boolean}")
		s := r.Value.Schema()
		if s.Name != "row" || s.Version != 3 {
			t.Errorf("schema basics not kept: name %q version %d", s.Name, s.Version)
		}
		if f := s.Field("bar"); f == nil || f.Index != 1 {
			t.Errorf("derived schema is not indexed: Field(bar) = %+v", f)
		}
		// The derived schema is built once per input schema.
		r2 := rec(typed(t, replaceSchema, `{"dont":"x","abc":1,"foo":false,"etc":"y"}`))
		r2.Value = r2.Value.WithSchema(in.Schema())
		apply(t, c, r2)
		if r2.Value.Schema() != s {
			t.Error("a second record of the same schema got a new derived schema")
		}
	})
	t.Run("tombstones", func(t *testing.T) {
		// Connect's tombstoneSchemaless and tombstoneWithSchema.
		tombstonesPass(t, one(t, replaceValue, "include", "abc,foo", "renames", "abc:xyz,foo:bar"),
			typed(t, replaceSchema, `{"dont":"a","abc":1,"foo":true,"etc":"e"}`).Schema())
	})
	t.Run("deprecatedNames", func(t *testing.T) {
		c := one(t, replaceValue, "blacklist", "dont", "whitelist", "dont,abc")
		r := rec(schemaless(t, `{"dont":1,"abc":2,"foo":3}`))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"abc":2}`)
		// The new names win over the old.
		c = one(t, replaceValue, "exclude", "foo", "blacklist", "abc")
		r = rec(schemaless(t, `{"dont":1,"abc":2,"foo":3}`))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"dont":1,"abc":2}`)
	})
	t.Run("key", func(t *testing.T) {
		c := one(t, replaceKey, "exclude", "b", "renames", "a:id")
		r := keyed(schemaless(t, `{"a":7,"b":8}`), schemaless(t, `{"v":1}`))
		apply(t, c, r)
		wantJSON(t, "key", r.Key, `{"id":7}`)
		wantJSON(t, "value", r.Value, `{"v":1}`)
		if !c.NeedsKey() {
			t.Error("ReplaceField$Key does not ask for keys")
		}
	})
	t.Run("duplicateMembers", func(t *testing.T) {
		// A JSON object with a name twice: the last value counts.
		c := one(t, replaceValue, "renames", "a:b")
		r := rec(schemaless(t, `{"a":1,"c":2,"a":3}`))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"b":3,"c":2}`)
	})
	t.Run("collisions", func(t *testing.T) {
		c := one(t, replaceValue, "renames", "abc:etc")
		err := applyErr(t, c, rec(typed(t, replaceSchema, `{"dont":"a","abc":1,"foo":true,"etc":"e"}`)))
		contains(t, "error", err.Error(), `two fields named "etc"`)
		err = applyErr(t, c, rec(schemaless(t, `{"abc":1,"etc":2}`)))
		if fieldOf(err) != "etc" {
			t.Errorf("schemaless collision names field %q, want etc", fieldOf(err))
		}
	})
	t.Run("notAStruct", func(t *testing.T) {
		c := one(t, replaceValue, "exclude", "a")
		err := applyErr(t, c, rec(schemaless(t, `"text"`)))
		contains(t, "error", err.Error(), "ReplaceField$Value", "a string")
	})
}

func TestReplaceFieldConfig(t *testing.T) {
	checkConfigErrors(t, replaceValue, []configCase{
		{[]string{"renames", "a:b,c"}, "transforms.x.renames", `invalid rename mapping "c"`},
		{[]string{"renames", "a:b:c"}, "transforms.x.renames", "invalid rename mapping"},
		{[]string{"renames", "a:"}, "transforms.x.renames", "invalid rename mapping"},
		{[]string{"replace.null.with.default", "maybe"}, "transforms.x.replace.null.with.default", "true or false"},
		{[]string{"exclude", "a", "excludes", "b"}, "transforms.x.excludes", "unknown setting for ReplaceField$Value (its settings: blacklist, exclude, include, renames, replace.null.with.default, whitelist)"},
	})
}

// The cases of Connect's ExtractFieldTest.
func TestExtractField(t *testing.T) {
	t.Run("schemaless", func(t *testing.T) {
		r := keyed(schemaless(t, `{"magic":42}`), record.Value{})
		apply(t, one(t, extractKey, "field", "magic"), r)
		wantJSON(t, "key", r.Key, "42")
		if r.Key.Schema() != nil {
			t.Error("schemaless key got a schema")
		}
	})
	t.Run("schemalessAndNestedPath", func(t *testing.T) {
		r := keyed(schemaless(t, `{"magic":{"foo":42}}`), record.Value{})
		apply(t, one(t, extractKey, "field", "magic.foo", "field.syntax.version", "V2"), r)
		wantJSON(t, "key", r.Key, "42")
	})
	t.Run("nullSchemaless", func(t *testing.T) {
		r := keyed(record.Value{}, record.Value{})
		apply(t, one(t, extractKey, "field", "magic"), r)
		if !r.Key.IsNull() {
			t.Errorf("null key became %s", r.Key.GoString())
		}
	})
	t.Run("withSchema", func(t *testing.T) {
		r := keyed(typed(t, `{"type":"struct","fields":[{"field":"magic","type":"int32"}]}`, `{"magic":42}`), record.Value{})
		apply(t, one(t, extractKey, "field", "magic"), r)
		wantJSON(t, "key", r.Key, "42")
		wantSchema(t, "key", r.Key, "int32")
	})
	t.Run("withSchemaAndNestedPath", func(t *testing.T) {
		k := typed(t, `{"type":"struct","fields":[{"field":"magic","type":"struct","fields":[{"field":"foo","type":"int32"}]}]}`, `{"magic":{"foo":42}}`)
		r := keyed(k, record.Value{})
		apply(t, one(t, extractKey, "field", "magic.foo", "field.syntax.version", "v2"), r)
		wantJSON(t, "key", r.Key, "42")
		wantSchema(t, "key", r.Key, "int32")
	})
	t.Run("nullWithSchema", func(t *testing.T) {
		s := typed(t, `{"type":"struct","optional":true,"fields":[{"field":"magic","type":"int32"}]}`, `{"magic":1}`).Schema()
		r := keyed(record.Null(s), record.Value{})
		apply(t, one(t, extractKey, "field", "magic"), r)
		if !r.Key.IsNull() || r.Key.Schema() == nil || r.Key.Schema().Type != record.TypeInt32 {
			t.Errorf("null key with schema became %s of schema %s, want null of int32", r.Key.GoString(), r.Key.Schema())
		}
	})
	t.Run("nonExistentFieldSchemalessShouldReturnNull", func(t *testing.T) {
		r := keyed(schemaless(t, `{"magic":42}`), record.Value{})
		apply(t, one(t, extractKey, "field", "nonexistent"), r)
		if !r.Key.IsNull() {
			t.Errorf("got %s, want null", r.Key.GoString())
		}
		r = keyed(schemaless(t, `{"magic":{"foo":42}}`), record.Value{})
		apply(t, one(t, extractKey, "field", "magic.nonexistent", "field.syntax.version", "V2"), r)
		if !r.Key.IsNull() {
			t.Errorf("nested: got %s, want null", r.Key.GoString())
		}
	})
	t.Run("nonExistentFieldWithSchemaShouldFail", func(t *testing.T) {
		k := typed(t, `{"type":"struct","fields":[{"field":"magic","type":"int32"}]}`, `{"magic":42}`)
		err := applyErr(t, one(t, extractKey, "field", "nonexistent"), keyed(k, record.Value{}))
		contains(t, "error", err.Error(), `unknown field "nonexistent"`)
		if fieldOf(err) != "nonexistent" {
			t.Errorf("error names field %q", fieldOf(err))
		}
		k = typed(t, `{"type":"struct","fields":[{"field":"magic","type":"struct","fields":[{"field":"foo","type":"int32"}]}]}`, `{"magic":{"foo":42}}`)
		err = applyErr(t, one(t, extractKey, "field", "magic.nonexistent", "field.syntax.version", "V2"), keyed(k, record.Value{}))
		contains(t, "error", err.Error(), `unknown field "magic.nonexistent"`)
	})
	t.Run("V1TakesDotsLiterally", func(t *testing.T) {
		r := rec(schemaless(t, `{"a.b":1,"a":{"b":2}}`))
		apply(t, one(t, extractValue, "field", "a.b"), r)
		wantJSON(t, "value", r.Value, "1")
		r = rec(schemaless(t, "{\"a.b\":{\"c\":3}}"))
		apply(t, one(t, extractValue, "field", "`a.b`.c", "field.syntax.version", "V2"), r)
		wantJSON(t, "value", r.Value, "3")
	})
	t.Run("valueOfDebeziumEnvelope", func(t *testing.T) {
		r := rec(schemaless(t, `{"before":null,"after":{"id":1},"op":"c"}`))
		apply(t, one(t, extractValue, "field", "after"), r)
		wantJSON(t, "value", r.Value, `{"id":1}`)
	})
	t.Run("throughNonStruct", func(t *testing.T) {
		err := applyErr(t, one(t, extractValue, "field", "a.b", "field.syntax.version", "V2"), rec(schemaless(t, `{"a":5}`)))
		contains(t, "error", err.Error(), "not a struct")
	})
	t.Run("notAStruct", func(t *testing.T) {
		err := applyErr(t, one(t, extractValue, "field", "a"), rec(schemaless(t, `[1]`)))
		contains(t, "error", err.Error(), "ExtractField$Value", "an array")
	})
}

func TestFieldPathV2(t *testing.T) {
	for path, want := range map[string]string{
		"foo":            "foo",
		"foo.bar":        "foo|bar",
		"foo.bar.":       "foo|bar|",
		"`foo.bar`.baz":  "foo.bar|baz",
		"`foo.bar`":      "foo.bar",
		"a.`b.c`.d":      "a|b.c|d",
		"`a\\`.b`.c":     "a`.b|c",
		"`a`b`.c":        "a`b|c",
		"foo..bar":       "foo||bar",
		"`foo.bar`.`x`.": "foo.bar|x|",
	} {
		c := one(t, extractValue, "field", path, "field.syntax.version", "V2")
		// Build a nested object along the expected steps and read it back.
		steps := strings.Split(want, "|")
		obj := `"found"`
		for i := len(steps) - 1; i >= 0; i-- {
			obj = `{` + quote(steps[i]) + `:` + obj + `}`
		}
		r := rec(schemaless(t, obj))
		apply(t, c, r)
		if got := js(t, r.Value); got != `"found"` {
			t.Errorf("path %q: read %s from %s, want the value at steps %q", path, got, obj, steps)
		}
	}
	fe := configErr(t, extractValue, "field", "`foo.bar", "field.syntax.version", "V2")
	if fe.Name != "transforms.x.field" || !strings.Contains(fe.Msg, "incomplete backtick pair") {
		t.Errorf("error %v", fe)
	}
	fe = configErr(t, extractValue, "field", "a", "field.syntax.version", "V3")
	if fe.Name != "transforms.x.field.syntax.version" {
		t.Errorf("error %v", fe)
	}
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// The cases of Connect's InsertFieldTest.
func TestInsertField(t *testing.T) {
	all := []string{"topic.field", "topic_field!", "partition.field", "partition_field", "offset.field", "offset_field?",
		"timestamp.field", "timestamp_field", "static.field", "instance_id", "static.value", "my-instance-id"}
	t.Run("schemaless", func(t *testing.T) {
		r := rec(schemaless(t, `{"magic":42}`))
		apply(t, one(t, insertValue, all...), r)
		wantJSON(t, "value", r.Value, `{"magic":42,"topic_field":"test","partition_field":3,"offset_field":42,"timestamp_field":1700000000123,"instance_id":"my-instance-id"}`)
	})
	t.Run("withSchema", func(t *testing.T) {
		r := rec(typed(t, `{"type":"struct","name":"name","version":1,"doc":"doc","fields":[{"field":"magic","type":"int64"}]}`, `{"magic":42}`))
		apply(t, one(t, insertValue, all...), r)
		wantSchema(t, "value", r.Value, "struct{magic int64, topic_field string, partition_field optional int32, offset_field optional int64, timestamp_field optional org.apache.kafka.connect.data.Timestamp int64, instance_id optional string}")
		wantJSON(t, "value", r.Value, `{"magic":42,"topic_field":"test","partition_field":3,"offset_field":42,"timestamp_field":"2023-11-14T22:13:20.123Z","instance_id":"my-instance-id"}`)
		s := r.Value.Schema()
		if s.Name != "name" || s.Version != 1 || s.Doc != "doc" {
			t.Errorf("schema basics not kept: %+v", s)
		}
		ts, _ := r.Value.Get("timestamp_field")
		if ts.Kind() != record.KindTimestamp || ts.Schema() == nil || ts.Schema().Name != record.LogicalTimestamp {
			t.Errorf("timestamp field is %s of %s, want a Timestamp", ts.Describe(), ts.Schema())
		}
	})
	t.Run("topicIsTheRoutedOne", func(t *testing.T) {
		c := chainOf(t, "transforms", "route,ins",
			"transforms.route.type", "RegexRouter", "transforms.route.regex", "(.*)", "transforms.route.replacement", "routed_$1",
			"transforms.ins.type", insertValue, "transforms.ins.topic.field", "t")
		r := rec(schemaless(t, `{}`))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"t":"routed_test"}`)
	})
	t.Run("tombstonesPassUnchanged", func(t *testing.T) {
		tombstonesPass(t, one(t, insertValue, all...),
			typed(t, `{"type":"struct","optional":true,"fields":[{"field":"magic","type":"int64"}]}`, `{"magic":1}`).Schema())
	})
	t.Run("key", func(t *testing.T) {
		c := one(t, insertKey, "topic.field", "topic_field!", "partition.field", "partition_field")
		r := keyed(schemaless(t, `{"id":1}`), schemaless(t, `{"v":2}`))
		apply(t, c, r)
		wantJSON(t, "key", r.Key, `{"id":1,"topic_field":"test","partition_field":3}`)
		wantJSON(t, "value", r.Value, `{"v":2}`)
		// insertIntoNullKeyLeavesRecordUnchanged
		r = keyed(record.Value{}, schemaless(t, `{"v":2}`))
		apply(t, c, r)
		if !r.Key.IsNull() {
			t.Errorf("null key became %s", r.Key.GoString())
		}
	})
	t.Run("schemalessPutReplaces", func(t *testing.T) {
		r := rec(schemaless(t, `{"a":1,"topic":"old"}`))
		apply(t, one(t, insertValue, "topic.field", "topic"), r)
		wantJSON(t, "value", r.Value, `{"a":1,"topic":"test"}`)
	})
	t.Run("typedDuplicateField", func(t *testing.T) {
		r := rec(typed(t, `{"type":"struct","fields":[{"field":"topic","type":"string"}]}`, `{"topic":"x"}`))
		err := applyErr(t, one(t, insertValue, "topic.field", "topic"), r)
		contains(t, "error", err.Error(), `two fields named "topic"`)
	})
	t.Run("requiredTimestampMissing", func(t *testing.T) {
		r := rec(typed(t, `{"type":"struct","fields":[{"field":"a","type":"int32"}]}`, `{"a":1}`))
		r.Timestamp = time.Time{} // a record without a timestamp
		err := applyErr(t, one(t, insertValue, "timestamp.field", "ts!"), r)
		if fieldOf(err) != "ts" {
			t.Errorf("error %v names field %q, want ts", err, fieldOf(err))
		}
		r = rec(schemaless(t, `{"a":1}`))
		r.Timestamp = time.Time{}
		apply(t, one(t, insertValue, "timestamp.field", "ts"), r)
		wantJSON(t, "value", r.Value, `{"a":1}`)
	})
}

func TestInsertFieldConfig(t *testing.T) {
	checkConfigErrors(t, insertValue, []configCase{
		{nil, "transforms.x", "no field insertion configured"},
		{[]string{"static.field", "f"}, "transforms.x.static.value", `no value set for static field "f"`},
		{[]string{"topic.field", "!"}, "transforms.x.topic.field", "must not be empty"},
		{[]string{"topic.field", "t", "topic.fields", "u"}, "transforms.x.topic.fields", "unknown setting"},
	})
}

// tombstonesPass checks that c leaves a schemaless tombstone and a typed
// one (a null of schema s) as they are.
func tombstonesPass(t *testing.T, c *transform.Chain, s *record.Schema) {
	t.Helper()
	r := rec(record.Value{})
	apply(t, c, r)
	if !r.Value.IsNull() || r.Value.Schema() != nil {
		t.Errorf("schemaless tombstone became %s", r.Value.GoString())
	}
	r = rec(record.Null(s))
	apply(t, c, r)
	if !r.Value.IsNull() || r.Value.Schema() != s {
		t.Error("a typed tombstone must keep its value and schema unchanged")
	}
}
