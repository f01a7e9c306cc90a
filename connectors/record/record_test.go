package record

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseInteger(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-0": 0, "1.000": 1, "1e3": 1000, "12.5e1": 125, "-9223372036854775808": -9223372036854775808, "0.0e5": 0} {
		got, err := ParseInteger(in)
		if err != nil || got != want {
			t.Errorf("ParseInteger(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1.5", "1e-1", "9223372036854775808", "1e19", "1e999999999999", "x", "--1"} {
		if _, err := ParseInteger(in); err == nil {
			t.Errorf("ParseInteger(%s) succeeded", in)
		}
	}
}

func TestDecimalText(t *testing.T) {
	for _, c := range []struct {
		b     []byte
		scale int32
		want  string
	}{
		{[]byte{0x30, 0x39}, 2, "123.45"},
		{[]byte{0x30, 0x39}, 0, "12345"},
		{[]byte{0x30, 0x39}, -2, "1234500"},
		{[]byte{0x05}, 3, "0.005"},
		{[]byte{0xff}, 0, "-1"},
		{[]byte{0xff, 0x00}, 1, "-25.6"},
		{[]byte{0x80}, 2, "-1.28"},
		{nil, 2, "0.00"},
	} {
		if got := DecimalText(TwosComplement(c.b), c.scale); got != c.want {
			t.Errorf("DecimalText(%x, %d) = %s, want %s", c.b, c.scale, got, c.want)
		}
	}
}

// TestConversions checks each As… conversion on the value kinds that mean
// the same thing, typed and schemaless alike.
func TestConversions(t *testing.T) {
	j := func(s string) Value { return JSON([]byte(s)) }
	ints := map[string]Value{
		"int": Int(42), "json number": j(`42`), "numeric string": j(`"42"`), "integral float": Float64(42),
		"exponent": j(`4.2e1`), "decimal": DecimalInt(4200, 2), "uint": Uint(42),
	}
	for name, v := range ints {
		if n, err := v.AsInt64(); err != nil || n != 42 {
			t.Errorf("%s: AsInt64 = %d, %v", name, n, err)
		}
	}
	for name, v := range map[string]Value{"fraction": j(`4.5`), "float": Float64(4.5), "bool": Bool(true), "object": j(`{}`),
		"big uint": Uint(math.MaxUint64), "string": j(`"x"`), "decimal": DecimalInt(4250, 2), "nan": j(`"NaN"`)} {
		if _, err := v.AsInt64(); !errors.Is(err, ErrCoerce) {
			t.Errorf("%s: AsInt64 error %v, want ErrCoerce", name, err)
		}
	}
	// A duration fills an integer column as whole milliseconds
	// (docs/formats.md: Protobuf Duration → bigint, Int64).
	if n, err := Duration(-90, -500_000_000).AsInt64(); err != nil || n != -90500 {
		t.Errorf("Duration(-90.5 s).AsInt64 = %d, %v; want -90500", n, err)
	}
	if _, err := Duration(1, 1000).AsInt64(); !errors.Is(err, ErrCoerce) {
		t.Errorf("Duration(1.000001 s).AsInt64 error %v, want ErrCoerce (a fraction of a millisecond is not dropped)", err)
	}
	if n, err := Uint(math.MaxUint64).AsUint64(); err != nil || n != math.MaxUint64 {
		t.Errorf("AsUint64 = %d, %v", n, err)
	}
	if _, err := Int(-1).AsUint64(); err == nil {
		t.Error("AsUint64(-1) succeeded")
	}
	d, err := j(`123456789012345678901234567890.000000000000000001`).AsDecimal()
	if err != nil || d.Text() != "123456789012345678901234567890.000000000000000001" {
		t.Errorf("exact decimal = %s, %v", d.Text(), err)
	}
	if d, _ := Float64(0.1).AsDecimal(); d.Text() != "0.1" {
		t.Errorf("float decimal = %s", d.Text())
	}
	if d, _ := j(`"-Infinity"`).AsDecimal(); d.Special != "-Infinity" {
		t.Errorf("special = %+v", d)
	}
	if u, ok := (Dec{Unscaled: big.NewInt(15), Exp: -1}).AtScale(2); !ok || u.Int64() != 150 {
		t.Errorf("AtScale = %v %v", u, ok)
	}
	if _, ok := (Dec{Unscaled: big.NewInt(15), Exp: -1}).AtScale(0); ok {
		t.Error("AtScale dropped a place")
	}
	for in, want := range map[string]bool{`true`: true, `"yes"`: true, `0`: false, `"off"`: false, `1`: true} {
		if b, err := j(in).AsBool(); err != nil || b != want {
			t.Errorf("AsBool(%s) = %v, %v", in, b, err)
		}
	}
	ts := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	for name, v := range map[string]Value{"typed": Timestamp(ts), "epoch ms": j(`1700000000000`), "rfc3339": j(`"2023-11-14T23:13:20+01:00"`),
		"space": j(`"2023-11-14 22:13:20"`)} {
		if got, err := v.AsTimestamp(); err != nil || !got.Time.Equal(ts) {
			t.Errorf("%s: AsTimestamp = %v, %v", name, got, err)
		}
	}
	if got, _ := j(`"-infinity"`).AsTimestamp(); got.Inf != -1 {
		t.Errorf("infinity: %+v", got)
	}
	day := time.Date(2022, 1, 8, 0, 0, 0, 0, time.UTC)
	for name, v := range map[string]Value{"typed": Date(19000), "days": j(`19000`), "text": j(`"2022-01-08"`), "timestamp": Timestamp(day)} {
		if got, err := v.AsDate(); err != nil || !got.Time.Equal(day) {
			t.Errorf("%s: AsDate = %v, %v", name, got, err)
		}
	}
	if _, err := Timestamp(day.Add(5 * time.Hour)).AsDate(); !errors.Is(err, ErrCoerce) {
		t.Errorf("a timestamp with a time of day became a date: %v", err)
	}
	want := 12*time.Hour + 34*time.Minute + 56*time.Second + 789*time.Millisecond
	for name, v := range map[string]Value{"typed": TimeOfDay(int64(want)), "ms": j(`45296789`), "text": j(`"12:34:56.789"`)} {
		if got, err := v.AsTimeOfDay(); err != nil || got != want {
			t.Errorf("%s: AsTimeOfDay = %v, %v", name, got, err)
		}
	}
	if b, err := j(`"AAEC"`).AsBytes(); err != nil || string(b) != "\x00\x01\x02" {
		t.Errorf("AsBytes = %q, %v", b, err)
	}
	u1, err1 := j(`"{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}"`).AsUUID()
	u2, err2 := Bytes(u1[:]).AsUUID()
	if err1 != nil || err2 != nil || u1 != u2 || u1[0] != 0x6b {
		t.Errorf("AsUUID = %x %v %v", u1, err1, err2)
	}
	for name, c := range map[string]struct {
		v    Value
		want string
	}{
		"number as written": {j(`1e3`), "1e3"}, "bool": {Bool(false), "false"}, "decimal": {DecimalInt(-5, 3), "-0.005"},
		"date": {Date(19000), "2022-01-08"}, "time": {TimeOfDay(int64(want)), "12:34:56.789"},
		"timestamp": {Timestamp(ts), "2023-11-14T22:13:20Z"}, "escaped": {j(`"a\nb"`), "a\nb"}, "float32": {Float32(0.1), "0.1"},
	} {
		if got, err := c.v.AsText(); err != nil || got != c.want {
			t.Errorf("%s: AsText = %q, %v; want %q", name, got, err, c.want)
		}
	}
	if _, err := j(`{"a":1}`).AsText(); !errors.Is(err, ErrCoerce) || !strings.Contains(err.Error(), "got an object") {
		t.Errorf("object as text: %v", err)
	}
}

func TestAppendJSON(t *testing.T) {
	s := NewStruct("r", false,
		&Field{Name: "a", Schema: &Schema{Type: TypeInt32}},
		&Field{Name: "b", Schema: &Schema{Type: TypeBytes}},
		&Field{Name: "c", Schema: &Schema{Type: TypeMap, Key: &Schema{Type: TypeString}, Elem: &Schema{Type: TypeFloat64}}},
		&Field{Name: "d", Schema: &Schema{Type: TypeArray, Elem: &Schema{Type: TypeString, Optional: true}}},
		&Field{Name: "e", Schema: &Schema{Type: TypeMap, Key: &Schema{Type: TypeInt32}, Elem: &Schema{Type: TypeBoolean}}},
	)
	v := Struct(s, []Value{
		Int(7), Bytes([]byte{0, 1, 2}),
		Map(s.Fields[2].Schema, []Value{String("x"), Float64(math.NaN()), String("q\""), Float64(1.5)}),
		Array(s.Fields[3].Schema, []Value{String("é\u2028"), Null(nil)}),
		Map(s.Fields[4].Schema, []Value{Int(1), Bool(true)}),
	})
	got, err := v.AppendJSON(nil)
	want := `{"a":7,"b":"AAEC","c":{"x":"NaN","q\"":1.5},"d":["é\u2028",null],"e":[[1,true]]}`
	if err != nil || string(got) != want {
		t.Fatalf("AppendJSON = %s, %v\nwant %s", got, err, want)
	}
	if raw := []byte(` {"k": [1, "x"]} `); string(must(JSON(raw).JSONText())) != `{"k": [1, "x"]}` {
		t.Error("schemaless JSON not kept as written")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestRangeAndGet(t *testing.T) {
	v := JSON([]byte(`{"a":1,"b\u0021":{"c":[true]},"a":2}`))
	var names []string
	err := v.Range(func(name []byte, fv Value) error {
		names = append(names, string(name))
		return nil
	})
	if err != nil || strings.Join(names, ",") != "a,b!,a" {
		t.Fatalf("Range: %v %v", names, err)
	}
	if a, ok := v.Get("a"); !ok || must(a.JSONText()) == nil || string(must(a.JSONText())) != "2" {
		t.Errorf("Get(a) = %v %v, want the last member", a.GoString(), ok)
	}
	b, _ := v.Get("b!")
	c, _ := b.Get("c")
	if c.Len() != 1 {
		t.Errorf("nested array len %d", c.Len())
	}
	deep := strings.Repeat("[", 1200) + strings.Repeat("]", 1200)
	obj := JSON([]byte(`{"x":` + deep + `}`))
	n := 0
	if err := obj.Range(func([]byte, Value) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("deep object: %d %v", n, err)
	}
	if err := JSON([]byte(`[1]`)).Range(func([]byte, Value) error { return nil }); !errors.Is(err, ErrDecode) {
		t.Errorf("Range on an array: %v", err)
	}
}

func TestError(t *testing.T) {
	r := &kgo.Record{Topic: "t", Partition: 3, Offset: 9}
	e := NewError(r, FieldErrorf("qty", ErrCoerce, "%d is out of range", 5))
	if e.Field != "qty" || !errors.Is(e, ErrCoerce) || !IsBadRecord(e) {
		t.Fatalf("%+v", e)
	}
	if got := e.Error(); got != `bad record t[3]@9 field "qty": cannot convert value: 5 is out of range` {
		t.Errorf("Error() = %s", got)
	}
	if IsBadRecord(Errorf(ErrUnavailable, "registry down")) {
		t.Error("an unavailable registry counts as a bad record")
	}
}

// FuzzJSONValue: any valid JSON converts to every target without panics,
// failing only with ErrCoerce, and renders back to text that is valid JSON
// of the same value.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`1`, `-0`, `-123456789012345678`, `1234567890123456789`, `-9223372036854775808`, `-0.0e-0`, `"x"`, `"\u0000"`, `{"a":[1,{"b":null}]}`, `1e999999999`, `"2024-02-29T10:00:00Z"`, `true`, `"NaN"`, `"AAEC"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseJSON(b)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error does not wrap ErrDecode: %v", err)
			}
			return
		}
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrCoerce) && !errors.Is(err, ErrDecode) {
				t.Fatalf("%s: error %v", b, err)
			}
		}
		text, err := v.AsText()
		check(err)
		if shared, serr := v.AsTextShared(); shared != text || (serr == nil) != (err == nil) {
			t.Fatalf("%s: AsTextShared %q, %v; AsText %q, %v", b, shared, serr, text, err)
		}
		n, err := v.AsInt64()
		check(err)
		if v.Kind() == KindNumber {
			// The small-integer fast path agrees with the general parse.
			if want, werr := ParseInteger(string(TrimJSONSpace(b))); n != want || (err == nil) != (werr == nil) {
				t.Fatalf("%s: AsInt64 %d, %v; ParseInteger %d, %v", b, n, err, want, werr)
			}
		}
		_, err = v.AsUint64()
		check(err)
		_, err = v.AsFloat(32)
		check(err)
		_, err = v.AsDecimal()
		check(err)
		_, err = v.AsBool()
		check(err)
		_, err = v.AsTimestamp()
		check(err)
		_, err = v.AsDate()
		check(err)
		_, err = v.AsTimeOfDay()
		check(err)
		_, err = v.AsBytes()
		check(err)
		_, err = v.AsUUID()
		check(err)
		_ = v.Len()
	})
}

