package server_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/svc-dev/svc/apiserver/internal/server"
)

// The served document loads and validates as OpenAPI 3.1 and covers the
// three public surfaces.
func TestDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	for _, p := range []string{"/api/v1/models", "/api/v1/models/{model}", "/api/v1/chat/completions",
		"/api/v1/responses", "/api/v1/messages",
		"/api/projects/{projectId}/agent-proxy/agent/channels/webhook/incoming",
		"/api/projects/{projectId}/channels/webhook/replay",
		"/api/projects/{projectId}/checkpoints/graph"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("path %s is missing", p)
		}
	}
}
