// Package channelapi serves the webhook channel's configuration to the
// project's pod: GET /internal/projects/{id}/channel (runtime token of that
// project) answers wire.ChannelConfig {configured, channelId, secret,
// callbackHeaders, previousSecrets, failingEndpoints}. The pod caches it for about a second, so
// `apiserver admin channel set` reaches a running agent without a restart.
package channelapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Store is what the handler reads (store.Store).
type Store interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
	ListWebhookEndpoints(ctx context.Context, projectID string, failingOnly bool) ([]store.WebhookEndpoint, error)
}

// Handler returns GET /channel for a group at /internal/projects/:id that is
// guarded by httpmw.Runtime(auth, "id").
func Handler(s Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Param("id")
		if p := httpmw.PrincipalFrom(c); !p.Runtime() || p.ProjectID != id {
			return wire.Coded("runtime_token_required", "Only the project's own runtime may read its channel configuration.")
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		ch, err := s.GetChannel(c.Request().Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return c.JSON(http.StatusOK, wire.ChannelConfig{CallbackHeaders: map[string]string{}})
		}
		if err != nil {
			return wire.Internal(err)
		}
		headers, err := DecodeCallbackHeaders(ch.CallbackHeaders)
		if err != nil {
			e := wire.Coded("invalid_callback_headers",
				"The channel's callbackHeaders are not a JSON object; fix them with `apiserver admin channel set`.")
			e.Cause = err
			return e
		}
		failing, err := s.ListWebhookEndpoints(c.Request().Context(), id, true)
		if err != nil {
			return wire.Internal(err)
		}
		cfg := wire.ChannelConfig{Configured: true, ChannelID: ch.ID, Secret: ch.Secret, CallbackHeaders: headers,
			PreviousSecrets: ch.PreviousSecrets(time.Now())}
		for _, e := range failing {
			cfg.FailingEndpoints = append(cfg.FailingEndpoints, e.Endpoint)
		}
		return c.JSON(http.StatusOK, cfg)
	}
}

// DecodeCallbackHeaders turns the stored JSON object into header values:
// strings as they are, other values as their JSON text, null dropped.
// Names that are not valid HTTP header names are dropped too (they would
// make every callback fail).
func DecodeCallbackHeaders(raw string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(raw) == "" {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return out, nil
	}
	for k, v := range m {
		if !validHeaderName(k) || string(v) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		if strings.ContainsAny(s, "\r\n\x00") {
			continue
		}
		out[k] = s
	}
	return out, nil
}

// validHeaderName reports whether k is an RFC 9110 token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
