package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sethvargo/go-retry"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wait"
)

// RouterOptions tune fallbacks, retries, cooldowns and key pools
// (docs/gateway.md). Zero values take the defaults.
type RouterOptions struct {
	// MaxAttempts bounds the upstream requests of one completion over all
	// deployments and keys. Default 3.
	MaxAttempts int
	// BreakerFailures consecutive failures (connect errors, timeouts, 5xx)
	// open a deployment's circuit breaker. Default 5.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker refuses requests before
	// one probe is let through. Default 30 s.
	BreakerCooldown time.Duration
	// KeyCooldown keeps a key out of rotation after a 401/403, or a 429
	// without Retry-After. Default 60 s.
	KeyCooldown time.Duration
	// BackoffBase is the first wait before a deployment is tried again
	// (doubling, with jitter). Default 100 ms.
	BackoffBase time.Duration
	// BackoffMax caps every wait; a Retry-After beyond it ends the retries.
	// Default 2 s.
	BackoffMax time.Duration
	Tracer     *tracing.Tracer
	Log        *zap.Logger
	// Registerer receives the per-deployment and per-key series (nil: none).
	Registerer prometheus.Registerer
}

func (o *RouterOptions) defaults() {
	o.MaxAttempts = settings.PositiveOr(o.MaxAttempts, 3)
	o.BreakerFailures = settings.PositiveOr(o.BreakerFailures, 5)
	o.BreakerCooldown = settings.PositiveOr(o.BreakerCooldown, 30*time.Second)
	o.KeyCooldown = settings.PositiveOr(o.KeyCooldown, 60*time.Second)
	o.BackoffBase = settings.PositiveOr(o.BackoffBase, 100*time.Millisecond)
	o.BackoffMax = settings.PositiveOr(o.BackoffMax, 2*time.Second)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

// Router sends a model's requests to its deployments in order: a connect
// error, a timeout before headers, a 429, 401/403 or 5xx moves to the next
// key or deployment, within MaxAttempts; nothing is retried once an answer
// is handed to the caller. Breakers and key pools are per replica.
type Router struct {
	c    *Client
	o    RouterOptions
	deps map[string]*deployment
	// byModel holds each model's deployments in order (one lookup per
	// request, no name built).
	byModel map[string][]*deployment
	m       *routerMetrics
	now     func() time.Time
	sleep   func(context.Context, time.Duration) error
}

type deployment struct {
	d        catalog.Deployment
	name     string
	provider catalog.Provider
	pool     *keyPool
	breaker  *gobreaker.TwoStepCircuitBreaker[struct{}]
	ok       map[*poolKey]prometheus.Counter // the hot path's counters, resolved once
	okNoKey  prometheus.Counter
}

// NewRouter builds the breakers and key pools of every deployment in cat.
func NewRouter(c *Client, cat *catalog.Catalog, o RouterOptions) *Router {
	o.defaults()
	r := &Router{c: c, o: o, deps: map[string]*deployment{}, byModel: map[string][]*deployment{}, m: newRouterMetrics(o.Registerer),
		now: time.Now, sleep: wait.For}
	if cat == nil {
		return r // no models: every Send fails with ErrNoDeployment
	}
	pools := map[string]*keyPool{}
	for name, p := range cat.Providers {
		pools[name] = newKeyPool(p)
	}
	for _, model := range cat.Models {
		for _, d := range model.Deployments {
			name := d.Name()
			if _, ok := r.deps[name]; ok {
				continue
			}
			dep := &deployment{d: d, name: name, provider: cat.Providers[d.Provider], pool: pools[d.Provider],
				ok: map[*poolKey]prometheus.Counter{}}
			for _, k := range dep.pool.keys {
				dep.ok[k] = r.m.requests.WithLabelValues(name, k.name, outcomeOK)
			}
			dep.okNoKey = r.m.requests.WithLabelValues(name, "", outcomeOK)
			dep.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
				Name:        name,
				MaxRequests: 1,
				Timeout:     o.BreakerCooldown,
				ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(o.BreakerFailures) },
				OnStateChange: func(name string, from, to gobreaker.State) {
					if to == gobreaker.StateOpen {
						r.m.depCooldowns.WithLabelValues(name).Inc()
						o.Log.Warn("upstream deployment cooling down", zap.String("deployment", name),
							zap.String("from", from.String()), zap.Duration("for", o.BreakerCooldown))
					}
				},
			})
			r.deps[name] = dep
		}
	}
	for _, model := range cat.Models {
		r.byModel[model.ID] = r.lookup(&model)
	}
	return r
}

// Answer is the outcome of Send: the upstream's answer (200, or the last
// failure when no attempt succeeded; the caller closes its body) and who
// gave it.
type Answer struct {
	Resp       *http.Response
	Deployment catalog.Deployment
	Name       string        // Deployment.Name(), without an allocation per request
	Key        string        // the key's name ("" without a key)
	Attempts   int           // upstream requests sent
	Wait       time.Duration // spent in upstream exchanges (not in backoff)
}

