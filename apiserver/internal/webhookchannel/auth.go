package webhookchannel

import (
	"context"
	"errors"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Authenticate checks X-Webhook-Secret against the channel secret from the
// store, and the one a rotation replaced while its overlap lasts, in
// constant time (SecretMatches); an empty or missing channel
// secret rejects every request.
func Authenticate(c echo.Context, st interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
}, projectID string) (store.Channel, error) {
	ch, err := st.GetChannel(c.Request().Context(), projectID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ch, wire.Unavailable(err)
	}
	if ch.Secret == "" {
		return ch, wire.Coded("channel_secret_not_set",
			"This channel has no secret configured, so it rejects every request. Set one in the channel settings.")
	}
	if !SecretMatches(ch, c.Request().Header.Get(wire.HeaderWebhookSecret), time.Now()) {
		return ch, wire.Coded("invalid_webhook_secret",
			"Missing or invalid X-Webhook-Secret header.")
	}
	return ch, nil
}
