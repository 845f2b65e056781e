package store

import (
	"context"
	"errors"
	"time"
)

// Session is a console sign-in (package console): the cookie carries the
// token, the row only its SHA-256. ExpiresAt is the absolute expiry; the idle
// expiry is measured from LastSeenAt.
type Session struct {
	TokenHash  string `gorm:"primaryKey"`
	UserID     string
	CSRFToken  string `gorm:"column:csrf_token"`
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time
}

// TableName maps Session to console_sessions.
func (Session) TableName() string { return "console_sessions" }

// CreateSession stores a console session.
func (s *Store) CreateSession(ctx context.Context, sess Session) error {
	return s.db.WithContext(ctx).Create(&sess).Error
}

// GetSession loads a session by the hash of its token; expiry is the
// caller's to check.
func (s *Store) GetSession(ctx context.Context, tokenHash string) (Session, error) {
	return first[Session](ctx, s.db, "token_hash = ?", tokenHash)
}

// TouchSession moves a session's idle expiry forward.
func (s *Store) TouchSession(ctx context.Context, tokenHash string, at time.Time) error {
	return s.db.WithContext(ctx).Model(&Session{}).Where("token_hash = ?", tokenHash).
		UpdateColumn("last_seen_at", at.UTC()).Error
}

// DeleteSession ends a session.
func (s *Store) DeleteSession(ctx context.Context, tokenHash string) error {
	return s.db.WithContext(ctx).Delete(&Session{}, "token_hash = ?", tokenHash).Error
}

// DeleteUserSessions ends every session of a user (after a password change).
func (s *Store) DeleteUserSessions(ctx context.Context, userID string) error {
	return s.db.WithContext(ctx).Delete(&Session{}, "user_id = ?", userID).Error
}

// PruneSessions deletes sessions and sign-in links that expired before cutoff.
func (s *Store) PruneSessions(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Delete(&Session{}, "expires_at < ?", cutoff.UTC())
	if res.Error != nil {
		return 0, res.Error
	}
	res2 := s.db.WithContext(ctx).Delete(&LoginToken{}, "expires_at < ?", cutoff.UTC())
	return res.RowsAffected + res2.RowsAffected, res2.Error
}

// LoginToken is a one-time sign-in link (admin user login-link).
type LoginToken struct {
	TokenHash string `gorm:"primaryKey"`
	UserID    string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    *time.Time
}

// ErrTokenUsed is returned for a sign-in link that was already used or has expired.
var ErrTokenUsed = errors.New("store: sign-in link already used or expired")

// CreateLoginToken stores a one-time sign-in link's token hash.
func (s *Store) CreateLoginToken(ctx context.Context, lt LoginToken) error {
	return s.db.WithContext(ctx).Create(&lt).Error
}

// ConsumeLoginToken marks a sign-in link used and returns its user. Exactly
// one caller wins a race for the same link; a used, unknown or expired link
// is ErrTokenUsed.
func (s *Store) ConsumeLoginToken(ctx context.Context, tokenHash string, now time.Time) (string, error) {
	res := s.db.WithContext(ctx).Model(&LoginToken{}).Where("token_hash = ? AND used_at IS NULL", tokenHash).
		Update("used_at", now.UTC())
	if res.Error != nil {
		return "", res.Error
	}
	if res.RowsAffected != 1 {
		return "", ErrTokenUsed
	}
	var lt LoginToken
	if err := s.db.WithContext(ctx).First(&lt, "token_hash = ?", tokenHash).Error; err != nil {
		return "", notFound(err)
	}
	if !now.Before(lt.ExpiresAt) {
		return "", ErrTokenUsed
	}
	return lt.UserID, nil
}
