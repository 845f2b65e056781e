// Package channelcfg gives the pod its webhook channel configuration
// (secret, callbackHeaders, channelId) by asking the API at
// GET {SVC_API_URL}/internal/projects/{id}/channel with the runtime token.
// Answers are cached for a short TTL (1 s by default) so that
// `apiserver admin channel set` reaches a running pod without a restart.
package channelcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTTL is how long a fetched configuration is reused.
const DefaultTTL = time.Second

// ErrUnavailable wraps every failure to obtain the configuration.
var ErrUnavailable = errors.New("channel configuration unavailable")

// Source returns the current channel configuration.
type Source interface {
	Channel(ctx context.Context) (wire.ChannelConfig, error)
}

// Static is a fixed configuration (tests, and pods without an API).
type Static wire.ChannelConfig

// Channel returns the fixed configuration.
func (s Static) Channel(context.Context) (wire.ChannelConfig, error) {
	return wire.ChannelConfig(s), nil
}

// Client fetches the configuration from the API.
type Client struct {
	API *internalapi.Client
	// TTL of the cache; 0 means DefaultTTL, negative disables caching.
	TTL time.Duration
	// Timeout of one fetch (default 5 s).
	Timeout time.Duration
	// Patience is how long a fetch that got no answer (a timeout, a refused
	// connection: an API swamped by a rush of starting pods) is tried again,
	// within the caller's context (default 30 s). An answer, even an error,
	// is not retried.
	Patience time.Duration
	Now      func() time.Time

	mu  sync.Mutex // held across a fetch: concurrent callers share it
	cfg wire.ChannelConfig
	at  time.Time
	ok  bool
}

// Channel returns the cached configuration, fetching it when older than TTL.
// Errors wrap ErrUnavailable; a failed fetch is not cached.
func (c *Client) Channel(ctx context.Context) (wire.ChannelConfig, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && ttl > 0 && now().Sub(c.at) < ttl {
		return c.cfg, nil
	}
	cfg, err := c.fetch(ctx)
	if err != nil {
		c.ok = false
		return wire.ChannelConfig{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	c.cfg, c.at, c.ok = cfg, now(), true
	return cfg, nil
}

func (c *Client) fetch(ctx context.Context) (wire.ChannelConfig, error) {
	timeout := settings.PositiveOr(c.Timeout, 5*time.Second)
	ctx, cancel := context.WithTimeout(ctx, settings.PositiveOr(c.Patience, 30*time.Second))
	defer cancel()
	var (
		cfg  wire.ChannelConfig
		last error
	)
	b := retry.WithCappedDuration(2*time.Second, retry.NewExponential(100*time.Millisecond))
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		var err error
		cfg, err = c.API.ChannelConfig(ctx, timeout)
		var noAnswer net.Error // a timeout, a refused or reset connection
		if _, answered := internalapi.AsStatus(err); !answered && errors.As(err, &noAnswer) && ctx.Err() == nil {
			last = err
			return retry.RetryableError(err)
		}
		return err
	})
	if err != nil && last != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (last attempt: %w)", err, last)
	}
	return cfg, err
}
