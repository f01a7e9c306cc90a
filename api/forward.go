package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/txsink/txsink/connectors/herder"
)

// Forwarding, as Kafka Connect's workers do it in distributed mode: a
// request that another worker must answer (a write, which the leader
// makes; a task restart, which the task's worker makes) fails in the
// herder with a *herder.ForwardError, and the API sends the same request
// there, with the query parameter forward=true on the first hop and
// forward=false on the second, and answers with that worker's response. A
// request that came with forward=false is not forwarded again: it gets
// 409, which means a rebalance moved the target meanwhile.

// msgHops is Connect's message when two hops did not reach the target.
const msgHops = "Cannot complete request because of a conflicting operation (e.g. worker rebalance)"

// forwardBodyLimit bounds a forwarded response body.
const forwardBodyLimit = 16 << 20

// syncer is a herder that can catch up with the cluster's configuration
// after a write another worker made (herder.Distributed).
type syncer interface {
	Sync(ctx context.Context) error
}

// forwardWriter is the ResponseWriter of a request that may be forwarded:
// it keeps the request and its body.
type forwardWriter struct {
	http.ResponseWriter
	r    *http.Request
	body []byte
}

// forwarding lets the requests under it be forwarded: it reads the body
// (bounded by limitBody before) so it can be sent again.
func (s *Server) forwarding(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is larger than %d bytes", mbe.Limit))
					return
				}
				writeError(w, http.StatusBadRequest, "Cannot read the request body")
				return
			}
			body = b
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		next.ServeHTTP(&forwardWriter{ResponseWriter: w, r: r, body: body}, r)
	})
}

// forward sends the request to the worker fe names and relays its answer.
func (s *Server) forward(fw *forwardWriter, fe *herder.ForwardError) {
	r := fw.r
	var next string
	switch r.URL.Query().Get("forward") {
	case "":
		next = "true"
	case "true":
		next = "false"
	default:
		s.log.Warn("request not forwarded: two hops did not reach its target (a rebalance moved it)", "method", r.Method, "path", r.URL.Path, "target", fe.Target)
		writeError(fw.ResponseWriter, http.StatusConflict, msgHops)
		return
	}
	base, err := url.Parse(fe.URL)
	if err != nil || base.Host == "" {
		writeError(fw.ResponseWriter, http.StatusInternalServerError, fmt.Sprintf("Cannot forward the request to %s: the worker's URL %q is not a URL", fe.Target, fe.URL))
		return
	}
	target := *base
	target.Path = strings.TrimSuffix(base.Path, "/") + r.URL.Path
	q := r.URL.Query()
	q.Set("forward", next)
	target.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(r.Context(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, target.String(), bytes.NewReader(fw.body))
	if err != nil {
		writeError(fw.ResponseWriter, http.StatusInternalServerError, "Cannot forward the request: "+err.Error())
		return
	}
	for _, h := range []string{"Content-Type", "Accept", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	s.log.Debug("forwarding request", "method", r.Method, "path", r.URL.Path, "to", fe.Target, "url", base.String())
	resp, err := s.forwardClient().Do(req)
	if err != nil {
		writeError(fw.ResponseWriter, http.StatusInternalServerError, fmt.Sprintf("IO Error trying to forward REST request to %s: %v", fe.Target, err))
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, forwardBodyLimit))
	if err != nil {
		writeError(fw.ResponseWriter, http.StatusInternalServerError, fmt.Sprintf("IO Error trying to forward REST request to %s: %v", fe.Target, err))
		return
	}
	if resp.StatusCode/100 == 2 && r.Method != http.MethodGet {
		// Read our own writes: the next GET on this worker sees the change.
		if sy, ok := s.h.(syncer); ok {
			sctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			if err := sy.Sync(sctx); err != nil {
				s.log.Warn("forwarded write done; this worker has not read it back yet", "err", err)
			}
			cancel()
		}
	}
	for _, h := range []string{"Content-Type", "Location", "WWW-Authenticate"} {
		if v := resp.Header.Get(h); v != "" {
			fw.Header().Set(h, v)
		}
	}
	fw.WriteHeader(resp.StatusCode)
	_, _ = fw.Write(b)
}

// forwardClient returns the client of forwarded requests.
func (s *Server) forwardClient() *http.Client {
	if s.opt.Forward != nil {
		return s.opt.Forward
	}
	return defaultForwardClient
}

var defaultForwardClient = &http.Client{Timeout: 90 * time.Second}
