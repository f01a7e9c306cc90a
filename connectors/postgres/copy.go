package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The binary COPY stream's fixed parts: the signature, the flags and the
// header extension length (both 0), and the trailer (a field count of -1).
var (
	copyHeader  = []byte("PGCOPY\n\377\r\n\000\000\000\000\000\000\000\000\000")
	copyTrailer = []byte{0xff, 0xff}
)

// copyChunk is how much of the stream is encoded ahead of the
// connection's reads: about one CopyData message (pgconn reads 64 KiB at
// a time).
const copyChunk = 64<<10 - 5

// copyOps writes ops (all with columns cols) into t with one binary COPY,
// as pgx.Conn.CopyFrom would, but the encode plan of each column is
// looked up once per Go type of its values instead of once per value, and
// the rows are encoded as the connection reads them (no pipe and no
// goroutine of its own). The per-value lookup (two map reads keyed by the
// value's type, and a reflect of it) was about 8 % of a drain's CPU.
//
// The column types must be what the server describes the columns with:
// a table with a domain column (described by its base type) goes through
// pgx.Conn.CopyFrom instead, which asks the server.
func copyOps(ctx context.Context, tx pgx.Tx, t *table, cols []*column, ops []*op) error {
	var sql strings.Builder
	sql.WriteString("COPY ")
	sql.WriteString(pgx.Identifier{t.Schema, t.Name}.Sanitize())
	sql.WriteString(" (")
	r := &copyRows{m: tx.Conn().TypeMap(), cols: make([]copyCol, len(cols)), ops: ops, buf: append(make([]byte, 0, copyChunk+1024), copyHeader...)}
	for i, c := range cols {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString(pgx.Identifier{c.Name}.Sanitize())
		r.cols[i] = copyCol{c: c}
	}
	sql.WriteString(") FROM STDIN BINARY")
	_, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql.String())
	return err
}

// copyDescribed reports whether cols' types are the ones the server
// describes them with, which copyOps needs: none is a domain.
func copyDescribed(cols []*column) bool {
	for _, c := range cols {
		if c.Type.Domain {
			return false
		}
	}
	return true
}

// copyRows is the binary COPY stream of ops' values, an io.Reader that
// encodes rows as it is read.
type copyRows struct {
	m    *pgtype.Map
	cols []copyCol
	ops  []*op
	next int    // the next op to encode
	buf  []byte // encoded and not all read yet
	off  int    // read up to here
	done bool   // the trailer is in buf
}

// copyCol is a column of the stream and the plan that encodes the values
// of one Go type into it (the type of the last value that was not nil).
type copyCol struct {
	c    *column
	typ  reflect.Type
	plan pgtype.EncodePlan
}

func (r *copyRows) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// fill encodes rows into buf until it holds a chunk, then the trailer
// after the last row.
func (r *copyRows) fill() error {
	for r.next < len(r.ops) && len(r.buf) < copyChunk {
		o := r.ops[r.next]
		if len(o.vals) != len(r.cols) {
			return fmt.Errorf("record %s: %d values for %d columns", recordRef(o), len(o.vals), len(r.cols))
		}
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(len(r.cols)))
		for i, v := range o.vals {
			var err error
			if r.buf, err = r.cols[i].encode(r.m, r.buf, v); err != nil {
				return fmt.Errorf("record %s: column %q: %w", recordRef(o), r.cols[i].c.Name, err)
			}
		}
		r.next++
	}
	if r.next == len(r.ops) {
		r.buf = append(r.buf, copyTrailer...)
		r.done = true
	}
	return nil
}

// recordRef names o's record for an error.
func recordRef(o *op) string {
	if o.rec == nil {
		return "?"
	}
	return fmt.Sprintf("%s[%d]@%d", o.rec.Topic, o.rec.Partition, o.rec.Offset)
}

// encode appends v as one field: its length (-1: NULL) and its binary
// value, as pgx encodes a COPY value, with the plan of v's type kept from
// the value before when the types match.
func (cc *copyCol) encode(m *pgtype.Map, buf []byte, v any) ([]byte, error) {
	at := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // -1 until a value is written
	if v == nil {
		return buf, nil
	}
	oid := cc.c.Type.OID
	var out []byte
	var err error
	switch t := reflect.TypeOf(v); {
	case t == cc.typ:
		out, err = cc.plan.Encode(v, buf)
	case mayBeNil(t):
		// A nil pointer, slice or map is NULL, or what its driver.Valuer
		// says: pgtype.Map.Encode sorts that out, per value.
		out, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf)
	default:
		if plan := m.PlanEncode(oid, pgtype.BinaryFormatCode, v); plan != nil {
			cc.typ, cc.plan = t, plan
			out, err = plan.Encode(v, buf)
		} else {
			out, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf) // the error naming it
		}
	}
	if err != nil {
		// What pgx does next: the value's text, parsed as the column's
		// type, encoded from that.
		var ferr error
		if out, ferr = encodeViaText(m, buf, oid, v); ferr != nil {
			return nil, err
		}
	}
	if out == nil {
		return buf, nil // NULL
	}
	binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
	return out, nil
}

// mayBeNil reports whether a value of type t can be a nil that is not an
// untyped nil.
func mayBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Map, reflect.Pointer, reflect.UnsafePointer, reflect.Interface, reflect.Slice:
		return true
	}
	return false
}

// encodeViaText encodes v into the type oid by way of its text: a string
// as it is, anything else as the text pgx makes of it, scanned as the
// type (an array keeps its dimensions) and encoded from what that gives.
// pgx.Conn.CopyFrom falls back to the same when a value has no binary
// encoding into the column's type (a string into an enum or inet column).
func encodeViaText(m *pgtype.Map, buf []byte, oid uint32, v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		text, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
		if err != nil {
			return nil, errors.New("not a string and cannot be encoded as text")
		}
		s = string(text)
	}
	if typ, ok := m.TypeForOID(oid); ok {
		if _, ok := typ.Codec.(*pgtype.ArrayCodec); ok {
			var arr pgtype.Array[any]
			if err := m.Scan(oid, pgtype.TextFormatCode, []byte(s), &arr); err == nil {
				return m.Encode(oid, pgtype.BinaryFormatCode, arr, buf)
			}
		}
	}
	var x any
	if err := m.Scan(oid, pgtype.TextFormatCode, []byte(s), &x); err != nil {
		return nil, err
	}
	return m.Encode(oid, pgtype.BinaryFormatCode, x, buf)
}
