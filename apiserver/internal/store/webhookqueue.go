package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/wire"
)

// The API's delivery queue (docs/webhook-delivery.md "The API's delivery
// queue", migration 00023): a reply in the outbox with NextAttemptAt set is
// queued for a callback. A replica claims due rows with a lease (FOR UPDATE
// SKIP LOCKED on Postgres; SQLite's one connection serializes claimers),
// makes one attempt each, and finishes the row and records the attempt in
// one transaction. A row under lease is neither claimed again nor served by
// an outbox poll; a poll that takes a queued reply ends its queue in the
// same statement (TakeOutbox).

// Queue states of an outbox row.
const (
	QueueQueued    = "queued"
	QueueDelivered = "delivered"
	QueueTaken     = "taken"
	QueueExhausted = "exhausted"
	QueueStopped   = "stopped"
)

// ClaimQueued leases up to limit queued replies due at now to owner until
// leaseUntil and returns them.
func (s *Store) ClaimQueued(ctx context.Context, owner string, now, leaseUntil time.Time, limit int) ([]OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	lock := ""
	if s.dialect == migrations.Postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	q := `UPDATE webhook_outbox SET lease_until = ?, lease_owner = ?
WHERE id IN (
  SELECT id FROM webhook_outbox
  WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= ? AND delivered_at IS NULL AND status = 'replied'
    AND (lease_until IS NULL OR lease_until <= ?)
  ORDER BY next_attempt_at, id LIMIT ?` + lock + `)
RETURNING id, project_id, channel_id, correlation_id, reply, metadata, created_at, accepted_at, delivered_at, status,
  deadline_at, next_attempt_at, lease_until, lease_owner, queue_state, queue_attempts, attempt_base, callback_url, webhook_id`
	var out []OutboxMessage
	now = now.UTC()
	err := s.db.WithContext(ctx).Raw(q, leaseUntil.UTC(), owner, now, now, limit).Scan(&out).Error
	return out, err
}

// QueueUpdate is how a claimed row goes on.
type QueueUpdate struct {
	// Next is the next attempt's time; zero ends the queue with State.
	Next  time.Time
	State string
	// Delivered closes the message (a 2xx): status delivered, never served.
	Delivered bool
	// Attempted counts one attempt of the API.
	Attempted bool
	// Resolved: what the attempt log said of the pod's attempts.
	CallbackURL, WebhookID string
	AttemptBase            int
}

// FinishQueued releases owner's lease on a claimed row with u and, in the
// same transaction, records attempts (as RecordWebhookAttempts). It
// reports whether the lease was still owner's (false: the row was left as
// it was; the attempts are recorded all the same).
func (s *Store) FinishQueued(ctx context.Context, id, owner string, u QueueUpdate, attempts []WebhookAttempt,
	failingAfter time.Duration, now time.Time) (bool, []EndpointChange, error) {
	var held bool
	var changes []EndpointChange
	err := s.tx(ctx, func(tx *gorm.DB) error {
		held, changes = false, nil
		set := map[string]any{"lease_until": nil, "lease_owner": ""}
		if u.Next.IsZero() {
			set["next_attempt_at"], set["queue_state"] = nil, u.State
		} else {
			set["next_attempt_at"] = u.Next.UTC()
		}
		if u.Delivered {
			set["status"], set["delivered_at"] = wire.OutboxStatusDelivered, now.UTC()
		}
		if u.Attempted {
			set["queue_attempts"] = gorm.Expr("queue_attempts + 1")
		}
		if u.CallbackURL != "" {
			set["callback_url"], set["webhook_id"], set["attempt_base"] = u.CallbackURL, u.WebhookID, u.AttemptBase
		}
		res := tx.Model(&OutboxMessage{}).Where("id = ? AND lease_owner = ? AND delivered_at IS NULL", id, owner).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		held = res.RowsAffected == 1
		if len(attempts) == 0 {
			return nil
		}
		var err error
		_, changes, err = s.recordAttempts(tx, attempts, failingAfter, now)
		return err
	})
	return held, changes, err
}

// LastDeliveryAttempt is the latest attempt of kind delivery of a message
// (ErrNotFound: none).
func (s *Store) LastDeliveryAttempt(ctx context.Context, projectID, correlationID string) (WebhookAttempt, error) {
	var out []WebhookAttempt
	err := s.db.WithContext(ctx).Where("project_id = ? AND correlation_id = ? AND kind = ?", projectID, correlationID, wire.AttemptDelivery).
		Order("attempted_at DESC, attempt DESC").Limit(1).Find(&out).Error
	if err != nil {
		return WebhookAttempt{}, err
	}
	if len(out) == 0 {
		return WebhookAttempt{}, ErrNotFound
	}
	return out[0], nil
}

// EndpointFailing reports whether a project's endpoint is marked failing.
func (s *Store) EndpointFailing(ctx context.Context, projectID, endpoint string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&WebhookEndpoint{}).
		Where("project_id = ? AND endpoint = ? AND disabled_at IS NOT NULL", projectID, endpoint).Count(&n).Error
	return n > 0, err
}

// ListReplayable returns up to limit replies of a project's channel
// created in [since, until) (zero: open), oldest first, whose final state
// (wire.Message*) is state: delivered, in_outbox or taken_from_outbox
// (empty: any of them).
func (s *Store) ListReplayable(ctx context.Context, projectID, channelID string, since, until time.Time, state string, limit int) ([]OutboxMessage, error) {
	q := s.db.WithContext(ctx).Where("project_id = ? AND channel_id = ?", projectID, channelID)
	switch state {
	case wire.MessageDelivered:
		q = q.Where("status = ?", wire.OutboxStatusDelivered)
	case wire.MessageInOutbox:
		q = q.Where("status = ? AND delivered_at IS NULL", wire.OutboxStatusReplied)
	case wire.MessageFetched:
		q = q.Where("status = ? AND delivered_at IS NOT NULL", wire.OutboxStatusReplied)
	default:
		q = q.Where("status IN ?", []string{wire.OutboxStatusReplied, wire.OutboxStatusDelivered})
	}
	if !since.IsZero() {
		q = q.Where("created_at >= ?", since.UTC())
	}
	if !until.IsZero() {
		q = q.Where("created_at < ?", until.UTC())
	}
	var out []OutboxMessage
	err := q.Order("created_at, id").Limit(limit).Find(&out).Error
	return out, err
}
