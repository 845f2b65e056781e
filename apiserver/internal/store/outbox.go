package store

import (
	"context"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm/clause"

	"github.com/svc-dev/svc/migrations"
)

// OutboxMessage is one row of webhook_outbox: a reply the webhook channel
// could not give inline or by callback (DESIGN.md §6), waiting for an
// integration to fetch it. DeliveredAt is set when a fetch returned it.
type OutboxMessage struct {
	ID            string `gorm:"primaryKey"`
	ProjectID     string
	ChannelID     string
	CorrelationID string
	Reply         string
	Metadata      string
	CreatedAt     time.Time `gorm:"autoCreateTime:false"`
	AcceptedAt    time.Time
	DeliveredAt   *time.Time
}

// TableName is webhook_outbox.
func (OutboxMessage) TableName() string { return "webhook_outbox" }

// PutOutbox stores m (ID, AcceptedAt and an empty Metadata are filled in).
// It is idempotent on (project, correlation id): when the row exists,
// nothing changes — a message that was already fetched stays fetched — and
// the existing row comes back with created false.
func (s *Store) PutOutbox(ctx context.Context, m OutboxMessage) (OutboxMessage, bool, error) {
	m.ID = NewID("obx")
	m.AcceptedAt = time.Now().UTC()
	if m.CreatedAt.IsZero() {
		m.CreatedAt = m.AcceptedAt
	}
	m.CreatedAt = m.CreatedAt.UTC()
	if strings.TrimSpace(m.Metadata) == "" {
		m.Metadata = "{}"
	}
	m.DeliveredAt = nil
	res := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&m)
	if res.Error != nil {
		return OutboxMessage{}, false, res.Error
	}
	if res.RowsAffected == 1 {
		return m, true, nil
	}
	var existing OutboxMessage
	err := s.db.WithContext(ctx).First(&existing, "project_id = ? AND correlation_id = ?", m.ProjectID, m.CorrelationID).Error
	return existing, false, notFound(err)
}

// TakeOutbox returns up to limit of the oldest undelivered messages of a
// project's channel and marks them delivered in the same statement. On
// Postgres the rows are picked FOR UPDATE SKIP LOCKED, so concurrent takers
// (on any replica) never return the same message; SQLite runs on one
// connection, which serializes takers. It never waits: long-polling is the
// caller's loop.
func (s *Store) TakeOutbox(ctx context.Context, projectID, channelID string, limit int) ([]OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	lock := ""
	if s.dialect == migrations.Postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	q := `UPDATE webhook_outbox SET delivered_at = ? WHERE id IN (
  SELECT id FROM webhook_outbox
  WHERE project_id = ? AND channel_id = ? AND delivered_at IS NULL
  ORDER BY created_at, id LIMIT ?` + lock + `)
RETURNING id, project_id, channel_id, correlation_id, reply, metadata, created_at, accepted_at, delivered_at`
	var out []OutboxMessage
	err := s.db.WithContext(ctx).Raw(q, time.Now().UTC(), projectID, channelID, limit).Scan(&out).Error
	if err != nil {
		return nil, err
	}
	// RETURNING does not keep the subquery's order.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// ReleaseOutbox makes messages a fetch took undelivered again (the answer
// could not be written to the caller), so the next fetch returns them.
func (s *Store) ReleaseOutbox(ctx context.Context, projectID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.db.WithContext(ctx).Model(&OutboxMessage{}).
		Where("project_id = ? AND id IN ?", projectID, ids).
		Update("delivered_at", nil).Error
}

// CountOutbox is the number of undelivered messages of a project's channel.
func (s *Store) CountOutbox(ctx context.Context, projectID, channelID string) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&OutboxMessage{}).
		Where("project_id = ? AND channel_id = ? AND delivered_at IS NULL", projectID, channelID).Count(&n).Error
	return n, err
}

// PruneOutbox deletes messages delivered before cutoff (the rows that are
// only kept to make the pod's retries idempotent) and returns how many.
func (s *Store) PruneOutbox(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("delivered_at IS NOT NULL AND delivered_at < ?", cutoff.UTC()).
		Delete(&OutboxMessage{})
	return res.RowsAffected, res.Error
}
