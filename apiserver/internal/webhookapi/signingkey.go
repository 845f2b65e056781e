package webhookapi

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// SigningKey is GET …/webhook/signing-key: the public half (whpk_) of the
// channel's ed25519 key that signs the v1a signatures, empty when the
// channel signs with its HMAC secret only. The key is public: a project
// member reads it without the channel secret.
func (h *Handlers) SigningKey(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := h.Channels.GetChannel(c.Request().Context(), proj.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return wire.Unavailable(err)
	}
	out := wire.WebhookSigningPublicKey{Scheme: "v1a"}
	if ch.SigningKey != "" {
		if out.PublicKey, err = wire.WebhookPublicKey(ch.SigningKey); err != nil {
			return wire.Internal(err)
		}
	}
	return c.JSON(http.StatusOK, out)
}
