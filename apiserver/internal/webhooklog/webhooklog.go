// Package webhooklog is the API side of webhook delivery that operators can
// see and steer (spec 2.5 and 4.2 callbacks and outbox;
// docs/webhook-delivery.md "Attempt log"):
//
//	POST /internal/projects/{id}/webhook/attempts          the pod hands over attempt records (runtime token;
//	                                                       idempotent on the attempt id)
//	GET  …/agent-proxy/agent/channels/webhook/attempts     the attempt log, newest first, paginated
//	                                                       (?limit=&cursor=&correlationId=), each with its
//	                                                       message's final state
//	GET  …/agent-proxy/agent/channels/webhook/endpoints    callback endpoints with failures, and which are failing
//	POST …/agent-proxy/agent/channels/webhook/replay/{correlationId}
//	                                                       re-send a delivered or outboxed reply (one attempt,
//	                                                       same webhook-id) through the project's pod
//	POST …/agent-proxy/agent/channels/webhook/endpoints/test
//	                                                       a test message to an endpoint; a 2xx re-enables it
//
// The member routes take an API key of a project member and the channel
// secret (X-Webhook-Secret), like the outbox poll. The log lives in the
// API's database, not on the pod (which may be replaced); it is pruned by
// the janitor after SVC_WEBHOOK_ATTEMPT_RETENTION.
//
// Endpoint health: RecordWebhookAttempts counts each endpoint's
// consecutive failures; a streak that lasts FailingAfter (Svix's five days
// by default), or one 410 Gone answer, marks it failing (a log line, svc_webhook_endpoint_failing_total,
// and the pod, which reads the failing endpoints with its channel config,
// puts replies for it straight into the outbox; svc_webhook_endpoints_failing
// is the number failing now); any 2xx, such as a test
// message, re-enables it.
package webhooklog

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultFailingAfter is how long every attempt to an endpoint must have
// failed before it is marked failing (Svix: five days).
const DefaultFailingAfter = 5 * 24 * time.Hour

// Store is what the log needs (store.Store).
type Store interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
	RecordWebhookAttempts(ctx context.Context, attempts []store.WebhookAttempt, failingAfter time.Duration, now time.Time) (int, []store.EndpointChange, error)
	ListWebhookAttempts(ctx context.Context, projectID, correlationID string, before *store.AttemptCursor, limit int) ([]store.WebhookAttempt, error)
	MessageStates(ctx context.Context, projectID string, correlationIDs []string, now time.Time) (map[string]string, error)
	GetOutboxMessage(ctx context.Context, projectID, correlationID string) (store.OutboxMessage, error)
	ListWebhookEndpoints(ctx context.Context, projectID string, failingOnly bool) ([]store.WebhookEndpoint, error)
}

// Log records and serves attempts; the console shares it with the routes.
type Log struct {
	Store Store
	Log   *zap.Logger
	// FailingAfter: DefaultFailingAfter when zero.
	FailingAfter time.Duration
	Now          func() time.Time

	failing, reenabled prometheus.Counter
	failingNow         prometheus.Gauge
}

// Counter is the part of the store the failing gauge reads (store.Store).
type Counter interface {
	CountFailingEndpoints(ctx context.Context) (int64, error)
}

// GaugeInterval is how often Job refreshes svc_webhook_endpoints_failing.
const GaugeInterval = time.Minute

// Job refreshes svc_webhook_endpoints_failing from the database every
// interval until ctx ends (every replica runs it; the gauge is the same on
// all of them).
func (l *Log) Job(ctx context.Context, c Counter, interval time.Duration) {
	wait.EveryFromNow(ctx, interval, func(ctx context.Context) {
		if err := l.RefreshGauge(ctx, c); err != nil && ctx.Err() == nil {
			l.Log.Warn("counting failing webhook endpoints failed", zap.Error(err))
		}
	})
}

// RefreshGauge sets svc_webhook_endpoints_failing once.
func (l *Log) RefreshGauge(ctx context.Context, c Counter) error {
	n, err := c.CountFailingEndpoints(ctx)
	if err != nil {
		return err
	}
	l.failingNow.Set(float64(n))
	return nil
}

