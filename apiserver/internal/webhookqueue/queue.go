// Package webhookqueue is the API's delivery queue for async webhook
// replies (spec 2.5 and 4.2; docs/webhook-delivery.md "The API's delivery
// queue", "Throttle", "Recovery"). The pod makes the first attempts (the
// fast path, ~4 min); a reply it then hands to the outbox is queued on its
// outbox row (migration 00023) and every replica of the API keeps
// delivering it on the Schedule (~3 days by default) — with the same SSRF
// guard, webhook-id and signatures (shared/webhooksend), whether or not the
// project has a pod — until a 2xx, an outbox poll takes it, the endpoint
// is failing or answers for good, or the schedule ends. Every attempt is
// recorded in the attempt log in the transaction that moves the row on.
//
// A replica claims due rows under a lease (store.ClaimQueued: FOR UPDATE
// SKIP LOCKED on PostgreSQL), so two replicas never make the same attempt;
// a replica that dies leaves its lease to expire and another one takes the
// row. Attempts go through the per-endpoint Throttle, shared with Replay.
package webhookqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// Store is what the queue needs (store.Store).
type Store interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
	ClaimQueued(ctx context.Context, owner string, now, leaseUntil time.Time, limit int) ([]store.OutboxMessage, error)
	FinishQueued(ctx context.Context, id, owner string, u store.QueueUpdate, attempts []store.WebhookAttempt,
		failingAfter time.Duration, now time.Time) (bool, []store.EndpointChange, error)
	LastDeliveryAttempt(ctx context.Context, projectID, correlationID string) (store.WebhookAttempt, error)
	EndpointFailing(ctx context.Context, projectID, endpoint string) (bool, error)
}

// Defaults of Options.
const (
	DefaultConcurrency  = 8
	DefaultPollInterval = time.Second
	// DefaultGrace is how long a queued reply whose pod attempts the log
	// does not know yet waits for them (the attempt log and the outbox
	// reach the API through separate hand-overs).
	DefaultGrace = 2 * time.Minute
	// leaseMargin is added to the attempt timeout to make the lease.
	leaseMargin = 30 * time.Second
	// throttleWait bounds how long a claimed row waits for the throttle
	// before it is put back for a second.
	throttleWait = time.Second
)

// Options configure a Queue.
type Options struct {
	// Schedule: DefaultSchedule when empty.
	Schedule Schedule
	// Concurrency is the attempts this replica makes at once.
	Concurrency int
	// AttemptTimeout bounds one POST (webhooksend.DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// Lease: AttemptTimeout + 30 s when zero. It must outlast an attempt.
	Lease        time.Duration
	PollInterval time.Duration
	Grace        time.Duration
	// Owner names this replica in leases (random when empty).
	Owner string
	Now   func() time.Time
}

// Queue delivers queued replies. Run it on every replica.
type Queue struct {
	store    Store
	sender   *webhooksend.Sender
	throttle *Throttle
	wlog     *webhooklog.Log
	log      *zap.Logger
	o        Options

	wake     chan struct{}
	attempts *prometheus.CounterVec
}

// New returns a queue sending with sender through throttle; wl reports
// endpoint transitions (and gives the failing period); reg may be nil.
func New(st Store, sender *webhooksend.Sender, throttle *Throttle, wl *webhooklog.Log, o Options, log *zap.Logger, reg prometheus.Registerer) *Queue {
	if len(o.Schedule) == 0 {
		o.Schedule = MustSchedule(DefaultSchedule)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = webhooksend.DefaultAttemptTimeout
	}
	if o.Lease <= 0 {
		o.Lease = o.AttemptTimeout + leaseMargin
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Owner == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Owner = "rep_" + hex.EncodeToString(b[:])
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	q := &Queue{store: st, sender: sender, throttle: throttle, wlog: wl, log: log, o: o, wake: make(chan struct{}, 1),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_webhook_queue_attempts_total",
			Help: "Callback attempts of the API's delivery queue, by outcome (delivered, retrying, failed)"}, []string{"outcome"})}
	if reg != nil {
		reg.MustRegister(q.attempts)
	}
	return q
}

// FirstDelay is the delay before the API's first attempt of a reply
// queued now (outbox.Outbox.QueueDelay).
func (q *Queue) FirstDelay() time.Duration {
	d, _ := q.o.Schedule.Delay(0)
	return d
}

