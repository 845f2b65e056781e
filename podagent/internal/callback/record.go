package callback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// The attempt log (docs/webhook-delivery.md "Attempt log"): every
// attempt is described by a wire.WebhookAttempt — time, status or network
// error, latency, the first wire.AttemptHeadBytes of the answer, and when
// the next try goes — and handed to Options.Recorder.

// record hands one attempt to the recorder; wait is the delay before the
// next try (0: none follows).
func (d *Deliverer) record(del Delivery, n int, a answer, outcome string, wait time.Duration) {
	if d.o.Recorder == nil {
		return
	}
	d.o.Recorder.Record(d.describe(del, n, a, outcome, wait))
}

func (d *Deliverer) describe(del Delivery, n int, a answer, outcome string, wait time.Duration) wire.WebhookAttempt {
	kind := del.Kind
	if kind == "" {
		kind = wire.AttemptDelivery
	}
	rec := wire.WebhookAttempt{ID: NewAttemptID(), ChannelID: del.ChannelID, CorrelationID: del.CorrelationID,
		WebhookID: del.MsgID, Kind: kind, Attempt: n, URL: del.URL, Endpoint: wire.WebhookEndpoint(del.URL),
		AttemptedAt: a.at.UTC(), LatencyMS: a.latency.Milliseconds(), Status: a.status, ResponseHead: a.head,
		Outcome: outcome}
	if a.err != nil {
		var pe *permanentError
		if errors.As(a.err, &pe) {
			rec.Error = pe.err.Error()
		} else {
			rec.Error = a.err.Error()
		}
	}
	if wait > 0 {
		rec.NextRetryAt = a.at.Add(wait).UTC()
	}
	return rec
}

// Once makes one attempt (a replay or a test message: no retries) and
// returns its record, which the recorder is also told.
func (d *Deliverer) Once(ctx context.Context, del Delivery) wire.WebhookAttempt {
	a := d.attempt(ctx, del)
	outcome := wire.AttemptDelivered
	if a.err != nil {
		outcome = wire.AttemptFailed
	}
	rec := d.describe(del, 1, a, outcome, 0)
	if d.o.Recorder != nil {
		d.o.Recorder.Record(rec)
	}
	return rec
}

// NewAttemptID returns att_ and 24 hex digits.
func NewAttemptID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "att_" + hex.EncodeToString(b[:])
}
