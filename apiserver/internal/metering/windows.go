package metering

import (
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// WindowCacheTTL bounds how stale a replica's view of a workspace's usage
// windows can be. Usage lands asynchronously anyway (Recorder). A replica
// adds the usage it writes to its cached view as the write commits
// (write-through), so on one replica a quota is seen as soon as the usage
// is written, without reading the windows back; other replicas see it
// within this TTL. Admission without a database round trip therefore runs
// for at most this long into a database outage; after it, admission fails
// closed (docs/performance.md, "Usage windows: write-through").
const WindowCacheTTL = time.Second

// windowRefreshAhead is the age from which a workspace's cached windows,
// still used, are read again in the background (Meter.refreshWindows): a
// workspace in steady use then finds them fresh and its admission does not
// wait for the database, while windows used are still never older than
// WindowCacheTTL.
const windowRefreshAhead = WindowCacheTTL * 3 / 4

type cachedWindows struct {
	windows []store.UsageWindow
	at      time.Time
	gen     uint64 // the generation the read started in
}

// windowCache holds each workspace's windows as last read. Its generation
// is bumped when a usage write begins and when it ends: a read that
// overlapped either is not cached, and a write adds its credits only to
// entries read before it began (later ones may hold them already; they
// are dropped instead).
type windowCache struct {
	mu  sync.Mutex
	m   map[string]cachedWindows
	gen uint64
	// refreshing: the workspaces whose windows are being read in the
	// background.
	refreshing map[string]struct{}
}

// generation is read before a database read; put ignores a read that a
// write overtook, so a stale view is never cached.
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

// refreshDue reports whether workspaceID's cached windows, still fresh,
// are windowRefreshAhead old and nobody reads them again yet; then the
// caller does, and calls refreshed after.
func (c *windowCache) refreshDue(workspaceID string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[workspaceID]
	if age := now.Sub(e.at); !ok || age < windowRefreshAhead || age >= WindowCacheTTL {
		return false
	}
	if _, busy := c.refreshing[workspaceID]; busy {
		return false
	}
	if c.refreshing == nil {
		c.refreshing = map[string]struct{}{}
	}
	c.refreshing[workspaceID] = struct{}{}
	return true
}

// refreshed ends a background read that refreshDue asked for.
func (c *windowCache) refreshed(workspaceID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.refreshing, workspaceID)
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
	c.m[workspaceID] = cachedWindows{windows: w, at: at, gen: gen}
}

// beginWrite is called before a usage write; it returns the generation
// the write's end passes to written or failed.
func (c *windowCache) beginWrite() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	return c.gen
}

// written adds the credits a committed write added (workspace → window
// name → credits) to the cached windows, as the store's upsert did at
// nowMs. An entry read after the write began, or lacking a window the write
// touched, or holding it expired (the store restarted it), is dropped: the
// next admission reads it.
func (c *windowCache) written(credits map[string]map[string]int64, nowMs int64, writeGen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for ws, byName := range credits {
		e, ok := c.m[ws]
		if !ok {
			continue
		}
		if e.gen >= writeGen {
			delete(c.m, ws)
			continue
		}
		// Readers hold the old slice: the entry gets a new one.
		w := append([]store.UsageWindow(nil), e.windows...)
		applied := 0
		for i := range w {
			if add, ok := byName[w[i].WindowName]; ok && w[i].ResetsAt > nowMs {
				w[i].CreditsMicro += add
				applied++
			}
		}
		if applied != len(byName) {
			delete(c.m, ws)
			continue
		}
		e.windows = w
		c.m[ws] = e
	}
}

// failed ends a write that may or may not have committed: the cached
// windows of its workspaces are dropped.
func (c *windowCache) failed(workspaceIDs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range workspaceIDs {
		delete(c.m, id)
	}
}

// windowCredits sums what records add to each workspace's windows.
func windowCredits(recs []store.UsageRecord, windows [][]store.WindowSpec) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for i, r := range recs {
		byName := out[r.WorkspaceID]
		if byName == nil {
			byName = map[string]int64{}
			out[r.WorkspaceID] = byName
		}
		for _, w := range windows[i] {
			byName[w.Name] += r.CreditsMicro
		}
	}
	return out
}