// Wake makes Run look for due rows now.
func (q *Queue) Wake() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run claims and attempts due rows until ctx ends. When ctx ends, rows
// claimed but not yet attempted keep their lease until it expires (as
// after a crash); attempts in flight finish and are recorded.
func (q *Queue) Run(ctx context.Context) {
	slots := make(chan struct{}, q.o.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		free := q.o.Concurrency - len(slots)
		var rows []store.OutboxMessage
		if free > 0 {
			now := q.o.Now()
			var err error
			rows, err = q.store.ClaimQueued(ctx, q.o.Owner, now, now.Add(q.o.Lease), free)
			if err != nil && ctx.Err() == nil {
				q.log.Warn("claiming queued webhook replies failed", zap.Error(err))
			}
		}
		for _, r := range rows {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				q.handle(ctx, r)
			}()
		}
		if len(rows) == free && free > 0 {
			continue // maybe more due
		}
		t := time.NewTimer(q.o.PollInterval)
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// Tick claims the rows due now (at most Concurrency), attempts them and
// returns how many it handled, once all are finished (tests, and an
// operator's one-off drain).
func (q *Queue) Tick(ctx context.Context) int {
	now := q.o.Now()
	rows, err := q.store.ClaimQueued(ctx, q.o.Owner, now, now.Add(q.o.Lease), q.o.Concurrency)
	if err != nil {
		q.log.Warn("claiming queued webhook replies failed", zap.Error(err))
		return 0
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.handle(ctx, r)
		}()
	}
	wg.Wait()
	return len(rows)
}

// handle makes one attempt of a claimed row (or puts it back).
func (q *Queue) handle(ctx context.Context, r store.OutboxMessage) {
	if ctx.Err() != nil {
		return // abandoned: the lease expires
	}
	fctx := context.WithoutCancel(ctx)
	u, ok := q.resolve(ctx, r)
	if !ok {
		q.finish(fctx, r, u, nil)
		return
	}
	ch, err := q.store.GetChannel(ctx, r.ProjectID)
	if err != nil || ch.ID != r.ChannelID || ch.Secret == "" {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			q.retryLater(fctx, r, u, err)
			return
		}
		u.State = store.QueueStopped
		q.finish(fctx, r, u, nil)
		return
	}
	headers, _ := webhookchannel.DecodeCallbackHeaders(ch.CallbackHeaders)
	meta := json.RawMessage(r.Metadata)
	if !json.Valid(meta) {
		meta = json.RawMessage("{}")
	}
	body, err := webhooksend.CallbackBody(wire.WebhookCallback{Reply: r.Reply, CorrelationID: r.CorrelationID, Metadata: meta})
	if err != nil {
		u.State = store.QueueStopped
		q.finish(fctx, r, u, nil)
		return
	}
	del := webhooksend.Delivery{URL: u.CallbackURL, MsgID: u.WebhookID, Secret: ch.Secret,
		OldSecrets: ch.PreviousSecrets(q.o.Now()), SigningKey: ch.SigningKey, CorrelationID: r.CorrelationID,
		ChannelID: ch.ID, Kind: wire.AttemptDelivery, Headers: headers, Body: body}
	tctx, cancel := context.WithTimeout(ctx, throttleWait)
	done, err := q.throttle.Acquire(tctx, wire.WebhookEndpoint(del.URL))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		u.Next = q.o.Now().Add(throttleWait)
		q.finish(fctx, r, u, nil)
		return
	}
	ans := q.sender.Attempt(fctx, del)
	done(ans.Status)
	n := r.QueueAttempts + 1
	u.Attempted = true
	outcome, wait := wire.AttemptDelivered, time.Duration(0)
	switch {
	case ans.Err == nil:
		u.Delivered, u.State = true, store.QueueDelivered
	case ans.Permanent:
		outcome, u.State = wire.AttemptFailed, store.QueueStopped
	default:
		d, more := q.o.Schedule.Delay(n)
		if !more {
			outcome, u.State = wire.AttemptFailed, store.QueueExhausted
			break
		}
		if ans.RetryAfter > d {
			d = min(ans.RetryAfter, webhooksend.MaxRetryAfter)
		}
		outcome, wait, u.Next = wire.AttemptRetrying, d, ans.At.Add(d)
	}
	q.attempts.WithLabelValues(outcome).Inc()
	rec := webhooksend.Record(del, u.AttemptBase+n, ans, outcome, wait)
	q.finish(fctx, r, u, []store.WebhookAttempt{webhooklog.ToRow(r.ProjectID, rec)})
	if u.State == store.QueueExhausted {
		q.log.Warn("the API's callback schedule ended without a 2xx: the reply stays in the outbox",
			zap.String("projectId", r.ProjectID), zap.String("webhookId", u.WebhookID), zap.Int("attempts", n))
	}
}

