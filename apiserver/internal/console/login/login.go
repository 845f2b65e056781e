// Package login holds what both the console and the admin CLI need to sign
// users in: argon2id password hashes, one-time sign-in links and
// the random tokens of sessions, of which only SHA-256 hashes are stored.
package login

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// LinkTTL is how long a one-time sign-in link stays valid.
const LinkTTL = 15 * time.Minute

// RandomToken returns 256 random bits, base64url (43 characters).
func RandomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// TokenHash is the stored form of a session or sign-in link token.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateLoginLink mints a one-time sign-in link for user (admin CLI and
// `make run`): base is the server's public URL.
func CreateLoginLink(ctx context.Context, st *store.Store, userID, base string, now time.Time) (string, time.Time, error) {
	if _, err := st.GetUser(ctx, userID); err != nil {
		return "", time.Time{}, fmt.Errorf("user %s: %w", userID, err)
	}
	token := RandomToken()
	exp := now.Add(LinkTTL).UTC()
	if err := st.CreateLoginToken(ctx, store.LoginToken{TokenHash: TokenHash(token), UserID: userID,
		CreatedAt: now.UTC(), ExpiresAt: exp}); err != nil {
		return "", time.Time{}, err
	}
	return strings.TrimSuffix(base, "/") + "/console/link/" + token, exp, nil
}

// SetPassword validates, hashes and stores a user's password, and ends the
// user's sessions.
func SetPassword(ctx context.Context, st *store.Store, userID, password string) error {
	if err := ValidatePassword(password); err != nil {
		return err
	}
	h, err := HashPassword(password)
	if err != nil {
		return err
	}
	if err := st.SetPasswordHash(ctx, userID, h); err != nil {
		return fmt.Errorf("user %s: %w", userID, err)
	}
	return st.DeleteUserSessions(ctx, userID)
}
