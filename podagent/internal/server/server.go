// Package server is the pod's HTTP surface (DESIGN.md §5): /healthz,
// /readyz, /metrics, and the /agent/* routes, which require the project's
// runtime token as a bearer (compared in constant time).
package server

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

// Flusher is what POST /agent/git-flush drives (gitsync.GitWorkspaceSync).
type Flusher interface {
	Flush(ctx context.Context, fo gitsync.FlushOptions) (wire.GitFlushResponse, error)
}

// Options configure the server.
type Options struct {
	RuntimeToken string
	Registry     *prometheus.Registry
	// Ready returns nil when the pod can serve turns.
	Ready   func() error
	Flusher Flusher
	Log     *zap.Logger
}

// Error is the one error type of handlers; the error handler maps it.
type Error struct {
	Status  int
	Code    string
	Type    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// New builds the echo server.
func New(o Options) *echo.Echo {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	log := o.Log.Named("http")
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(log)

	e.GET(internalapi.PodHealthz, func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET(internalapi.PodReadyz, func(c echo.Context) error {
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				return &Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Type: "unavailable", Message: err.Error()}
			}
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	if o.Registry != nil {
		e.GET(internalapi.PodMetrics, echo.WrapHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	}
	e.POST(internalapi.PodGitFlush, gitFlush(o), RequireRuntimeToken(o.RuntimeToken))
	return e
}

// RequireRuntimeToken accepts only "Authorization: Bearer <token>".
func RequireRuntimeToken(token string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get("Authorization")
			got, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || !runtimetoken.Equal(token, strings.TrimSpace(got)) {
				return &Error{Status: http.StatusUnauthorized, Code: "invalid_runtime_token", Type: "authentication_error", Message: "missing or invalid runtime token"}
			}
			return next(c)
		}
	}
}

func gitFlush(o Options) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req wire.GitFlushRequest
		if c.Request().ContentLength != 0 {
			if err := c.Bind(&req); err != nil {
				return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Type: "invalid_request_error", Message: "body must be JSON {tag, tagMessage}"}
			}
		}
		if (req.Tag == "") != (req.TagMessage == "") {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_tag", Type: "invalid_request_error", Message: "tag and tagMessage are set together"}
		}
		if req.Tag != "" {
			if _, _, err := wire.ParsePublishTag(req.Tag); err != nil {
				return &Error{Status: http.StatusBadRequest, Code: "invalid_tag", Type: "invalid_request_error", Message: err.Error()}
			}
		}
		resp, err := o.Flusher.Flush(c.Request().Context(), gitsync.FlushOptions{Tag: req.Tag, TagMessage: req.TagMessage})
		if err != nil {
			return mapFlushError(err)
		}
		return c.JSON(http.StatusOK, resp)
	}
}

func mapFlushError(err error) error {
	switch {
	case errors.Is(err, gitsync.ErrFenced):
		return &Error{Status: http.StatusConflict, Code: "fenced", Type: "conflict", Message: "another pod holds a newer history of this project; this pod stopped writing"}
	case errors.Is(err, gitsync.ErrTagExists):
		return &Error{Status: http.StatusConflict, Code: "tag_exists", Type: "conflict", Message: err.Error()}
	case errors.Is(err, gitsync.ErrClosed):
		return &Error{Status: http.StatusServiceUnavailable, Code: "shutting_down", Type: "unavailable", Message: "the pod is shutting down"}
	case errors.Is(err, gitsync.ErrNotPersisted):
		return &Error{Status: http.StatusServiceUnavailable, Code: "not_persisted", Type: "unavailable", Message: "the commit could not be persisted to object storage; retry later"}
	}
	return err
}

func errorHandler(log *zap.Logger) func(error, echo.Context) {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var e *Error
		var he *echo.HTTPError
		switch {
		case errors.As(err, &e):
		case errors.As(err, &he):
			msg := http.StatusText(he.Code)
			if m, ok := he.Message.(string); ok {
				msg = m
			}
			e = &Error{Status: he.Code, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(he.Code), " ", "_")), Type: "invalid_request_error", Message: msg}
		default:
			e = &Error{Status: http.StatusInternalServerError, Code: "internal_error", Type: "api_error", Message: "internal error"}
		}
		if e.Status >= 500 {
			log.Error("request failed", zap.String("path", c.Path()), zap.Int("status", e.Status), zap.Error(err))
		}
		_ = c.JSON(e.Status, wire.ErrorBody{Error: wire.ErrorDetail{Message: e.Message, Type: e.Type, Code: e.Code}})
	}
}
