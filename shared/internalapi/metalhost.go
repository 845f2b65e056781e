package internalapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/svc-dev/svc/shared/wire"
)

// Micro-VM runtime (spec 10.5). Routes the guest's pod serves to the metal
// host (runtime-token bearer, like every /agent/* route):
const (
	// PodMetalExport + wire.MetalPart* streams one archive from the guest:
	// git commits the live tree first and returns the .git layout of
	// repoarchive; data is the work tree without .git; src is HEAD's content.
	PodMetalExport = PodAgent + "/metal/export/"
	// PodMetalPoweroff flushes the guest's disk and ends the VM.
	PodMetalPoweroff = PodAgent + "/metal/poweroff"
)

// MetalHostProjects + "/{projectId}" is a project's VM on the metal host
// (host token bearer): PUT ensures it runs (wire.MetalStartRequest →
// wire.MetalProject), GET reports it, DELETE stops it (?mode=suspend|discard),
// POST .../export exports now.
const MetalHostProjects = "/v1/projects"

// MetalHostClient is the typed client of the metal host's API
// (podagent/cmd/metalhost): the apiserver's metal runtime driver starts,
// reports and stops a project's micro-VM through it.
type MetalHostClient struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// MetalHostError is a non-2xx answer of the metal host.
type MetalHostError struct {
	Status  int
	Code    string
	Message string
}

func (e *MetalHostError) Error() string {
	return fmt.Sprintf("metal host: %d %s: %s", e.Status, e.Code, e.Message)
}

func (c *MetalHostClient) projectURL(id string) string {
	return strings.TrimRight(c.BaseURL, "/") + MetalHostProjects + "/" + url.PathEscape(id)
}

// Ensure makes the project's guest run and returns it (URL set).
func (c *MetalHostClient) Ensure(ctx context.Context, id string, req wire.MetalStartRequest) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodPut, c.projectURL(id), req)
}

// Status reports the project's guest.
func (c *MetalHostClient) Status(ctx context.Context, id string) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodGet, c.projectURL(id), nil)
}

// Stop stops the project's guest (mode wire.MetalStopSuspend or
// wire.MetalStopDiscard).
func (c *MetalHostClient) Stop(ctx context.Context, id, mode string) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodDelete, c.projectURL(id)+"?mode="+url.QueryEscape(mode), nil)
}

// Export pulls .git and the data archive (and with source, the source
// archive) from the guest into storage now.
func (c *MetalHostClient) Export(ctx context.Context, id string, source bool) (wire.MetalProject, error) {
	u := c.projectURL(id) + "/export"
	if source {
		u += "?source=true"
	}
	return c.do(ctx, http.MethodPost, u, nil)
}

func (c *MetalHostClient) do(ctx context.Context, method, u string, body any) (wire.MetalProject, error) {
	var out wire.MetalProject
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return out, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return out, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if resp.StatusCode/100 != 2 {
		var eb wire.ErrorBody
		_ = json.Unmarshal(b, &eb)
		return out, &MetalHostError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return out, json.Unmarshal(b, &out)
}
