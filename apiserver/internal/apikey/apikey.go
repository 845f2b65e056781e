// Package apikey mints and parses service API keys (spec 5.1): the shape is
// svc_sk_<id>_<secret>. The id (12 base32 characters) finds the row; only the
// SHA-256 of the secret is stored, and it is compared in constant time, so a
// lookup's timing does not depend on the secret.
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

// Key is a freshly minted key; Plain is shown to the user once.
type Key struct {
	ID      string // row id: key_<id>
	Plain   string
	Hash    string
	Display string // svc_sk_<id>, safe to show and log
}

// New mints a key.
func New() Key {
	id, secret := random(idLen), random(secretLen)
	return Key{ID: "key_" + id, Plain: Prefix + id + "_" + secret, Hash: Hash(secret), Display: Prefix + id}
}

// Parse splits a presented key into its row id and secret; ok is false when
// the shape is wrong (runtime tokens and other credentials included).
func Parse(plain string) (rowID, secret string, ok bool) {
	if !strings.HasPrefix(plain, Prefix) || len(plain) != len(Prefix)+idLen+1+secretLen {
		return "", "", false
	}
	rest := plain[len(Prefix):]
	if rest[idLen] != '_' {
		return "", "", false
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if !inAlphabet(id) || !inAlphabet(secret) {
		return "", "", false
	}
	return "key_" + id, secret, true
}

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

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(alphabet, rune(s[i])) {
			return false
		}
	}
	return true
}
