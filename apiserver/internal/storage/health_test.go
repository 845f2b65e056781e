package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// While storage is down the check is retried with a growing, capped
// backoff; once it answers Err is nil and the recheck interval applies.
func TestHealthRetriesUntilStorageAnswers(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	answered := make(chan struct{})
	h := newHealth(func(context.Context) error {
		switch n := calls.Add(1); {
		case n < 4:
			return errors.New("connection refused")
		case n == 4:
			close(answered)
		}
		return nil
	}, zap.NewNop())
	h.RetryMin, h.RetryMax, h.Recheck = time.Millisecond, 4*time.Millisecond, time.Hour
	if !errors.Is(h.Err(), errNotChecked) {
		t.Fatalf("Err before the first check = %v", h.Err())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(ctx)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatalf("the check was not retried until storage answered (%d calls)", calls.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Err = %v after storage answered", h.Err())
		}
		time.Sleep(time.Millisecond)
	}
	b := h.backoff()
	for i := 0; i < 6; i++ {
		if d, stop := b.Next(); stop || d <= 0 || d > h.RetryMax {
			t.Fatalf("wait %d = %v (stop %v), want within (0, %v]", i, d, stop, h.RetryMax)
		}
	}
}
