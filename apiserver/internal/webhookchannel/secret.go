package webhookchannel

import (
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// SecretMatches reports whether got (an X-Webhook-Secret) is the channel's
// secret, or the secret a rotation replaced while its overlap lasts at now,
// compared in constant time (wire.WebhookSecretMatches). An
// empty channel secret matches nothing.
func SecretMatches(ch store.Channel, got string, now time.Time) bool {
	if ch.Secret == "" {
		return false
	}
	return wire.WebhookSecretMatches(got, append([]string{ch.Secret}, ch.PreviousSecrets(now)...))
}
