package outbox

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

// Client posts outbox messages to the API:
// POST {SVC_API_URL}/internal/projects/{id}/outbox with the runtime token.
type Client struct {
	APIURL    string
	ProjectID string
	Token     string
	HTTP      *http.Client
	// Timeout of one POST (default 15 s).
	Timeout time.Duration
}

// StatusError is a non-2xx answer of the API.
type StatusError struct {
	Status int
	Body   wire.ErrorBody
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("outbox put: HTTP %d: %s %s", e.Status, e.Body.Error.Code, e.Body.Error.Message)
}

// Permanent reports whether the API will never take this message: an
// invalid or oversized payload, or a channel that is not the project's.
// Everything else (network, 5xx, 429, 401/403 of a stale token, a 404 of an
// API without the route) may pass and is retried.
func (e *StatusError) Permanent() bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	case http.StatusNotFound:
		return e.Body.Error.Code == "channel_not_found"
	}
	return false
}

// Put posts one message.
func (c *Client) Put(ctx context.Context, m wire.OutboxPut) (wire.OutboxPutResponse, error) {
	var out wire.OutboxPutResponse
	if c.APIURL == "" {
		return out, errors.New("outbox put: SVC_API_URL is not set")
	}
	body, err := json.Marshal(m)
	if err != nil {
		return out, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimRight(c.APIURL, "/") + "/internal/projects/" + url.PathEscape(c.ProjectID) + "/outbox"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("outbox put: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Status: resp.StatusCode}
		_ = json.Unmarshal(b, &se.Body)
		return out, se
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("outbox put: decoding answer: %w", err)
	}
	return out, nil
}
