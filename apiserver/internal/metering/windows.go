package metering

import (
	"context"
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

// maxRefresh bounds the workspaces whose windows one written batch reads
// back.
const maxRefresh = 64

// refreshWindows runs after the Recorder wrote a batch (on its goroutine):
// it drops the cached windows of the batch's workspaces, as before, then
// reads back those it held and caches them again. Without the read-back the
// next request of each workspace read its windows in admission, before its
// first byte: with streams longer than the Recorder's flush interval that
// was every request at one client (issue 26). A read an invalidation
// overtakes is not cached (generation).
func (m *Meter) refreshWindows(workspaceIDs ...string) {
	held := m.windows.invalidate(workspaceIDs...)
	if len(held) > maxRefresh {
		held = held[:maxRefresh]
	}
	seen := make(map[string]bool, len(held))
	for _, id := range held {
		if seen[id] {
			continue
		}
		seen[id] = true
		gen := m.windows.generation()
		now := m.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w, err := m.Store.UsageWindows(ctx, id)
		cancel()
		if err == nil {
			m.windows.put(id, w, now, gen)
		}
	}
}
