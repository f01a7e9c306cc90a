package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the hand-written OpenAPI 3 description of the API. A test
// walks the router and checks that every route is documented and every
// documented path exists.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document.
func OpenAPI() []byte { return openAPI }

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
