package store

import (
	"context"
	"time"
)

// Credential is what a table of minted bearer secrets keeps of each one
// (package apikey mints API keys and pairing tokens alike): the row id the
// secret carries, a name, the display prefix, and when it was made and
// revoked. The SHA-256 of the secret part has its own column in each table.
type Credential struct {
	ID        string     `gorm:"primaryKey" json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// APIKey is a svc_sk_ key of a workspace member.
type APIKey struct {
	Credential
	WorkspaceID string     `json:"workspaceId"`
	UserID      string     `json:"userId"`
	KeyHash     string     `json:"-"`
	LastUsedAt  *time.Time `json:"lastUsedAt,omitempty"`
}

// CreateAPIKey stores a key whose secret hash and display prefix the caller
// computed (package apikey); the plain key never reaches the store.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey) (APIKey, error) {
	k.CreatedAt = time.Now().UTC()
	return k, s.db.WithContext(ctx).Create(&k).Error
}

// KeyAuth is what authentication needs about a key, read in one query.
type KeyAuth struct {
	KeyID       string
	KeyHash     string
	WorkspaceID string
	UserID      string
	Billing
	Revoked bool
	// Budgeted: the key has a credit budget of its own (key_budgets).
	Budgeted bool
}

// LookupKey loads a key with its workspace's plan by key id.
func (s *Store) LookupKey(ctx context.Context, keyID string) (KeyAuth, error) {
	var row struct {
		ID          string
		KeyHash     string
		WorkspaceID string
		UserID      string
		RevokedAt   *time.Time
		Budgeted    bool
		Billing
	}
	err := s.db.WithContext(ctx).Table("api_keys").
		Select("api_keys.id, api_keys.key_hash, api_keys.workspace_id, api_keys.user_id, api_keys.revoked_at, workspaces.plan, workspaces.usage_based_pricing, key_budgets.key_id IS NOT NULL AS budgeted").
		Joins("JOIN workspaces ON workspaces.id = api_keys.workspace_id").
		Joins("LEFT JOIN key_budgets ON key_budgets.key_id = api_keys.id").
		Where("api_keys.id = ?", keyID).Take(&row).Error
	if err != nil {
		return KeyAuth{}, notFound(err)
	}
	return KeyAuth{KeyID: row.ID, KeyHash: row.KeyHash, WorkspaceID: row.WorkspaceID, UserID: row.UserID,
		Billing: row.Billing, Revoked: row.RevokedAt != nil, Budgeted: row.Budgeted}, nil
}

// GetAPIKey loads one key row (never its secret).
func (s *Store) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	return first[APIKey](ctx, s.db, "id = ?", id)
}

// ListAPIKeys lists a workspace's keys (never their secrets).
func (s *Store) ListAPIKeys(ctx context.Context, workspaceID string) ([]APIKey, error) {
	return all[APIKey](ctx, s.db.Order("created_at"), "workspace_id = ?", workspaceID)
}

// TouchAPIKey records when a key was last used.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.db.WithContext(ctx).Model(&APIKey{}).Where("id = ?", id).
		UpdateColumn("last_used_at", at.UTC()).Error
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
