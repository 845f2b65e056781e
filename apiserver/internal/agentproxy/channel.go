package agentproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/shared/wire"
)

// The channel's checks at the edge (spec 5.2, 7.2). Cloud auth has passed
// (httpmw.APIKey, ProjectMember); before the proxy asks the runtime for the
// agent it checks what the pod would check first, so that a caller learns
// of a wrong secret (401) or a bad body (400) whatever the agent's state,
// and an unauthenticated or invalid message never starts an agent:
//
//   - every proxied channel route but health: X-Webhook-Secret against the
//     channel's secret and, during a rotation's overlap, the secret it
//     replaced, in constant time (webhookchannel.Authenticate — the rule
//     the pod applies with wire.WebhookSecretMatches);
//   - POST …/incoming: the body's shape (wire.ParseWebhookIncoming, the
//     pod's own parser), read up to MaxBodyBytes and forwarded unchanged.
//
// The pod keeps both checks (defence in depth).

// DefaultMaxBodyBytes is the incoming body limit when MaxBodyBytes is zero:
// the pod's default (SVC_WEBHOOK_MAX_BODY_BYTES).
const DefaultMaxBodyBytes = 1 << 20

// healthPath is the agent path of the channel's health.
const healthPath = "/agent/channels/webhook/health"

func (p *Proxy) check(c echo.Context, projectID, rest string) error {
	if p.Channels == nil {
		return nil
	}
	req := c.Request()
	if _, err := webhookchannel.Authenticate(req.Context(), p.Channels, projectID, req.Header.Get(wire.HeaderWebhookSecret)); err != nil {
		return err
	}
	if rest != incomingPath || req.Method != http.MethodPost {
		return nil
	}
	limit := p.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	tooLarge := wire.Coded("request_too_large", fmt.Sprintf("The body is larger than the limit of %d bytes.", limit))
	if req.ContentLength > limit {
		return tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge
		}
		return wire.Coded("invalid_body", "The body could not be read.")
	}
	if _, err := wire.ParseWebhookIncoming(body); err != nil {
		return err
	}
	// Forwarded as read: a known length, and a body that cannot be replayed
	// (onceTransport).
	req.Body, req.ContentLength, req.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	req.GetBody = nil
	return nil
}
