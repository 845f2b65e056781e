// Package metal is the runtime driver of micro-VM projects (spec 10.5): the
// agent runs as `podagent` in guest mode inside a QEMU micro-VM on a metal
// host (podagent/cmd/metalhost), which this driver asks to start, report
// and stop a project's guest. The API then reaches the guest at the address
// the host returns, so the webhook URL stays the same (spec 4.2). The host
// — not the API, not the guest — moves the project's archives.
package metal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// Name is the driver name recorded in runtime assignments.
const Name = "metal"

// Options configure the driver.
type Options struct {
	// HostURL is the metal host's API (SVC_METAL_HOST_URL).
	HostURL string
	// HostToken authenticates the API to the host (SVC_METAL_HOST_TOKEN).
	HostToken string
	// RuntimeSecret mints each project's runtime token; the host and the
	// guest get only the project's own token.
	RuntimeSecret []byte
	// StartTimeout bounds one Ensure (a cold boot under TCG takes seconds).
	StartTimeout time.Duration
	// RetryAfter is told to clients after a failed start.
	RetryAfter time.Duration
	Log        *zap.Logger
}

// Driver is the metal runtime driver.
type Driver struct {
	o      Options
	client *internalapi.MetalHostClient
	log    *zap.Logger
}

// New returns a driver; an empty host URL or token is a start-up error.
func New(o Options) (*Driver, error) {
	if o.HostURL == "" || o.HostToken == "" {
		return nil, errors.New("runtime driver metal needs SVC_METAL_HOST_URL and SVC_METAL_HOST_TOKEN")
	}
	if _, err := url.Parse(o.HostURL); err != nil {
		return nil, fmt.Errorf("SVC_METAL_HOST_URL: %w", err)
	}
	o.StartTimeout = settings.PositiveOr(o.StartTimeout, 2*time.Minute)
	o.RetryAfter = settings.PositiveOr(o.RetryAfter, 5*time.Second)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Driver{o: o, log: o.Log.Named("runtime.metal"),
		client: &internalapi.MetalHostClient{BaseURL: o.HostURL, Token: o.HostToken, HTTP: &http.Client{Timeout: o.StartTimeout}}}, nil
}

// Name implements runtimes.Driver.
func (d *Driver) Name() string { return Name }

// Ensure implements runtimes.Driver: the host boots the guest once however
// many requests ask (it single-flights per project).
func (d *Driver) Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error) {
	if len(d.o.RuntimeSecret) == 0 {
		return runtimes.Endpoint{}, d.startErr(p.ID, errors.New("SVC_RUNTIME_AUTH_SECRET is not set: no runtime token can be minted"))
	}
	mode := p.CloudSyncMode
	if mode == "" {
		mode = syncmode.Default
	}
	token := runtimetoken.Mint(d.o.RuntimeSecret, p.ID)
	st, err := d.client.Ensure(ctx, p.ID, wire.MetalStartRequest{RuntimeToken: token, CloudSyncMode: string(mode)})
	if err != nil {
		return runtimes.Endpoint{}, d.startErr(p.ID, err)
	}
	u, err := url.Parse(st.URL)
	if err != nil || st.URL == "" {
		return runtimes.Endpoint{}, d.startErr(p.ID, fmt.Errorf("the metal host returned no guest URL (state %s)", st.State))
	}
	return runtimes.Endpoint{URL: u, Token: token}, nil
}

func (d *Driver) startErr(id string, err error) error {
	d.log.Error("starting the micro-VM guest failed", zap.String("projectId", id), zap.Error(err))
	return &runtimes.StartError{ProjectID: id, RetryAfter: d.o.RetryAfter, Err: err}
}

// Stop implements runtimes.Driver: the guest is suspended (exported, and
// snapshotted when the host keeps snapshots).
func (d *Driver) Stop(ctx context.Context, projectID string) error {
	_, err := d.client.Stop(ctx, projectID, wire.MetalStopSuspend)
	return err
}

// Status implements runtimes.Driver.
func (d *Driver) Status(ctx context.Context, projectID string) (runtimes.Status, error) {
	st, err := d.client.Status(ctx, projectID)
	if err != nil {
		return runtimes.Status{Driver: Name, State: runtimes.StateFailed, LastError: err.Error()}, nil
	}
	out := runtimes.Status{Driver: Name, Endpoint: st.URL, PID: st.PID, StartedAt: st.StartedAt, LastError: st.LastError}
	switch st.State {
	case "running":
		out.State = runtimes.StateRunning
	case "failed", "quarantined":
		out.State = runtimes.StateFailed
	default:
		out.State = runtimes.StateStopped
	}
	return out, nil
}

// Running implements runtimes.Finder: the guest when the host reports it
// running; nothing is booted or resumed.
func (d *Driver) Running(ctx context.Context, p store.Project) (runtimes.Endpoint, bool, error) {
	st, err := d.client.Status(ctx, p.ID)
	if err != nil || st.State != "running" || st.URL == "" || len(d.o.RuntimeSecret) == 0 {
		return runtimes.Endpoint{}, false, nil
	}
	u, err := url.Parse(st.URL)
	if err != nil {
		return runtimes.Endpoint{}, false, nil
	}
	return runtimes.Endpoint{URL: u, Token: runtimetoken.Mint(d.o.RuntimeSecret, p.ID)}, true, nil
}

// RetryHint is the Retry-After told after a failed boot.
func (d *Driver) RetryHint() time.Duration { return d.o.RetryAfter }
