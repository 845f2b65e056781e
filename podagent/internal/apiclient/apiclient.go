// Package apiclient is the pod's one client for the API's runtime-token
// routes /internal/projects/{id}/… (spec 5.3): JSON in and out, the
// project's runtime token as bearer, a timeout per call, and one error type
// for answers other than 2xx. Checkpoint records (4.3), channel configuration
// and outbox hand-over use it.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTimeout bounds one call when Client.Timeout is zero.
const DefaultTimeout = 15 * time.Second

// maxAnswer bounds an answer body.
const maxAnswer = 1 << 20

// Client calls the API for one project.
type Client struct {
	BaseURL   string // SVC_API_URL
	ProjectID string
	Token     string // SVC_RUNTIME_TOKEN
	HTTP      *http.Client
	Timeout   time.Duration
}

// StatusError is an answer other than 2xx, with the API's error body.
type StatusError struct {
	Op     string
	Status int
	Body   wire.ErrorBody
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s %s", e.Op, e.Status, e.Body.Error.Code, e.Body.Error.Message)
}

// Do sends method to /internal/projects/{id}/<path>, with in as the JSON body
// when not nil, and decodes a 2xx answer into out when not nil. op names the
// call in errors.
func (c *Client) Do(ctx context.Context, op, method, path string, in, out any) error {
	if c.BaseURL == "" {
		return fmt.Errorf("%s: SVC_API_URL is not set", op)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	u := strings.TrimRight(c.BaseURL, "/") + "/internal/projects/" + url.PathEscape(c.ProjectID) + "/" + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s: reading answer: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Op: op, Status: resp.StatusCode}
		_ = json.Unmarshal(b, &se.Body)
		return se
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s: decoding answer: %w", op, err)
		}
	}
	return nil
}

// AsStatus returns the StatusError inside err, if any.
func AsStatus(err error) (*StatusError, bool) {
	var se *StatusError
	ok := errors.As(err, &se)
	return se, ok
}
