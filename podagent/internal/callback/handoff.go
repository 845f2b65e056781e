package callback

import (
	"context"
	"errors"
	"time"
)

// ErrHandedOff: the deliverer stopped between two attempts because its
// owner is shutting down; the caller hands the reply to the API, whose
// delivery queue continues the schedule with the same webhook-id
// (docs/webhook-delivery.md, "A pod stopped mid-schedule").
var ErrHandedOff = errors.New("callback: retries handed to the API at shutdown")

// ErrCutOff is the attempt log's error for an attempt whose request went
// out but whose answer never came because the deliverer was stopped (its
// context ended at the pod's shutdown): the receiver may have seen it, and
// the API's delivery queue makes the next attempt.
var ErrCutOff = errors.New("stopped before the receiver answered; the API's delivery queue continues")

type stopKey struct{}

// WithStop returns ctx carrying stop: when stop is closed, Deliver makes
// no further attempt (an attempt in flight still ends, and is recorded)
// and returns ErrHandedOff instead of waiting for the next one.
func WithStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// stopOf is the channel WithStop put in ctx (nil: none, never fires).
func stopOf(ctx context.Context) <-chan struct{} {
	s, _ := ctx.Value(stopKey{}).(<-chan struct{})
	return s
}

// stopped reports whether ctx's stop channel is closed.
func stopped(ctx context.Context) bool {
	select {
	case <-stopOf(ctx):
		return true
	default:
		return false
	}
}

// sleepOrStop waits d with sleep, cut short when ctx's stop channel closes
// (ErrHandedOff) or ctx ends (its error).
func sleepOrStop(ctx context.Context, sleep func(context.Context, time.Duration) error, d time.Duration) error {
	stop := stopOf(ctx)
	if stop == nil {
		return sleep(ctx, d)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-sctx.Done():
		}
	}()
	err := sleep(sctx, d)
	if err != nil && ctx.Err() == nil && stopped(ctx) {
		return ErrHandedOff
	}
	return err
}
