// Package server is the pod's HTTP surface (docs/design.md §5): /healthz,
// /readyz, /metrics, and the /agent/* routes, which require the project's
// runtime token as a bearer (compared in constant time).
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/poderr"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/podagent/internal/webhook"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

// Flusher is what POST /agent/git-flush drives: a flush turn (pod.Pod.Flush).
type Flusher interface {
	Flush(ctx context.Context, fo gitsync.FlushOptions) (wire.GitFlushResponse, error)
}

// Options configure the server.
type Options struct {
	RuntimeToken string
	// ProjectID and Generation name this pod in its /readyz answer
	// (wire.PodReadiness): the runtime driver routes a project's messages
	// only to a pod that says it is that project's.
	ProjectID  string
	Generation int64
	Registry   *prometheus.Registry
	// Ready returns nil when the pod can serve turns.
	Ready   func() error
	Flusher Flusher
	// Restorer serves POST /agent/restore (rollback); nil: not mounted.
	Restorer Restorer
	// Webhook is the channel (nil: its routes are not mounted).
	Webhook *webhook.Handler
	Log     *zap.Logger
}

// Restorer is what POST /agent/restore drives: a rollback turn (pod.Pod.Restore).
type Restorer interface {
	Restore(ctx context.Context, sha string) (wire.RestoreResponse, error)
}

// New builds the echo server.
func New(o Options) *echo.Echo {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	log := o.Log.Named("http")
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = poderr.Handler(log)
	routes(e, o)
	return e
}

// routes is the pod's whole route table (docs/design.md §5): the probes,
// and under /agent, behind the runtime token, git-flush and the webhook
// channel. The paths are shared/internalapi's and wire's.
func routes(e *echo.Echo, o Options) {
	e.GET(internalapi.PodHealthz, func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET(internalapi.PodReadyz, func(c echo.Context) error {
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				return wire.Coded("not_ready", err.Error())
			}
		}
		return c.JSON(http.StatusOK, wire.PodReadiness{Status: "ready", ProjectID: o.ProjectID, Generation: o.Generation})
	})
	if o.Registry != nil {
		e.GET(internalapi.PodMetrics, echo.WrapHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	}
	agent := e.Group(internalapi.PodAgent, RequireRuntimeToken(o.RuntimeToken))
	agent.POST(strings.TrimPrefix(internalapi.PodGitFlush, internalapi.PodAgent), gitFlush(o))
	if o.Restorer != nil {
		agent.POST(strings.TrimPrefix(internalapi.PodRestore, internalapi.PodAgent), restore(o))
	}
	if h := o.Webhook; h != nil {
		ch := agent.Group(strings.TrimPrefix(internalapi.PodWebhook, internalapi.PodAgent))
		ch.POST("/incoming", h.Incoming)
		ch.GET("/health", h.Health)
		ch.GET("/activity", h.ActivityLog)
		ch.POST(strings.TrimPrefix(internalapi.PodWebhookReplay, internalapi.PodWebhook), h.Replay)
		ch.POST(strings.TrimPrefix(internalapi.PodWebhookTest, internalapi.PodWebhook), h.TestCallback)
		if h.ServesOutbox() {
			ch.GET("/outbox/:channelId", h.OutboxPoll)
		}
	}
}

// RequireRuntimeToken accepts only "Authorization: Bearer <token>".
func RequireRuntimeToken(token string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get("Authorization")
			got, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || !runtimetoken.Equal(token, strings.TrimSpace(got)) {
				return wire.Coded("invalid_runtime_token", "missing or invalid runtime token")
			}
			return next(c)
		}
	}
}

// MaxFlushBodyBytes bounds POST /agent/git-flush ({tag, tagMessage}).
const MaxFlushBodyBytes = 64 << 10

func gitFlush(o Options) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req wire.GitFlushRequest
		r := c.Request()
		if r.ContentLength > MaxFlushBodyBytes {
			return wire.Coded("request_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxFlushBodyBytes))
		}
		if r.ContentLength != 0 {
			r.Body = http.MaxBytesReader(c.Response(), r.Body, MaxFlushBodyBytes)
			if err := c.Bind(&req); err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					return wire.Coded("request_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxFlushBodyBytes))
				}
				return wire.Coded("invalid_body", "body must be JSON {tag, tagMessage}")
			}
		}
		if (req.Tag == "") != (req.TagMessage == "") {
			return wire.Coded("invalid_tag", "tag and tagMessage are set together")
		}
		if req.Tag != "" {
			if _, _, err := wire.ParsePublishTag(req.Tag); err != nil {
				return wire.Coded("invalid_tag", err.Error())
			}
		}
		// Bounded by the caller's timeout: the answer (an error, if storage
		// is slow) reaches the caller before it gives up.
		ctx, cancel := internalapi.CallerContext(c.Request())
		defer cancel()
		resp, err := o.Flusher.Flush(ctx, gitsync.FlushOptions{Tag: req.Tag, TagMessage: req.TagMessage})
		if err != nil {
			return mapFlushError(err)
		}
		return c.JSON(http.StatusOK, resp)
	}
}

// restore is the rollback of docs/sync-modes.md §6: a new commit whose
// tree is that of the given checkpoint, persisted and recorded like a turn.
func restore(o Options) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req wire.RestoreRequest
		if err := c.Bind(&req); err != nil || !validSHA(req.SHA) {
			return wire.Coded("invalid_sha", "body must be JSON {sha} with a full hex commit id")
		}
		ctx, cancel := internalapi.CallerContext(c.Request())
		defer cancel()
		resp, err := o.Restorer.Restore(ctx, req.SHA)
		if errors.Is(err, gitsync.ErrUnknownCommit) {
			return wire.Coded("commit_not_found", "the project has no commit "+req.SHA)
		}
		if err != nil {
			return mapFlushError(err)
		}
		return c.JSON(http.StatusOK, resp)
	}
}

func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

func mapFlushError(err error) error {
	var busy *turn.InProgressError
	switch {
	case errors.As(err, &busy):
		// The turn in flight outlasted what the caller's deadline left for
		// the wait (docs/sync-modes.md §6).
		e := wire.Coded("turn_in_progress", fmt.Sprintf("a %s turn is running; the %s waited %s for it and was not started",
			busy.Holder, busy.Kind, busy.Waited.Round(time.Millisecond)))
		e.Headers = map[string]string{"Retry-After": strconv.Itoa(int(busy.RetryAfter / time.Second))}
		return e
	case errors.Is(err, gitsync.ErrFenced):
		return wire.Coded("fenced", "another pod holds a newer history of this project; this pod stopped writing")
	case errors.Is(err, gitsync.ErrTagExists):
		return wire.Coded("tag_exists", err.Error())
	case errors.Is(err, gitsync.ErrClosed):
		return wire.Coded("shutting_down", "the pod is shutting down")
	case errors.Is(err, gitsync.ErrNotPersisted):
		return wire.Coded("not_persisted", "the commit could not be persisted to object storage; retry later")
	case errors.Is(err, context.DeadlineExceeded):
		return wire.Coded("flush_timeout", "the flush did not finish within the caller's timeout; committed changes are persisted later")
	}
	return err
}
