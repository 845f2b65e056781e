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

// WebhookReplay has the pod send a reply once more (the same webhook-id,
// a new timestamp and signature) and returns the attempt.
func (p *PodClient) WebhookReplay(ctx context.Context, secret string, r wire.WebhookReplay) (wire.WebhookAttempt, error) {
	return podJSON[wire.WebhookAttempt](ctx, p, "webhook replay", http.MethodPost, PodWebhookReplay, secretHeader(secret), r)
}

// WebhookTestCallback has the pod send a test message to a callback URL
// and returns the attempt.
func (p *PodClient) WebhookTestCallback(ctx context.Context, secret string, r wire.WebhookTestCallback) (wire.WebhookAttempt, error) {
	return podJSON[wire.WebhookAttempt](ctx, p, "webhook test callback", http.MethodPost, PodWebhookTest, secretHeader(secret), r)
}

func secretHeader(secret string) http.Header { return http.Header{wire.HeaderWebhookSecret: {secret}} }
