package store

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/wire"
)

// WebhookAttempt is one row of webhook_attempts: one callback attempt
// (docs/webhook-delivery.md "Attempt log"). No request or reply
// body is kept; ResponseHead is the first wire.AttemptHeadBytes of the
// receiver's answer.
type WebhookAttempt struct {
	ID            string `gorm:"primaryKey"`
	ProjectID     string
	ChannelID     string
	CorrelationID string
	WebhookID     string
	Kind          string
	Attempt       int
	URL           string
	Endpoint      string
	AttemptedAt   time.Time
	LatencyMS     int64
	StatusCode    int
	Error         string
	ResponseHead  string
	NextRetryAt   *time.Time
	Outcome       string
}

// TableName is webhook_attempts.
func (WebhookAttempt) TableName() string { return "webhook_attempts" }

// WebhookEndpoint is one row of webhook_endpoints: the health of one
// callback endpoint of a project.
type WebhookEndpoint struct {
	ProjectID           string `gorm:"primaryKey"`
	Endpoint            string `gorm:"primaryKey"`
	ConsecutiveFailures int
	// FailingSince is the first failure of the current streak (nil after a
	// success).
	FailingSince *time.Time
	// DisabledAt is when the streak had lasted the failing period: replies
	// go straight to the outbox until an attempt succeeds.
	DisabledAt    *time.Time
	LastError     string
	LastAttemptAt time.Time
}

// TableName is webhook_endpoints.
func (WebhookEndpoint) TableName() string { return "webhook_endpoints" }

// EndpointChange is a transition of an endpoint's health caused by
// RecordWebhookAttempts.
type EndpointChange struct {
	Endpoint WebhookEndpoint
	// Failing is true when the endpoint was just marked failing, false when
	// a success re-enabled it.
	Failing bool
}

// RecordWebhookAttempts stores attempts (idempotent on the id: a pod
// re-sending a batch stores nothing twice) and updates the health of their
// endpoints in attempt order: a 2xx resets the streak (re-enabling a
// failing endpoint), a failure extends it, and a streak that has lasted
// failingAfter, or one 410 Gone answer, marks the endpoint failing. Each endpoint's row is read
// (locked) and written once per call. It returns how many attempts were
// new and the endpoints whose failing state changed.
func (s *Store) RecordWebhookAttempts(ctx context.Context, attempts []WebhookAttempt, failingAfter time.Duration, now time.Time) (int, []EndpointChange, error) {
	var stored int
	var changes []EndpointChange
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		stored, changes, err = s.recordAttempts(tx, attempts, failingAfter, now)
		return err
	})
	return stored, changes, err
}

// recordAttempts is RecordWebhookAttempts inside tx.
func (s *Store) recordAttempts(tx *gorm.DB, attempts []WebhookAttempt, failingAfter time.Duration, now time.Time) (int, []EndpointChange, error) {
	stored := 0
	var changes []EndpointChange
	type key struct{ project, endpoint string }
	var order []key
	fresh := map[key][]WebhookAttempt{}
	for i := range attempts {
		a := attempts[i]
		a.AttemptedAt = a.AttemptedAt.UTC()
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&a)
		if res.Error != nil {
			return 0, nil, res.Error
		}
		if res.RowsAffected == 0 {
			continue
		}
		stored++
		k := key{a.ProjectID, a.Endpoint}
		if _, ok := fresh[k]; !ok {
			order = append(order, k)
		}
		fresh[k] = append(fresh[k], a)
	}
	for _, k := range order {
		ch, changed, err := s.updateEndpoint(tx, k.project, k.endpoint, fresh[k], failingAfter, now.UTC())
		if err != nil {
			return 0, nil, err
		}
		if changed {
			changes = append(changes, ch)
		}
	}
	return stored, changes, nil
}

// updateEndpoint applies new attempts of one endpoint, oldest first.
func (s *Store) updateEndpoint(tx *gorm.DB, projectID, endpoint string, as []WebhookAttempt, failingAfter time.Duration, now time.Time) (EndpointChange, bool, error) {
	sort.SliceStable(as, func(i, j int) bool { return as[i].AttemptedAt.Before(as[j].AttemptedAt) })
	seed := WebhookEndpoint{ProjectID: projectID, Endpoint: endpoint, LastAttemptAt: as[0].AttemptedAt}
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&seed).Error; err != nil {
		return EndpointChange{}, false, err
	}
	q := tx
	if s.dialect == migrations.Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	var e WebhookEndpoint
	if err := q.First(&e, "project_id = ? AND endpoint = ?", projectID, endpoint).Error; err != nil {
		return EndpointChange{}, false, err
	}
	wasFailing := e.DisabledAt != nil
	for _, a := range as {
		if a.AttemptedAt.After(e.LastAttemptAt) {
			e.LastAttemptAt = a.AttemptedAt
		}
		if a.Outcome == wire.AttemptDelivered {
			e.ConsecutiveFailures, e.FailingSince, e.DisabledAt, e.LastError = 0, nil, nil, ""
			continue
		}
		e.ConsecutiveFailures++
		if e.FailingSince == nil || a.AttemptedAt.Before(*e.FailingSince) {
			t := a.AttemptedAt
			e.FailingSince = &t
		}
		e.LastError = AttemptError(a)
		// 410 Gone disables the endpoint at once (Standard Webhooks).
		if e.DisabledAt == nil && (a.StatusCode == http.StatusGone || a.AttemptedAt.Sub(*e.FailingSince) >= failingAfter) {
			e.DisabledAt = &now
		}
	}
	err := tx.Model(&WebhookEndpoint{}).Where("project_id = ? AND endpoint = ?", projectID, endpoint).
		Updates(map[string]any{"consecutive_failures": e.ConsecutiveFailures, "failing_since": e.FailingSince,
			"disabled_at": e.DisabledAt, "last_error": e.LastError, "last_attempt_at": e.LastAttemptAt}).Error
	isFailing := e.DisabledAt != nil
	return EndpointChange{Endpoint: e, Failing: isFailing}, err == nil && isFailing != wasFailing, err
}

