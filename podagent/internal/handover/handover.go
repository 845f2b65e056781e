// Package handover is the pod's one queue of what it hands to the API in
// the background (spec 2.5, 4.3; docs/webhook-delivery.md "One hand-over
// queue"): outbox messages, callback attempt records and checkpoint records
// are kinds of one Queue, kept in one table of the pod's journal
// (journal.Handover) until the API took them, drained by one Loop, and what
// the API refuses for good is told apart by one rule, internalapi.Permanent
// (the entry is set aside in the journal, logged, and the rest goes on).
//
// A Loop drains at once when woken (something was queued), and after a
// failed drain waits a backoff step (exponential, capped, with jitter:
// sethvargo/go-retry) before the next; a drain that succeeds resets the
// backoff.
package handover

import (
	"context"
	"time"

	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
)

// Defaults.
const (
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
	// JitterPercent spreads the retries of many pods after an API outage.
	JitterPercent = 20
)

// Options configure a Loop.
type Options struct {
	// Drain hands over what is queued; an error (other than ctx's) is
	// retried after a backoff step.
	Drain func(ctx context.Context) error
	// RetryMin is the first backoff step, RetryMax its cap.
	RetryMin, RetryMax time.Duration
	// Pending, when set, is logged with a failure.
	Pending func() int
	// What names the queue in logs ("outbox messages", "attempt records").
	What string
	Log  *zap.Logger
}

// Loop is one background drain loop. Wake is safe for concurrent use.
type Loop struct {
	o    Options
	wake chan struct{}
}

// New returns a Loop; Run runs it.
func New(o Options) *Loop {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.RetryMin = settings.PositiveOr(o.RetryMin, DefaultRetryMin)
	o.RetryMax = max(settings.PositiveOr(o.RetryMax, DefaultRetryMax), o.RetryMin)
	return &Loop{o: o, wake: make(chan struct{}, 1)}
}

// Wake asks for a drain now (something was queued).
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Loop) backoff() retry.Backoff {
	return retry.WithJitterPercent(JitterPercent, retry.WithCappedDuration(l.o.RetryMax, retry.NewExponential(l.o.RetryMin)))
}

// Run drains once, then on every Wake and after each backoff step while
// drains fail, until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	b := l.backoff()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	select { // the first drain takes what was queued before Run
	case <-l.wake:
	default:
	}
	for {
		if err := l.o.Drain(ctx); err != nil && ctx.Err() == nil {
			d, _ := b.Next()
			pending := 0
			if l.o.Pending != nil {
				pending = l.o.Pending()
			}
			l.o.Log.Warn("handing "+l.o.What+" to the API failed; will retry", zap.Duration("in", d),
				zap.Int("pending", pending), zap.Error(err))
			timer.Reset(d)
		} else {
			b = l.backoff()
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}