// discard drains and closes a failed answer before the next attempt.
func (a *Answer) discard() {
	if a.Resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(a.Resp.Body, 64<<10))
		a.Resp.Body.Close()
		a.Resp = nil
	}
}

// lookup finds model's deployments by name (a model the router was not
// built with; nil entries for unknown deployments).
func (r *Router) lookup(model *catalog.Model) []*deployment {
	deps := make([]*deployment, len(model.Deployments))
	for i, d := range model.Deployments {
		deps[i] = r.deps[d.Name()]
	}
	return deps
}

// ErrNoDeployment is returned when every deployment of the model is cooling
// down (its breaker open, or all its provider's keys cooling).
var ErrNoDeployment = errors.New("upstream: every deployment of the model is cooling down")

// noDone stands in for a breaker's report when the breaker is bypassed.
func noDone(error) {}

// errAttemptFailed is what a deployment's breaker counts as a failure.
var errAttemptFailed = errors.New("upstream attempt failed")

// Outcome labels of svc_upstream_requests_total.
const (
	outcomeOK           = "ok"
	outcomeRejected     = "rejected"     // 4xx other than below: the request's fault, not retried
	outcomeRateLimited  = "rate_limited" // 429: key cooled down, retried
	outcomeUnauthorized = "unauthorized" // 401/403: key cooled down, retried
	outcomeServerError  = "server_error" // 408, 5xx: breaker failure, retried
	outcomeTimeout      = "timeout"      // no headers in time: breaker failure, retried
	outcomeUnavailable  = "unavailable"  // connect error: breaker failure, retried
)

func outcomeOf(status int) string {
	switch {
	case status >= 200 && status < 300:
		return outcomeOK
	case status == http.StatusTooManyRequests:
		return outcomeRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return outcomeUnauthorized
	case status == http.StatusRequestTimeout || status >= 500:
		return outcomeServerError
	default:
		return outcomeRejected
	}
}

// Send sends the model's request, body(d) being the body for deployment d.
// On success Answer.Resp is a 200; when every attempt failed it is the last
// failed answer (or err is the last transport error, wrapped in ErrTimeout
// or ErrUnavailable, or ErrNoDeployment).
func (r *Router) Send(ctx context.Context, model *catalog.Model, body func(*catalog.Deployment) ([]byte, error)) (Answer, error) {
	var (
		a       Answer
		lastErr error = ErrNoDeployment
		// The body of each deployment, built when first needed (the first
		// deployment's in body0: no allocation when it answers).
		body0  []byte
		bodies [][]byte
		hint   time.Duration // the longest Retry-After of this round
		// backoff paces the rounds after the first (built when needed: no
		// allocation when the first round answers).
		backoff retry.Backoff
	)
	deps := r.byModel[model.ID]
	if len(deps) != len(model.Deployments) {
		deps = r.lookup(model)
	}
	// Cooldowns steer traffic to an alternative; a model with one deployment
	// has none, so its breaker and key cooldowns never refuse a request
	// (the upstream's own answer reaches the client instead of a 503).
	lone := len(model.Deployments) == 1
	var timedOut []bool // deployments that already cost a full header timeout
	for round := 0; a.Attempts < r.o.MaxAttempts; round++ {
		if round > 0 {
			if !lone && !r.anyAvailable(model) {
				break
			}
			if hint > r.o.BackoffMax {
				break // the upstream asked for more than we wait
			}
			if backoff == nil {
				backoff = r.backoff()
			}
			d, _ := backoff.Next()
			if err := r.sleep(ctx, max(d, hint)); err != nil {
				break
			}
			hint = 0
		}
		tried := false
		for i := range model.Deployments {
			d := &model.Deployments[i]
			dep := deps[i]
			if dep == nil { // a catalog the router was not built from
				return a, unknownDeployment(d)
			}
			if timedOut != nil && timedOut[i] {
				continue
			}
			for tries := 0; a.Attempts < r.o.MaxAttempts; tries++ {
				var key *poolKey
				if !dep.pool.empty() {
					if key, _ = dep.pool.pick(r.now()); key == nil {
						if !lone || tries > 0 {
							break // every key cooling down
						}
						key = dep.pool.soonest()
					}
				}
				done := noDone
				if !lone {
					var err error
					if done, err = dep.breaker.Allow(); err != nil {
						break // open, or its one probe is out
					}
				}
				var b []byte
				switch {
				case i == 0 && body0 != nil:
					b = body0
				case i > 0 && bodies != nil && bodies[i] != nil:
					b = bodies[i]
				default:
					var err error
					if b, err = body(d); err != nil {
						done(nil)
						return a, err
					}
					if i == 0 {
						body0 = b
					} else {
						if bodies == nil {
							bodies = make([][]byte, len(model.Deployments))
						}
						bodies[i] = b
					}
				}
				a.discard()
				tried = true
				a.Attempts++
				resp, retryKey, err := r.attempt(ctx, dep, key, b, &a, done)
				if err == nil && resp.StatusCode == http.StatusOK {
					if a.Attempts > 1 {
						r.m.fallbacks.WithLabelValues(model.ID).Inc()
					}
					return a, nil
				}
				lastErr = err
				if errors.Is(err, ErrTimeout) {
					if timedOut == nil {
						timedOut = make([]bool, len(model.Deployments))
					}
					timedOut[i] = true
				}
				if resp != nil {
					if outcomeOf(resp.StatusCode) == outcomeRejected {
						return a, nil // the request's own fault: the caller maps it
					}
					hint = max(hint, retryAfter(resp.Header.Get("Retry-After"), r.now()))
				}
				if !retryKey {
					break // the deployment failed: next deployment
				}
			}
		}
		if !tried {
			break
		}
	}
	if a.Resp != nil {
		return a, nil
	}
	return a, lastErr
}

