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
