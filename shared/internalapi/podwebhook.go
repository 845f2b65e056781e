package internalapi

import (
	"context"
	"net/http"

	"github.com/svc-dev/svc/shared/wire"
)

// The webhook channel's routes on the pod (spec 4.2), called by the API's
// console with the project's runtime token like every PodClient call; the
// channel secret goes in X-Webhook-Secret, as an external caller sends it.

// WebhookHealth reads the channel's health.
func (p *PodClient) WebhookHealth(ctx context.Context) (wire.WebhookHealth, error) {
	return podJSON[wire.WebhookHealth](ctx, p, "webhook health", http.MethodGet, PodWebhookHealth, nil, nil)
}

// WebhookActivity reads the last 50 inbound and outbound events.
func (p *PodClient) WebhookActivity(ctx context.Context, secret string) (wire.WebhookActivity, error) {
	return podJSON[wire.WebhookActivity](ctx, p, "webhook activity", http.MethodGet, PodWebhookActivity,
		secretHeader(secret), nil)
}

// WebhookSend sends a sync message (no callbackUrl) and returns the reply.
func (p *PodClient) WebhookSend(ctx context.Context, secret string, msg wire.WebhookIncoming) (wire.WebhookReply, error) {
	return podJSON[wire.WebhookReply](ctx, p, "webhook message", http.MethodPost, PodWebhookIncoming,
		secretHeader(secret), msg)
}

func secretHeader(secret string) http.Header { return http.Header{wire.HeaderWebhookSecret: {secret}} }
