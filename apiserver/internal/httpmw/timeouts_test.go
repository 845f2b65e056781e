package httpmw_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
)

// The write timeout cuts a non-streamed answer whose writing outlasts it,
// and never a server-sent event stream.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const d = 100 * time.Millisecond
	e := echo.New()
	// The handler writes its headers and a first part, lets the write
	// deadline pass (the time passing is what is tested), then writes the rest.
	slow := func(contentType string) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set(echo.HeaderContentType, contentType)
			c.Response().WriteHeader(http.StatusOK)
			_, _ = io.WriteString(c.Response(), "first;")
			c.Response().Flush()
			<-time.After(3 * d)
			_, _ = io.WriteString(c.Response(), "rest")
			c.Response().Flush()
			return nil
		}
	}
	e.GET("/plain", slow("application/json"), httpmw.WriteTimeout(d))
	e.GET("/stream", slow("text/event-stream"), httpmw.WriteTimeout(d))
	e.GET("/off", slow("application/json"), httpmw.WriteTimeout(0))
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		path     string
		complete bool
	}{{"/plain", false}, {"/stream", true}, {"/off", true}} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			resp, err := http.Get(hs.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if complete := err == nil && string(b) == "first;rest"; complete != tc.complete {
				t.Fatalf("body %q (%v): complete %v, want %v", b, err, complete, tc.complete)
			}
		})
	}
}