// New returns a log whose metrics are registered on reg (nil: none).
func New(s Store, log *zap.Logger, reg prometheus.Registerer) *Log {
	if log == nil {
		log = zap.NewNop()
	}
	l := &Log{Store: s, Log: log,
		failing: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_webhook_endpoint_failing_total",
			Help: "Callback endpoints marked failing (every attempt failed for the failing period); replies for them go to the outbox"}),
		reenabled: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_webhook_endpoint_reenabled_total",
			Help: "Failing callback endpoints re-enabled by a successful attempt (a test message or a replay)"}),
		failingNow: prometheus.NewGauge(prometheus.GaugeOpts{Name: "svc_webhook_endpoints_failing",
			Help: "Callback endpoints marked failing now, all projects (refreshed every minute)"}),
	}
	if reg != nil {
		reg.MustRegister(l.failing, l.reenabled, l.failingNow)
	}
	return l
}

func (l *Log) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Log) failingAfter() time.Duration {
	if l.FailingAfter > 0 {
		return l.FailingAfter
	}
	return DefaultFailingAfter
}

// Record stores attempts of a project's channel and reports the endpoint
// transitions they caused (log line and metric).
func (l *Log) Record(ctx context.Context, projectID string, in []wire.WebhookAttempt) (int, error) {
	rows := make([]store.WebhookAttempt, len(in))
	for i, a := range in {
		rows[i] = ToRow(projectID, a)
	}
	n, changes, err := l.Store.RecordWebhookAttempts(ctx, rows, l.failingAfter(), l.now())
	if err != nil {
		return 0, err
	}
	l.Report(projectID, changes)
	return n, nil
}

// FailingPeriod is the failing period in force.
func (l *Log) FailingPeriod() time.Duration { return l.failingAfter() }

// Report logs and counts endpoint transitions that recorded attempts
// caused (Record does it; the delivery queue records through its own
// transaction and calls it).
func (l *Log) Report(projectID string, changes []store.EndpointChange) {
	for _, ch := range changes {
		e := ch.Endpoint
		if ch.Failing {
			l.failing.Inc()
			l.Log.Warn("callback endpoint marked failing: replies for it go straight to the outbox until a test message succeeds",
				zap.String("projectId", projectID), zap.String("endpoint", e.Endpoint),
				zap.Int("consecutiveFailures", e.ConsecutiveFailures), zap.Timep("failingSince", e.FailingSince),
				zap.String("lastError", e.LastError))
			continue
		}
		l.reenabled.Inc()
		l.Log.Info("callback endpoint re-enabled by a successful attempt", zap.String("projectId", projectID),
			zap.String("endpoint", e.Endpoint))
	}
}

// Limits of stored fields.
const (
	maxIDBytes    = 200
	maxURLBytes   = 4096
	maxErrorBytes = 1000
)

// ToRow is the row of a wire attempt; the endpoint is derived from the URL
// here (whatever the pod said) and long fields are cut at a rune boundary.
func ToRow(projectID string, a wire.WebhookAttempt) store.WebhookAttempt {
	r := store.WebhookAttempt{ID: a.ID, ProjectID: projectID, ChannelID: a.ChannelID, CorrelationID: a.CorrelationID,
		WebhookID: a.WebhookID, Kind: a.Kind, Attempt: a.Attempt, URL: cut(a.URL, maxURLBytes),
		Endpoint: cut(wire.WebhookEndpoint(a.URL), maxURLBytes), AttemptedAt: a.AttemptedAt.UTC(), LatencyMS: a.LatencyMS,
		StatusCode: a.Status, Error: cut(a.Error, maxErrorBytes), ResponseHead: cut(a.ResponseHead, wire.AttemptHeadBytes),
		Outcome: a.Outcome}
	if !a.NextRetryAt.IsZero() {
		t := a.NextRetryAt.UTC()
		r.NextRetryAt = &t
	}
	return r
}

// FromRow is the wire form of a row.
func FromRow(r store.WebhookAttempt) wire.WebhookAttempt {
	a := wire.WebhookAttempt{ID: r.ID, ChannelID: r.ChannelID, CorrelationID: r.CorrelationID, WebhookID: r.WebhookID,
		Kind: r.Kind, Attempt: r.Attempt, URL: r.URL, Endpoint: r.Endpoint, AttemptedAt: r.AttemptedAt.UTC(),
		LatencyMS: r.LatencyMS, Status: r.StatusCode, Error: r.Error, ResponseHead: r.ResponseHead, Outcome: r.Outcome}
	if r.NextRetryAt != nil {
		a.NextRetryAt = r.NextRetryAt.UTC()
	}
	return a
}

// cut returns at most n bytes of s, ending on a rune boundary, valid UTF-8.
func cut(s string, n int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // replaces invalid bytes
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
