package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/svc-dev/svc/migrations"
)

// A range replay's pending sends live on the outbox rows it replays
// (docs/webhook-delivery.md "Recovery", migration 00025): MarkReplays sets
// ReplayAt, any replica claims due rows with a lease (ClaimReplays, as
// ClaimQueued), and FinishReplay clears the row once its attempt is in the
// log. A replica stopped mid-replay leaves the rest to the others.

// ReplayMark is one message a replay sends, and where.
type ReplayMark struct {
	ID, URL, WebhookID string
}

// MarkReplays queues the replay of ms (one transaction).
func (s *Store) MarkReplays(ctx context.Context, ms []ReplayMark, at time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		for _, m := range ms {
			err := tx.Model(&OutboxMessage{}).Where("id = ?", m.ID).Updates(map[string]any{"replay_at": at.UTC(),
				"replay_url": m.URL, "replay_webhook_id": m.WebhookID, "replay_lease_until": nil, "replay_owner": ""}).Error
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// ReplayPending counts a project's messages waiting for their replay.
func (s *Store) ReplayPending(ctx context.Context, projectID string) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&OutboxMessage{}).Where("project_id = ? AND replay_at IS NOT NULL", projectID).Count(&n).Error
	return n, err
}

// ClaimReplays leases up to limit pending replays due at now to owner
// until leaseUntil.
func (s *Store) ClaimReplays(ctx context.Context, owner string, now, leaseUntil time.Time, limit int) ([]OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	lock := ""
	if s.dialect == migrations.Postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	var ids []string
	now = now.UTC()
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ids = nil
		if err := tx.Raw(`SELECT id FROM webhook_outbox
WHERE replay_at IS NOT NULL AND replay_at <= ? AND (replay_lease_until IS NULL OR replay_lease_until <= ?)
ORDER BY replay_at, created_at, id LIMIT ?`+lock, now, now, limit).Scan(&ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.Model(&OutboxMessage{}).Where("id IN ?", ids).
			Updates(map[string]any{"replay_lease_until": leaseUntil.UTC(), "replay_owner": owner}).Error
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	var out []OutboxMessage
	err = s.db.WithContext(ctx).Where("id IN ? AND replay_owner = ?", ids, owner).Order("created_at, id").Find(&out).Error
	return out, err
}

// FinishReplay ends owner's claimed replay of a row (its attempt is in the
// log).
func (s *Store) FinishReplay(ctx context.Context, id, owner string) error {
	return s.db.WithContext(ctx).Model(&OutboxMessage{}).Where("id = ? AND replay_owner = ?", id, owner).
		Updates(map[string]any{"replay_at": nil, "replay_lease_until": nil, "replay_owner": ""}).Error
}
