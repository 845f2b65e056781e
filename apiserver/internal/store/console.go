package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// Membership roles (migration 00009).
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// ValidRole reports whether r is a membership role.
func ValidRole(r string) bool { return r == RoleOwner || r == RoleMember }

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

// GetUser loads one user.
func (s *Store) GetUser(ctx context.Context, id string) (User, error) {
	return first[User](ctx, s.db, "id = ?", id)
}

// SetPasswordHash stores a user's console password hash.
func (s *Store) SetPasswordHash(ctx context.Context, userID, hash string) error {
	res := s.db.WithContext(ctx).Model(&User{}).Where("id = ?", userID).Update("password_hash", hash)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// SetMember puts user in workspace with role, or changes the role of an
// existing membership.
func (s *Store) SetMember(ctx context.Context, workspaceID, userID, role string) (Membership, error) {
	if !ValidRole(role) {
		return Membership{}, fmt.Errorf("store: role must be %s or %s, not %q", RoleOwner, RoleMember, role)
	}
	m := Membership{WorkspaceID: workspaceID, UserID: userID, Role: role, CreatedAt: time.Now().UTC()}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "workspace_id"}, {Name: "user_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"role"}),
	}).Create(&m).Error
	if err != nil {
		return Membership{}, err
	}
	return s.GetMembership(ctx, workspaceID, userID)
}

// GetMembership loads user's membership of workspace.
func (s *Store) GetMembership(ctx context.Context, workspaceID, userID string) (Membership, error) {
	return first[Membership](ctx, s.db, "workspace_id = ? AND user_id = ?", workspaceID, userID)
}

// UserWorkspace is a workspace seen by one of its members.
type UserWorkspace struct {
	Workspace
	Role string `json:"role"`
}

// ListUserWorkspaces returns the workspaces user belongs to, by name.
func (s *Store) ListUserWorkspaces(ctx context.Context, userID string) ([]UserWorkspace, error) {
	var out []UserWorkspace
	err := s.db.WithContext(ctx).Table("workspaces").
		Select("workspaces.*, memberships.role").
		Joins("JOIN memberships ON memberships.workspace_id = workspaces.id").
		Where("memberships.user_id = ?", userID).Order("workspaces.name, workspaces.id").Scan(&out).Error
	return out, err
}

// ListProjects lists a workspace's projects by name.
func (s *Store) ListProjects(ctx context.Context, workspaceID string) ([]Project, error) {
	var ps []Project
	err := s.db.WithContext(ctx).Where("workspace_id = ?", workspaceID).Order("name, id").Find(&ps).Error
	return ps, err
}

// GetAPIKey loads one key row (never its secret).
func (s *Store) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	return first[APIKey](ctx, s.db, "id = ?", id)
}

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