// AttemptError is the short text of a failed attempt: its error, or the
// status it was answered with.
func AttemptError(a WebhookAttempt) string {
	if a.Error != "" {
		return a.Error
	}
	if a.StatusCode != 0 {
		return "answered " + strconv.Itoa(a.StatusCode)
	}
	return "failed"
}

// AttemptCursor is a position in the newest-first list.
type AttemptCursor struct {
	At time.Time
	ID string
}

// ListWebhookAttempts returns up to limit attempts of a project, newest
// first, older than the cursor (nil: from the newest); correlationID, when
// set, keeps one message's attempts.
func (s *Store) ListWebhookAttempts(ctx context.Context, projectID, correlationID string, before *AttemptCursor, limit int) ([]WebhookAttempt, error) {
	q := s.db.WithContext(ctx).Where("project_id = ?", projectID)
	if correlationID != "" {
		q = q.Where("correlation_id = ?", correlationID)
	}
	if before != nil {
		at := before.At.UTC()
		q = q.Where("attempted_at < ? OR (attempted_at = ? AND id < ?)", at, at, before.ID)
	}
	var out []WebhookAttempt
	err := q.Order("attempted_at DESC, id DESC").Limit(limit).Find(&out).Error
	return out, err
}

// MessageStates returns the final state (wire.Message*) of each message
// the API's outbox record knows, by correlation id.
func (s *Store) MessageStates(ctx context.Context, projectID string, correlationIDs []string, now time.Time) (map[string]string, error) {
	out := map[string]string{}
	if len(correlationIDs) == 0 {
		return out, nil
	}
	var rows []OutboxMessage
	err := s.db.WithContext(ctx).Select("correlation_id", "status", "delivered_at", "deadline_at").
		Where("project_id = ? AND correlation_id IN ?", projectID, correlationIDs).Find(&rows).Error
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.CorrelationID] = MessageState(r, now)
	}
	return out, nil
}

// MessageState is the final state of an outbox record.
func MessageState(r OutboxMessage, now time.Time) string {
	switch r.Status {
	case wire.OutboxStatusDelivered:
		return wire.MessageDelivered
	case wire.OutboxStatusUnanswered:
		return wire.MessageUnanswered
	case StatusAccepted:
		if r.DeadlineAt != nil && !r.DeadlineAt.After(now) {
			return wire.MessageUnanswered
		}
		return wire.MessagePending
	}
	if r.DeliveredAt != nil {
		return wire.MessageFetched
	}
	return wire.MessageInOutbox
}

// GetOutboxMessage loads a project's outbox record by correlation id.
func (s *Store) GetOutboxMessage(ctx context.Context, projectID, correlationID string) (OutboxMessage, error) {
	return first[OutboxMessage](ctx, s.db, "project_id = ? AND correlation_id = ?", projectID, correlationID)
}

// ListWebhookEndpoints returns a project's endpoints with a failure streak
// or marked failing, most recent first.
func (s *Store) ListWebhookEndpoints(ctx context.Context, projectID string, failingOnly bool) ([]WebhookEndpoint, error) {
	q := s.db.WithContext(ctx).Where("project_id = ?", projectID)
	if failingOnly {
		q = q.Where("disabled_at IS NOT NULL")
	} else {
		q = q.Where("consecutive_failures > 0 OR disabled_at IS NOT NULL")
	}
	var out []WebhookEndpoint
	err := q.Order("last_attempt_at DESC").Limit(100).Find(&out).Error
	return out, err
}

// CountFailingEndpoints is the number of endpoints marked failing, all projects.
func (s *Store) CountFailingEndpoints(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&WebhookEndpoint{}).Where("disabled_at IS NOT NULL").Count(&n).Error
	return n, err
}

// PruneWebhookAttempts deletes attempts made before cutoff, and the health
// rows of endpoints neither failing nor tried since, and returns how many
// attempts went.
func (s *Store) PruneWebhookAttempts(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("attempted_at < ?", cutoff.UTC()).Delete(&WebhookAttempt{})
	if res.Error != nil {
		return 0, res.Error
	}
	err := s.db.WithContext(ctx).Where("disabled_at IS NULL AND last_attempt_at < ?", cutoff.UTC()).
		Delete(&WebhookEndpoint{}).Error
	return res.RowsAffected, err
}
