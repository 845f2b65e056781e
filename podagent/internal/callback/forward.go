package callback

// Forwarding (spec 10.5, micro-VM guests): a guest has no route out, so its
// deliverer hands every signed attempt to the host's forwarding endpoint
// (Options.ForwardURL) with the target in HeaderForwardTarget. The host
// (Forwarder) applies the same SSRF guard as a pod (NewGuard, CheckURL,
// NewHTTPClient) and POSTs the body with the guest's headers unchanged —
// the Standard Webhooks signature and webhook-id included — so receivers
// verify and de-duplicate exactly as for a pod. The answer's status,
// Retry-After and (bounded) body come back; retries stay the guest's.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"code.dny.dev/ssrf"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Headers between a guest's deliverer and the host's Forwarder.
const (
	// HeaderForwardTarget carries the callbackUrl of the attempt.
	HeaderForwardTarget = "Svc-Callback-Target"
	// HeaderForwardToken carries the project's runtime token: the host
	// forwards only for its own guest (never passed on to the receiver).
	HeaderForwardToken = "Svc-Callback-Token"
	// HeaderForwardRefused marks the host's SSRF refusal (403).
	HeaderForwardRefused = "Svc-Callback-Refused"
	// HeaderForwardError marks a host-side transport failure (502): the
	// guest treats it as the network error it stands for.
	HeaderForwardError = "Svc-Callback-Error"
)

// MaxForwardBody bounds a forwarded callback body.
const MaxForwardBody = 16 << 20

// maxAnswer bounds the receiver's answer body passed back.
const maxAnswer = 64 << 10

// NewForwardingClient returns the client a guest's deliverer sends with:
// every request goes to forwardURL, its own URL in HeaderForwardTarget and
// the project's runtime token in HeaderForwardToken.
func NewForwardingClient(forwardURL, token string, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport:     &forwardTransport{to: forwardURL, token: token, base: &http.Transport{Proxy: nil, DisableCompression: true}},
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type forwardTransport struct {
	to, token string
	base      http.RoundTripper
}

func (t *forwardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, t.to, r.Body)
	if err != nil {
		return nil, err
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	out.Header.Set(HeaderForwardTarget, r.URL.String())
	out.Header.Set(HeaderForwardToken, t.token)
	res, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("callback forwarder: %w", err)
	}
	if msg := res.Header.Get(HeaderForwardRefused); msg != "" {
		res.Body.Close()
		return nil, fmt.Errorf("%w by the host: %s", ErrRefused, msg)
	}
	if msg := res.Header.Get(HeaderForwardError); msg != "" {
		res.Body.Close()
		return nil, fmt.Errorf("callback forwarder: %s", msg)
	}
	res.Request = r
	return res, nil
}

// Forwarder is the host side: an http.Handler that POSTs one attempt on
// behalf of a guest.
type Forwarder struct {
	guard *ssrf.Guardian
	http  *http.Client
	log   *zap.Logger
	// Observe, when set, is told each outcome: "forwarded", "refused" or
	// "error".
	Observe func(outcome string)
}

// NewForwarder returns a forwarder guarded by g (nil: NewGuard(nil)); each
// POST is bounded by timeout (0: DefaultAttemptTimeout).
func NewForwarder(g *ssrf.Guardian, timeout time.Duration, log *zap.Logger) *Forwarder {
	if g == nil {
		g = NewGuard(nil)
	}
	timeout = settings.PositiveOr(timeout, DefaultAttemptTimeout)
	if log == nil {
		log = zap.NewNop()
	}
	return &Forwarder{guard: g, http: NewHTTPClient(g, timeout), log: log.Named("callback-forwarder")}
}

func (f *Forwarder) observe(outcome string) {
	if f.Observe != nil {
		f.Observe(outcome)
	}
}

func (f *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get(HeaderForwardTarget)
	// Every refusal is the envelope of a code declared in wire.Codes.
	answer := func(code, msg string) { wire.Coded(code, msg).Write(w, r, r.URL.Path, nil, nil) }
	fail := func(code, header, msg string) {
		w.Header().Set(header, msg)
		answer(code, msg)
	}
	if r.Method != http.MethodPost {
		answer("method_not_allowed", "POST only")
		return
	}
	if err := CheckURL(f.guard, target); err != nil {
		f.observe("refused")
		f.log.Warn("refused a guest's callback target", zap.String("target", target), zap.Error(err))
		fail("callback_target_refused", HeaderForwardRefused, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxForwardBody))
	if err != nil {
		answer("request_too_large", "callback body too large or unreadable")
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		f.observe("refused")
		fail("callback_target_refused", HeaderForwardRefused, err.Error())
		return
	}
	for k, vs := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case HeaderForwardTarget, HeaderForwardToken, "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
			"Proxy-Connection", "Te", "Trailer", "Upgrade", "Accept-Encoding":
			continue
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	res, err := f.http.Do(out)
	if err != nil {
		if errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedPort) || errors.Is(err, ssrf.ErrProhibitedNetwork) {
			f.observe("refused")
			f.log.Warn("refused a guest's callback target at connect time", zap.String("target", target), zap.Error(err))
			fail("callback_target_refused", HeaderForwardRefused, err.Error())
			return
		}
		f.observe("error")
		fail("callback_forward_failed", HeaderForwardError, err.Error())
		return
	}
	defer res.Body.Close()
	f.observe("forwarded")
	if v := res.Header.Get("Retry-After"); v != "" {
		w.Header().Set("Retry-After", v)
	}
	if v := res.Header.Get("Location"); v != "" {
		w.Header().Set("Location", v)
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(res.Body, maxAnswer))
}
