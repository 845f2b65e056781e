// Package callback delivers async webhook replies (spec 6, docs/design.md §6):
// POST {reply, correlationId, metadata} to the caller's callbackUrl with
// Content-Type application/json, the channel's callbackHeaders and Standard
// Webhooks signature headers (webhook-id, webhook-timestamp,
// webhook-signature v1 = HMAC-SHA256 keyed by the channel secret).
//
// Delivery is at-least-once: network errors, 429 and 5xx are retried with
// exponential backoff and jitter (a Retry-After answer is honoured, capped),
// 3xx (never followed) and other 4xx stop, 410 Gone also disables the
// endpoint (see gone.go), and after the configured schedule the caller moves the reply to
// the outbox. The webhook-id is the same on every attempt, so receivers can
// de-duplicate. Targets go through an SSRF guard at connect time.
package callback

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"code.dny.dev/ssrf"
	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// Standard Webhooks headers.
const (
	HeaderID        = webhooksend.HeaderID
	HeaderTimestamp = webhooksend.HeaderTimestamp
	HeaderSignature = webhooksend.HeaderSignature
)

// Defaults of Options.
const (
	DefaultAttempts       = 8
	DefaultRetryBase      = time.Second
	DefaultRetryMax       = 2 * time.Minute
	DefaultAttemptTimeout = 30 * time.Second
	// MaxRetryAfter caps how long a Retry-After answer can make us wait.
	MaxRetryAfter = webhooksend.MaxRetryAfter
)

// Options configure a Deliverer.
type Options struct {
	// Guard refuses private targets; nil means NewGuard(nil).
	Guard *ssrf.Guardian
	// HTTP overrides the guarded client (tests of the retry logic only).
	HTTP *http.Client
	// ForwardURL, when set, sends every attempt through a host's Forwarder
	// (a micro-VM guest, which has no route out; see forward.go).
	ForwardURL string
	// ForwardToken is the project's runtime token, which the forwarder
	// requires.
	ForwardToken string
	// Attempts is the total number of tries (first + retries).
	Attempts int
	// RetryBase is the first backoff; it doubles up to RetryMax, ±20 % jitter.
	RetryBase, RetryMax time.Duration
	// AttemptTimeout bounds one POST.
	AttemptTimeout time.Duration
	Log            *zap.Logger
	Now            func() time.Time
	// Sleep waits between attempts (tests); nil uses a timer and ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// Recorder, when set, is told every attempt (the attempt log); it must
	// not block.
	Recorder Recorder
}

// Recorder takes the record of each attempt (attemptlog.Recorder).
type Recorder interface {
	Record(a wire.WebhookAttempt)
}

// Deliverer sends callbacks.
type Deliverer struct {
	o      Options
	guard  *ssrf.Guardian
	sender *webhooksend.Sender
	log    *zap.Logger
	gone   goneSet
}

// New returns a deliverer.
func New(o Options) *Deliverer {
	o.Attempts = settings.PositiveOr(o.Attempts, DefaultAttempts)
	o.RetryBase = settings.PositiveOr(o.RetryBase, DefaultRetryBase)
	o.RetryMax = settings.PositiveOr(o.RetryMax, DefaultRetryMax)
	o.AttemptTimeout = settings.PositiveOr(o.AttemptTimeout, DefaultAttemptTimeout)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = wait.For
	}
	g := o.Guard
	if g == nil {
		g = NewGuard(nil)
	}
	hc := o.HTTP
	if hc == nil && o.ForwardURL != "" {
		hc = NewForwardingClient(o.ForwardURL, o.ForwardToken, o.AttemptTimeout)
	}
	if hc == nil {
		hc = NewHTTPClient(g, o.AttemptTimeout)
	}
	return &Deliverer{o: o, guard: g, sender: webhooksend.NewSender(g, hc, o.AttemptTimeout, o.Now), log: o.Log.Named("callback")}
}

// Guard returns the deliverer's SSRF guard.
func (d *Deliverer) Guard() *ssrf.Guardian { return d.guard }

// CheckURL validates a callbackUrl against the deliverer's guard (see the
// package function CheckURL).
func (d *Deliverer) CheckURL(raw string) error { return CheckURL(d.guard, raw) }

// Delivery is one callback (webhooksend.Delivery).
type Delivery = webhooksend.Delivery

