package callback_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/shared/wire"
)

type records struct {
	mu sync.Mutex
	as []wire.WebhookAttempt
}

func (r *records) Record(a wire.WebhookAttempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.as = append(r.as, a)
}

// A deliverer told to stop (its pod shuts down) makes no further attempt
// after the one in flight, records that one, and returns ErrHandedOff at
// once instead of waiting out its backoff; without a stop the wait runs.
func TestDeliverStopsBetweenAttemptsWhenHandedOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		stop    bool
		wantErr error
	}{
		{"stop closed: handed off after the first attempt", true, callback.ErrHandedOff},
		{"no stop: the backoff runs to the context's end", false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := callbacktest.New(t, 503, 503, 503)
			rec := &records{}
			d := callback.New(callback.Options{Guard: callback.NewGuard(loopback), Attempts: 3, RetryBase: time.Hour,
				RetryMax: time.Hour, Log: zaptest.NewLogger(t), Recorder: rec})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if tc.stop {
				stop := make(chan struct{})
				close(stop)
				ctx = callback.WithStop(ctx, stop)
			}
			res := d.Deliver(ctx, callback.Delivery{URL: rcv.URL + "/cb", MsgID: "msg_h", Secret: "s", CorrelationID: "cor_h",
				Kind: wire.AttemptDelivery})
			if res.Delivered || res.Attempts != 1 || !errors.Is(res.Err, tc.wantErr) {
				t.Fatalf("result %+v, want one attempt and %v", res, tc.wantErr)
			}
			if got := len(rcv.Got()); got != 1 {
				t.Fatalf("receiver got %d requests, want 1", got)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.as) != 1 || rec.as[0].Outcome != wire.AttemptRetrying || rec.as[0].Status != 503 || rec.as[0].WebhookID != "msg_h" {
				t.Fatalf("records %+v, want the one attempt, retrying", rec.as)
			}
		})
	}
}
