package pairing

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every pairing token: svc_pt_<id>_<secret>. The id (12
// base32 characters) finds the row; only the SHA-256 of the secret is stored.
const TokenPrefix = "svc_pt_"

const (
	idLen     = 12
	secretLen = 40
	alphabet  = "abcdefghijklmnopqrstuvwxyz234567"
)

// Token is a freshly minted pairing token; Plain is shown once.
type Token struct {
	ID      string // row id: pair_<id>
	Plain   string
	Hash    string
	Display string // svc_pt_<id>, safe to show and log
}

// NewToken mints a pairing token.
func NewToken() Token {
	id, secret := random(idLen), random(secretLen)
	return Token{ID: "pair_" + id, Plain: TokenPrefix + id + "_" + secret, Hash: hash(secret), Display: TokenPrefix + id}
}

// ParseToken splits a presented token into its row id and secret.
func ParseToken(plain string) (rowID, secret string, ok bool) {
	if !strings.HasPrefix(plain, TokenPrefix) || len(plain) != len(TokenPrefix)+idLen+1+secretLen {
		return "", "", false
	}
	rest := plain[len(TokenPrefix):]
	if rest[idLen] != '_' {
		return "", "", false
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if strings.Trim(id, alphabet) != "" || strings.Trim(secret, alphabet) != "" {
		return "", "", false
	}
	return "pair_" + id, secret, true
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func matches(secret, storedHash string) bool {
	return subtle.ConstantTimeCompare([]byte(hash(secret)), []byte(storedHash)) == 1
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
