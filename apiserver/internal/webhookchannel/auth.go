package webhookchannel

import (
	"context"
	"errors"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Store is what Authenticate reads: the project's channel.
type Store interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
}

// Authenticate checks secret (the request's X-Webhook-Secret) against the
// channel secret from the store, and the one a rotation replaced while its
// overlap lasts, in constant time (SecretMatches); an empty or missing
// channel secret rejects every request (401 channel_secret_not_set).
func Authenticate(ctx context.Context, st Store, projectID, secret string) (store.Channel, error) {
	ch, err := st.GetChannel(ctx, projectID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ch, wire.Unavailable(err)
	}
	if ch.Secret == "" {
		return ch, wire.Coded("channel_secret_not_set",
			"This channel has no secret configured, so it rejects every request. Set one in the channel settings.")
	}
	if !SecretMatches(ch, secret, time.Now()) {
		return ch, wire.Coded("invalid_webhook_secret",
			"Missing or invalid X-Webhook-Secret header.")
	}
	return ch, nil
}
