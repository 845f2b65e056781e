package httpmw

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

const projectKey = "svc.project"

// ProjectFrom returns the project loaded by ProjectMember.
func ProjectFrom(c echo.Context) store.Project { return c.Get(projectKey).(store.Project) }

// ProjectMember runs after APIKey: the key's user must be a member of the
// workspace that owns the project named by the route parameter param (spec
// 5.2.1). Otherwise 403 — also for a project that does not exist, so a key
// cannot probe for other workspaces' project ids. The project row is read
// on every request; the membership answer is cached for auth.CacheTTL, like
// key rows, so a removed membership is seen within a second on every replica.
func ProjectMember(st *store.Store, param string) echo.MiddlewareFunc {
	cache := &memberCache{m: map[memberKey]memberEntry{}}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := PrincipalFrom(c)
			proj, ok, err := cache.lookup(c.Request().Context(), st, c.Param(param), p.UserID)
			if err != nil {
				return wire.Unavailable(err)
			}
			if !ok {
				return wire.Coded("project_access_denied", "This API key has no access to the project.")
			}
			c.Set(projectKey, proj)
			return next(c)
		}
	}
}

type memberKey struct{ workspace, user string }

type memberEntry struct {
	ok bool
	at time.Time
}

type memberCache struct {
	mu sync.Mutex
	m  map[memberKey]memberEntry
}

func (mc *memberCache) lookup(ctx context.Context, st *store.Store, projectID, userID string) (store.Project, bool, error) {
	proj, err := st.GetProject(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Project{}, false, nil
	}
	if err != nil {
		return store.Project{}, false, err
	}
	k, now := memberKey{proj.WorkspaceID, userID}, time.Now()
	mc.mu.Lock()
	e, hit := mc.m[k]
	mc.mu.Unlock()
	if hit && now.Sub(e.at) < auth.CacheTTL {
		return proj, e.ok, nil
	}
	ok, err := st.IsMember(ctx, proj.WorkspaceID, userID)
	if err != nil {
		return store.Project{}, false, err
	}
	mc.mu.Lock()
	if len(mc.m) > 100_000 {
		mc.m = map[memberKey]memberEntry{}
	}
	mc.m[k] = memberEntry{ok: ok, at: now}
	mc.mu.Unlock()
	return proj, ok, nil
}

// SetProject stores the project a request acts on (for routes whose
// caller is authorised another way, such as a pod's runtime token).
func SetProject(c echo.Context, p store.Project) { c.Set(projectKey, p) }
