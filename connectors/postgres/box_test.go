package postgres

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txsink/txsink/connectors/internal/box"
)

// TestBoxes: a value boxed by box.Boxes is the same interface value as
// the compiler's boxing of it for pgx too (its binary encoding, and the
// sink's keyString), after many more values were boxed and the garbage
// collector ran.
func TestBoxes(t *testing.T) {
	var bx box.Boxes
	const n = 5 * 512
	got := make([]any, 0, 2*n)
	want := make([]any, 0, 2*n)
	for i := range n {
		s := "v" + strconv.Itoa(i) // a new string each time
		got = append(got, bx.String(s), bx.Int64(int64(i)*1_000_003-7))
		want = append(want, any(s), any(int64(i)*1_000_003-7))
	}
	runtime.GC()
	runtime.GC()
	m := pgtype.NewMap()
	for i := range got {
		g, w := got[i], want[i] // the same interface values: box.TestBoxes
		oid := uint32(pgtype.TextOID)
		if _, ok := w.(int64); ok {
			oid = pgtype.Int8OID
		}
		gb, gerr := m.Encode(oid, pgtype.BinaryFormatCode, g, nil)
		wb, werr := m.Encode(oid, pgtype.BinaryFormatCode, w, nil)
		if gerr != nil || werr != nil || string(gb) != string(wb) {
			t.Fatalf("box %d: pgx encodes %x (%v), want %x (%v)", i, gb, gerr, wb, werr)
		}
	}
	if keyString(got[:4]) != keyString(want[:4]) {
		t.Fatalf("keyString %q, want %q", keyString(got[:4]), keyString(want[:4]))
	}
}
