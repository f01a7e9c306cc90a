package faultnet

import (
	"bytes"
	"encoding/binary"
)

// PostgreSQL protocol codes of the untyped start-up messages.
const (
	pgProtocol3 = 196608 // StartupMessage, protocol 3.0
	pgSSL       = 80877103
	pgGSSENC    = 80877104
	pgCancel    = 80877102
)

// pgWatcher frames the frontend messages of a PostgreSQL connection and
// reports each statement it executes: a simple Query ('Q'), or an Execute
// ('E') of a portal bound ('B') to a parsed ('P') statement. A reply is
// lost from the first byte the server sends after the armed statement:
// the server answers a statement only once it ran it.
type pgWatcher struct {
	buf     []byte
	startup bool // untyped start-up messages still to come
	broken  bool // unparseable (TLS): pass everything
	stmts   map[string]string
	portals map[string]string
	armedM  message
}

func (w *pgWatcher) client(b []byte) []message {
	if w.broken {
		return nil
	}
	w.buf = append(w.buf, b...)
	var out []message
	for {
		if w.startup {
			if len(w.buf) < 8 {
				return out
			}
			n := int(binary.BigEndian.Uint32(w.buf))
			if n < 8 || n > 1<<20 {
				w.broken = true
				return out
			}
			if len(w.buf) < n {
				return out
			}
			switch binary.BigEndian.Uint32(w.buf[4:]) {
			case pgProtocol3:
				w.startup = false
			case pgSSL, pgGSSENC:
				// The server answers one byte; TLS or GSS would follow,
				// which tests do not use through a proxy: if the next
				// message does not parse, the watcher gives up.
			case pgCancel:
			default:
				w.broken = true
				return out
			}
			w.buf = w.buf[n:]
			continue
		}
		if len(w.buf) < 5 {
			return out
		}
		typ := w.buf[0]
		n := int(binary.BigEndian.Uint32(w.buf[1:]))
		if n < 4 || n > 1<<30 {
			w.broken = true
			return out
		}
		if len(w.buf) < 1+n {
			return out
		}
		body := w.buf[5 : 1+n]
		switch typ {
		case 'Q':
			out = append(out, message{text: cstring(body)})
		case 'P':
			name := cstring(body)
			w.stmts[name] = cstring(body[min(len(name)+1, len(body)):])
		case 'B':
			portal := cstring(body)
			w.portals[portal] = w.stmts[cstring(body[min(len(portal)+1, len(body)):])]
		case 'E':
			out = append(out, message{text: w.portals[cstring(body)]})
		}
		w.buf = w.buf[1+n:]
		if len(w.buf) == 0 {
			w.buf = nil // let the array go
		}
	}
}

func (w *pgWatcher) arm(m message)   { w.armedM = m }
func (w *pgWatcher) target() message { return w.armedM }

func (w *pgWatcher) server(b []byte, armed bool) ([]byte, bool) {
	if armed {
		return nil, true
	}
	return b, false
}

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
