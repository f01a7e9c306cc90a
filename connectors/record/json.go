package record

import (
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends v as JSON text: schemaless JSON as it was written;
// structs as objects in field order; maps with string keys as objects in
// their order, other maps as arrays of [key, value] pairs (as Kafka
// Connect's JsonConverter writes them); bytes as base64 strings; decimals
// as exact numbers; NaN and infinities as the strings "NaN", "Infinity",
// "-Infinity"; dates, times and timestamps as ISO 8601 strings; durations
// as ISO 8601 duration strings.
func (v Value) AppendJSON(dst []byte) ([]byte, error) {
	if v.flags&flagJSON != 0 {
		return append(dst, v.b...), nil
	}
	switch v.kind {
	case KindNull:
		return append(dst, "null"...), nil
	case KindBool:
		return strconv.AppendBool(dst, v.n != 0), nil
	case KindInt:
		return strconv.AppendInt(dst, int64(v.n), 10), nil
	case KindUint:
		return strconv.AppendUint(dst, v.n, 10), nil
	case KindFloat:
		s := formatFloat(v.float(), v.IsFloat32())
		if s == "NaN" || s == "Infinity" || s == "-Infinity" {
			return appendJSONString(dst, s), nil
		}
		return append(dst, s...), nil
	case KindNumber:
		return append(dst, v.b...), nil
	case KindDecimal:
		return append(dst, v.decimalText()...), nil
	case KindString:
		s, err := v.str()
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, s), nil
	case KindBytes:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.b)
		return append(dst, '"'), nil
	case KindDate, KindTime, KindDuration:
		s, _ := v.AsText()
		return appendJSONString(dst, s), nil
	case KindTimestamp:
		return appendJSONString(dst, v.timestamp().Format(time.RFC3339Nano)), nil
	case KindStruct:
		elems := v.elems()
		dst = append(dst, '{')
		for i := range elems {
			if i > 0 {
				dst = append(dst, ',')
			}
			if v.sch != nil {
				dst = appendJSONString(dst, v.sch.Fields[i].Name)
			} else {
				dst = appendJSONString(dst, v.x.names[i])
			}
			dst = append(dst, ':')
			var err error
			if dst, err = elems[i].AppendJSON(dst); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case KindArray:
		dst = append(dst, '[')
		for i, e := range v.elems() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = e.AppendJSON(dst); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case KindMap:
		kv := v.elems()
		stringKeys := true
		for i := 0; i < len(kv); i += 2 {
			if kv[i].kind != KindString {
				stringKeys = false
				break
			}
		}
		open, close := byte('{'), byte('}')
		if !stringKeys {
			open, close = '[', ']'
		}
		dst = append(dst, open)
		for i := 0; i+1 < len(kv); i += 2 {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if !stringKeys {
				dst = append(dst, '[')
			}
			if dst, err = kv[i].AppendJSON(dst); err != nil {
				return nil, err
			}
			if stringKeys {
				dst = append(dst, ':')
			} else {
				dst = append(dst, ',')
			}
			if dst, err = kv[i+1].AppendJSON(dst); err != nil {
				return nil, err
			}
			if !stringKeys {
				dst = append(dst, ']')
			}
		}
		return append(dst, close), nil
	}
	return nil, coerceErr("cannot render %s as JSON", v.Describe())
}

// JSONText returns v as JSON text (see AppendJSON).
func (v Value) JSONText() ([]byte, error) {
	if v.flags&flagJSON != 0 {
		return v.b, nil
	}
	return v.AppendJSON(nil)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaping as encoding/json
// does (without its HTML escaping); invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
