package httpmw

import (
	"errors"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

const projectKey = "svc.project"

// ProjectFrom returns the project loaded by ProjectMember.
func ProjectFrom(c echo.Context) store.Project { return c.Get(projectKey).(store.Project) }

// ProjectMember runs after APIKey: the key's user must be a member of the
// workspace that owns the project named by the route parameter param (spec
// 5.2.1). Otherwise 403 — also for a project that does not exist, so a key
// cannot probe for other workspaces' project ids.
func ProjectMember(st *store.Store, param string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := PrincipalFrom(c)
			forbidden := apierr.Forbidden("project_access_denied", "This API key has no access to the project.")
			proj, err := st.GetProject(c.Request().Context(), c.Param(param))
			if errors.Is(err, store.ErrNotFound) {
				return forbidden
			}
			if err != nil {
				return apierr.Internal(err)
			}
			ok, err := st.IsMember(c.Request().Context(), proj.WorkspaceID, p.UserID)
			if err != nil {
				return apierr.Internal(err)
			}
			if !ok {
				return forbidden
			}
			c.Set(projectKey, proj)
			return next(c)
		}
	}
}
