package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The defences of the API against web pages and stray clients; see
// docs/security.md.
//
//   - checkHost: the Host header must name this worker (localhost, an IP
//     address, the listen host, or rest.allowed.hosts), which defeats DNS
//     rebinding: a page of attacker.example whose name resolves to
//     127.0.0.1 still sends "Host: attacker.example".
//   - cors: Kafka Connect's access.control.allow.origin; a state-changing
//     request that carries the Origin of a site not allowed is refused
//     (cross-site request forgery).
//   - requireClientCert: with mutual TLS, every request but GET /health
//     must come with a verified client certificate.
//   - requireJSON: a request body must be application/json, so a browser
//     cannot send one without a CORS preflight (HTTP 415 otherwise).

// isHealth reports whether r is the probe request, which the host and
// client-certificate checks (and authentication) let through.
func isHealth(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Path == "/health"
}

// hostAllowed reports whether a Host header names this worker: empty (no
// browser sends that), an IP address (DNS rebinding needs a name), localhost,
// the host the API listens on, or an entry of allowed ("name",
// "*.domain", or "*").
func hostAllowed(host, listenHost string, allowed []string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" || h == "localhost" {
		return true
	}
	ip := h
	if i := strings.IndexByte(h, '%'); i >= 0 && strings.Contains(h[:i], ":") {
		ip = h[:i] // an IPv6 zone
	}
	if net.ParseIP(ip) != nil {
		return true
	}
	if listenHost != "" && strings.EqualFold(h, strings.TrimSuffix(listenHost, ".")) {
		return true
	}
	for _, a := range allowed {
		a = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(a)), ".")
		switch {
		case a == "*":
			return true
		case strings.HasPrefix(a, "*."):
			if strings.HasSuffix(h, a[1:]) && len(h) > len(a)-1 {
				return true
			}
		case a == h:
			return true
		}
	}
	return false
}

// checkHost refuses requests whose Host header does not name this worker
// (HTTP 403).
func (s *Server) checkHost(next http.Handler) http.Handler {
	listenHost := ""
	if h, _, err := net.SplitHostPort(s.opt.Listen); err == nil {
		listenHost = h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealth(r) || hostAllowed(r.Host, listenHost, s.opt.AllowedHosts) {
			next.ServeHTTP(w, r)
			return
		}
		s.log.Debug("request refused: Host not allowed", "host", r.Host, "path", r.URL.Path)
		writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not allowed: this worker answers to localhost, its IP addresses and the names in rest.allowed.hosts", r.Host))
	})
}

// corsPolicy is Kafka Connect's access.control.allow.origin and
// access.control.allow.methods.
type corsPolicy struct {
	any     bool
	origins []string
	methods []string
}

func newCORSPolicy(origins, methods string) corsPolicy {
	var p corsPolicy
	for _, o := range strings.Split(origins, ",") {
		switch o = strings.TrimSpace(o); o {
		case "":
		case "*":
			p.any = true
		default:
			p.origins = append(p.origins, strings.ToLower(strings.TrimSuffix(o, "/")))
		}
	}
	if strings.TrimSpace(methods) == "" {
		methods = "GET,POST,HEAD"
	}
	for _, m := range strings.Split(methods, ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			p.methods = append(p.methods, m)
		}
	}
	return p
}

func (p corsPolicy) allows(origin string) bool {
	return p.any || slices.Contains(p.origins, strings.ToLower(origin))
}

// sameOrigin reports whether origin (scheme://host[:port]) is the
// worker's own origin as the request reached it.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	defaultPort := map[string]string{"http": "80", "https": "443"}
	op := u.Port()
	if op == "" {
		op = defaultPort[u.Scheme]
	}
	rh, rp, err := net.SplitHostPort(r.Host)
	if err != nil {
		rh, rp = r.Host, defaultPort[scheme]
	}
	return u.Scheme == scheme && strings.EqualFold(u.Hostname(), strings.Trim(rh, "[]")) && op == rp
}

// cors answers CORS preflights and adds CORS headers for allowed origins;
// it refuses state-changing requests from other origins (HTTP 403). GET
// and HEAD from other origins are served without CORS headers, so the
// browser does not show the answer to the page.
func (s *Server) cors(next http.Handler) http.Handler {
	p := newCORSPolicy(s.opt.AllowOrigin, s.opt.AllowMethods)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		switch {
		case p.allows(origin):
			method := r.Method
			if preflight {
				method = strings.ToUpper(r.Header.Get("Access-Control-Request-Method"))
			}
			if !slices.Contains(p.methods, method) && method != http.MethodOptions {
				writeError(w, http.StatusForbidden, fmt.Sprintf("Cross-origin %s is not allowed: add it to access.control.allow.methods", method))
				return
			}
			if p.any {
				w.Header().Set("Access-Control-Allow-Origin", "*")
			} else {
				w.Header().Set("Access-Control-Allow-Origin", origin)
			}
			if preflight {
				w.Header().Set("Access-Control-Allow-Methods", strings.Join(p.methods, ","))
				w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Authorization, Accept, X-Requested-With")
				w.Header().Set("Access-Control-Max-Age", "1800")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		case sameOrigin(origin, r):
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) && !preflight:
		default:
			s.log.Debug("request refused: cross-origin", "origin", origin, "method", r.Method, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, fmt.Sprintf("Cross-origin request from %q refused: add the origin to access.control.allow.origin", origin))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireClientCert refuses requests without a verified client
// certificate when mutual TLS is on, except GET /health (HTTP 401).
func (s *Server) requireClientCert(next http.Handler) http.Handler {
	if !s.opt.RequireClientCert {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealth(r) || r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusUnauthorized, "A client certificate is required (mutual TLS)")
	})
}

// requireJSON answers HTTP 415 to a POST, PUT, PATCH or DELETE whose body
// is not declared application/json (UTF-8): a request with a
// Content-Type must name JSON, and one without may not have a body. Kafka
// Connect clients send application/json; a web form or a cross-site
// fetch without a CORS preflight cannot.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			next.ServeHTTP(w, r)
			return
		}
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" || params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8") {
			shown := ct
			if shown == "" {
				shown = "none"
			}
			writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Unsupported Content-Type %s: request bodies must be application/json", shown))
			return
		}
		next.ServeHTTP(w, r)
	})
}
