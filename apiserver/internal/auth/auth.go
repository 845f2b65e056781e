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
	touches sync.WaitGroup // last-use writes in flight
}

type cached struct {
	row store.KeyAuth
	at  time.Time
}

// New returns an Authenticator; runtimeSecret may be empty (no runtime auth).
func New(st *store.Store, runtimeSecret []byte, log *zap.Logger) *Authenticator {
	return &Authenticator{store: st, secret: runtimeSecret, log: log, now: time.Now,
		cache: map[string]cached{}, touched: map[string]time.Time{}}
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
	a.mu.Unlock()
	if ok && now.Sub(c.at) < CacheTTL {
		return c.row, nil
	}
	row, err := a.store.LookupKey(ctx, id)
	if err != nil {
		if ok && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil && now.Sub(c.at) < a.StaleFor {
			return c.row, nil // the database is down: the row as last read
		}
		return row, err
	}
	a.mu.Lock()
	if len(a.cache) > 100_000 { // bound memory under a flood of distinct keys
		a.cache = map[string]cached{}
	}
	a.cache[id] = cached{row: row, at: now}
	a.mu.Unlock()
	return row, nil
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

// Close waits, until ctx ends, for the last-use writes still in flight; call
// it after the HTTP server has stopped taking requests and before the
// database closes.
func (a *Authenticator) Close(ctx context.Context) error { return wait.Group(ctx, &a.touches) }
