package wire

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
)

// Asymmetric callback signatures (Standard Webhooks "v1a"; docs/webhook-delivery.md
// "Asymmetric signatures"): a channel may carry an ed25519 signing key.
// The secret key is "whsk_" and the base64 of the 64-byte ed25519 private
// key (seed and public key, as Svix stores it); the public key receivers
// verify with is "whpk_" and the base64 of the 32-byte public key.
const (
	WebhookSigningKeyPrefix = "whsk_"
	WebhookPublicKeyPrefix  = "whpk_"
)

// ErrWebhookSigningKey reports a signing key not in the whsk_ form.
var ErrWebhookSigningKey = errors.New("not an ed25519 signing key (whsk_ and the base64 of 64 bytes)")

// NewWebhookSigningKey returns a fresh whsk_ key.
func NewWebhookSigningKey() (string, error) {
	_, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	return WebhookSigningKeyPrefix + base64.StdEncoding.EncodeToString(sk), nil
}

// ParseWebhookSigningKey decodes a whsk_ key; its public half must match
// its seed.
func ParseWebhookSigningKey(s string) (ed25519.PrivateKey, error) {
	rest, ok := strings.CutPrefix(s, WebhookSigningKeyPrefix)
	if !ok {
		return nil, ErrWebhookSigningKey
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(b) != ed25519.PrivateKeySize {
		return nil, ErrWebhookSigningKey
	}
	sk := ed25519.PrivateKey(b)
	if !sk.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(sk.Seed()).Public()) {
		return nil, ErrWebhookSigningKey
	}
	return sk, nil
}

// WebhookPublicKey returns the whpk_ public key of a whsk_ key.
func WebhookPublicKey(signingKey string) (string, error) {
	sk, err := ParseWebhookSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return WebhookPublicKeyPrefix + base64.StdEncoding.EncodeToString(sk.Public().(ed25519.PublicKey)), nil
}

// WebhookSigningPublicKey is the answer of GET …/webhook/signing-key.
type WebhookSigningPublicKey struct {
	// Scheme is always "v1a" (the webhook-signature entries it verifies).
	Scheme string `json:"scheme"`
	// PublicKey is whpk_ and base64, empty when the channel has no
	// signing key (v1 HMAC signatures only).
	PublicKey string `json:"publicKey"`
}
