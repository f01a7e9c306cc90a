package box

import (
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"testing"
)

// TestBoxes: a value boxed by Boxes is the same interface value as the
// compiler's boxing of it (type word, ==, type switches, reflect), and
// stays so after many more values were boxed and the garbage collector
// ran. The sinks check their drivers' encodings of boxed values too.
func TestBoxes(t *testing.T) {
	if typeWord("") != typeWord("x") || typeWord(int64(1)) != typeWord(int64(1000)) || typeWord("") == typeWord(int64(0)) {
		t.Fatal("type words of the compiler's boxes are not what boxes uses")
	}
	var bx Boxes
	const n = 5 * boxChunk
	got := make([]any, 0, 2*n)
	want := make([]any, 0, 2*n)
	for i := range n {
		s := "v" + strconv.Itoa(i) // a new string each time
		got = append(got, bx.String(s), bx.Int64(int64(i)*1_000_003-7))
		want = append(want, any(s), any(int64(i)*1_000_003-7))
	}
	runtime.GC()
	runtime.GC()
	for i := range got {
		g, w := got[i], want[i]
		if g != w || !reflect.DeepEqual(g, w) || reflect.TypeOf(g) != reflect.TypeOf(w) || fmt.Sprint(g) != fmt.Sprint(w) {
			t.Fatalf("box %d: %#v, want %#v", i, g, w)
		}
		switch x := g.(type) {
		case string:
			if x != w.(string) {
				t.Fatalf("box %d: string %q, want %q", i, x, w)
			}
		case int64:
			if x != w.(int64) {
				t.Fatalf("box %d: int64 %d, want %d", i, x, w)
			}
		default:
			t.Fatalf("box %d: type %T", i, g)
		}
	}
}

// BenchmarkBoxes compares boxes with the compiler's boxing, for a
// string and an int64 per op.
func BenchmarkBoxes(b *testing.B) {
	strs := make([]string, 1024)
	for i := range strs {
		strs[i] = fmt.Sprintf("k%010d", i)
	}
	sink := make([]any, 2*len(strs))
	b.Run("compiler", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := i % len(strs)
			sink[2*j], sink[2*j+1] = any(strs[j]), any(int64(i)<<20)
		}
	})
	b.Run("boxes", func(b *testing.B) {
		var bx Boxes
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := i % len(strs)
			sink[2*j], sink[2*j+1] = bx.String(strs[j]), bx.Int64(int64(i)<<20)
		}
	})
}