// resolve finds what the attempt log knows of the pod's attempts; ok is
// false when no attempt is to be made now (u says what happens instead).
func (q *Queue) resolve(ctx context.Context, r store.OutboxMessage) (u store.QueueUpdate, ok bool) {
	u = store.QueueUpdate{CallbackURL: r.CallbackURL, WebhookID: r.WebhookID, AttemptBase: r.AttemptBase}
	if r.CallbackURL == "" {
		young := q.o.Now().Sub(r.AcceptedAt) < q.o.Grace
		last, err := q.store.LastDeliveryAttempt(ctx, r.ProjectID, r.CorrelationID)
		switch {
		case errors.Is(err, store.ErrNotFound) && young:
			u.Next = q.o.Now().Add(q.o.Grace / 4)
			return u, false
		case errors.Is(err, store.ErrNotFound):
			u.State = store.QueueStopped // a sync reply: no callback URL
			return u, false
		case err != nil:
			u.Next = q.o.Now().Add(q.o.PollInterval)
			return u, false
		case last.Outcome == wire.AttemptRetrying && young:
			u.Next = q.o.Now().Add(q.o.Grace / 4) // the pod's final record is on its way
			return u, false
		case last.Outcome == wire.AttemptDelivered || !TakeOver(last):
			u.State = store.QueueStopped
			return u, false
		}
		u.CallbackURL, u.WebhookID, u.AttemptBase = last.URL, last.WebhookID, last.Attempt
	}
	failing, err := q.store.EndpointFailing(ctx, r.ProjectID, wire.WebhookEndpoint(u.CallbackURL))
	if err != nil {
		u.Next = q.o.Now().Add(q.o.PollInterval)
		return u, false
	}
	if failing {
		u.State = store.QueueStopped // replies for a failing endpoint stay in the outbox
		return u, false
	}
	return u, true
}

// TakeOver reports whether the API keeps delivering after the pod's last
// attempt: it failed in a way worth retrying (a network error, 429, 5xx),
// not for good (an SSRF refusal, 3xx, other 4xx, 410 Gone).
func TakeOver(last store.WebhookAttempt) bool {
	if last.StatusCode == http.StatusTooManyRequests || last.StatusCode >= 500 {
		return true
	}
	if last.StatusCode != 0 {
		return false
	}
	e := last.Error
	return e != "" && !strings.Contains(e, webhooksend.ErrRefused.Error()) && !strings.Contains(e, webhooksend.ErrEndpointGone.Error()) &&
		!strings.Contains(e, context.Canceled.Error()) && !strings.Contains(e, "no secret")
}

func (q *Queue) retryLater(ctx context.Context, r store.OutboxMessage, u store.QueueUpdate, err error) {
	q.log.Warn("queued webhook reply put back", zap.String("projectId", r.ProjectID), zap.Error(err))
	u.Next = q.o.Now().Add(q.o.PollInterval)
	q.finish(ctx, r, u, nil)
}

// finish moves the row on and records attempts, in one transaction.
func (q *Queue) finish(ctx context.Context, r store.OutboxMessage, u store.QueueUpdate, attempts []store.WebhookAttempt) {
	held, changes, err := q.store.FinishQueued(ctx, r.ID, q.o.Owner, u, attempts, q.wlog.FailingPeriod(), q.o.Now())
	if err != nil {
		q.log.Error("finishing a queued webhook reply failed: its lease expires and it is attempted again",
			zap.String("projectId", r.ProjectID), zap.String("correlationId", r.CorrelationID), zap.Error(err))
		return
	}
	q.wlog.Report(r.ProjectID, changes)
	if !held {
		q.log.Info("a queued webhook reply was taken meanwhile", zap.String("projectId", r.ProjectID),
			zap.String("correlationId", r.CorrelationID))
	}
}
