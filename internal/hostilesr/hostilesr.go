// Package hostilesr is a hostile Schema Registry for tests: an HTTP server
// on 127.0.0.1 whose answers the test chooses (oversized bodies streamed
// without buffering, redirects, bodies that trickle a byte at a time,
// answers that are no registry's), and which records what clients sent
// it (paths, Authorization headers) and how many bytes it wrote.
//
// It is used by the converters' unit tests and by the integration tests
// of a real "txsink serve" process.
package hostilesr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Answer writes one answer. It may stream for as long as the client reads.
type Answer func(w http.ResponseWriter, r *http.Request)

// Server is a hostile registry on 127.0.0.1.
type Server struct {
	// URL is http://127.0.0.1:port.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	answer   Answer
	requests []Request
	sent     atomic.Int64
}

// Request is what a client sent.
type Request struct {
	Method, Path  string
	Authorization string
	At            time.Time
}

// New starts a server answering with a; stop it with Close.
func New(a Answer) *Server {
	s := &Server{answer: a}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server and closes its connections.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Set changes the answer for the next requests.
func (s *Server) Set(a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = a
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// BytesSent returns how many body bytes the server's answers wrote (that
// the kernel accepted: a client that stops reading stops the count).
func (s *Server) BytesSent() int64 { return s.sent.Load() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), At: time.Now()})
	a := s.answer
	s.mu.Unlock()
	if a == nil {
		http.NotFound(w, r)
		return
	}
	a(&countingWriter{ResponseWriter: w, n: &s.sent}, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

const registryType = "application/vnd.schemaregistry.v1+json"

// Schema answers every GET …/schemas/ids/N with schema (an Avro schema
// text), as a registry would, and every other path with the registry's
// 404 error JSON.
func Schema(schema string) Answer {
	body, _ := json.Marshal(map[string]any{"schema": schema})
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/schemas/ids/") {
			RegistryError(http.StatusNotFound, 40401, "Subject not found")(w, r)
			return
		}
		w.Header().Set("Content-Type", registryType)
		_, _ = w.Write(body)
	}
}

// RegistryError answers with a registry's error JSON.
func RegistryError(status, code int, message string) Answer {
	body, _ := json.Marshal(map[string]any{"error_code": code, "message": message})
	return Raw(status, registryType, body)
}

// Raw answers with status, content type and body: HTML, binary, …
func Raw(status int, contentType string, body []byte) Answer {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// Oversized answers 200 with a registry answer of size bytes: a valid
// {"schema": "…"} whose schema text is padding, so that a client without
// a limit reads all of it. It is streamed from a small buffer (the test
// process never holds it) and stops when the client stops reading. With
// declare the Content-Length is sent; without, the body is chunked.
func Oversized(size int64, declare bool) Answer {
	const head, tail = `{"schema":"`, `"}`
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", registryType)
		if declare {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write([]byte(head)); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		left := size - int64(len(head)+len(tail))
		for left > 0 {
			n := min(left, int64(len(chunk)))
			if _, err := w.Write(chunk[:n]); err != nil {
				return
			}
			left -= n
		}
		_, _ = w.Write([]byte(tail))
	}
}

// Redirect answers with status (301, 302, 307, 308, …) and Location.
func Redirect(status int, location string) Answer {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", location)
		w.WriteHeader(status)
	}
}

// Drip answers 200 with body, one byte every interval, flushed, until the
// body ends or the client goes away.
func Drip(body []byte, every time.Duration) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", registryType)
		w.WriteHeader(http.StatusOK)
		t := time.NewTicker(every)
		defer t.Stop()
		for _, b := range body {
			if _, err := w.Write([]byte{b}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
	}
}

// ByPath answers requests whose path starts with a key of m with its
// answer, others with fallback (a 404 when nil).
func ByPath(m map[string]Answer, fallback Answer) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		for p, a := range m {
			if strings.HasPrefix(r.URL.Path, p) {
				a(w, r)
				return
			}
		}
		if fallback == nil {
			http.NotFound(w, r)
			return
		}
		fallback(w, r)
	}
}

// String describes the server for test messages.
func (s *Server) String() string { return fmt.Sprintf("hostile registry %s", s.URL) }
