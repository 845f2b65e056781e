package webhook

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/shared/wire"
)

// ParseWait reads ?wait= (wire.ParseOutboxWait: seconds or a duration,
// capped at 30 s; empty means no wait).
func ParseWait(v string) (time.Duration, error) { return wire.ParseOutboxWait(v) }

// ParseLimit reads ?limit= (wire.ParseOutboxLimit: default 20, at most 100).
func ParseLimit(v string) (int, error) { return wire.ParseOutboxLimit(v) }

func (h *Handler) outbox(c echo.Context) error {
	cfg, err := h.authenticate(c)
	if err != nil {
		return err
	}
	if c.Param("channelId") != cfg.ChannelID {
		return &wire.Error{Code: "channel_not_found",
			Message: "No channel with this id on this project."}
	}
	wait, err := ParseWait(c.QueryParam("wait"))
	if err != nil {
		return badRequest("invalid_wait", err.Error()+".")
	}
	limit, err := ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return badRequest("invalid_limit", err.Error()+".")
	}
	ob := h.d.Outbox.(taker) // Mount adds the route only then
	msgs := ob.Take(c.Request().Context(), cfg.ChannelID, limit, wait)
	if err := c.JSON(http.StatusOK, wire.OutboxResponse{Messages: msgs}); err != nil {
		// Not acknowledged after all: the answer did not reach the caller.
		ob.Requeue(cfg.ChannelID, msgs)
		return nil
	}
	if len(msgs) > 0 {
		h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, Mode: "outbox", Status: wire.ActivityFetched,
			CorrelationID: msgs[0].CorrelationID, Preview: fmt.Sprintf("%d message(s) fetched from the outbox", len(msgs)),
			FinishedAt: h.now()})
	}
	return nil
}
