package metering

import (
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// WindowCacheTTL bounds how stale a replica's view of a workspace's usage
// windows can be. Usage lands asynchronously anyway (Recorder); a replica
// drops its cached view as soon as it writes usage of that workspace, so on
// one replica a quota is seen as soon as the usage is written, and on others
// within this TTL.
const WindowCacheTTL = time.Second

type cachedWindows struct {
	windows []store.UsageWindow
	at      time.Time
}

type windowCache struct {
	mu  sync.Mutex
	m   map[string]cachedWindows
	gen uint64 // bumped by every invalidation
}

// generation is read before a database read; put ignores a read that an
// invalidation overtook, so a stale view is never cached.
func (c *windowCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *windowCache) get(workspaceID string, now time.Time) ([]store.UsageWindow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[workspaceID]
	if !ok || now.Sub(e.at) >= WindowCacheTTL {
		return nil, false
	}
	return e.windows, true
}

func (c *windowCache) put(workspaceID string, w []store.UsageWindow, at time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) > 100_000 {
		c.m = map[string]cachedWindows{}
	}
	c.m[workspaceID] = cachedWindows{windows: w, at: at}
}

// invalidate drops the cached windows of the given workspaces; it returns
// those it held (the workspaces this replica serves now).
func (c *windowCache) invalidate(workspaceIDs ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	var held []string
	for _, id := range workspaceIDs {
		if _, ok := c.m[id]; ok {
			held = append(held, id)
			delete(c.m, id)
		}
	}
	return held
}
