// Package auth authenticates the API server's callers (spec 5): service API
// keys (svc_sk_, 5.1) for the public API and the webhook channel, and runtime
// tokens (5.3) for /internal routes. Keys are looked up by id and their secret
// hash compared in constant time; a short-lived cache (TTL below one second)
// keeps the hot path off the database while a revocation still takes effect
// on every replica within a second.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// Principal is who is calling, put in the request context by middleware.
type Principal struct {
	KeyID       string // set for API keys
	UserID      string // set for API keys
	WorkspaceID string
	ProjectID   string // set for runtime tokens
	// KeyBudget: the API key has a credit budget of its own (metering
	// reserves against it).
	KeyBudget bool
	store.Billing
}

// Runtime reports whether the caller is a pod (runtime token).
func (p Principal) Runtime() bool { return p.ProjectID != "" && p.KeyID == "" }

// CacheTTL bounds how long a key's row is reused; revocation is visible on
// every replica after at most this long.
const CacheTTL = 500 * time.Millisecond

// refreshAhead is the age from which a key's cached row, still served, is
// read again in the background: a key in steady use then finds its row
// fresh and never waits for the database on the request path, while a row
// served is still never older than CacheTTL.
const refreshAhead = CacheTTL * 3 / 4

// Authenticator checks credentials.
type Authenticator struct {
	// StaleFor: while the database does not answer, a key this replica
	// read within this long is still served from its cache (0: not; the
	// answer is 503). A key it does not know gets 503, never 401
	// (docs/gateway.md, "When PostgreSQL is down").
	StaleFor time.Duration

	store  *store.Store
	secret []byte
	log    *zap.Logger
	now    func() time.Time

	mu      sync.Mutex
	cache   map[string]cached
	touched map[string]time.Time
	// refreshing: the keys whose rows are being read in the background.
	refreshing map[string]struct{}
	touches    sync.WaitGroup // last-use writes and background reads in flight
}

type cached struct {
	row store.KeyAuth
	at  time.Time
}

// New returns an Authenticator; runtimeSecret may be empty (no runtime auth).
func New(st *store.Store, runtimeSecret []byte, log *zap.Logger) *Authenticator {
	return &Authenticator{store: st, secret: runtimeSecret, log: log, now: time.Now,
		cache: map[string]cached{}, touched: map[string]time.Time{}, refreshing: map[string]struct{}{}}
}

// Bearer extracts the token of an "Authorization: Bearer x" header value.
func Bearer(header string) string {
	const p = "Bearer "
	if len(header) > len(p) && strings.EqualFold(header[:len(p)], p) {
		return strings.TrimSpace(header[len(p):])
	}
	return ""
}

// APIKey authenticates a svc_sk_ key. Anything else, runtime tokens
// included, is invalid_api_key (spec 5.1.2 and 5.1.4).
func (a *Authenticator) APIKey(ctx context.Context, token string) (Principal, error) {
	id, secret, ok := apikey.Parse(token)
	if !ok {
		return Principal{}, wire.InvalidAPIKey()
	}
	row, err := a.lookup(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, wire.InvalidAPIKey()
	}
	if err != nil {
		return Principal{}, wire.Unavailable(fmt.Errorf("auth: key lookup: %w", err))
	}
	if !secretMatches(secret, row.KeyHash) || row.Revoked {
		return Principal{}, wire.InvalidAPIKey()
	}
	a.touch(id)
	return Principal{KeyID: row.KeyID, UserID: row.UserID, WorkspaceID: row.WorkspaceID,
		KeyBudget: row.Budgeted, Billing: row.Billing}, nil
}

// Runtime authenticates a pod's runtime token; it must belong to projectID.
func (a *Authenticator) Runtime(ctx context.Context, token, projectID string) (Principal, error) {
	pid, err := runtimetoken.Verify(a.secret, token)
	if err != nil || pid != projectID {
		return Principal{}, wire.Coded("invalid_runtime_token",
			"Invalid runtime token for this project.")
	}
	p, err := a.store.GetProject(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, wire.Coded("project_not_found", "Project not found.")
	}
	if err != nil {
		return Principal{}, wire.Internal(err)
	}
	w, err := a.store.GetWorkspace(ctx, p.WorkspaceID)
	if err != nil {
		return Principal{}, wire.Internal(err)
	}
	return Principal{ProjectID: p.ID, WorkspaceID: w.ID, Billing: w.Billing}, nil
}

func (a *Authenticator) lookup(ctx context.Context, id string) (store.KeyAuth, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[id]
	age := now.Sub(c.at)
	refresh := false
	if ok && age >= refreshAhead && age < CacheTTL {
		_, busy := a.refreshing[id]
		if refresh = !busy; refresh {
			a.refreshing[id] = struct{}{}
		}
	}
	a.mu.Unlock()
	if ok && age < CacheTTL {
		if refresh {
			a.touches.Go(func() { a.refresh(id, now) })
		}
		return c.row, nil
	}
	row, err := a.store.LookupKey(ctx, id)
	if err != nil {
		if ok && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil && age < a.StaleFor {
			return c.row, nil // the database is down: the row as last read
		}
		return row, err
	}
	a.mu.Lock()
	a.cachePut(id, row, now)
	a.mu.Unlock()
	return row, nil
}

// refresh reads key id's row again off the request path (refreshAhead),
// as of now (taken before the read, so its age is never understated). A
// key that is gone leaves the cache, so that its next use reads it on the
// request path; a failed read leaves the cached row to expire.
func (a *Authenticator) refresh(id string, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	row, err := a.store.LookupKey(ctx, id)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.refreshing, id)
	switch {
	case err == nil:
		a.cachePut(id, row, now)
	case errors.Is(err, store.ErrNotFound):
		delete(a.cache, id)
	}
}

// cachePut caches key id's row as read at now, unless a newer read is cached;
// a.mu is held.
func (a *Authenticator) cachePut(id string, row store.KeyAuth, now time.Time) {
	if len(a.cache) > 100_000 { // bound memory under a flood of distinct keys
		a.cache = map[string]cached{}
	}
	if c, ok := a.cache[id]; ok && c.at.After(now) {
		return
	}
	a.cache[id] = cached{row: row, at: now}
}

// touch records last use at most once a minute per key, off the request path.
func (a *Authenticator) touch(id string) {
	now := a.now()
	a.mu.Lock()
	last := a.touched[id]
	stale := now.Sub(last) > time.Minute
	if stale {
		a.touched[id] = now
	}
	a.mu.Unlock()
	if !stale {
		return
	}
	a.touches.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.store.TouchAPIKey(ctx, id, now); err != nil {
			a.log.Warn("recording key use failed", zap.String("key_id", id), zap.Error(err))
		}
	})
}

// Close waits, until ctx ends, for the last-use writes and the background
// reads of keys still in flight; call it after the HTTP server has stopped
// taking requests and before the database closes.
func (a *Authenticator) Close(ctx context.Context) error { return wait.Group(ctx, &a.touches) }
