package channelapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// SecretMatches reports whether got (an X-Webhook-Secret) is the channel's
// secret, or the secret a rotation replaced while its overlap lasts at now
// (issue 24). Each candidate is compared in constant time as a SHA-256
// digest (equal lengths, so a length does not leak), and every candidate is
// compared whatever the outcome of the others. An empty channel secret
// matches nothing.
func SecretMatches(ch store.Channel, got string, now time.Time) bool {
	if ch.Secret == "" {
		return false
	}
	return MatchAny(got, append([]string{ch.Secret}, ch.PreviousSecrets(now)...))
}

// MatchAny compares got with every non-empty candidate in constant time.
func MatchAny(got string, candidates []string) bool {
	g := sha256.Sum256([]byte(got))
	ok := 0
	for _, c := range candidates {
		if c == "" {
			continue
		}
		w := sha256.Sum256([]byte(c))
		if hmac.Equal(g[:], w[:]) {
			ok = 1
		}
	}
	return ok == 1
}
