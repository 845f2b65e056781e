// Package runtimes decides where a project's agent runs and how the API
// reaches it (docs/design.md §4, "runtime"). A Driver starts or finds the runtime
// of a project and returns its Endpoint; the local driver (runtimes/local) runs
// one podagent process per project, the Kubernetes driver one pod per project,
// and the paired driver (package pairing) a user's machine connected through
// a tunnel. The Router pins each project to one runtime at a time (spec
// 10.1.1) and records the assignment in the store.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Endpoint is how the API reaches a running agent: its HTTP surface
// (/agent/*, /healthz, /readyz) lives under URL, every call carries Token (the
// project's runtime token) as a bearer, and Transport carries the request
// (nil: the caller's default transport; the paired driver sets its tunnel).
type Endpoint struct {
	URL       *url.URL
	Token     string
	Transport http.RoundTripper
	// Hold, when set, is called as a request to the agent starts, and the
	// function it returns once that request has ended. A driver that stops
	// idle runtimes (kubernetes) counts the requests in flight with it, so a
	// request longer than the idle time keeps its runtime.
	Hold func() (release func())
}

// State is what a driver knows about a project's runtime.
type State string

const (
	StateStopped  State = "stopped"
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateFailed   State = "failed"
	// StateOffline: pinned to a paired machine that is not connected.
	StateOffline State = "offline"
)

// Status describes a project's runtime for operators and tests.
type Status struct {
	Driver    string    `json:"driver"`
	State     State     `json:"state"`
	Endpoint  string    `json:"endpoint,omitempty"`
	PID       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	Restarts  int       `json:"restarts,omitempty"`
	LastError string    `json:"lastError,omitempty"`
}

// Driver runs agents. Implementations are safe for concurrent use.
type Driver interface {
	// Name is recorded in the runtime assignment (local, kubernetes, paired).
	Name() string
	// Ensure returns the endpoint of the project's running agent, starting
	// it first when needed (concurrent calls for one project start it once).
	// Errors: *StartError when a cold start failed, ErrOffline when the
	// runtime cannot be reached and cannot be started by the API.
	Ensure(ctx context.Context, p store.Project) (Endpoint, error)
	// Stop stops the project's runtime, if this driver runs one.
	Stop(ctx context.Context, projectID string) error
	// Status reports the project's runtime as this driver sees it.
	Status(ctx context.Context, projectID string) (Status, error)
}

// PinnedDriver is a Driver that serves a project from the assignment the
// Router has already loaded: the paired hub reads in it which API replica
// holds the machine's tunnel.
type PinnedDriver interface {
	EnsurePinned(ctx context.Context, p store.Project, a store.RuntimeAssignment) (Endpoint, error)
}

// AssignmentOwner is a Driver that keeps the project's runtime assignment
// itself (the kubernetes driver: pod generation, name and IP, shared by every
// API replica). The Router hands it the assignment it loaded (nil when the
// project has none, or one of another driver) and records nothing for it.
type AssignmentOwner interface {
	EnsureAssigned(ctx context.Context, p store.Project, a *store.RuntimeAssignment) (Endpoint, error)
}

// Closer is implemented by drivers that own processes or connections which
// must end when the API server shuts down.
type Closer interface {
	Close(ctx context.Context) error
}

// ErrOffline means the project is pinned to a paired machine that is not
// connected (spec 7.2: 503 instance_offline).
var ErrOffline = errors.New("runtime: the paired machine of this project is not connected")

// StartError is a failed cold start (spec 7.2: 503 agent_start_failed,
// retryable after RetryAfter).
type StartError struct {
	ProjectID  string
	RetryAfter time.Duration
	Err        error
	// Reason, when set, is why the start failed in words safe to show the
	// caller (a pod's state, a timeout): the 503's message carries it. Err
	// stays in the logs only.
	Reason string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("runtime: starting the agent of %s failed: %v", e.ProjectID, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// Unavailable is the answer of a handler that needs the agent for one call
// (publish, rollback) when Ensure failed with err: a failed cold start or an
// offline paired machine is a 503 agent_unavailable to retry shortly; any
// other error is a 500.
func Unavailable(err error) *wire.Error {
	var se *StartError
	if !errors.As(err, &se) && !errors.Is(err, ErrOffline) {
		return wire.Internal(err)
	}
	e := wire.Coded("agent_unavailable",
		"The project's agent is not available; retry shortly.")
	e.Headers, e.Cause = map[string]string{"Retry-After": "5"}, err
	return e
}
