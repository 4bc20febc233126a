package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the hand-written OpenAPI 3.1 description of every route; a test checks that it
// lists every registered route.
//
//go:embed openapi.json
var openAPIDocument []byte

func (a *API) openAPI(w http.ResponseWriter, _ *http.Request, _ principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return nil
}
