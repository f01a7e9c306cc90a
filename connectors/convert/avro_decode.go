package convert

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/txsink/txsink/connectors/record"
)

// The Avro binary decoder: it walks the program built from the writer
// schema and makes Values directly, without an intermediate Go value.
// Strings and bytes refer to the payload.

var (
	errAvroTruncated = record.Errorf(record.ErrDecode, "truncated Avro payload")
	errAvroVarint    = record.Errorf(record.ErrDecode, "invalid Avro varint")
)

// errOutOfDomain marks a value that a decoder refuses although its wire
// encoding is valid: a string that is not UTF-8, a time of day outside
// 00:00–24:00, an instant outside the range the sinks can store. Each is
// a bad record (it wraps record.ErrDecode), never a silent replacement.
var errOutOfDomain = errors.New("value outside its type's domain")

func outOfDomain(format string, args ...any) error {
	return record.Errorf(record.ErrDecode, "%w: "+format, append([]any{errOutOfDomain}, args...)...)
}

// maxZeroByteItems bounds the element count of arrays whose elements take
// no bytes on the wire (array<null>), which the input cannot bound.
const maxZeroByteItems = 4 << 10

type avroReader struct {
	b     []byte
	i     int
	arena *valueArena
}

// valueArena hands out the field slices of decoded records from chunks
// reused record after record: a converter's result is valid until its
// Buffer's next use (see Converter), so the next record may overwrite
// them. It keeps the allocations and the garbage of the schema'd paths as
// low as the lazy JSON path's. The zero value is ready; a nil arena
// allocates.
type valueArena struct {
	chunks [][]record.Value
	cur    int // chunk in use
	used   int // values handed out of chunks[cur]
}

const arenaChunk = 512

// reset makes every chunk reusable: the values of the previous record
// are no longer used.
func (a *valueArena) reset() {
	if a != nil {
		a.cur, a.used = 0, 0
	}
}

// alloc returns n values (their previous contents are overwritten by the
// caller).
func (a *valueArena) alloc(n int) []record.Value {
	if a == nil || n > arenaChunk/4 {
		return make([]record.Value, n)
	}
	for {
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]record.Value, arenaChunk))
		}
		if a.used+n <= arenaChunk {
			s := a.chunks[a.cur][a.used : a.used+n : a.used+n]
			a.used += n
			return s
		}
		a.cur, a.used = a.cur+1, 0
	}
}

func (r *avroReader) long() (int64, error) {
	var u uint64
	var shift uint
	for j := 0; j < 10; j++ {
		if r.i >= len(r.b) {
			return 0, errAvroTruncated
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
		shift += 7
	}
	return 0, errAvroVarint
}

func (r *avroReader) int() (int32, error) {
	n, err := r.long()
	if err != nil {
		return 0, err
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, record.Errorf(record.ErrDecode, "Avro int %d out of range", n)
	}
	return int32(n), nil
}

func (r *avroReader) next(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, errAvroTruncated
	}
	b := r.b[r.i : r.i+n : r.i+n]
	r.i += n
	return b, nil
}

func (r *avroReader) lenPrefixed() ([]byte, error) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, record.Errorf(record.ErrDecode, "negative Avro length %d", n)
	}
	if n > int64(len(r.b)-r.i) {
		return nil, errAvroTruncated
	}
	return r.next(int(n))
}

// blockCount reads the count of the next block of an array or map; a
// negative count is followed by the block's size in bytes, which is
// skipped. total is the number of items read so far.
func (r *avroReader) blockCount(minBytes int, total int) (int, error) {
	n, err := r.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, record.Errorf(record.ErrDecode, "invalid Avro block count")
		}
		n = -n
		if _, err := r.long(); err != nil {
			return 0, err
		}
	}
	rem := int64(len(r.b) - r.i)
	if minBytes > 0 && n > rem/int64(minBytes) {
		return 0, errAvroTruncated
	}
	if minBytes == 0 && n > int64(maxZeroByteItems-total) {
		return 0, record.Errorf(record.ErrDecode, "Avro array of more than %d empty items", maxZeroByteItems)
	}
	return int(n), nil
}

// inPath ties err to the field or element name, prefixing the path an
// inner error already names: "address.lines[2]".
func inPath(name string, err error) error {
	var fe *record.FieldError
	if errors.As(err, &fe) {
		sep := "."
		if len(fe.Field) > 0 && fe.Field[0] == '[' {
			sep = ""
		}
		return &record.FieldError{Field: name + sep + fe.Field, Err: fe.Err}
	}
	return &record.FieldError{Field: name, Err: err}
}

