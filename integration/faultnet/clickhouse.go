package faultnet

import (
	"bytes"
)

// ClickHouse native protocol: server packet codes this watcher reads.
const (
	chServerException   = 2
	chServerEndOfStream = 5
)

// chWatcher finds INSERT queries in the bytes a ClickHouse client sends
// (the query text travels uncompressed in the Query packet) without
// framing the protocol, which would mean decoding data blocks. An insert
// runs as: the client sends the query; the server answers with the
// table's header; the client sends the data blocks and an empty block;
// the server inserts and answers (progress, profile events, end of
// stream). So, once an insert is armed, the server's bytes pass until the
// client speaks again (the data), and everything the server sends after
// that is the insert's answer: it is lost, and the connection is cut when
// the answer ends with EndOfStream (the insert is done) or starts with an
// exception.
type chWatcher struct {
	window []byte // lowercased tail of the client's bytes
	base   int64  // stream offset of window[0]
	next   int64  // offsets before this were already searched

	armedM      message
	armed       bool
	serverSpoke bool // the header came back after the armed query
	dataSent    bool // the client sent its blocks after the header
}

var chInsert = []byte("insert into ")

func (w *chWatcher) client(b []byte) []message {
	if w.armed && w.serverSpoke {
		w.dataSent = true
	}
	low := bytes.ToLower(b)
	w.window = append(w.window, low...)
	var out []message
	for {
		from := int(w.next - w.base)
		i := bytes.Index(w.window[from:], chInsert)
		if i < 0 {
			break
		}
		at := from + i
		end := min(len(w.window), at+300)
		text := w.window[at:end]
		if z := bytes.IndexByte(text, 0); z >= 0 {
			text = text[:z]
		}
		out = append(out, message{text: string(text)})
		w.next = w.base + int64(at+len(chInsert))
	}
	// Keep a tail long enough to find a match split across reads.
	if keep := 512; len(w.window) > keep {
		drop := len(w.window) - keep
		w.window = append([]byte(nil), w.window[drop:]...)
		w.base += int64(drop)
		w.next = max(w.next, w.base)
	}
	return out
}

func (w *chWatcher) arm(m message) {
	w.armedM, w.armed = m, true
}

func (w *chWatcher) target() message { return w.armedM }

func (w *chWatcher) server(b []byte, armed bool) ([]byte, bool) {
	if !armed {
		return b, false
	}
	if !w.dataSent {
		w.serverSpoke = true
		return b, false
	}
	// The insert's answer.
	if len(b) > 0 && (b[len(b)-1] == chServerEndOfStream || b[0] == chServerException) {
		return nil, true
	}
	return nil, false
}
