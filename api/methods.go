package api

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// HEAD and OPTIONS as Kafka Connect's Jersey answers them: HEAD is GET
// without the body (same status and headers); OPTIONS lists a path's
// methods.

// routeTable maps each routed path pattern ("/connectors/{name}/config")
// to its methods.
type routeTable map[string][]string

// newRouteTable walks r's routes, mounted ones included.
func newRouteTable(r chi.Routes) routeTable {
	t := routeTable{}
	_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.ReplaceAll(route, "/*/", "/")
		if len(route) > 1 {
			route = strings.TrimRight(route, "/")
		}
		t[route] = append(t[route], method)
		return nil
	})
	return t
}

// methodOrder is the order in which OPTIONS lists methods.
var methodOrder = []string{http.MethodHead, http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed returns the methods of the routes that match path, HEAD
// wherever GET is and OPTIONS last; nil when no route matches.
func (t routeTable) allowed(path string) []string {
	if len(path) > 1 {
		path = strings.TrimRight(path, "/")
	}
	has := map[string]bool{}
	for pattern, methods := range t {
		if matchPattern(pattern, path) {
			for _, m := range methods {
				has[m] = true
			}
		}
	}
	if len(has) == 0 {
		return nil
	}
	has[http.MethodHead] = has[http.MethodGet]
	var out []string
	for _, m := range methodOrder {
		if has[m] {
			out = append(out, m)
		}
	}
	return append(out, http.MethodOptions)
}

// matchPattern matches a path against a chi pattern segment by segment;
// a {param} segment matches any one non-empty segment.
func matchPattern(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if p != xs[i] {
			return false
		}
	}
	return true
}

// options answers OPTIONS: 200 with the path's methods in Allow and, as
// Jersey does, the same list as a text/plain body, or an empty
// application/json body for a client that accepts only JSON; 404 for a
// path that does not exist. CORS preflights of allowed origins are
// answered before (cors).
func (s *Server) options(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		allowed := s.routes.allowed(r.URL.Path)
		if allowed == nil {
			writeError(w, http.StatusNotFound, "HTTP 404 Not Found")
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ","))
		accept := r.Header.Get("Accept")
		if strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/plain") && !strings.Contains(accept, "*/*") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, strings.Join(allowed, ", "))
	})
}

// head serves HEAD as GET and drops the body, keeping the status and the
// headers GET would send, Content-Length included. A path without GET
// answers 405, as Connect does.
func head(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		get := r.Clone(r.Context())
		get.Method = http.MethodGet
		hw := &headWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(hw, get)
		if w.Header().Get("Content-Length") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(hw.n))
		}
		w.WriteHeader(hw.code)
	})
}

// headWriter counts the body instead of sending it and holds the status
// until the handler is done.
type headWriter struct {
	http.ResponseWriter
	code int
	n    int
}

func (h *headWriter) WriteHeader(code int) { h.code = code }

func (h *headWriter) Write(b []byte) (int, error) {
	h.n += len(b)
	return len(b), nil
}
