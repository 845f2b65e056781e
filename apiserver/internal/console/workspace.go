package console

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

const (
	workspaceKey = "svc.console.workspace"
	projectKey   = "svc.console.project"
)

// Workspace runs after RequireSession on routes with a :ws parameter: the
// user must be a member, else 404 (the same answer as for a workspace that
// does not exist, so ids cannot be probed).
func (c *Console) Workspace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		s, _ := sessionFrom(ec)
		wss, err := c.o.Store.ListUserWorkspaces(ec.Request().Context(), s.user.ID)
		if err != nil {
			return err
		}
		for i := range wss {
			if wss[i].ID == ec.Param("ws") {
				ec.Set(workspaceKey, wss)
				ec.Set(workspaceKey+".i", i)
				return next(ec)
			}
		}
		return c.errorPage(ec, http.StatusNotFound, "No such workspace.")
	}
}

// Project runs after Workspace on routes with a :project parameter: the
// project must belong to the workspace, else 404.
func (c *Console) Project(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		p, err := c.o.Store.GetProject(ec.Request().Context(), ec.Param("project"))
		if errors.Is(err, store.ErrNotFound) || (err == nil && p.WorkspaceID != ec.Param("ws")) {
			return c.errorPage(ec, http.StatusNotFound, "No such project.")
		}
		if err != nil {
			return err
		}
		ec.Set(projectKey, p)
		return next(ec)
	}
}

func projectFrom(ec echo.Context) store.Project { return ec.Get(projectKey).(store.Project) }

// newPage fills the parts every signed-in page has.
func newPage(ec echo.Context, title, nav string) page {
	s, _ := sessionFrom(ec)
	p := page{Title: title, Nav: nav, User: s.user, CSRF: s.row.CSRFToken}
	if wss, ok := ec.Get(workspaceKey).([]store.UserWorkspace); ok {
		p.Workspaces = wss
		i := ec.Get(workspaceKey + ".i").(int)
		p.WS = &wss[i]
	}
	return p
}

func isOwner(p page) bool { return p.WS != nil && p.WS.Role == store.RoleOwner }

// Home is GET /console: the first workspace's projects, or a page saying
// the user belongs to none.
func (c *Console) Home(ec echo.Context) error {
	s, _ := sessionFrom(ec)
	wss, err := c.o.Store.ListUserWorkspaces(ec.Request().Context(), s.user.ID)
	if err != nil {
		return err
	}
	if len(wss) == 0 {
		p := newPage(ec, "No workspace", "")
		return c.render(ec, http.StatusOK, "empty", p)
	}
	return ec.Redirect(http.StatusSeeOther, "/console/w/"+wss[0].ID+"/projects")
}

// WorkspaceHome is GET /console/w/:ws: the workspace's projects.
func (c *Console) WorkspaceHome(ec echo.Context) error {
	return ec.Redirect(http.StatusSeeOther, "/console/w/"+ec.Param("ws")+"/projects")
}

// ownerOnly answers 403 for a member who tries to change keys or channels.
func (c *Console) ownerOnly(ec echo.Context, p page) error {
	if isOwner(p) {
		return nil
	}
	return c.errorPage(ec, http.StatusForbidden, "Only owners of this workspace can change API keys and channels.")
}
