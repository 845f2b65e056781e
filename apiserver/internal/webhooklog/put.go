package webhooklog

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Bounds of the pod's POST.
const (
	MaxBodyBytes       = 4 << 20
	MaxAttemptsPerPost = 500
)

// Put stores the pod's batch of attempt records (agentapi's POST
// /internal/projects/{id}/webhook/attempts): every record is checked and
// must belong to the project's channel.
func (l *Log) Put(ctx context.Context, projectID string, attempts []wire.WebhookAttempt) (int, error) {
	if err := validate(attempts); err != nil {
		return 0, wire.Coded("invalid_webhook_attempt", err.Error())
	}
	ch, err := l.Store.GetChannel(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, wire.Coded("channel_not_found", "No channel with this id on this project.")
	}
	if err != nil {
		return 0, wire.Unavailable(err)
	}
	for _, a := range attempts {
		if a.ChannelID != ch.ID {
			return 0, wire.Coded("channel_not_found", "No channel with this id on this project.")
		}
	}
	n, err := l.Record(ctx, projectID, attempts)
	if err != nil {
		return 0, wire.Unavailable(err)
	}
	return n, nil
}

// validate names every offending record.
func validate(as []wire.WebhookAttempt) error {
	if len(as) > MaxAttemptsPerPost {
		return errors.New("at most 500 attempts per request")
	}
	var bad []string
	for i, a := range as {
		var why []string
		if a.ID == "" || len(a.ID) > maxIDBytes {
			why = append(why, "id")
		}
		if a.CorrelationID == "" || len(a.CorrelationID) > maxIDBytes || len(a.WebhookID) > maxIDBytes {
			why = append(why, "correlationId/webhookId")
		}
		switch a.Kind {
		case wire.AttemptDelivery, wire.AttemptReplay, wire.AttemptTest:
		default:
			why = append(why, "kind")
		}
		switch a.Outcome {
		case wire.AttemptDelivered, wire.AttemptRetrying, wire.AttemptFailed:
		default:
			why = append(why, "outcome")
		}
		if a.AttemptedAt.IsZero() || a.Attempt < 1 {
			why = append(why, "attemptedAt/attempt")
		}
		if len(why) > 0 {
			bad = append(bad, "attempts["+itoa(i)+"]: "+strings.Join(why, ", "))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }
