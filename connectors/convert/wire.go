package convert

import (
	"encoding/binary"

	"github.com/txsink/txsink/connectors/record"
)

// Confluent's wire format, which the Avro, Protobuf and JSON Schema
// serializers of a Schema Registry write: a magic byte 0, the schema id as
// a 4-byte big-endian integer, then (Protobuf only) the message indexes,
// then the payload.
const (
	wireMagic     = 0
	wireHeaderLen = 5
	// maxMessageIndexes bounds the message-index array of a Protobuf
	// record: a path into nested message declarations, never deeper than
	// a schema nests them.
	maxMessageIndexes = 100
)

// wireHeader splits data into its schema id and the rest. A record that is
// not in the wire format is a bad record.
func wireHeader(data []byte) (id uint32, rest []byte, err error) {
	if len(data) < wireHeaderLen {
		return 0, nil, record.Errorf(record.ErrDecode, "%d bytes are too short for Confluent's wire format (magic byte 0 and a 4-byte schema id)", len(data))
	}
	if data[0] != wireMagic {
		return 0, nil, record.Errorf(record.ErrDecode, "wrong magic byte 0x%02x, want 0x00: not in Confluent's wire format (was it written by a Schema Registry serializer?)", data[0])
	}
	return binary.BigEndian.Uint32(data[1:5]), data[5:], nil
}

// messageIndexes reads the message-index array that follows a Protobuf
// record's schema id: a zig-zag varint count, then that many zig-zag
// varint indexes; a count of 0 is the shorthand for [0] (the first message
// of the file). dst is reused.
func messageIndexes(rest []byte, dst []int) ([]int, []byte, error) {
	n, w := binary.Varint(rest)
	if w <= 0 {
		return nil, nil, record.Errorf(record.ErrDecode, "truncated Protobuf message indexes")
	}
	rest = rest[w:]
	if n == 0 {
		return append(dst[:0], 0), rest, nil
	}
	if n < 0 || n > maxMessageIndexes {
		return nil, nil, record.Errorf(record.ErrDecode, "invalid Protobuf message index count %d", n)
	}
	if n > int64(len(rest)) {
		return nil, nil, record.Errorf(record.ErrDecode, "truncated Protobuf message indexes")
	}
	dst = dst[:0]
	for range n {
		i, w := binary.Varint(rest)
		if w <= 0 {
			return nil, nil, record.Errorf(record.ErrDecode, "truncated Protobuf message indexes")
		}
		if i < 0 || i > 1<<20 {
			return nil, nil, record.Errorf(record.ErrDecode, "invalid Protobuf message index %d", i)
		}
		dst = append(dst, int(i))
		rest = rest[w:]
	}
	return dst, rest, nil
}