func (n *avroNode) decode(r *avroReader) (record.Value, error) {
	switch n.op {
	case avroNull:
		return record.Null(n.sch), nil
	case avroBoolean:
		b, err := r.next(1)
		if err != nil {
			return record.Value{}, err
		}
		if b[0] > 1 {
			// The specification allows 0 and 1 only.
			return record.Value{}, outOfDomain("invalid Avro boolean byte 0x%02x", b[0])
		}
		return record.Bool(b[0] == 1).WithSchema(n.sch), nil
	case avroInt:
		v, err := r.int()
		if err != nil {
			return record.Value{}, err
		}
		return n.integer(int64(v))
	case avroLong:
		v, err := r.long()
		if err != nil {
			return record.Value{}, err
		}
		return n.integer(v)
	case avroFloat:
		b, err := r.next(4)
		if err != nil {
			return record.Value{}, err
		}
		return record.Float32(math.Float32frombits(binary.LittleEndian.Uint32(b))).WithSchema(n.sch), nil
	case avroDouble:
		b, err := r.next(8)
		if err != nil {
			return record.Value{}, err
		}
		return record.Float64(math.Float64frombits(binary.LittleEndian.Uint64(b))).WithSchema(n.sch), nil
	case avroString:
		b, err := r.lenPrefixed()
		if err != nil {
			return record.Value{}, err
		}
		if !utf8.Valid(b) {
			return record.Value{}, outOfDomain("Avro string is not valid UTF-8")
		}
		return record.StringBytes(b).WithSchema(n.sch), nil
	case avroBytes:
		b, err := r.lenPrefixed()
		if err != nil {
			return record.Value{}, err
		}
		return n.bytes(b)
	case avroFixed:
		b, err := r.next(n.size)
		if err != nil {
			return record.Value{}, err
		}
		return n.bytes(b)
	case avroEnum:
		i, err := r.int()
		if err != nil {
			return record.Value{}, err
		}
		if i < 0 || int(i) >= len(n.symbols) {
			return record.Value{}, record.Errorf(record.ErrDecode, "Avro enum index %d out of range [0, %d)", i, len(n.symbols))
		}
		return n.symbols[i], nil
	case avroRecord:
		fields := r.arena.alloc(len(n.fields))
		for i, f := range n.fields {
			v, err := f.node.decode(r)
			if err != nil {
				return record.Value{}, inPath(f.name, err)
			}
			fields[i] = v
		}
		return record.Struct(n.sch, fields), nil
	case avroOptional:
		b, err := r.long()
		if err != nil {
			return record.Value{}, err
		}
		switch {
		case b == int64(n.nullIdx):
			return record.Null(n.sch), nil
		case b == int64(1-n.nullIdx):
			return n.elem.decode(r)
		}
		return record.Value{}, record.Errorf(record.ErrDecode, "Avro union branch %d out of range [0, 2)", b)
	case avroUnion:
		b, err := r.long()
		if err != nil {
			return record.Value{}, err
		}
		if b < 0 || b >= int64(len(n.branches)) {
			return record.Value{}, record.Errorf(record.ErrDecode, "Avro union branch %d out of range [0, %d)", b, len(n.branches))
		}
		br := n.branches[b]
		if br == nil {
			return record.Null(n.sch), nil
		}
		fields := make([]record.Value, len(n.sch.Fields))
		for i, f := range n.sch.Fields {
			if f.Schema == br.sch {
				v, err := br.decode(r)
				if err != nil {
					return record.Value{}, inPath(f.Name, err)
				}
				fields[i] = v
			} else {
				fields[i] = record.Null(f.Schema)
			}
		}
		return record.Struct(n.sch, fields), nil
	case avroArray:
		var elems []record.Value
		for {
			c, err := r.blockCount(n.elem.minBytes, len(elems))
			if err != nil {
				return record.Value{}, err
			}
			if c == 0 {
				return record.Array(n.sch, elems), nil
			}
			if elems == nil {
				elems = make([]record.Value, 0, c)
			}
			for range c {
				v, err := n.elem.decode(r)
				if err != nil {
					return record.Value{}, inPath("["+strconv.Itoa(len(elems))+"]", err)
				}
				elems = append(elems, v)
			}
		}
	case avroMap:
		return n.decodeMap(r)
	case avroMapEntries:
		var kv []record.Value
		k, v := n.fields[0].node, n.fields[1].node
		for {
			c, err := r.blockCount(k.minBytes+v.minBytes, len(kv)/2)
			if err != nil {
				return record.Value{}, err
			}
			if c == 0 {
				return record.Map(n.sch, kv), nil
			}
			for range c {
				key, err := k.decode(r)
				if err != nil {
					return record.Value{}, inPath("["+strconv.Itoa(len(kv)/2)+"].key", err)
				}
				val, err := v.decode(r)
				if err != nil {
					return record.Value{}, inPath("["+strconv.Itoa(len(kv)/2)+"].value", err)
				}
				kv = append(kv, key, val)
			}
		}
	}
	return record.Value{}, record.Errorf(record.ErrDecode, "unsupported Avro node")
}

