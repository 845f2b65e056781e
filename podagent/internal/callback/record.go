package callback

import (
	"context"
	"time"

	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// The attempt log (docs/webhook-delivery.md "Attempt log"): every
// attempt is described by a wire.WebhookAttempt — time, status or network
// error, latency, the first wire.AttemptHeadBytes of the answer, and when
// the next try goes — and handed to Options.Recorder.

// record hands one attempt to the recorder; wait is the delay before the
// next try (0: none follows).
func (d *Deliverer) record(del Delivery, n int, a webhooksend.Answer, outcome string, wait time.Duration) {
	if d.o.Recorder == nil {
		return
	}
	d.o.Recorder.Record(webhooksend.Record(del, n, a, outcome, wait))
}

// Once makes one attempt (a replay or a test message: no retries) and
// returns its record, which the recorder is also told.
func (d *Deliverer) Once(ctx context.Context, del Delivery) wire.WebhookAttempt {
	a := d.attempt(ctx, del)
	outcome := wire.AttemptDelivered
	if a.Err != nil {
		outcome = wire.AttemptFailed
	}
	rec := webhooksend.Record(del, 1, a, outcome, 0)
	if d.o.Recorder != nil {
		d.o.Recorder.Record(rec)
	}
	return rec
}

// NewAttemptID returns att_ and 24 hex digits.
func NewAttemptID() string { return webhooksend.NewAttemptID() }
