package agentapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/shared/wire"
)

// Channel is GET /internal/projects/{id}/channel: the webhook channel's
// configuration for the project's pod, wire.ChannelConfig {configured,
// channelId, secret, callbackHeaders, previousSecrets, failingEndpoints}.
// The pod caches it for about a second, so `apiserver admin channel set`
// reaches a running agent without a restart.
func (a *API) Channel(c echo.Context) error {
	id, err := ownProject(c, "read its channel configuration")
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	ch, err := a.Store.GetChannel(c.Request().Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return c.JSON(http.StatusOK, wire.ChannelConfig{CallbackHeaders: map[string]string{}})
	}
	if err != nil {
		return wire.Internal(err)
	}
	headers, err := webhookchannel.DecodeCallbackHeaders(ch.CallbackHeaders)
	if err != nil {
		e := wire.Coded("invalid_callback_headers",
			"The channel's callbackHeaders are not a JSON object; fix them with `apiserver admin channel set`.")
		e.Cause = err
		return e
	}
	failing, err := a.Store.ListWebhookEndpoints(c.Request().Context(), id, true)
	if err != nil {
		return wire.Internal(err)
	}
	cfg := wire.ChannelConfig{Configured: true, ChannelID: ch.ID, Secret: ch.Secret, CallbackHeaders: headers,
		PreviousSecrets: ch.PreviousSecrets(time.Now()), SigningKey: ch.SigningKey}
	for _, e := range failing {
		cfg.FailingEndpoints = append(cfg.FailingEndpoints, e.Endpoint)
	}
	return c.JSON(http.StatusOK, cfg)
}
