package internalapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTimeout bounds one call when a client's Timeout is zero.
const DefaultTimeout = 15 * time.Second

// maxAnswer bounds an answer body.
const maxAnswer = 1 << 20

// Client is the pod's client of the API's per-project internal routes: JSON
// in and out, the project's runtime token as bearer, a timeout per call.
// Build it once and share it; it holds no per-call state.
type Client struct {
	BaseURL   string // SVC_API_URL
	ProjectID string
	Token     string // SVC_RUNTIME_TOKEN
	HTTP      *http.Client
	// Timeout of one call; zero means DefaultTimeout.
	Timeout time.Duration
}

// StatusError is an answer other than 2xx, with the peer's error body.
type StatusError struct {
	Op     string
	Status int
	Body   wire.ErrorBody
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s %s", e.Op, e.Status, e.Body.Error.Code, e.Body.Error.Message)
}

// AsStatus returns the StatusError inside err, if any.
func AsStatus(err error) (*StatusError, bool) {
	var se *StatusError
	ok := errors.As(err, &se)
	return se, ok
}

// URL is the absolute URL of path under the project's internal group.
func (c *Client) URL(path string) string { return ProjectURL(c.BaseURL, c.ProjectID, path) }

// CompletionsURL is where the pod's agent loop posts chat completions.
func (c *Client) CompletionsURL() string { return c.URL(PathChatCompletions) }

// LFSURL is the project's lfs.url (git-lfs appends /objects/batch).
func (c *Client) LFSURL() string { return c.URL(PathLFS) }

// RecordCheckpoint posts one checkpoint record (spec 4.3).
func (c *Client) RecordCheckpoint(ctx context.Context, rec wire.CheckpointRecord) (wire.CheckpointRecordResponse, error) {
	return doJSON[wire.CheckpointRecordResponse](ctx, c, c.Timeout, "checkpoint record", http.MethodPost, PathCheckpointRecord, rec)
}

// ChannelConfig fetches the project's webhook channel configuration;
// timeout bounds the call (zero: the client's).
func (c *Client) ChannelConfig(ctx context.Context, timeout time.Duration) (wire.ChannelConfig, error) {
	return doJSON[wire.ChannelConfig](ctx, c, timeout, "channel config", http.MethodGet, PathChannel, nil)
}

// PutOutbox hands one message to the API's durable outbox.
func (c *Client) PutOutbox(ctx context.Context, m wire.OutboxPut) (wire.OutboxPutResponse, error) {
	return doJSON[wire.OutboxPutResponse](ctx, c, c.Timeout, "outbox put", http.MethodPost, PathOutbox, m)
}

// OutboxPending counts the messages of the project's channel the API's
// durable outbox holds for a poll; timeout bounds the call (zero: the
// client's).
func (c *Client) OutboxPending(ctx context.Context, timeout time.Duration) (wire.OutboxPending, error) {
	return doJSON[wire.OutboxPending](ctx, c, timeout, "outbox pending", http.MethodGet, PathOutboxPending, nil)
}

// PutWebhookAttempts hands callback attempt records to the API's log
// (idempotent on the attempt ids).
func (c *Client) PutWebhookAttempts(ctx context.Context, in wire.WebhookAttemptsPut) (wire.WebhookAttemptsPutResponse, error) {
	return doJSON[wire.WebhookAttemptsPutResponse](ctx, c, c.Timeout, "webhook attempts", http.MethodPost, PathWebhookAttempts, in)
}

// doJSON is one call whose 2xx answer is a T.
func doJSON[T any](ctx context.Context, c *Client, timeout time.Duration, op, method, path string, in any) (T, error) {
	var out T
	err := c.do(ctx, timeout, op, method, path, in, &out)
	return out, err
}

// do is one call; a zero timeout is the client's.
func (c *Client) do(ctx context.Context, timeout time.Duration, op, method, path string, in, out any) error {
	timeout = settings.PositiveOr(timeout, c.Timeout)
	if c.BaseURL == "" {
		return fmt.Errorf("%s: SVC_API_URL is not set", op)
	}
	return call(ctx, c.HTTP, timeout, op, method, c.URL(path), c.Token, in, out)
}

// call sends one JSON request with a bearer token and decodes a 2xx answer
// into out; any other answer is a *StatusError.
func call(ctx context.Context, hc *http.Client, timeout time.Duration, op, method, u, token string, in, out any) error {
	return callWith(ctx, hc, timeout, op, method, u, token, nil, in, out)
}

// callWith is call with extra request headers (the channel secret).
func callWith(ctx context.Context, hc *http.Client, timeout time.Duration, op, method, u, token string, header http.Header, in, out any) error {
	timeout = settings.PositiveOr(timeout, DefaultTimeout)
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
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	setTimeout(ctx, req.Header)
	for k, v := range header {
		req.Header[k] = v
	}
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
