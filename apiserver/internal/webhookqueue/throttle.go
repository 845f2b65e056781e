package webhookqueue

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"
)

// Defaults of the per-endpoint throttle.
const (
	DefaultMaxInFlight = 10
	DefaultRate        = 20.0 // attempts per second
	// minRate is the floor 429s can push an endpoint's rate down to.
	minRate = 0.2
)

// Throttle bounds the attempts of this replica to each endpoint
// (docs/webhook-delivery.md "Throttle"): at most MaxInFlight at once and
// Rate per second (a token bucket of one second's worth). A 429 halves the
// endpoint's in-flight bound and rate (multiplicative decrease, down to one
// and minRate); each 2xx raises them back by one step (additive increase)
// up to the settings. The queue and bulk replays share one Throttle.
type Throttle struct {
	maxInFlight int
	rate        float64
	now         func() time.Time

	mu sync.Mutex
	m  map[string]*endpointState
}

type endpointState struct {
	inFlight int
	limit    float64 // in-flight bound, lowered by 429s
	rate     float64
	tokens   float64
	last     time.Time
	// freed is closed (and replaced) when an attempt ends.
	freed chan struct{}
}

// NewThrottle returns a throttle (0: the defaults).
func NewThrottle(maxInFlight int, rate float64) *Throttle {
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	if rate <= 0 {
		rate = DefaultRate
	}
	return &Throttle{maxInFlight: maxInFlight, rate: rate, now: time.Now, m: map[string]*endpointState{}}
}

// Acquire waits until an attempt to endpoint may start, or ctx ends. The
// caller must call done with the answer's status (0: no answer) once the
// attempt ended.
func (t *Throttle) Acquire(ctx context.Context, endpoint string) (done func(status int), err error) {
	for {
		t.mu.Lock()
		e := t.state(endpoint)
		now := t.now()
		e.tokens = math.Min(math.Max(e.rate, 1), e.tokens+now.Sub(e.last).Seconds()*e.rate)
		e.last = now
		if e.inFlight < int(e.limit) && e.tokens >= 1 {
			e.tokens--
			e.inFlight++
			t.mu.Unlock()
			return func(status int) { t.done(endpoint, status) }, nil
		}
		var wake <-chan struct{} = e.freed
		wait := time.Hour
		if e.inFlight < int(e.limit) {
			wait = time.Duration((1 - e.tokens) / e.rate * float64(time.Second))
			wake = nil
		}
		t.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (t *Throttle) state(endpoint string) *endpointState {
	e, ok := t.m[endpoint]
	if !ok {
		e = &endpointState{limit: float64(t.maxInFlight), rate: t.rate, tokens: 1, last: t.now(), freed: make(chan struct{})}
		t.m[endpoint] = e
	}
	return e
}

func (t *Throttle) done(endpoint string, status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.state(endpoint)
	e.inFlight--
	switch {
	case status == http.StatusTooManyRequests:
		e.limit = math.Max(1, e.limit/2)
		e.rate = math.Max(minRate, e.rate/2)
		e.tokens = math.Min(e.tokens, 0)
	case status >= 200 && status < 300:
		e.limit = math.Min(float64(t.maxInFlight), e.limit+1)
		e.rate = math.Min(t.rate, e.rate+math.Max(1, t.rate/10))
	}
	close(e.freed)
	e.freed = make(chan struct{})
	if e.inFlight == 0 && e.limit == float64(t.maxInFlight) && e.rate == t.rate && e.tokens >= math.Max(e.rate, 1) {
		delete(t.m, endpoint) // back at rest: forget it
	}
}

// Limits reports an endpoint's current in-flight bound and rate.
func (t *Throttle) Limits(endpoint string) (maxInFlight int, rate float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[endpoint]
	if !ok {
		return t.maxInFlight, t.rate
	}
	return int(e.limit), e.rate
}
