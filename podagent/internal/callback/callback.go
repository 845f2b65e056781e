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
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"code.dny.dev/ssrf"
	"github.com/sethvargo/go-retry"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// Standard Webhooks headers.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// Defaults of Options.
const (
	DefaultAttempts       = 8
	DefaultRetryBase      = time.Second
	DefaultRetryMax       = 2 * time.Minute
	DefaultAttemptTimeout = 30 * time.Second
	// MaxRetryAfter caps how long a Retry-After answer can make us wait.
	MaxRetryAfter = 10 * time.Minute
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
	// Recorder, when set, is told every attempt (the attempt log, issue
	// 24); it must not block.
	Recorder Recorder
}

// Recorder takes the record of each attempt (attemptlog.Recorder).
type Recorder interface {
	Record(a wire.WebhookAttempt)
}

// Deliverer sends callbacks.
type Deliverer struct {
	o     Options
	guard *ssrf.Guardian
	http  *http.Client
	log   *zap.Logger
	gone  goneSet
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
	return &Deliverer{o: o, guard: g, http: hc, log: o.Log.Named("callback")}
}

// Guard returns the deliverer's SSRF guard.
func (d *Deliverer) Guard() *ssrf.Guardian { return d.guard }

// CheckURL validates a callbackUrl against the deliverer's guard (see the
// package function CheckURL).
func (d *Deliverer) CheckURL(raw string) error { return CheckURL(d.guard, raw) }

// Delivery is one callback.
type Delivery struct {
	URL string
	// MsgID is the webhook-id, the same on every attempt.
	MsgID string
	// Secret is the channel secret the signature is keyed by.
	Secret string
	// OldSecrets are secrets a rotation replaced whose overlap lasts: each
	// adds a signature to webhook-signature (space-separated), so receivers
	// that know either secret verify.
	OldSecrets []string
	// SigningKey, when set, is the channel's ed25519 key (whsk_): a "v1a,"
	// signature is added to webhook-signature beside the v1 ones.
	SigningKey string
	// CorrelationID, ChannelID and Kind (wire.Attempt*; empty: delivery)
	// go into the attempt records.
	CorrelationID, ChannelID, Kind string
	// Headers are the channel's callbackHeaders (ours win on conflicts).
	Headers map[string]string
	Body    []byte
}

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
		status, retryAfter, err := ans.status, ans.retryAfter, ans.err
		res.Status, res.Err = status, err
		if err == nil {
			res.Delivered = true
			d.record(del, res.Attempts, ans, wire.AttemptDelivered, 0)
			return res
		}
		var pe *permanentError
		if errors.As(err, &pe) {
			res.Err = pe.err
			if ctx.Err() == nil {
				d.record(del, res.Attempts, ans, wire.AttemptFailed, 0)
			}
			d.log.Warn("callback failed permanently", zap.String("webhookId", del.MsgID), zap.Int("status", status),
				zap.Int("attempts", res.Attempts), zap.Error(pe.err))
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
		if err := d.o.Sleep(ctx, wait); err != nil {
			res.Err = fmt.Errorf("%w (last failure: %v)", err, res.Err)
			return res
		}
	}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// answer is the outcome of one POST.
type answer struct {
	at         time.Time
	latency    time.Duration
	status     int
	retryAfter time.Duration
	head       string
	// err is nil for a 2xx; a permanentError for failures not worth
	// retrying.
	err error
}

