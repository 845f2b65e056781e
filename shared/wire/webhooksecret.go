package wire

import (
	"crypto/hmac"
	"crypto/sha256"
)

// WebhookSecretMatches reports whether got (an X-Webhook-Secret) is one of
// the channel's secrets: the current one, or one a rotation replaced while
// its overlap lasts. Both sides check it the same way, the API
// for its own routes and the pod for the forwarded ones: every non-empty
// candidate is compared as a SHA-256 digest (equal lengths, so a length does
// not leak) with hmac.Equal, all of them whatever the outcome of the
// others. No candidate (or only empty ones) matches nothing.
func WebhookSecretMatches(got string, candidates []string) bool {
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
