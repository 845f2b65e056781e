package server

// The OpenAPI 3.1 document of the public surfaces (spec 4.1 public API, 4.2
// webhook channel, 4.3 checkpoint reads), served at /api/v1/openapi.json.
// The document is written in YAML beside this file (openapi.yaml) and
// converted to JSON once at start-up; the e2e suite validates real answers
// against the served copy, so it cannot drift from the code.

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var openAPISource []byte

// openAPIDocument is the JSON form, built at init (a broken document fails every
// test of this package and the binary's start).
var openAPIDocument = mustJSON(openAPISource)

// OpenAPI returns the document as JSON.
func OpenAPI() []byte { return openAPIDocument }

// openAPI answers GET /api/v1/openapi.json.
func openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}

func mustJSON(y []byte) []byte {
	var v any
	if err := yaml.Unmarshal(y, &v); err != nil {
		panic(fmt.Sprintf("openapi: document: %v", err))
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("openapi: document is not JSON-compatible (quote numeric keys): %v", err))
	}
	return b
}
