package webhookapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/shared/wire"
)

// Poll is GET …/webhook/outbox/:channelId?wait=&limit=, the integrations'
// long-poll of the durable outbox (cloud auth and ProjectMember have run;
// the channel secret is checked here). Messages that cannot reach the
// caller are released for the next poll.
func (h *Handlers) Poll(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret))
	if err != nil {
		return err
	}
	if c.Param("channelId") != ch.ID {
		return outbox.ChannelNotFound()
	}
	wait, err := wire.ParseOutboxWait(c.QueryParam("wait"))
	if err != nil {
		return wire.Coded(wire.CodeInvalidWait, err.Error()+".")
	}
	limit, err := wire.ParseOutboxLimit(c.QueryParam("limit"))
	if err != nil {
		return wire.Coded(wire.CodeInvalidLimit, err.Error()+".")
	}
	ctx := c.Request().Context()
	msgs, err := h.Outbox.Poll(ctx, proj.ID, ch.ID, wait, limit)
	if err != nil {
		return err
	}
	if msgs == nil {
		if ctx.Err() != nil {
			return nil // the caller left
		}
		msgs = []wire.OutboxMessage{}
	}
	err = ctx.Err()
	if err == nil {
		err = c.JSON(http.StatusOK, wire.OutboxResponse{Messages: msgs})
	}
	if err != nil && len(msgs) > 0 {
		h.Outbox.Release(ctx, proj.ID, msgs)
	}
	return nil
}
