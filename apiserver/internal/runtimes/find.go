package runtimes

import (
	"context"
	"errors"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Finder is a Driver that can hand out the endpoint of a project's agent
// that is already serving, without starting, waking or touching it (a
// request through that endpoint does not count as a use for an idle stop).
type Finder interface {
	// Running returns the endpoint and true when the project's agent is
	// serving; false (and no error) when it is not.
	Running(ctx context.Context, p store.Project) (Endpoint, bool, error)
}

// Found is what Router.Find learned: the endpoint of a serving agent, or
// the status of one that is not serving.
type Found struct {
	Serving  bool
	Endpoint Endpoint
	Status   Status
	// RetryAfter is set with StateFailed: the driver's retry hint.
	RetryAfter time.Duration
}

// Find reports the project's agent on the driver the project is pinned to
// and never starts or wakes one: the webhook channel's health answers from
// it (a monitoring system polling every project must not keep every agent
// awake).
func (r *Router) Find(ctx context.Context, p store.Project) (Found, error) {
	a, err := r.Store.GetRuntimeAssignment(ctx, p.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Found{}, err
	}
	if err == nil && a.Driver == store.DriverPaired {
		if r.Paired == nil {
			return Found{Status: Status{Driver: store.DriverPaired, State: StateOffline}}, nil
		}
		return find(ctx, r.Paired, p)
	}
	return find(ctx, r.Default, p)
}

func find(ctx context.Context, d Driver, p store.Project) (Found, error) {
	if f, ok := d.(Finder); ok {
		ep, serving, err := f.Running(ctx, p)
		if err != nil {
			return Found{}, err
		}
		if serving {
			return Found{Serving: true, Endpoint: ep}, nil
		}
	}
	st, err := d.Status(ctx, p.ID)
	if err != nil {
		return Found{}, err
	}
	out := Found{Status: st}
	if st.State == StateRunning {
		// A driver that cannot hand out an endpoint without Ensure is
		// reported by its state only.
		out.Status.State = StateStarting
	}
	if rh, ok := d.(interface{ RetryHint() time.Duration }); ok && st.State == StateFailed {
		out.RetryAfter = rh.RetryHint()
	}
	return out, nil
}
