// Package metalapi is the typed client of the metal host's API (spec 10.5,
// podagent/cmd/metalhost): the apiserver's metal runtime driver starts,
// reports and stops a project's micro-VM through it. Paths and bodies are
// wire's, so the host and its callers cannot drift apart.
package metalapi

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

// Client calls one metal host.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// Error is a non-2xx answer of the host.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("metal host: %d %s: %s", e.Status, e.Code, e.Message)
}

func (c *Client) projectURL(id string) string {
	return strings.TrimRight(c.BaseURL, "/") + wire.MetalHostProjectsPath + "/" + url.PathEscape(id)
}

// Ensure makes the project's guest run and returns it (URL set).
func (c *Client) Ensure(ctx context.Context, id string, req wire.MetalStartRequest) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodPut, c.projectURL(id), req)
}

// Status reports the project's guest.
func (c *Client) Status(ctx context.Context, id string) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodGet, c.projectURL(id), nil)
}

// Stop stops the project's guest (mode wire.MetalStopSuspend or
// wire.MetalStopDiscard).
func (c *Client) Stop(ctx context.Context, id, mode string) (wire.MetalProject, error) {
	return c.do(ctx, http.MethodDelete, c.projectURL(id)+"?mode="+url.QueryEscape(mode), nil)
}

// Export pulls .git and the data archive (and with source, the source
// archive) from the guest into storage now.
func (c *Client) Export(ctx context.Context, id string, source bool) (wire.MetalProject, error) {
	u := c.projectURL(id) + "/export"
	if source {
		u += "?source=true"
	}
	return c.do(ctx, http.MethodPost, u, nil)
}

func (c *Client) do(ctx context.Context, method, u string, body any) (wire.MetalProject, error) {
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
		return out, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return out, json.Unmarshal(b, &out)
}
