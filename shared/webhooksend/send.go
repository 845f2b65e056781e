package webhooksend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"code.dny.dev/ssrf"

	"github.com/svc-dev/svc/shared/wire"
)

// DefaultAttemptTimeout bounds one POST.
const DefaultAttemptTimeout = 30 * time.Second

// MaxRetryAfter caps how long a Retry-After answer can make a sender wait.
const MaxRetryAfter = 10 * time.Minute

// ErrEndpointGone reports an endpoint that answered 410 Gone.
var ErrEndpointGone = errors.New("callback endpoint is gone (410)")

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

// Answer is the outcome of one POST.
type Answer struct {
	At      time.Time
	Latency time.Duration
	// Status of the answer (0 when none).
	Status int
	// RetryAfter is the receiver's Retry-After on 429 and 5xx (uncapped).
	RetryAfter time.Duration
	// Head is the first wire.AttemptHeadBytes of the answer's body.
	Head string
	// Err is nil for a 2xx.
	Err error
	// Permanent marks a failure not worth retrying: SSRF refusal, 3xx,
	// 4xx other than 429, 410 (Gone also sets Gone), a cancelled ctx.
	Permanent bool
	// Gone: the receiver answered 410.
	Gone bool
	// Sent: the request was written to the receiver in full, so it may
	// have seen it even when no answer came (a cancelled ctx).
	Sent bool
}

// Sender makes attempts. The zero value is not usable; call NewSender.
type Sender struct {
	guard   *ssrf.Guardian
	http    *http.Client
	timeout time.Duration
	now     func() time.Time
}

// NewSender returns a sender guarded by g (nil: NewGuard(nil)) whose POSTs
// take at most timeout (0: DefaultAttemptTimeout). hc, when not nil,
// replaces the guarded client (a micro-VM guest's forwarding client, or
// tests of the retry logic); now nil is time.Now.
func NewSender(g *ssrf.Guardian, hc *http.Client, timeout time.Duration, now func() time.Time) *Sender {
	if g == nil {
		g = NewGuard(nil)
	}
	if timeout <= 0 {
		timeout = DefaultAttemptTimeout
	}
	if hc == nil {
		hc = NewHTTPClient(g, timeout)
	}
	if now == nil {
		now = time.Now
	}
	return &Sender{guard: g, http: hc, timeout: timeout, now: now}
}

// Guard returns the sender's SSRF guard.
func (s *Sender) Guard() *ssrf.Guardian { return s.guard }

// Attempt is one POST of del, signed now.
func (s *Sender) Attempt(ctx context.Context, del Delivery) (a Answer) {
	a.At = s.now()
	start := time.Now()
	defer func() { a.Latency = time.Since(start) }()
	fail := func(err error) Answer {
		a.Err, a.Permanent = err, true
		return a
	}
	if err := CheckURL(s.guard, del.URL); err != nil {
		return fail(err)
	}
	sig, err := Sign(del.Secret, del.MsgID, a.At, del.Body, del.OldSecrets...)
	if err != nil {
		return fail(err)
	}
	if del.SigningKey != "" {
		v1a, err := SignAsymmetric(del.SigningKey, del.MsgID, a.At, del.Body)
		if err != nil {
			return fail(err)
		}
		sig += " " + v1a
	}
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var sent atomic.Bool // set on the transport's goroutine
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			sent.Store(true)
		}
	}})
	req, err := http.NewRequestWithContext(actx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return fail(err)
	}
	for k, v := range del.Headers {
		if usableHeader(k, v) {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "svc-webhook-callback/1")
	req.Header.Set(HeaderID, del.MsgID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(a.At.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := s.http.Do(req)
	a.Sent = sent.Load()
	if err != nil {
		switch {
		case errors.Is(err, ErrRefused):
			return fail(err)
		case errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedPort) || errors.Is(err, ssrf.ErrProhibitedNetwork):
			return fail(fmt.Errorf("%w: %v", ErrRefused, err))
		case ctx.Err() != nil:
			return fail(ctx.Err())
		}
		a.Err = err
		return a
	}
	head := make([]byte, wire.AttemptHeadBytes)
	n, _ := io.ReadFull(resp.Body, head)
	a.Head = string(head[:n])
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	a.Status = resp.StatusCode
	switch {
	case a.Status >= 200 && a.Status < 300:
	case a.Status == http.StatusGone:
		a.Gone = true
		return fail(fmt.Errorf("%w: callback answered 410", ErrEndpointGone))
	case a.Status == http.StatusTooManyRequests || a.Status >= 500:
		a.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), s.now())
		a.Err = fmt.Errorf("callback answered %d", a.Status)
	default:
		return fail(fmt.Errorf("callback answered %d", a.Status))
	}
	return a
}

// Record is the attempt log's record of attempt n of del; wait is the
// delay before the next try (0: none follows).
func Record(del Delivery, n int, a Answer, outcome string, wait time.Duration) wire.WebhookAttempt {
	kind := del.Kind
	if kind == "" {
		kind = wire.AttemptDelivery
	}
	rec := wire.WebhookAttempt{ID: NewAttemptID(), ChannelID: del.ChannelID, CorrelationID: del.CorrelationID,
		WebhookID: del.MsgID, Kind: kind, Attempt: n, URL: del.URL, Endpoint: wire.WebhookEndpoint(del.URL),
		AttemptedAt: a.At.UTC(), LatencyMS: a.Latency.Milliseconds(), Status: a.Status, ResponseHead: a.Head,
		Outcome: outcome}
	if a.Err != nil {
		rec.Error = a.Err.Error()
	}
	if wait > 0 {
		rec.NextRetryAt = a.At.Add(wait).UTC()
	}
	return rec
}

// NewAttemptID returns att_ and 24 hex digits.
func NewAttemptID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "att_" + hex.EncodeToString(b[:])
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

// ParseRetryAfter reads delay-seconds or an HTTP date (0: none, a past
// date, or unreadable).
func ParseRetryAfter(v string, now time.Time) time.Duration {
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
