package server

import (
	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/checkpoint"
)

// registerInternal mounts the pod-facing routes (runtime token of the
// project in the path, already checked by the group's middleware).
func (s *Server) registerInternal(g *echo.Group) {
	g.POST("/checkpoints/record", checkpoint.Handler(s.deps.Store))
}
