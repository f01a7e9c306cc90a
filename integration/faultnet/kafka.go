package faultnet

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaWatcher frames a Kafka connection's requests (size, API key,
// version, correlation id, client id, and the body, decoded with kmsg to
// read a transactional id) and responses (size, correlation id). Once a
// request is armed, responses to earlier requests still pass; the response
// carrying the armed request's correlation id is lost.
type kafkaWatcher struct {
	cbuf   []byte
	broken bool

	// Server side: bytes still to forward of the current response, and
	// the start of the next one, held until its correlation id is known.
	rem    int
	held   []byte
	armedM message
}

func (w *kafkaWatcher) client(b []byte) []message {
	if w.broken {
		return nil
	}
	w.cbuf = append(w.cbuf, b...)
	var out []message
	for len(w.cbuf) >= 4 {
		n := int(int32(binary.BigEndian.Uint32(w.cbuf)))
		if n < 8 || n > 1<<30 {
			w.broken = true
			return out
		}
		if len(w.cbuf) < 4+n {
			break
		}
		if m, ok := parseKafkaRequest(w.cbuf[4 : 4+n]); ok {
			out = append(out, m)
		}
		w.cbuf = w.cbuf[4+n:]
		if len(w.cbuf) == 0 {
			w.cbuf = nil
		}
	}
	return out
}

// parseKafkaRequest reads a request's header and, for the transactional
// requests, its transactional id.
func parseKafkaRequest(frame []byte) (message, bool) {
	r := kbin.Reader{Src: frame}
	key, ver, corr := r.Int16(), r.Int16(), r.Int32()
	r.NullableString() // client id
	if !r.Ok() {
		return message{}, false
	}
	m := message{apiKey: key, corr: corr}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return m, true
	}
	req.SetVersion(ver)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	body := r.Src
	switch req := req.(type) {
	case *kmsg.EndTxnRequest:
		if req.ReadFrom(body) == nil {
			m.txnID = req.TransactionalID
		}
	case *kmsg.TxnOffsetCommitRequest:
		if req.ReadFrom(body) == nil {
			m.txnID = req.TransactionalID
		}
	case *kmsg.AddOffsetsToTxnRequest:
		if req.ReadFrom(body) == nil {
			m.txnID = req.TransactionalID
		}
	}
	return m, true
}

func (w *kafkaWatcher) arm(m message)   { w.armedM = m }
func (w *kafkaWatcher) target() message { return w.armedM }

func (w *kafkaWatcher) server(b []byte, armed bool) ([]byte, bool) {
	if w.broken {
		return b, false
	}
	var out []byte
	for len(b) > 0 {
		if w.rem > 0 {
			k := min(w.rem, len(b))
			out = append(out, b[:k]...)
			w.rem -= k
			b = b[k:]
			continue
		}
		// At a response boundary: hold bytes until size and correlation
		// id are known.
		need := 8 - len(w.held)
		k := min(need, len(b))
		w.held = append(w.held, b[:k]...)
		b = b[k:]
		if len(w.held) < 8 {
			break
		}
		size := int(int32(binary.BigEndian.Uint32(w.held)))
		corr := int32(binary.BigEndian.Uint32(w.held[4:]))
		if size < 4 {
			w.broken = true
			out = append(out, w.held...)
			w.held = nil
			return append(out, b...), false
		}
		if armed && corr == w.armedM.corr {
			return out, true
		}
		out = append(out, w.held...)
		w.held = nil
		w.rem = size - 4
	}
	return out, false
}
