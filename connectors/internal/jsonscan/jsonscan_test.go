package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// check compares Object and Valid with encoding/json on one input.
func check(t *testing.T, in []byte) {
	t.Helper()
	valid := Valid(in)
	deep := bytes.Count(in, []byte("["))+bytes.Count(in, []byte("{")) > MaxDepth
	if want := json.Valid(in); valid != want && !deep {
		t.Fatalf("Valid(%q) = %v, encoding/json says %v", in, valid, want)
	}
	members, ok := Object(in, nil)
	var m map[string]json.RawMessage
	jerr := json.Unmarshal(in, &m)
	wantOK := jerr == nil && m != nil
	if ok != wantOK && !deep {
		t.Fatalf("Object(%q) ok = %v, encoding/json into a map: %v (map nil: %v)", in, ok, jerr, m == nil)
	}
	if !ok || !utf8.Valid(in) {
		return // encoding/json replaces invalid UTF-8 in keys; callers check UTF-8 first
	}
	got := map[string]json.RawMessage{}
	for _, mb := range members {
		key := string(mb.Key)
		if mb.Escaped != bytes.Contains(mb.Key, []byte(`\`)) {
			t.Fatalf("Object(%q): key %q Escaped = %v", in, mb.Key, mb.Escaped)
		}
		if mb.Escaped {
			if err := json.Unmarshal([]byte(`"`+key+`"`), &key); err != nil {
				t.Fatalf("Object(%q): key %q does not decode: %v", in, mb.Key, err)
			}
		}
		got[key] = mb.Value
	}
	if fields, fok := Fields(in); fok != !hasEscapedKey(members) {
		t.Fatalf("Fields(%q) ok = %v, Object ok = %v", in, fok, ok)
	} else if fok && !mapsEqual(fields, m) {
		t.Fatalf("Fields(%q) = %q, encoding/json %q", in, fields, m)
	}
	if len(got) != len(m) {
		t.Fatalf("Object(%q): %d distinct keys, encoding/json %d", in, len(got), len(m))
	}
	for k, v := range m {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("Object(%q): member %q = %q, encoding/json %q", in, k, got[k], v)
		}
	}
}

func TestObject(t *testing.T) {
	cases := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a" : "x" , "b":[1,2,{"c":null}],"d":{"e":true}}`,
		`{"id":"k1","seq":12,"body":"xxxxxxxx"}`,
		`{"a":1,"a":2}`, `{"a\"b":1}`, `{"\u00e9":"\u00e9"}`, `{"a":"\/\b\f\n\r\t\\"}`,
		`{"n":-0.5e+10,"m":0,"o":1E5,"p":-12.250}`,
		// rejected
		``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1}x`, `{"a":1}{}`,
		`[]`, `"s"`, `1`, `null`, `{a:1}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`,
		`{"a":1e}`, `{"a":+1}`, `{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`,
		`{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", "{\"a\":\"tab\there\"}", `{"a":[1,]}`, `{"a":[,1]}`,
		`{"a":"unterminated}`, `{"a":1 "b":2}`, `{"a":NaN}`, `{'a':1}`,
	}
	for _, c := range cases {
		check(t, []byte(c))
	}
}

func TestDepth(t *testing.T) {
	ok := `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`
	if _, scanned := Object([]byte(ok), nil); !scanned {
		t.Fatalf("nesting of %d not scanned", MaxDepth)
	}
	deep := `{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`
	if _, scanned := Object([]byte(deep), nil); scanned {
		t.Fatalf("nesting of %d scanned, want refused (callers fall back to encoding/json)", MaxDepth+1)
	}
}

func FuzzObject(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"id":"x","seq":1,"body":"y"}`, `{"a":[{"b":"\u0041"}]}`, `{"a":1,"a":2}`, `[1]`, `{"a":1e5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		check(t, in)
	})
}

func BenchmarkObject(b *testing.B) {
	in := []byte(`{"id":"k0000012345","seq":12345,"body":"` + strings.Repeat("x", 60) + `"}`)
	var dst []Member
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		dst, _ = Object(in, dst[:0])
	}
}

func BenchmarkEncodingJSONMap(b *testing.B) {
	in := []byte(`{"id":"k0000012345","seq":12345,"body":"` + strings.Repeat("x", 60) + `"}`)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(in, &m)
	}
}

func hasEscapedKey(ms []Member) bool {
	for _, m := range ms {
		if m.Escaped {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