// decodeMap reads an Avro map. Entries keep their order on the wire; a
// key written twice keeps its first position and its last value, as a
// Java or Go map would.
func (n *avroNode) decodeMap(r *avroReader) (record.Value, error) {
	var kv []record.Value
	var index map[string]int
	for {
		c, err := r.blockCount(1+n.elem.minBytes, len(kv)/2)
		if err != nil {
			return record.Value{}, err
		}
		if c == 0 {
			return record.Map(n.sch, kv), nil
		}
		if kv == nil {
			kv = make([]record.Value, 0, 2*c)
		}
		for range c {
			kb, err := r.lenPrefixed()
			if err != nil {
				return record.Value{}, err
			}
			if !utf8.Valid(kb) {
				return record.Value{}, outOfDomain("Avro map key is not valid UTF-8")
			}
			v, err := n.elem.decode(r)
			if err != nil {
				return record.Value{}, inPath(string(kb), err)
			}
			at := -1
			if index != nil {
				if i, ok := index[string(kb)]; ok {
					at = i
				}
			} else {
				for i := 0; i < len(kv); i += 2 {
					if s, _ := kv[i].AsString(); s == string(kb) {
						at = i
						break
					}
				}
			}
			if at >= 0 {
				kv[at+1] = v
				continue
			}
			if index == nil && len(kv) >= 32 {
				index = make(map[string]int, len(kv))
				for i := 0; i < len(kv); i += 2 {
					s, _ := kv[i].AsString()
					index[s] = i
				}
			}
			if index != nil {
				index[string(kb)] = len(kv)
			}
			kv = append(kv, record.StringBytes(kb).WithSchema(n.sch.Key), v)
		}
	}
}

// integer applies the node's logical conversion to an int or long.
func (n *avroNode) integer(v int64) (record.Value, error) {
	switch n.conv {
	case convNone:
		return record.Int(v).WithSchema(n.sch), nil
	case convDate:
		return record.Date(v).WithSchema(n.sch), nil
	case convTimeMillis, convTimeMicros, convTimeNanos:
		unit := map[avroConv]int64{convTimeMillis: 1e6, convTimeMicros: 1e3, convTimeNanos: 1}[n.conv]
		if v < 0 || v > int64(24*time.Hour)/unit {
			return record.Value{}, outOfDomain("time of day %d is outside 00:00-24:00", v)
		}
		return record.TimeOfDay(v * unit).WithSchema(n.sch), nil
	}
	var t time.Time
	switch n.conv {
	case convTimestampMillis, convLocalMillis:
		t = time.UnixMilli(v)
	case convTimestampMicros, convLocalMicros:
		t = time.UnixMicro(v)
	default:
		t = time.Unix(0, v)
	}
	t = t.UTC()
	if t.Before(record.MinTime) || t.After(record.MaxTime) {
		return record.Value{}, outOfDomain("timestamp %d is out of range", v)
	}
	if n.conv == convLocalMillis || n.conv == convLocalMicros || n.conv == convLocalNanos {
		return record.LocalTimestamp(t).WithSchema(n.sch), nil
	}
	return record.Timestamp(t).WithSchema(n.sch), nil
}

// bytes applies the node's logical conversion to bytes or a fixed.
func (n *avroNode) bytes(b []byte) (record.Value, error) {
	switch n.conv {
	case convDecimal:
		if len(b) <= 8 {
			var u uint64
			for _, c := range b {
				u = u<<8 | uint64(c)
			}
			if len(b) > 0 && len(b) < 8 && b[0]&0x80 != 0 {
				u |= math.MaxUint64 << (8 * uint(len(b)))
			}
			return record.DecimalInt(int64(u), n.scale).WithSchema(n.sch), nil
		}
		return record.Decimal(record.TwosComplement(b), n.scale).WithSchema(n.sch), nil
	case convUUIDFixed:
		var s [36]byte
		hex.Encode(s[0:8], b[0:4])
		s[8] = '-'
		hex.Encode(s[9:13], b[4:6])
		s[13] = '-'
		hex.Encode(s[14:18], b[6:8])
		s[18] = '-'
		hex.Encode(s[19:23], b[8:10])
		s[23] = '-'
		hex.Encode(s[24:], b[10:16])
		return record.String(string(s[:])).WithSchema(n.sch), nil
	}
	return record.Bytes(b).WithSchema(n.sch), nil
}
