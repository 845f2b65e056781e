package internalapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// PodClient is the API's client of one pod's routes (git-flush, readiness),
// with the project's runtime token as bearer.
type PodClient struct {
	// BaseURL is the pod's address (http or https).
	BaseURL string
	Token   string
	HTTP    *http.Client
	// Timeout of one call; zero means DefaultTimeout.
	Timeout time.Duration
	// ProjectID, when set, is the project whose pod Ready expects: a
	// readiness answer naming another project (or, with Generation, another
	// generation) is a *wire.WrongPodError.
	ProjectID  string
	Generation int64
}

// GitFlush asks the pod to commit, persist and (with a tag) tag its work
// tree (spec 4.3, 10.4).
func (p *PodClient) GitFlush(ctx context.Context, req wire.GitFlushRequest) (wire.GitFlushResponse, error) {
	return podJSON[wire.GitFlushResponse](ctx, p, "git-flush", http.MethodPost, PodGitFlush, nil, req)
}

// Restore asks the pod to commit a rollback to req.SHA as a new turn.
func (p *PodClient) Restore(ctx context.Context, req wire.RestoreRequest) (wire.RestoreResponse, error) {
	return podJSON[wire.RestoreResponse](ctx, p, "restore", http.MethodPost, PodRestore, nil, req)
}

// Claim hands a spare pod of the warm pool its project (docs/scale.md); the
// client's Token is then the pod's bootstrap token
// (runtimetoken.Bootstrap), not a runtime token. The pod answers 202 once
// it took the claim, before its cold start; a pod that already serves
// another claim answers 409 pod_claimed, the same claim again 202.
func (p *PodClient) Claim(ctx context.Context, c wire.PodClaim) (wire.PodClaimAnswer, error) {
	return podJSON[wire.PodClaimAnswer](ctx, p, "claim", http.MethodPost, PodClaim, nil, c)
}

// Ready reports whether the pod's /readyz answers 200 and, with ProjectID
// set, names that project (and Generation).
func (p *PodClient) Ready(ctx context.Context) error {
	if err := p.checkURL(); err != nil {
		return err
	}
	timeout := p.Timeout
	timeout = settings.PositiveOr(timeout, DefaultTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url(PodReadyz), nil)
	if err != nil {
		return err
	}
	hc := p.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Op: "readyz", Status: resp.StatusCode}
	}
	if p.ProjectID == "" {
		return nil
	}
	if rerr != nil {
		return rerr
	}
	var r wire.PodReadiness
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("readyz: the answer is not a pod's readiness: %w", err)
	}
	return r.Serves(p.ProjectID, p.Generation)
}

// podJSON is one JSON call to the pod's path with the runtime token and
// the extra header (nil: none).
func podJSON[T any](ctx context.Context, p *PodClient, op, method, path string, header http.Header, in any) (T, error) {
	var out T
	if err := p.check(); err != nil {
		return out, err
	}
	err := callWith(ctx, p.HTTP, p.Timeout, op, method, p.url(path), p.Token, header, in, &out)
	return out, err
}

func (p *PodClient) check() error {
	if err := p.checkURL(); err != nil {
		return err
	}
	if p.Token == "" {
		return errors.New("no runtime token")
	}
	return nil
}

func (p *PodClient) checkURL() error {
	u, err := url.Parse(p.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid pod URL %q", p.BaseURL)
	}
	return nil
}

func (p *PodClient) url(path string) string {
	u, _ := url.Parse(p.BaseURL)
	return u.JoinPath(path).String()
}
