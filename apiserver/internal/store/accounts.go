package store

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// CreateWorkspace adds a workspace on plan.
func (s *Store) CreateWorkspace(ctx context.Context, name, plan string) (Workspace, error) {
	w := Workspace{ID: NewID("ws"), Name: name, Plan: plan, CreatedAt: time.Now().UTC()}
	return w, s.db.WithContext(ctx).Create(&w).Error
}

// GetWorkspace loads one workspace.
func (s *Store) GetWorkspace(ctx context.Context, id string) (Workspace, error) {
	return first[Workspace](ctx, s.db, "id = ?", id)
}

// FindWorkspaceByName returns the oldest workspace with name.
func (s *Store) FindWorkspaceByName(ctx context.Context, name string) (Workspace, error) {
	return first[Workspace](ctx, s.db.Order("created_at"), "name = ?", name)
}

// UpdateWorkspace changes the plan and/or the usage-based pricing flag.
func (s *Store) UpdateWorkspace(ctx context.Context, id string, plan *string, usageBased *bool) (Workspace, error) {
	updates := map[string]any{}
	if plan != nil {
		updates["plan"] = *plan
	}
	if usageBased != nil {
		updates["usage_based_pricing"] = *usageBased
	}
	if len(updates) > 0 {
		res := s.db.WithContext(ctx).Model(&Workspace{}).Where("id = ?", id).Updates(updates)
		if res.Error != nil {
			return Workspace{}, res.Error
		}
		if res.RowsAffected == 0 {
			return Workspace{}, ErrNotFound
		}
	}
	return s.GetWorkspace(ctx, id)
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

// FindUserByEmail loads a user by email.
func (s *Store) FindUserByEmail(ctx context.Context, email string) (User, error) {
	return first[User](ctx, s.db, "email = ?", email)
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

// IsMember reports whether user belongs to workspace.
func (s *Store) IsMember(ctx context.Context, workspaceID, userID string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Membership{}).
		Where("workspace_id = ? AND user_id = ?", workspaceID, userID).Count(&n).Error
	return n > 0, err
}

// CreateAPIKey stores a key whose secret hash and display prefix the caller
// computed (package apikey); the plain key never reaches the store.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey) (APIKey, error) {
	k.CreatedAt = time.Now().UTC()
	return k, s.db.WithContext(ctx).Create(&k).Error
}

// KeyAuth is what authentication needs about a key, read in one query.
type KeyAuth struct {
	KeyID             string
	KeyHash           string
	WorkspaceID       string
	UserID            string
	Plan              string
	UsageBasedPricing bool
	Revoked           bool
}

// LookupKey loads a key with its workspace's plan by key id.
func (s *Store) LookupKey(ctx context.Context, keyID string) (KeyAuth, error) {
	var row struct {
		ID                string
		KeyHash           string
		WorkspaceID       string
		UserID            string
		RevokedAt         *time.Time
		Plan              string
		UsageBasedPricing bool
	}
	err := s.db.WithContext(ctx).Table("api_keys").
		Select("api_keys.id, api_keys.key_hash, api_keys.workspace_id, api_keys.user_id, api_keys.revoked_at, workspaces.plan, workspaces.usage_based_pricing").
		Joins("JOIN workspaces ON workspaces.id = api_keys.workspace_id").
		Where("api_keys.id = ?", keyID).Take(&row).Error
	if err != nil {
		return KeyAuth{}, notFound(err)
	}
	return KeyAuth{KeyID: row.ID, KeyHash: row.KeyHash, WorkspaceID: row.WorkspaceID, UserID: row.UserID,
		Plan: row.Plan, UsageBasedPricing: row.UsageBasedPricing, Revoked: row.RevokedAt != nil}, nil
}

// RevokeAPIKey marks a key revoked; revoking twice keeps the first time.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) (APIKey, error) {
	now := time.Now().UTC()
	res := s.db.WithContext(ctx).Model(&APIKey{}).Where("id = ? AND revoked_at IS NULL", id).Update("revoked_at", now)
	if res.Error != nil {
		return APIKey{}, res.Error
	}
	return first[APIKey](ctx, s.db, "id = ?", id)
}

// TouchAPIKey records when a key was last used.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.db.WithContext(ctx).Model(&APIKey{}).Where("id = ?", id).
		UpdateColumn("last_used_at", at.UTC()).Error
}

// ListAPIKeys lists a workspace's keys (never their secrets).
func (s *Store) ListAPIKeys(ctx context.Context, workspaceID string) ([]APIKey, error) {
	var ks []APIKey
	err := s.db.WithContext(ctx).Where("workspace_id = ?", workspaceID).Order("created_at").Find(&ks).Error
	return ks, err
}

// tx runs fn in a transaction.
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}
