// Package jsonscan splits a JSON object into its members without building
// a map: the hot path of both sinks, which read a record value's fields by
// column. It validates the text as strictly as encoding/json does, so a
// caller can fall back to encoding/json for the error message whenever a
// scan fails, and get the same verdict on every input.
package jsonscan

import "encoding/json"

// MaxDepth is the deepest nesting Object accepts; deeper text is reported
// as not scanned (encoding/json's own limit is 10000).
const MaxDepth = 1000

// Member is one member of an object: slices of the scanned text.
type Member struct {
	// Key is the text between the key's quotes, escapes not decoded.
	Key []byte
	// Value is the member's value as raw JSON, without surrounding
	// whitespace (as encoding/json fills a json.RawMessage).
	Value []byte
	// Escaped reports that Key holds a backslash escape, so Key is not the
	// key's decoded name.
	Escaped bool
}

// Object scans b, which must be exactly one JSON object with optional
// whitespace around it, and appends its members in text order to dst
// (duplicates included: with encoding/json's map semantics the last one
// wins). ok is false when b is anything else: invalid JSON, another JSON
// value, trailing text, or nesting deeper than MaxDepth. Bytes of 0x80 and
// above are not checked for UTF-8 validity; encoding/json accepts them too.
func Object(b []byte, dst []Member) (members []Member, ok bool) {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' {
		return dst, false
	}
	ok = s.object(1, &dst)
	return dst, ok && s.end()
}

// Valid reports whether b is exactly one JSON value (with optional
// whitespace around it) nested no deeper than MaxDepth.
func Valid(b []byte) bool {
	s := scanner{b: b}
	s.ws()
	if !s.value(0) {
		return false
	}
	return s.end()
}

type scanner struct {
	b []byte
	i int
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value starting at s.i; depth counts the enclosing
// containers.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(depth+1, nil)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

func (s *scanner) lit(want string) bool {
	if len(s.b)-s.i < len(want) || string(s.b[s.i:s.i+len(want)]) != want {
		return false
	}
	s.i += len(want)
	return true
}

// str scans a string whose opening quote is at s.i, leaving s.i after the
// closing quote; esc reports a backslash escape inside.
func (s *scanner) str() (esc, ok bool) {
	b := s.b
	i := s.i + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return esc, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return esc, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return esc, false
					}
				}
				i += 6
			default:
				return esc, false
			}
		case c < 0x20:
			return esc, false
		default:
			i++
		}
	}
	return esc, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b := s.b
	i := s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		d := skipDigits(b, i+1)
		if d == i+1 {
			return false
		}
		i = d
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := skipDigits(b, i)
		if d == i {
			return false
		}
		i = d
	}
	s.i = i
	return true
}

// skipDigits returns the index after the run of ASCII digits at b[i:].
func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// object scans an object whose '{' is at s.i, at nesting depth depth;
// with a non-nil dst it appends the object's members to *dst.
func (s *scanner) object(depth int, dst *[]Member) bool {
	if depth > MaxDepth {
		return false
	}
	if s.open('}') {
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		start := s.i + 1
		esc, ok := s.str()
		if !ok {
			return false
		}
		key := s.b[start : s.i-1]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		vstart := s.i
		if !s.value(depth) {
			return false
		}
		if dst != nil {
			*dst = append(*dst, Member{Key: key, Value: s.b[vstart:s.i], Escaped: esc})
		}
		if more, ok := s.sep('}'); !more {
			return ok
		}
	}
}

func (s *scanner) array(depth int) bool {
	if depth > MaxDepth {
		return false
	}
	if s.open(']') {
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		if more, ok := s.sep(']'); !more {
			return ok
		}
	}
}

// open steps over a container's opening bracket at s.i and the whitespace
// after it, and reports whether the container is empty (closed at once).
func (s *scanner) open(close byte) (empty bool) {
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == close {
		s.i++
		return true
	}
	return false
}

// sep scans what follows a member or element: a comma (more follows) or
// the container's close; anything else is not JSON.
func (s *scanner) sep(close byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.ws()
		return true, true
	case close:
		s.i++
		return false, true
	}
	return false, false
}

// Fields scans b like Object and returns its members as a map, the last
// of duplicate keys winning, as encoding/json.Unmarshal into a
// map[string]json.RawMessage does; the values alias b. ok is false where
// Object's is, and when a key holds an escape: callers then use
// encoding/json, which decides and decodes those.
func Fields(b []byte) (fields map[string]json.RawMessage, ok bool) {
	var buf [16]Member
	members, ok := Object(b, buf[:0])
	if !ok {
		return nil, false
	}
	fields = make(map[string]json.RawMessage, len(members))
	for _, m := range members {
		if m.Escaped {
			return nil, false
		}
		fields[string(m.Key)] = m.Value
	}
	return fields, true
}

// Array scans b, which must be exactly one JSON array with optional
// whitespace around it, and appends its elements (raw JSON, without
// surrounding whitespace) in order to dst. ok is false when b is anything
// else or nests deeper than MaxDepth.
func Array(b []byte, dst [][]byte) (elems [][]byte, ok bool) {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '[' {
		return dst, false
	}
	if s.open(']') {
		return dst, s.end()
	}
	for {
		start := s.i
		if !s.value(1) {
			return dst, false
		}
		dst = append(dst, b[start:s.i])
		more, ok := s.sep(']')
		if !more {
			return dst, ok && s.end()
		}
	}
}
