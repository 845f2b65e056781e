package internalapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// The console's calls of the pod's channel routes carry the runtime token
// and the channel secret, and decode the pod's answers and errors.
func TestPodClientWebhookRoutes(t *testing.T) {
	t.Parallel()
	type seen struct{ method, path, auth, secret string }
	got := make(chan seen, 3)
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get(wire.HeaderWebhookSecret)}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case internalapi.PodWebhookHealth:
			_ = json.NewEncoder(w).Encode(wire.WebhookHealth{Connected: true, HasSecret: true, MessageCount: 2})
		case internalapi.PodWebhookActivity:
			_ = json.NewEncoder(w).Encode(wire.WebhookActivity{Events: []wire.ActivityEvent{{ID: "e1", Direction: "inbound"}}})
		case internalapi.PodWebhookIncoming:
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Error: wire.ErrorDetail{Code: "invalid_webhook_secret", Message: "no"}})
		}
	}))
	defer pod.Close()
	p := &internalapi.PodClient{BaseURL: pod.URL, Token: "svc_rt_x"}
	ctx := context.Background()

	h, err := p.WebhookHealth(ctx)
	if err != nil || !h.Connected || h.MessageCount != 2 {
		t.Fatalf("health %+v %v", h, err)
	}
	if s := <-got; s != (seen{http.MethodGet, "/agent/channels/webhook/health", "Bearer svc_rt_x", ""}) {
		t.Fatalf("health request %+v", s)
	}
	a, err := p.WebhookActivity(ctx, "sekrit")
	if err != nil || len(a.Events) != 1 {
		t.Fatalf("activity %+v %v", a, err)
	}
	if s := <-got; s != (seen{http.MethodGet, "/agent/channels/webhook/activity", "Bearer svc_rt_x", "sekrit"}) {
		t.Fatalf("activity request %+v", s)
	}
	_, err = p.WebhookSend(ctx, "wrong", wire.WebhookIncoming{Message: "hi"})
	se, ok := internalapi.AsStatus(err)
	if !ok || se.Status != http.StatusUnauthorized || se.Body.Error.Code != "invalid_webhook_secret" {
		t.Fatalf("send with a wrong secret: %v", err)
	}
	if s := <-got; s != (seen{http.MethodPost, "/agent/channels/webhook/incoming", "Bearer svc_rt_x", "wrong"}) {
		t.Fatalf("send request %+v", s)
	}
}
