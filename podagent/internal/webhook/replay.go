package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/shared/wire"
)

// Replay, test messages and failing endpoints
// (docs/webhook-delivery.md). The API calls the two routes for a member
// (with the runtime token and the channel secret); each makes one signed
// attempt with the deliverer — the SSRF guard, the micro-VM forwarder and
// the attempt log included — and answers its record.

// webhookID is the webhook-id of a message: the same on every attempt,
// after a restart and on a replay.
func webhookID(corr string) string { return turn.WebhookID(corr) }

// Replay is POST …/replay.
func (h *Handler) Replay(c echo.Context) error { return h.wrap(h.replay)(c) }

// TestCallback is POST …/test-callback.
func (h *Handler) TestCallback(c echo.Context) error { return h.wrap(h.testCallback)(c) }

func (h *Handler) replay(c echo.Context) error {
	cfg, err := h.authenticate(c)
	if err != nil {
		return err
	}
	body, err := h.readBody(c)
	if err != nil {
		return err
	}
	var in wire.WebhookReplay
	if err := json.Unmarshal(body, &in); err != nil || in.CorrelationID == "" {
		return badRequest("invalid_body", "The body must be a replay: correlationId, callbackUrl, reply, metadata.")
	}
	if len(in.Metadata) == 0 || !json.Valid(in.Metadata) || bytes.TrimSpace(in.Metadata)[0] != '{' {
		in.Metadata = json.RawMessage("{}")
	}
	payload, err := callbackBody(wire.WebhookCallback{Reply: in.Reply, CorrelationID: in.CorrelationID, Metadata: in.Metadata})
	if err != nil {
		return badRequest("invalid_body", "The reply could not be encoded.")
	}
	return h.once(c, cfg, in.CallbackURL, in.CorrelationID, wire.AttemptReplay, payload)
}

// TestCorrelationPrefix starts the correlationId of a test message.
const TestCorrelationPrefix = "cor_test_"

func (h *Handler) testCallback(c echo.Context) error {
	cfg, err := h.authenticate(c)
	if err != nil {
		return err
	}
	body, err := h.readBody(c)
	if err != nil {
		return err
	}
	var in wire.WebhookTestCallback
	if err := json.Unmarshal(body, &in); err != nil {
		return badRequest("invalid_body", "The body must be {\"callbackUrl\": \"https://…\"}.")
	}
	corr := newID(TestCorrelationPrefix)
	payload, err := callbackBody(wire.WebhookCallback{Reply: "Test message: the channel can reach this endpoint.",
		CorrelationID: corr, Metadata: json.RawMessage(`{"test":true}`)})
	if err != nil {
		return err
	}
	return h.once(c, cfg, in.CallbackURL, corr, wire.AttemptTest, payload)
}

// once makes one attempt and answers its record (200 whatever the
// receiver said: the record says it).
func (h *Handler) once(c echo.Context, cfg wire.ChannelConfig, url, corr, kind string, payload []byte) error {
	if err := h.d.Callbacks.CheckURL(url); err != nil {
		code := "invalid_callback_url"
		if errors.Is(err, callback.ErrRefused) {
			code = "callback_url_refused"
		}
		return badRequest(code, "'callbackUrl' is not usable: "+err.Error()+".")
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	rec := h.d.Callbacks.Once(ctx, callback.Delivery{URL: url, MsgID: webhookID(corr), Secret: cfg.Secret,
		OldSecrets: cfg.PreviousSecrets, SigningKey: cfg.SigningKey, Headers: cfg.CallbackHeaders, Body: payload, CorrelationID: corr,
		ChannelID: cfg.ChannelID, Kind: kind})
	h.log.Info("one callback attempt for a member", zap.String("kind", kind), zap.String("correlationId", corr),
		zap.String("outcome", rec.Outcome), zap.Int("status", rec.Status))
	return c.JSON(http.StatusOK, rec)
}

// callbackBody encodes a callback as deliver does: no HTML escaping, no
// trailing newline.
func callbackBody(cb wire.WebhookCallback) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cb); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
