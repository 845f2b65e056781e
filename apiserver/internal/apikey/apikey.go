// Package apikey mints and parses the service's bearer secrets (spec 5.1):
// service API keys, svc_sk_<id>_<secret>, and (with another Kind) pairing
// tokens. The id (12 base32 characters) finds the row; only the SHA-256 of the
// secret is stored, and it is compared in constant time, so a lookup's timing
// does not depend on the secret.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// Prefix starts every service API key.
const Prefix = "svc_sk_"

const (
	idLen     = 12
	secretLen = 40
	alphabet  = "abcdefghijklmnopqrstuvwxyz234567"
)

// Kind is one family of secrets: its public prefix and its row-id prefix.
type Kind struct {
	Prefix    string // e.g. svc_sk_
	RowPrefix string // e.g. key_
}

// Service is the kind of public API keys.
var Service = Kind{Prefix: Prefix, RowPrefix: "key_"}

// Key is a freshly minted secret; Plain is shown to the user once.
type Key struct {
	ID      string // row id: <RowPrefix><id>
	Plain   string
	Hash    string
	Display string // <Prefix><id>, safe to show and log
}

// New mints a secret of kind k.
func (k Kind) New() Key {
	id, secret := random(idLen), random(secretLen)
	return Key{ID: k.RowPrefix + id, Plain: k.Prefix + id + "_" + secret, Hash: Hash(secret), Display: k.Prefix + id}
}

// Parse splits a presented secret into its row id and secret part; ok is
// false when the shape is not of kind k (other credentials included).
func (k Kind) Parse(plain string) (rowID, secret string, ok bool) {
	if !strings.HasPrefix(plain, k.Prefix) || len(plain) != len(k.Prefix)+idLen+1+secretLen {
		return "", "", false
	}
	rest := plain[len(k.Prefix):]
	if rest[idLen] != '_' {
		return "", "", false
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if strings.Trim(id, alphabet) != "" || strings.Trim(secret, alphabet) != "" {
		return "", "", false
	}
	return k.RowPrefix + id, secret, true
}

// New mints a service API key.
func New() Key { return Service.New() }

// Parse parses a service API key.
func Parse(plain string) (rowID, secret string, ok bool) { return Service.Parse(plain) }

// Hash returns the stored form of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Matches compares secret against a stored hash in constant time.
func Matches(secret, storedHash string) bool {
	return subtle.ConstantTimeCompare([]byte(Hash(secret)), []byte(storedHash)) == 1
}

func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return string(b)
}
