// Package api is txsink's REST API in the Kafka Connect dialect: the worker
// endpoints of Kafka Connect 3.9 (connectors, tasks, offsets, plugins,
// loggers, health) with their paths, verbs, JSON shapes and status codes,
// plus Prometheus metrics and an OpenAPI description.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/connectors/secrets"
)

// DefaultMaxBodyBytes bounds request bodies (HTTP 413 above it).
const DefaultMaxBodyBytes = 1 << 20

// Auth is the optional HTTP authentication. With both set, either works.
// GET /health is always open (load balancers and probes).
type Auth struct {
	BasicUser, BasicPassword string
	BearerToken              string
}

// Enabled reports whether any authentication is configured.
func (a Auth) Enabled() bool {
	return a.BasicUser != "" || a.BearerToken != ""
}

// Options configure the API.
type Options struct {
	// Herder is the worker's herder.
	Herder Herder
	// Levels, when set, backs /admin/loggers.
	Levels *Levels
	// Metrics serves GET /metrics (default: the default Prometheus
	// registry).
	Metrics http.Handler
	Log     *slog.Logger
	Auth    Auth
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Listen is the address the API listens on; its host is a Host name
	// the API answers to.
	Listen string
	// AllowedHosts are further Host names the API answers to
	// (rest.allowed.hosts): "name", "*.domain" or "*".
	AllowedHosts []string
	// AllowOrigin and AllowMethods are Kafka Connect's CORS settings
	// (access.control.allow.origin, access.control.allow.methods).
	AllowOrigin, AllowMethods string
	// RequireClientCert refuses requests without a verified client
	// certificate, except GET /health (mutual TLS; the listener verifies
	// a certificate when one is given).
	RequireClientCert bool
	// Version and Commit are shown by GET /.
	Version, Commit string
	// Forward is the client of requests forwarded to another worker
	// (distributed mode; default: plain HTTP with a 90 s timeout). It
	// carries the worker's TLS settings when the API is served over TLS.
	Forward *http.Client
	// UIHistory keeps what /ui draws over time (default: one that samples
	// only when the page is rendered; the worker runs one, see
	// UIHistory.Run).
	UIHistory *UIHistory
}

// Server holds the API's resources.
type Server struct {
	opt Options
	h   Herder
	log *slog.Logger
	// routes are the routed paths and their methods (for OPTIONS).
	routes routeTable
}

// New returns the API's router.
func New(opt Options) chi.Router {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opt.Metrics == nil {
		opt.Metrics = promhttp.Handler()
	}
	if opt.Levels == nil {
		opt.Levels = NewLevels(slog.LevelInfo)
	}
	if opt.UIHistory == nil {
		opt.UIHistory = NewUIHistory(opt.Herder, 0, 0, opt.Log)
	}
	s := &Server{opt: opt, h: opt.Herder, log: opt.Log}
	return s.Routes()
}

// Routes mounts every resource.
func (s *Server) Routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.recoverer, s.logRequests, s.checkHost, s.cors, s.requireClientCert, s.limitBody, s.authenticate, requireJSON, stripSlash,
		head, s.options)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "HTTP 404 Not Found")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "HTTP 405 Method Not Allowed")
	})
	r.Get("/", s.root)
	r.Get("/health", s.health)
	r.Method(http.MethodGet, "/metrics", s.opt.Metrics)
	r.Get("/openapi.json", serveOpenAPI)
	r.Get("/ui", s.ui)
	r.Mount("/connectors", connectorsResource{s}.Routes())
	r.Mount("/connector-plugins", pluginsResource{s}.Routes())
	r.Mount("/admin/loggers", loggersResource{s.opt.Levels}.Routes())
	s.routes = newRouteTable(r)
	return r
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, serverInfo{Version: s.opt.Version, Commit: s.opt.Commit, KafkaClusterID: s.h.ClusterID(ctx)})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ready, err := s.h.Ready(r.Context())
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "unhealthy", Message: err.Error()})
	case !ready:
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "starting", Message: "Worker is still starting up (or shutting down)."})
	default:
		body := healthBody{Status: "healthy", Message: "Worker has completed startup and is ready to handle requests."}
		var waiting []engine.TaskWaiting
		if wl, ok := s.h.(waitingLister); ok {
			waiting = wl.Waiting()
		}
		tasks := map[string]bool{}
		for _, tw := range waiting {
			tasks[fmt.Sprintf("%s/%d", tw.Connector, tw.Task)] = true
		}
		if n := len(tasks); n > 0 {
			// Still 200: the worker is up and its tasks retry by
			// themselves; restarting it would not bring a dependency back.
			body.Message = fmt.Sprintf("Worker has completed startup and is ready to handle requests; %d task(s) waiting for a dependency (see the connectors' status).", n)
		}
		// /health is open to anyone: with authentication configured it
		// names no connector. The errors are in the task statuses only.
		if !s.opt.Auth.Enabled() && !s.opt.RequireClientCert {
			for _, tw := range waiting {
				body.Waiting = append(body.Waiting, healthWaiting{Connector: tw.Connector, Task: tw.Task, Cause: string(tw.Cause), Since: tw.Since})
			}
		}
		writeJSON(w, http.StatusOK, body)
	}
}

