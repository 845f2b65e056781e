package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// User is a person who can hold API keys.
type User struct {
	ID    string `gorm:"primaryKey" json:"id"`
	Email string `json:"email"`
	// PasswordHash is the console password (argon2id PHC string; empty:
	// none set). Never sent.
	PasswordHash string    `json:"-"`
	CreatedAt    time.Time `json:"createdAt"`
}

// CreateUser adds a user; a duplicate email is ErrConflict.
func (s *Store) CreateUser(ctx context.Context, email string) (User, error) {
	u := User{ID: NewID("usr"), Email: email, CreatedAt: time.Now().UTC()}
	if err := s.db.WithContext(ctx).Create(&u).Error; err != nil {
		if isUnique(err) {
			return User{}, ErrConflict
		}
		return User{}, err
	}
	return u, nil
}

// GetUser loads one user.
func (s *Store) GetUser(ctx context.Context, id string) (User, error) {
	return first[User](ctx, s.db, "id = ?", id)
}

// FindUserByEmail loads a user by email.
func (s *Store) FindUserByEmail(ctx context.Context, email string) (User, error) {
	return first[User](ctx, s.db, "email = ?", email)
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

// Membership roles (migration 00009).
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// ValidRole reports whether r is a membership role.
func ValidRole(r string) bool { return r == RoleOwner || r == RoleMember }

// Membership puts a user in a workspace (spec 5.2.1) as RoleOwner or
// RoleMember; only owners manage keys and channels.
type Membership struct {
	WorkspaceID string    `gorm:"primaryKey" json:"workspaceId"`
	UserID      string    `gorm:"primaryKey" json:"userId"`
	Role        string    `json:"role"`
	CreatedAt   time.Time `json:"createdAt"`
}

// AddMember puts user in workspace; adding twice is a no-op.
func (s *Store) AddMember(ctx context.Context, workspaceID, userID string) (Membership, error) {
	m := Membership{WorkspaceID: workspaceID, UserID: userID, Role: "member", CreatedAt: time.Now().UTC()}
	err := s.db.WithContext(ctx).Create(&m).Error
	if isUnique(err) {
		return m, nil
	}
	return m, err
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

// IsMember reports whether user belongs to workspace.
func (s *Store) IsMember(ctx context.Context, workspaceID, userID string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Membership{}).
		Where("workspace_id = ? AND user_id = ?", workspaceID, userID).Count(&n).Error
	return n > 0, err
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