// Result reports a delivery.
type Result struct {
	Delivered bool
	Attempts  int
	// Status of the last answer (0 when none).
	Status int
	// Err is the last failure when not delivered; errors.Is(Err, ErrRefused)
	// for an SSRF refusal.
	Err error
}

// Deliver POSTs until a 2xx, a permanent failure, the end of the schedule
// or ctx's end.
func (d *Deliverer) Deliver(ctx context.Context, del Delivery) Result {
	var b retry.Backoff = retry.NewExponential(d.o.RetryBase)
	b = retry.WithCappedDuration(d.o.RetryMax, b)
	b = retry.WithJitterPercent(20, b)
	b = retry.WithMaxRetries(uint64(d.o.Attempts-1), b)
	var res Result
	if d.gone.has(del.URL) {
		res.Err = fmt.Errorf("%w: %s", ErrEndpointGone, wire.WebhookEndpoint(del.URL))
		return res
	}
	for {
		res.Attempts++
		ans := d.attempt(ctx, del)
		status, retryAfter, err := ans.Status, ans.RetryAfter, ans.Err
		res.Status, res.Err = status, err
		if err == nil {
			res.Delivered = true
			d.record(del, res.Attempts, ans, wire.AttemptDelivered, 0)
			return res
		}
		if ans.Permanent {
			switch {
			case ctx.Err() == nil:
				d.record(del, res.Attempts, ans, wire.AttemptFailed, 0)
			case ans.Sent:
				// Cut off (the pod's shutdown) after the request went out:
				// the receiver may have seen it, so the log keeps it; the
				// reply's caller hands it to the API's delivery queue.
				ans.Err = ErrCutOff
				d.record(del, res.Attempts, ans, wire.AttemptRetrying, 0)
			}
			d.log.Warn("callback failed permanently", zap.String("webhookId", del.MsgID), zap.Int("status", status),
				zap.Int("attempts", res.Attempts), zap.Error(err))
			return res
		}
		wait, stop := b.Next()
		if stop {
			d.record(del, res.Attempts, ans, wire.AttemptFailed, 0)
			d.log.Warn("callback gave up", zap.String("webhookId", del.MsgID), zap.Int("status", status),
				zap.Int("attempts", res.Attempts), zap.Error(err))
			return res
		}
		if retryAfter > wait {
			wait = min(retryAfter, MaxRetryAfter)
		}
		d.record(del, res.Attempts, ans, wire.AttemptRetrying, wait)
		testhook.Reach(testhook.CallbackRetry)
		d.log.Info("callback will retry", zap.String("webhookId", del.MsgID), zap.Int("status", status),
			zap.Int("attempt", res.Attempts), zap.Duration("in", wait), zap.Error(err))
		if err := sleepOrStop(ctx, d.o.Sleep, wait); err != nil {
			res.Err = fmt.Errorf("%w (last failure: %v)", err, res.Err)
			return res
		}
	}
}

// attempt is one POST (webhooksend.Sender.Attempt); a 410 disables the
// endpoint in this deliverer, a 2xx re-enables it.
func (d *Deliverer) attempt(ctx context.Context, del Delivery) webhooksend.Answer {
	a := d.sender.Attempt(ctx, del)
	switch {
	case a.Err == nil:
		d.gone.clear(del.URL)
	case a.Gone:
		d.gone.add(del.URL)
		d.log.Warn("callback endpoint answered 410 Gone: disabled until a test message succeeds",
			zap.String("endpoint", wire.WebhookEndpoint(del.URL)), zap.String("webhookId", del.MsgID))
	}
	return a
}

// Key returns the HMAC key of a channel secret (webhooksend.Key).
func Key(secret string) []byte { return webhooksend.Key(secret) }

// Sign returns the webhook-signature header value of body (webhooksend.Sign).
func Sign(secret, msgID string, ts time.Time, body []byte, old ...string) (string, error) {
	return webhooksend.Sign(secret, msgID, ts, body, old...)
}

// SignAsymmetric returns the v1a signature of body (webhooksend.SignAsymmetric).
func SignAsymmetric(signingKey, msgID string, ts time.Time, body []byte) (string, error) {
	return webhooksend.SignAsymmetric(signingKey, msgID, ts, body)
}

// Verify checks the Standard Webhooks headers of a received callback.
func Verify(secret string, body []byte, h http.Header) error {
	return webhooksend.Verify(secret, body, h)
}