// TestAsTextShared: the shared text is AsText's, for every kind of
// value that holds its text as bytes and for those that do not.
func TestAsTextShared(t *testing.T) {
	d := Decimal(big.NewInt(-12345), 2)
	for _, v := range []Value{StringBytes([]byte("héllo")), StringBytes(nil), String("s"), JSON([]byte(`"a\"b"`)), JSON([]byte(`"plain"`)),
		JSON([]byte(`""`)), JSON([]byte(`-1.5e3`)), Int(-7), Uint(7), Bool(true), d, Float32(1.5), Date(19000), Bytes([]byte("x")), Null(nil)} {
		text, err := v.AsText()
		shared, serr := v.AsTextShared()
		if shared != text || (serr == nil) != (err == nil) {
			t.Errorf("%s: AsTextShared %q, %v; AsText %q, %v", v.GoString(), shared, serr, text, err)
		}
	}
}

func TestObject(t *testing.T) {
	o := Object([]string{"a", "b", "a"}, []Value{Int(1), String("x"), Int(3)})
	var names []string
	_ = o.Range(func(n []byte, _ Value) error { names = append(names, string(n)); return nil })
	if strings.Join(names, ",") != "a,b,a" || o.Len() != 3 {
		t.Fatalf("Range: %v", names)
	}
	if a, _ := o.Get("a"); must(a.JSONText()) == nil || string(must(a.JSONText())) != "3" {
		t.Errorf("Get(a) = %s, want the last", a.GoString())
	}
	if got := string(must(o.JSONText())); got != `{"a":1,"b":"x","a":3}` {
		t.Errorf("JSON %s", got)
	}
}

