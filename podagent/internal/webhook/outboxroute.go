package webhook

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/wire"
)

// ParseWait reads ?wait=: seconds ("10", "2.5") or a duration ("500ms"),
// capped at outbox.MaxWait; empty means no wait.
func ParseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("'wait' must be seconds or a duration, not %q", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("'wait' must not be negative")
	}
	return min(d, outbox.MaxWait), nil
}

// ParseLimit reads ?limit=: default 20, at most 100.
func ParseLimit(v string) (int, error) {
	if v == "" {
		return outbox.DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("'limit' must be a positive integer, not %q", v)
	}
	return min(n, outbox.MaxLimit), nil
}

func (h *Handler) outbox(c echo.Context) error {
	cfg, err := h.authenticate(c)
	if err != nil {
		return err
	}
	if c.Param("channelId") != cfg.ChannelID {
		return &Error{Status: http.StatusNotFound, Code: "channel_not_found", Type: "invalid_request_error",
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
	msgs := h.d.Outbox.Take(c.Request().Context(), cfg.ChannelID, limit, wait)
	if err := c.JSON(http.StatusOK, wire.OutboxResponse{Messages: msgs}); err != nil {
		// Not acknowledged after all: the answer did not reach the caller.
		h.d.Outbox.Requeue(cfg.ChannelID, msgs)
		return nil
	}
	if len(msgs) > 0 {
		h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, Mode: "outbox", Status: wire.ActivityFetched,
			CorrelationID: msgs[0].CorrelationID, Preview: fmt.Sprintf("%d message(s) fetched from the outbox", len(msgs)),
			FinishedAt: h.now()})
	}
	return nil
}
