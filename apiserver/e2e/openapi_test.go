package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"
	"github.com/openai/openai-go/v3/option"
)

// The OpenAPI document served at /api/v1/openapi.json is checked against
// every real answer of this suite: the SDK client (client()) and the raw
// helper (do()) validate each answer of a documented route, so the
// document cannot drift from the code. Routes the document does not cover
// (admin, internal, git, metrics) are not checked.

var (
	oaMu     sync.Mutex
	oaRouter routers.Router
)

// errNoDocument: the host that answered serves no OpenAPI document (a pod,
// not an apiserver); its answers are not checked.
var errNoDocument = errors.New("openapi: the host serves no document")

// openAPIRouter loads the document from the first apiserver that serves it
// (every apiserver serves the same embedded document); a host without one
// (a podagent) is not remembered, so the order of requests does not matter.
func openAPIRouter(host string) (routers.Router, error) {
	oaMu.Lock()
	defer oaMu.Unlock()
	if oaRouter != nil {
		return oaRouter, nil
	}
	resp, err := http.Get("http://" + host + "/api/v1/openapi.json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNoDocument
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /api/v1/openapi.json: %d %s", resp.StatusCode, raw)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = nil // match any host the tests run on
	r, err := legacyrouter.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	oaRouter = r
	return oaRouter, nil
}

// checkOpenAPI validates one answer; body is the answer's bytes (nil for a
// stream, whose body is not read here). It returns nil for routes the
// document does not describe.
func checkOpenAPI(req *http.Request, resp *http.Response, body []byte) error {
	router, err := openAPIRouter(req.URL.Host)
	if errors.Is(err, errNoDocument) {
		return nil // a podagent's answer: the document describes the apiserver
	}
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	// /v1 is the same API as /api/v1 (docs/design.md §5).
	u := *req.URL
	if strings.HasPrefix(u.Path, "/v1/") {
		u.Path = "/api" + u.Path
	}
	r2 := req.Clone(context.Background())
	r2.URL = &u
	route, params, err := router.FindRoute(r2)
	if err != nil {
		return nil // not a documented route
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r2, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" || body == nil {
		in.Options.ExcludeResponseBody = true
	} else {
		in.SetBodyBytes(body)
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("openapi: %s %s answered %d, which the document does not describe: %v\nbody: %.500s",
			req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return nil
}

// openAPIMiddleware makes every SDK call fail when its answer does not
// match the document.
func openAPIMiddleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		return resp, checkOpenAPI(req, resp, nil)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := checkOpenAPI(req, resp, body); err != nil {
		return nil, err
	}
	return resp, nil
}

// The check itself can fail: an answer that breaks the document is caught.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	t.Parallel()
	_, a, acc := freeAccount(t)
	resp, body := do(t, http.MethodGet, a.URL+"/v1/models/svc-2-0", acc.key, nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodGet, a.URL+"/v1/models/svc-2-0", nil)
	for name, bad := range map[string]string{
		"missing created":    `{"id":"svc-2-0","object":"model","owned_by":"svc"}`,
		"wrong object":       `{"id":"svc-2-0","object":"list","created":1,"owned_by":"svc"}`,
		"error without type": `{"error":{"message":"m","code":"c"}}`,
		"bare error":         `{"error":"boom"}`,
	} {
		if err := checkOpenAPI(req, resp, []byte(bad)); err == nil {
			t.Errorf("%s: accepted %s", name, bad)
		}
	}
	if err := checkOpenAPI(req, resp, body); err != nil {
		t.Fatal(err)
	}
}
