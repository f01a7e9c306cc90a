package api

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestOpenAPIMatchesRoutes walks the router: every route is documented in
// openapi.json with its method, and every documented path and method is
// routed.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newEnv(t)
	router := New(Options{Herder: e.worker})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	routed := map[string]bool{}
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.ReplaceAll(route, "/*/", "/")
		if len(route) > 1 {
			route = strings.TrimRight(route, "/")
		}
		routed[strings.ToLower(method)+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented[m+" "+path] = true
		}
	}
	var missing, extra []string
	for r := range routed {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from openapi.json: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("documented but not routed: %v", extra)
	}
	if len(routed) < 25 {
		t.Errorf("only %d routes walked: %v", len(routed), routed)
	}
	r := e.must(200, "GET", "/openapi.json", nil)
	if string(r.body) != string(OpenAPI()) {
		t.Error("GET /openapi.json does not serve the document")
	}
}
