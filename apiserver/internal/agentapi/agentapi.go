// Package agentapi is the API server's side of every call a project's pod
// makes with its runtime token (spec 4.3, 5.3, 10.3; docs/design.md §6), as
// coder's agentapi is the server side of its workspace agent:
//
//	POST /internal/projects/{id}/checkpoints/record   a commit's ProjectCheckpoint row (checkpoints.go)
//	GET  /internal/projects/{id}/channel              the webhook channel's configuration (channel.go)
//	POST /internal/projects/{id}/outbox               a late reply handed to the durable outbox (outbox.go)
//	GET  /internal/projects/{id}/outbox/pending       how many replies a poll would return (outbox.go)
//	POST /internal/projects/{id}/webhook/attempts     callback attempt records (attempts.go)
//	POST /internal/projects/{id}/lfs/objects/batch    the git-lfs batch API (lfs.go)
//	POST /internal/projects/{id}/lfs/verify           an upload's verify action (lfs.go)
//
// The paths are shared/internalapi's, where the pod's typed client lives
// too. The server's route table mounts these handlers behind the runtime
// middleware (httpmw.Runtime), which admits only the token of project {id};
// this package reads and checks the pod's payload and hands it to the
// domain package that keeps it (the store, outbox, webhooklog, the object
// store). The replica-to-replica relay of a paired machine is the
// agent-proxy's, not a pod's call, and stays in agentproxy.
package agentapi

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// Store is what the handlers read and write directly (store.Store).
type Store interface {
	RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (id string, created bool, err error)
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
	ListWebhookEndpoints(ctx context.Context, projectID string, failingOnly bool) ([]store.WebhookEndpoint, error)
}

// API holds the pod-facing handlers. A nil Outbox, Attempts or Objects
// leaves its routes unmounted (the route table checks Mounts*).
type API struct {
	Store Store
	// Outbox keeps late replies (the durable webhook outbox).
	Outbox *outbox.Outbox
	// Attempts is the callback attempt log.
	Attempts *webhooklog.Log
	// Objects signs the LFS batch answer's URLs (nil: no LFS routes).
	Objects objstore.Store
	// LFSExpiry is how long a presigned LFS URL stays valid (0:
	// DefaultLFSExpiry).
	LFSExpiry time.Duration
	Log       *zap.Logger
}

func (a *API) log() *zap.Logger {
	if a.Log == nil {
		return zap.NewNop()
	}
	return a.Log
}

// ownProject returns project {id} when the caller is that project's
// runtime; anything else is refused with runtime_token_required and
// what it may not do (the middleware already admits only that token: this
// is the second check of a route that must never serve another project).
func ownProject(c echo.Context, what string) (string, error) {
	id := c.Param("id")
	if p := httpmw.PrincipalFrom(c); !p.Runtime() || p.ProjectID != id {
		return "", wire.Coded("runtime_token_required", "Only the project's own runtime may "+what+".")
	}
	return id, nil
}

// WriteTimeout bounds the write of a payload a pod handed over once its body
// was read in full. The write goes on when the pod hangs up (it stopped or
// was rescheduled while it waited): what reached the API server is kept, and
// every such write is idempotent, so the pod's retry after a restart finds
// it kept rather than lost.
const WriteTimeout = 30 * time.Second

// writeContext is the context of such a write: the request's values without
// its cancellation, ended by WriteTimeout.
func writeContext(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.Request().Context()), WriteTimeout)
}

// readJSON reads a body of at most max bytes into v: invalid_body when it
// cannot be read or decoded (naming what it must be), request_too_large
// past max.
func readJSON(c echo.Context, max int64, v any, mustBe string) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, max+1))
	if err != nil {
		return wire.Coded("invalid_body", "The body could not be read.")
	}
	if int64(len(body)) > max {
		return wire.Coded("request_too_large", "The body is larger than the limit of this route.")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return wire.Coded("invalid_body", "The body must be "+mustBe+": "+err.Error())
	}
	return nil
}