// attempt sends one request to dep with key and records its outcome in the
// breaker, the key pool and the metrics. It reports whether the failure was
// the key's (so another key of the same deployment may be tried).
func (r *Router) attempt(ctx context.Context, dep *deployment, key *poolKey, body []byte, a *Answer, done func(error)) (*http.Response, bool, error) {
	keyName, keyValue := "", ""
	if key != nil {
		keyName, keyValue = key.name, key.value
	}
	sctx, span := r.o.Tracer.Start(ctx, "upstream")
	started := r.now()
	resp, err := r.c.send(sctx, dep.provider, keyValue, body)
	a.Wait += r.now().Sub(started)
	a.Deployment, a.Name, a.Key = dep.d, dep.name, keyName
	outcome := outcomeUnavailable
	if err != nil {
		if errors.Is(err, ErrTimeout) {
			outcome = outcomeTimeout
		}
	} else {
		a.Resp = resp
		outcome = outcomeOf(resp.StatusCode)
	}
	if span.IsRecording() {
		endAttemptSpan(span, dep.name, keyName, a.Attempts, outcome, resp)
	}
	keyFailure := false
	switch outcome {
	case outcomeOK:
		done(nil)
		if key != nil {
			dep.ok[key].Inc()
		} else {
			dep.okNoKey.Inc()
		}
		return resp, false, nil
	case outcomeRejected:
		done(nil) // the deployment works; the request does not
	case outcomeRateLimited, outcomeUnauthorized:
		done(nil)
		keyFailure = key != nil
		if keyFailure {
			r.coolKey(dep, key, outcome, resp)
		}
	default:
		done(errAttemptFailed)
	}
	r.m.requests.WithLabelValues(dep.name, keyName, outcome).Inc()
	return resp, keyFailure, err
}

func unknownDeployment(d *catalog.Deployment) error {
	return fmt.Errorf("%w: deployment %s unknown to the router", ErrUnavailable, d.Name())
}

// The rare branches of attempt are functions of their own: attempt is on
// every request's call stack under the HTTP client, and these branches'
// attribute and log-field arrays made its frame 1.2 KiB.

// endAttemptSpan records an attempt's outcome on its span and ends it.
func endAttemptSpan(span trace.Span, dep, keyName string, attempt int, outcome string, resp *http.Response) {
	span.SetAttributes(attribute.String("svc.deployment", dep), attribute.String("svc.upstream.key", keyName),
		attribute.Int("svc.attempt", attempt), attribute.String("svc.outcome", outcome))
	if resp != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	if outcome != outcomeOK {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// coolKey takes a key that was refused (401/403) or rate limited out of
// rotation: for the answer's Retry-After, else KeyCooldown.
func (r *Router) coolKey(dep *deployment, key *poolKey, outcome string, resp *http.Response) {
	until := r.now().Add(r.o.KeyCooldown)
	if ra := retryAfter(resp.Header.Get("Retry-After"), r.now()); outcome == outcomeRateLimited && ra > 0 {
		until = r.now().Add(ra)
	}
	if dep.pool.cooldown(key, r.now(), until) {
		r.m.keyCooldowns.WithLabelValues(dep.d.Provider, key.name).Inc()
		r.o.Log.Warn("upstream key cooling down", zap.String("provider", dep.d.Provider),
			zap.String("key", key.name), zap.Int("status", resp.StatusCode), zap.Time("until", until))
	}
}

// anyAvailable reports whether some deployment of model could be tried now.
func (r *Router) anyAvailable(model *catalog.Model) bool {
	now := r.now()
	for _, dep := range r.lookup(model) {
		if dep == nil || dep.breaker.State() == gobreaker.StateOpen {
			continue
		}
		if dep.pool.empty() || dep.pool.available(now) {
			return true
		}
	}
	return false
}

// backoff paces a request's rounds (go-retry, as every retry of the
// service): BackoffBase doubled per round, ±50 % jitter, capped at
// BackoffMax.
func (r *Router) backoff() retry.Backoff {
	return retry.WithCappedDuration(r.o.BackoffMax, retry.WithJitterPercent(50, retry.NewExponential(r.o.BackoffBase)))
}

// retryAfter reads a Retry-After header (seconds or an HTTP date).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