func TestScanned(t *testing.T) {
	v := JSON([]byte(`{"a":{"x":1,"y":[2],"x":3},"b":"s"}`))
	inner, _ := v.Get("a")
	s := inner.Scanned()
	if s.Kind() != KindStruct || s.Len() != 3 {
		t.Fatalf("Scanned: kind %s, len %d", s.Kind(), s.Len())
	}
	var got []string
	_ = s.Range(func(n []byte, fv Value) error {
		got = append(got, string(n)+"="+string(must(fv.JSONText())))
		return nil
	})
	if strings.Join(got, ",") != "x=1,y=[2],x=3" {
		t.Errorf("Range after Scanned: %v", got)
	}
	if x, _ := s.Get("x"); string(must(x.JSONText())) != "3" {
		t.Errorf("Get(x) = %s, want the last", x.GoString())
	}
	// Other values are returned as they are.
	if str := String("x").Scanned(); str.Kind() != KindString {
		t.Error("Scanned changed a string")
	}
	if o := Object([]string{"a"}, []Value{Int(1)}).Scanned(); o.Len() != 1 {
		t.Error("Scanned changed an Object")
	}
}

// TestMayHaveMember: the cheap check never says no for an object that has
// the member, escaped names included; it says no for one without it: from
// the text when the object was not scanned, from its members when it was
// (as the JSON converter hands objects on).
func TestMayHaveMember(t *testing.T) {
	for _, tc := range []struct {
		text              string
		wantText, wantSet bool
	}{
		{`{"id":1,"seq":2}`, false, false},
		{`{"op":"c","source":{}}`, true, true},
		{`{"\u006fp":"c"}`, true, true},                // escaped name: maybe
		{`{"x":{"op":"c"}}`, true, false},              // nested: only the text has it
		{`{"operation":"c","opx":1}`, false, false},    // prefixes are not the name
		{`{"note":"has \"op\" in text"}`, true, false}, // a backslash in the text
		{`{"note":"op"}`, true, false},                 // the value "op"
	} {
		for _, c := range []struct {
			v    Value
			want bool
		}{{JSON([]byte(tc.text)), tc.wantText}, {JSON([]byte(tc.text)).Scanned(), tc.wantSet}} {
			if got := c.v.MayHaveMember("op"); got != c.want {
				t.Errorf("%s (scanned: %v): MayHaveMember(op) = %v, want %v", tc.text, c.v.members() != nil, got, c.want)
			}
			if _, has := c.v.Get("op"); has && !c.v.MayHaveMember("op") {
				t.Errorf("%s: has op, but MayHaveMember says no", tc.text)
			}
		}
	}
	if !JSON([]byte(`[1]`)).MayHaveMember("op") {
		t.Error("a non-object must say maybe")
	}
}
