// Package box boxes a row's text and bigint values into interfaces without
// an allocation per value, for the sinks' row paths.
package box

import "unsafe"

// Boxing a row's values without an allocation per value. A row is a
// []any (what pgx's COPY and statement parameters and clickhouse-go's
// batch Append take), and Go boxes a
// string or an int64 that escapes into an any by allocating a copy of it
// (integers below 256 excepted): two or three allocations per row of the
// main workload, most of what planning a row still allocated. Boxes
// writes the value into a slot of a chunk allocated for many values and
// makes an interface whose data word points to that slot, as the runtime
// itself does (convTstring points an interface at a new copy of the
// string; convT64 points a small integer into a static table). The
// result is an ordinary string or int64 interface: type switches, ==,
// reflect, pgx and clickhouse-go see no difference.
//
// Exactness: a slot is written once, before its interface is made, and
// never again (chunks are never reset or reused), so an interface's value
// cannot change under it; the chunk stays alive while any interface
// points into it (interior pointers keep an allocation alive), and the
// strings in it keep the bytes they refer to alive.
type Boxes struct {
	strs []string
	ints []int64
}

// boxChunk is the number of slots per chunk.
const boxChunk = 512

// eface is the layout of an empty interface: its type word and its data
// word (runtime.eface), which TestBoxes checks against the compiler's
// own boxing.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

var (
	stringType = typeWord("")
	int64Type  = typeWord(int64(0))
)

func typeWord(x any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&x)).typ }

// String returns s as an any.
func (b *Boxes) String(s string) any {
	if len(b.strs) == 0 {
		b.strs = make([]string, boxChunk)
	}
	p := &b.strs[0]
	*p = s
	b.strs = b.strs[1:]
	var x any
	*(*eface)(unsafe.Pointer(&x)) = eface{typ: stringType, data: unsafe.Pointer(p)}
	return x
}

// Int64 returns n as an any.
func (b *Boxes) Int64(n int64) any {
	if len(b.ints) == 0 {
		b.ints = make([]int64, boxChunk)
	}
	p := &b.ints[0]
	*p = n
	b.ints = b.ints[1:]
	var x any
	*(*eface)(unsafe.Pointer(&x)) = eface{typ: int64Type, data: unsafe.Pointer(p)}
	return x
}
