package server

import "github.com/labstack/echo/v4"

// registerInternal mounts the pod-facing routes (runtime token of the
// project in the path, already checked by the group's middleware).
func (s *Server) registerInternal(g *echo.Group) {
}