// waitingLister is implemented by herders that list the waiting causes
// of their tasks without I/O (herder.Standalone, herder.Distributed).
type waitingLister interface {
	Waiting() []engine.TaskWaiting
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error_code":500,"message":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// writeError writes Connect's error body.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{ErrorCode: code, Message: msg})
}

// writeErr maps a worker error to its status code and writes it; secrets
// are removed from the message.
func (s *Server) writeErr(w http.ResponseWriter, err error, secs []string) {
	code := http.StatusInternalServerError
	msg := err.Error()
	var ferrs config.Errors
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		code, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is larger than %d bytes", mbe.Limit)
	case errors.As(err, &ferrs):
		code, msg = http.StatusBadRequest, invalidConfigMessage(ferrs)
	case errors.Is(err, herder.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, herder.ErrExists), errors.Is(err, herder.ErrConflict), errors.Is(err, herder.ErrSecretDropped), errors.Is(err, herder.ErrRebalance):
		code = http.StatusConflict
	case errors.Is(err, herder.ErrForward):
		code, msg = http.StatusConflict, msgHops
	case errors.Is(err, herder.ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, herder.ErrClosed):
		code = http.StatusServiceUnavailable
	}
	msg = secrets.ScrubString(msg, secs)
	if code == http.StatusInternalServerError {
		s.log.Error("request failed", "err", msg)
	}
	writeError(w, code, msg)
}

// invalidConfigMessage is Connect's message for an invalid configuration.
func invalidConfigMessage(errs config.Errors) string {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return fmt.Sprintf("Connector configuration is invalid and contains the following %d error(s):\n%s\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`", len(errs), strings.Join(lines, "\n"))
}

// badRequest is an error answered with 400 and its message.
func badRequest(format string, args ...any) error {
	return &apiError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// decode reads a JSON body into v. Errors are 400 (malformed) or 413 (too
// large).
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("Request body is larger than %d bytes", mbe.Limit)}
		}
		return badRequest("Cannot read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return badRequest("Request body is empty; a JSON object is required")
	}
	if err := json.Unmarshal(b, v); err != nil {
		var ae *apiError
		if errors.As(err, &ae) { // a setting's value (settings)
			return ae
		}
		return badRequest("Request body is not valid JSON for this endpoint: %s", jsonErrorText(err))
	}
	return nil
}

// jsonErrorText describes a JSON error without echoing values from the
// body (which may hold secrets).
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must not be a JSON %s", te.Field, te.Value)
		}
		return fmt.Sprintf("a JSON %s is not allowed here", te.Value)
	}
	return "malformed JSON"
}

// handleErr writes an apiError or a worker error; a request that another
// worker must answer is forwarded there (see forward).
func (s *Server) handleErr(w http.ResponseWriter, err error, secs []string) {
	var fe *herder.ForwardError
	if fw, ok := w.(*forwardWriter); ok && errors.As(err, &fe) {
		s.forward(fw, fe)
		return
	}
	secs = append(secs, s.h.Secrets()...)
	var ae *apiError
	if errors.As(err, &ae) {
		writeError(w, ae.code, secrets.ScrubString(ae.msg, secs))
		return
	}
	s.writeErr(w, err, secs)
}

// Middleware.

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, http.StatusInternalServerError, "Internal server error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// logRequests logs method, path (no query, no body), status and duration.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		lvl := slog.LevelDebug
		if rec.code >= 500 {
			lvl = slog.LevelWarn
		}
		s.log.Log(r.Context(), lvl, "http request", "method", r.Method, "path", r.URL.Path, "status", rec.code, "duration", time.Since(start).Round(time.Microsecond))
	})
}

// limitBody bounds every request body.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opt.MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is larger than %d bytes", s.opt.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// authenticate enforces basic or bearer authentication when configured.
func (s *Server) authenticate(next http.Handler) http.Handler {
	a := s.opt.Auth
	if !a.Enabled() {
		return next
	}
	eq := func(got, want string) bool {
		// Compare hashes so the comparison time does not depend on length.
		g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		return subtle.ConstantTimeCompare(g[:], w[:]) == 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealth(r) {
			next.ServeHTTP(w, r)
			return
		}
		ok := false
		if a.BasicUser != "" {
			if u, p, has := r.BasicAuth(); has && eq(u, a.BasicUser) && eq(p, a.BasicPassword) {
				ok = true
			}
		}
		if a.BearerToken != "" {
			if tok, has := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); has && eq(tok, a.BearerToken) {
				ok = true
			}
		}
		if !ok {
			if a.BasicUser != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="txsink"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="txsink"`)
			}
			writeError(w, http.StatusUnauthorized, "Authentication required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// stripSlash routes "/connectors/" like "/connectors", as Connect does.
func stripSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			rctx := chi.RouteContext(r.Context())
			if rctx != nil {
				rctx.RoutePath = strings.TrimRight(p, "/")
				if rctx.RoutePath == "" {
					rctx.RoutePath = "/"
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
