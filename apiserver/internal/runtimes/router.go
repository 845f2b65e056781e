package runtimes

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Store is what the Router needs of the database.
type Store interface {
	GetRuntimeAssignment(ctx context.Context, projectID string) (store.RuntimeAssignment, error)
	PinRuntime(ctx context.Context, a store.RuntimeAssignment) (store.RuntimeAssignment, error)
}

// Router is the Driver the agent-proxy uses: it sends a project to the paired
// driver when the project is pinned to a paired machine, else to the default
// driver (local or kubernetes), and records the assignment, so a project is
// pinned to one runtime at a time and its URL is the same whatever runs it.
type Router struct {
	Store   Store
	Default Driver
	// Paired serves projects pinned to a paired machine; nil: none are.
	Paired Driver
	// Instance names this API server process in local assignments.
	Instance string
	Log      *zap.Logger

	restarts sync.Map // projectID → *sync.Mutex (lockRestart)
}

// Name implements Driver.
func (r *Router) Name() string { return "router" }

// Ensure implements Driver.
func (r *Router) Ensure(ctx context.Context, p store.Project) (Endpoint, error) {
	a, err := r.Store.GetRuntimeAssignment(ctx, p.ID)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Endpoint{}, err
	}
	if found && a.Driver == store.DriverPaired {
		// Pinned to a paired machine: a runtime the default driver may still
		// run from before the pairing must not write the project too.
		r.stopIfRunning(r.Default, p.ID)
		if r.Paired == nil {
			return Endpoint{}, ErrOffline
		}
		if pd, ok := r.Paired.(PinnedDriver); ok {
			return pd.EnsurePinned(ctx, p, a)
		}
		return r.Paired.Ensure(ctx, p)
	}
	if r.Paired != nil {
		r.stopIfRunning(r.Paired, p.ID) // unpinned (token revoked): drop its tunnel
	}
	if owner, ok := r.Default.(AssignmentOwner); ok {
		var cur *store.RuntimeAssignment
		if found && a.Driver == r.Default.Name() {
			cur = &a
		}
		return owner.EnsureAssigned(ctx, p, cur)
	}
	if found && a.Driver == r.Default.Name() && a.Endpoint == "" {
		// `admin project restart` (another process) cleared the endpoint:
		// the running runtime stops gracefully (its shutdown flush, spec
		// 10.2) and the next one starts with the row's mode (spec 3.1).
		unlock := r.lockRestart(p.ID)
		defer unlock()
		if cur, err := r.Store.GetRuntimeAssignment(ctx, p.ID); err == nil && cur.Driver == a.Driver && cur.Endpoint == "" {
			r.log().Info("runtime restart requested; stopping the running one", zap.String("projectId", p.ID),
				zap.Int64("generation", cur.Generation))
			if err := r.Default.Stop(context.WithoutCancel(ctx), p.ID); err != nil {
				return Endpoint{}, err
			}
			a, found = cur, true
		}
	}
	ep, err := r.Default.Ensure(ctx, p)
	if err != nil {
		return Endpoint{}, err
	}
	endpoint := ep.URL.String()
	if !found || a.Driver != r.Default.Name() || a.Endpoint != endpoint || a.Instance != r.Instance {
		_, err := r.Store.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: p.ID, Driver: r.Default.Name(),
			Endpoint: endpoint, Instance: r.Instance, CloudSyncMode: string(p.CloudSyncMode)})
		if err != nil {
			r.log().Warn("recording the runtime assignment failed", zap.String("projectId", p.ID), zap.Error(err))
		}
	}
	return ep, nil
}

// lockRestart serialises restarts of one project on this replica, so the
// request that follows a restart stops the old runtime once and the ones
// after it (which see the new endpoint) stop nothing.
func (r *Router) lockRestart(projectID string) func() {
	v, _ := r.restarts.LoadOrStore(projectID, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// Stop implements Driver: it stops the project's runtime on every driver.
func (r *Router) Stop(ctx context.Context, projectID string) error {
	err := r.Default.Stop(ctx, projectID)
	if r.Paired != nil {
		err = errors.Join(err, r.Paired.Stop(ctx, projectID))
	}
	return err
}

// Status implements Driver: the status on the driver the project is pinned to.
func (r *Router) Status(ctx context.Context, projectID string) (Status, error) {
	a, err := r.Store.GetRuntimeAssignment(ctx, projectID)
	if err == nil && a.Driver == store.DriverPaired {
		if r.Paired == nil {
			return Status{Driver: store.DriverPaired, State: StateOffline}, nil
		}
		return r.Paired.Status(ctx, projectID)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Status{}, err
	}
	return r.Default.Status(ctx, projectID)
}

// Close closes the drivers that own processes or connections.
func (r *Router) Close(ctx context.Context) error {
	var errs []error
	for _, d := range []Driver{r.Default, r.Paired} {
		if c, ok := d.(Closer); ok && d != nil {
			errs = append(errs, c.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

func (r *Router) stopIfRunning(d Driver, projectID string) {
	st, err := d.Status(context.Background(), projectID)
	if err != nil || (st.State != StateRunning && st.State != StateStarting) {
		return
	}
	r.log().Info("stopping a runtime the project is no longer pinned to",
		zap.String("projectId", projectID), zap.String("driver", d.Name()))
	go func() {
		if err := d.Stop(context.Background(), projectID); err != nil {
			r.log().Warn("stopping an unpinned runtime failed", zap.String("projectId", projectID), zap.Error(err))
		}
	}()
}

func (r *Router) log() *zap.Logger {
	if r.Log == nil {
		return zap.NewNop()
	}
	return r.Log
}
