package server

import (
	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/channelapi"
	"github.com/svc-dev/svc/apiserver/internal/checkpoint"
	"github.com/svc-dev/svc/apiserver/internal/lfsbatch"
	"github.com/svc-dev/svc/shared/internalapi"
)

// registerInternal mounts the pod-facing routes (runtime token of the
// project in the path, already checked by the group's middleware).
func (s *Server) registerInternal(g *echo.Group) {
	g.POST(internalapi.PathCheckpointRecord, checkpoint.Handler(s.deps.Store))
	g.GET(internalapi.PathChannel, channelapi.Handler(s.deps.Store))
	s.Outbox.RegisterInternal(g)                         // POST /outbox: durable webhook outbox
	lfsbatch.New(s.deps.Objects, s.deps.Log).Register(g) // spec 4.3 batch + verify
}