// attempt is one POST.
func (d *Deliverer) attempt(ctx context.Context, del Delivery) (a answer) {
	a.at = d.o.Now()
	start := time.Now()
	defer func() { a.latency = time.Since(start) }()
	if err := CheckURL(d.guard, del.URL); err != nil {
		a.err = &permanentError{err}
		return a
	}
	sig, err := Sign(del.Secret, del.MsgID, a.at, del.Body, del.OldSecrets...)
	if err != nil {
		a.err = &permanentError{err}
		return a
	}
	if del.SigningKey != "" {
		v1a, err := SignAsymmetric(del.SigningKey, del.MsgID, a.at, del.Body)
		if err != nil {
			a.err = &permanentError{err}
			return a
		}
		sig += " " + v1a
	}
	actx, cancel := context.WithTimeout(ctx, d.o.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		a.err = &permanentError{err}
		return a
	}
	for k, v := range del.Headers {
		if usableHeader(k, v) {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "svc-webhook-callback/1")
	req.Header.Set(HeaderID, del.MsgID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(a.at.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := d.http.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, ErrRefused):
			a.err = &permanentError{err}
		case errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedPort) || errors.Is(err, ssrf.ErrProhibitedNetwork):
			a.err = &permanentError{fmt.Errorf("%w: %v", ErrRefused, err)}
		case ctx.Err() != nil:
			a.err = &permanentError{ctx.Err()}
		default:
			a.err = err
		}
		return a
	}
	head := make([]byte, wire.AttemptHeadBytes)
	n, _ := io.ReadFull(resp.Body, head)
	a.head = string(head[:n])
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	a.status = resp.StatusCode
	switch {
	case a.status >= 200 && a.status < 300:
		d.gone.clear(del.URL)
	case a.status == http.StatusGone:
		d.gone.add(del.URL)
		d.log.Warn("callback endpoint answered 410 Gone: disabled until a test message succeeds",
			zap.String("endpoint", wire.WebhookEndpoint(del.URL)), zap.String("webhookId", del.MsgID))
		a.err = &permanentError{fmt.Errorf("%w: callback answered 410", ErrEndpointGone)}
	case a.status == http.StatusTooManyRequests || a.status >= 500:
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), d.o.Now())
		a.err = fmt.Errorf("callback answered %d", a.status)
	default:
		a.err = &permanentError{fmt.Errorf("callback answered %d", a.status)}
	}
	return a
}

// usableHeader drops callbackHeaders that would break every attempt
// (invalid names or values) or that the transport owns.
func usableHeader(k, v string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "", "Host", "Content-Length", "Transfer-Encoding", "Connection":
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return !strings.ContainsAny(v, "\r\n\x00")
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Key returns the HMAC key of a channel secret: a Standard Webhooks secret
// ("whsec_" + base64) is decoded, any other secret is used as its bytes.
func Key(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil && len(k) > 0 {
			return k
		}
	}
	return []byte(secret)
}

// Sign returns the webhook-signature header value of body: "v1,<base64>"
// keyed by secret, followed by one space-separated entry per old secret (a
// rotation's overlap; Standard Webhooks receivers accept any entry that
// verifies).
func Sign(secret, msgID string, ts time.Time, body []byte, old ...string) (string, error) {
	if secret == "" {
		return "", errors.New("the channel has no secret to sign with")
	}
	var sigs []string
	for _, s := range append([]string{secret}, old...) {
		if s == "" {
			continue
		}
		wh, err := standardwebhooks.NewWebhookRaw(Key(s))
		if err != nil {
			return "", err
		}
		sig, err := wh.Sign(msgID, ts, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// SignAsymmetric returns the Standard Webhooks asymmetric signature of
// body: "v1a," and the base64 ed25519 signature, by the whsk_ key, of
// "<msgID>.<unix ts>.<body>".
func SignAsymmetric(signingKey, msgID string, ts time.Time, body []byte) (string, error) {
	sk, err := wire.ParseWebhookSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	content := make([]byte, 0, len(msgID)+len(body)+24)
	content = append(content, msgID...)
	content = append(content, '.')
	content = strconv.AppendInt(content, ts.Unix(), 10)
	content = append(content, '.')
	content = append(content, body...)
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(sk, content)), nil
}

// Verify checks the Standard Webhooks headers of a received callback.
func Verify(secret string, body []byte, h http.Header) error {
	wh, err := standardwebhooks.NewWebhookRaw(Key(secret))
	if err != nil {
		return err
	}
	return wh.Verify(body, h)
}
