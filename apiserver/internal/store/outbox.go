package store

import (
	"context"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm/clause"

	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/wire"
)

// OutboxMessage is one row of webhook_outbox: a reply the webhook channel
// could not give inline or by callback (docs/design.md §6), waiting for an
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
	// Status is wire.OutboxStatus*: replied (a reply to serve), accepted (the
	// API's record of an accepted async message, served as unanswered once
	// DeadlineAt passed), unanswered, delivered (closed, never served).
	Status     string
	DeadlineAt *time.Time
	// The API's delivery queue (webhookqueue.go): NextAttemptAt is set
	// while the reply is queued for a callback; a row under lease
	// (LeaseUntil after now) is being attempted by LeaseOwner.
	NextAttemptAt *time.Time
	LeaseUntil    *time.Time
	LeaseOwner    string
	// QueueState is Queue* ("" when never queued).
	QueueState string
	// QueueAttempts counts the API's attempts; AttemptBase is the pod's
	// last attempt number, CallbackURL and WebhookID what the attempt log
	// knew of the pod's attempts (empty until the first claim resolved them).
	QueueAttempts int
	AttemptBase   int
	CallbackURL   string
	WebhookID     string
	// A range replay's pending send (replay.go, migration 00025).
	ReplayAt         *time.Time
	ReplayLeaseUntil *time.Time
	ReplayOwner      string
	ReplayURL        string
	ReplayWebhookID  string
}

// StatusAccepted is the status of the API's record of an accepted async
// message that nothing answered yet.
const StatusAccepted = "accepted"

// closable are the states a reply or a delivery notice replaces.
var closable = []string{StatusAccepted, wire.OutboxStatusUnanswered}

// TableName is webhook_outbox.
func (OutboxMessage) TableName() string { return "webhook_outbox" }

// PutOutbox stores m (ID, AcceptedAt and an empty Metadata are filled in;
// Status is replied unless it is delivered, which stores the row as already
// fetched). It is idempotent on (project, correlation id): when a reply or a
// delivery notice exists, nothing changes — a message that was already
// fetched stays fetched — and the existing row comes back with created
// false. Over the API's record of an accepted message (accepted, or
// unanswered once served so) the reply or notice is written, created true.
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
	if m.Status == wire.OutboxStatusDelivered {
		m.DeliveredAt = &m.AcceptedAt
	} else {
		m.Status = wire.OutboxStatusReplied
	}
	m.DeadlineAt = nil
	m.LeaseUntil, m.LeaseOwner, m.QueueAttempts = nil, "", 0
	if m.Status == wire.OutboxStatusDelivered {
		m.NextAttemptAt = nil
	}
	m.QueueState = ""
	if m.NextAttemptAt != nil {
		t := m.NextAttemptAt.UTC()
		m.NextAttemptAt, m.QueueState = &t, QueueQueued
	}
	res := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "project_id"}, {Name: "correlation_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"reply", "metadata", "created_at", "delivered_at", "status",
			"next_attempt_at", "queue_state", "callback_url", "webhook_id", "attempt_base"}),
		Where: clause.Where{Exprs: []clause.Expression{
			clause.Expr{SQL: "webhook_outbox.status IN ?", Vars: []any{closable}}}},
	}).Create(&m)
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

// AcceptOutbox records an accepted async message (the agent-proxy saw the
// pod's 202): a row in status accepted, served as unanswered by polls after
// deadline unless a reply or a delivery notice closed it first. A row that
// exists already (the pod was quicker) is left alone.
func (s *Store) AcceptOutbox(ctx context.Context, projectID, channelID, correlationID string, deadline time.Time) error {
	now := time.Now().UTC()
	d := deadline.UTC()
	m := OutboxMessage{ID: NewID("obx"), ProjectID: projectID, ChannelID: channelID, CorrelationID: correlationID,
		Metadata: "{}", CreatedAt: now, AcceptedAt: now, Status: StatusAccepted, DeadlineAt: &d}
	return s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&m).Error
}

// servable selects the rows a poll may return at now (bound three times):
// a reply being attempted by the delivery queue (under lease) waits for
// the attempt's end.
const servable = `delivered_at IS NULL AND (status <> 'accepted' OR deadline_at <= ?) AND (lease_until IS NULL OR lease_until <= ?)`

// TakeOutbox returns up to limit of the oldest undelivered messages of a
// project's channel and marks them delivered in the same statement, which
// also ends their delivery queue (taken before delivered). On
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
	q := `UPDATE webhook_outbox SET delivered_at = ?,
  status = CASE WHEN status = 'accepted' THEN 'unanswered' ELSE status END,
  next_attempt_at = NULL,
  queue_state = CASE WHEN queue_state = 'queued' THEN 'taken' ELSE queue_state END
WHERE id IN (
  SELECT id FROM webhook_outbox
  WHERE project_id = ? AND channel_id = ? AND ` + servable + `
  ORDER BY created_at, id LIMIT ?` + lock + `)
RETURNING id, project_id, channel_id, correlation_id, reply, metadata, created_at, accepted_at, delivered_at, status, deadline_at`
	var out []OutboxMessage
	now := time.Now().UTC()
	err := s.db.WithContext(ctx).Raw(q, now, projectID, channelID, now, now, limit).Scan(&out).Error
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

// CountOutbox is the number of messages a poll would return now of a project's channel.
func (s *Store) CountOutbox(ctx context.Context, projectID, channelID string) (int64, error) {
	var n int64
	now := time.Now().UTC()
	err := s.db.WithContext(ctx).Model(&OutboxMessage{}).
		Where("project_id = ? AND channel_id = ? AND "+servable, projectID, channelID, now, now).Count(&n).Error
	return n, err
}

// PruneOutbox deletes messages delivered before cutoff (the rows that are
// only kept to make the pod's retries idempotent) and returns how many.
func (s *Store) PruneOutbox(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("delivered_at IS NOT NULL AND delivered_at < ?", cutoff.UTC()).
		Delete(&OutboxMessage{})
	return res.RowsAffected, res.Error
}
