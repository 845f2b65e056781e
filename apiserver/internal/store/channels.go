package store

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Channel is a project's webhook channel configuration (spec 2.5).
type Channel struct {
	ID              string    `gorm:"primaryKey" json:"channelId"`
	ProjectID       string    `json:"projectId"`
	Secret          string    `json:"-"`
	CallbackHeaders string    `json:"callbackHeaders"`
	UpdatedAt       time.Time `json:"updatedAt"`
	// PreviousSecret is the secret a rotation replaced; it stays valid
	// (accepted in X-Webhook-Secret, signed with) until
	// PreviousSecretExpiresAt.
	PreviousSecret          string     `json:"-"`
	PreviousSecretExpiresAt *time.Time `json:"previousSecretExpiresAt,omitempty"`
	// SigningKey is the channel's ed25519 key (whsk_): callbacks carry a
	// v1a signature beside v1; empty: v1 only.
	SigningKey string `json:"-"`
}

// PreviousSecrets returns the replaced secret while its overlap lasts at now.
func (c Channel) PreviousSecrets(now time.Time) []string {
	if c.PreviousSecret == "" || c.PreviousSecretExpiresAt == nil || !now.Before(*c.PreviousSecretExpiresAt) {
		return nil
	}
	return []string{c.PreviousSecret}
}

// RotateChannelSecret makes secret the channel's signing secret and keeps
// the current one valid for overlap (0: replaced at once). The channel must
// exist and have a secret.
func (s *Store) RotateChannelSecret(ctx context.Context, projectID, secret string, overlap time.Duration) (Channel, error) {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var c Channel
		if err := tx.First(&c, "project_id = ?", projectID).Error; err != nil {
			return notFound(err)
		}
		now := time.Now().UTC()
		updates := map[string]any{"secret": secret, "updated_at": now, "previous_secret": "",
			"previous_secret_expires_at": nil}
		if overlap > 0 && c.Secret != "" {
			updates["previous_secret"] = c.Secret
			updates["previous_secret_expires_at"] = now.Add(overlap)
		}
		return tx.Model(&Channel{}).Where("project_id = ?", projectID).Updates(updates).Error
	})
	if err != nil {
		return Channel{}, err
	}
	return s.GetChannel(ctx, projectID)
}

// DropPreviousSecret ends a rotation's overlap now: only the current
// secret is accepted and signed with.
func (s *Store) DropPreviousSecret(ctx context.Context, projectID string) (Channel, error) {
	err := s.db.WithContext(ctx).Model(&Channel{}).Where("project_id = ?", projectID).
		Updates(map[string]any{"previous_secret": "", "previous_secret_expires_at": nil}).Error
	if err != nil {
		return Channel{}, err
	}
	return s.GetChannel(ctx, projectID)
}

// PruneExpiredSecrets forgets the replaced secrets whose overlap ended.
func (s *Store) PruneExpiredSecrets(ctx context.Context, now time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Model(&Channel{}).
		Where("previous_secret <> '' AND previous_secret_expires_at <= ?", now.UTC()).
		Updates(map[string]any{"previous_secret": "", "previous_secret_expires_at": nil})
	return res.RowsAffected, res.Error
}

// SetChannelSigningKey sets (or, with "", removes) the channel's ed25519
// signing key. The channel must exist.
func (s *Store) SetChannelSigningKey(ctx context.Context, projectID, key string) (Channel, error) {
	res := s.db.WithContext(ctx).Model(&Channel{}).Where("project_id = ?", projectID).
		Updates(map[string]any{"signing_key": key, "updated_at": time.Now().UTC()})
	if res.Error != nil {
		return Channel{}, res.Error
	}
	if res.RowsAffected == 0 {
		return Channel{}, ErrNotFound
	}
	return s.GetChannel(ctx, projectID)
}

// GetChannel loads the webhook channel of a project.
func (s *Store) GetChannel(ctx context.Context, projectID string) (Channel, error) {
	return first[Channel](ctx, s.db, "project_id = ?", projectID)
}

// SetChannel creates or updates a project's channel; nil fields stay as they are.
func (s *Store) SetChannel(ctx context.Context, projectID string, secret, callbackHeaders *string) (Channel, error) {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		c := Channel{ID: NewID("ch"), ProjectID: projectID, CallbackHeaders: "{}", UpdatedAt: time.Now().UTC()}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&c).Error; err != nil {
			return err
		}
		updates := map[string]any{"updated_at": time.Now().UTC()}
		if secret != nil {
			updates["secret"] = *secret
		}
		if callbackHeaders != nil {
			updates["callback_headers"] = *callbackHeaders
		}
		return tx.Model(&Channel{}).Where("project_id = ?", projectID).Updates(updates).Error
	})
	if err != nil {
		return Channel{}, err
	}
	return s.GetChannel(ctx, projectID)
}
