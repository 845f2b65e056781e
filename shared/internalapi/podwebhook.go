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
	var out wire.WebhookHealth
	if err := p.check(); err != nil {
		return out, err
	}
	err := call(ctx, p.HTTP, p.Timeout, "webhook health", http.MethodGet, p.url(PodWebhookHealth), p.Token, nil, &out)
	return out, err
}

// WebhookActivity reads the last 50 inbound and outbound events.
func (p *PodClient) WebhookActivity(ctx context.Context, secret string) (wire.WebhookActivity, error) {
	var out wire.WebhookActivity
	if err := p.check(); err != nil {
		return out, err
	}
	err := callWith(ctx, p.HTTP, p.Timeout, "webhook activity", http.MethodGet, p.url(PodWebhookActivity), p.Token,
		http.Header{wire.HeaderWebhookSecret: {secret}}, nil, &out)
	return out, err
}

// WebhookSend sends a sync message (no callbackUrl) and returns the reply.
func (p *PodClient) WebhookSend(ctx context.Context, secret string, msg wire.WebhookIncoming) (wire.WebhookReply, error) {
	var out wire.WebhookReply
	if err := p.check(); err != nil {
		return out, err
	}
	err := callWith(ctx, p.HTTP, p.Timeout, "webhook message", http.MethodPost, p.url(PodWebhookIncoming), p.Token,
		http.Header{wire.HeaderWebhookSecret: {secret}}, msg, &out)
	return out, err
}
