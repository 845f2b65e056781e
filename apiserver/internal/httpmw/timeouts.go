package httpmw

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// WriteTimeout bounds the writing of a non-streamed answer: when the
// handler is about to send the answer's headers, the connection's write
// deadline is set to d from then (http.ResponseController), so a client
// that stops reading cannot hold the connection and its goroutine. The time
// before the headers (an upstream producing a non-streamed completion) is
// not counted: that is bounded by the upstream timeouts. A server-sent
// event stream (Content-Type text/event-stream) gets no deadline: a
// stream must never be cut by a write timeout (a taken-over stream bounds
// each of its writes itself). d <= 0: off.
func WriteTimeout(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if d <= 0 {
			return next
		}
		return func(c echo.Context) error {
			res := c.Response()
			res.Before(func() {
				if strings.HasPrefix(res.Header().Get(echo.HeaderContentType), "text/event-stream") {
					return
				}
				// The error is only "not supported" (a test recorder):
				// nothing to bound then.
				_ = http.NewResponseController(res.Writer).SetWriteDeadline(time.Now().Add(d))
			})
			return next(c)
		}
	}
}
