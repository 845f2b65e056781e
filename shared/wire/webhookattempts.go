package wire

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// Webhook delivery log, replay, secret rotation and endpoint health
// (docs/webhook-delivery.md "Attempt log").
//
// The pod records every callback attempt and hands the records to the API
// (POST /internal/projects/{id}/webhook/attempts, idempotent on the attempt
// id); the API keeps them in webhook_attempts for a bounded retention and
// serves them to members, newest first, with the final state of each
// message.

// Attempt kinds.
const (
	AttemptDelivery = "delivery" // the callback schedule of an async reply
	AttemptReplay   = "replay"   // a member re-sent a delivered or outboxed reply
	AttemptTest     = "test"     // a test message to an endpoint (re-enables a failing one)
)

// Attempt outcomes.
const (
	AttemptDelivered = "delivered" // answered 2xx
	AttemptRetrying  = "retrying"  // failed; NextRetryAt is when the next try goes
	AttemptFailed    = "failed"    // failed and no retry follows (gave up, permanent refusal, or one-shot)
)

// Final states of a message, as the attempt log shows them.
const (
	MessageDelivered  = "delivered"         // the callback answered 2xx
	MessageInOutbox   = "in_outbox"         // the reply waits in the outbox for a poll
	MessageFetched    = "taken_from_outbox" // a poll returned the reply
	MessageUnanswered = "unanswered"        // no reply reached the API by the deadline
	MessagePending    = "pending"           // accepted, still on its way
)

// AttemptHeadBytes is how much of a receiver's answer an attempt keeps.
const AttemptHeadBytes = 256

// WebhookAttempt is one callback attempt.
type WebhookAttempt struct {
	// ID is set by the pod (att_…); the API stores each id once.
	ID            string `json:"id"`
	ChannelID     string `json:"channelId"`
	CorrelationID string `json:"correlationId"`
	// WebhookID is the webhook-id header (the same on every attempt and
	// replay of a message).
	WebhookID string `json:"webhookId"`
	Kind      string `json:"kind"`
	// Attempt numbers the tries of one delivery from 1.
	Attempt int `json:"attempt"`
	// URL is the callbackUrl; Endpoint its WebhookEndpoint.
	URL         string    `json:"url"`
	Endpoint    string    `json:"endpoint"`
	AttemptedAt time.Time `json:"attemptedAt"`
	LatencyMS   int64     `json:"latencyMs"`
	// Status is the HTTP status of the answer (0: none, see Error).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// ResponseHead is the first AttemptHeadBytes of the answer's body.
	ResponseHead string    `json:"responseHead,omitempty"`
	NextRetryAt  time.Time `json:"nextRetryAt,omitzero"`
	Outcome      string    `json:"outcome"`
	// MessageState is the final state of the attempt's message (the API
	// fills it in when it serves the log).
	MessageState string `json:"messageState,omitempty"`
}

// WebhookAttemptsPut is the body of POST /internal/projects/{id}/webhook/attempts.
type WebhookAttemptsPut struct {
	Attempts []WebhookAttempt `json:"attempts"`
}

// WebhookAttemptsPutResponse answers it: how many were new.
type WebhookAttemptsPutResponse struct {
	Stored int `json:"stored"`
}

// WebhookAttemptList is GET …/agent/channels/webhook/attempts?limit=&cursor=&correlationId=:
// newest first; NextCursor is empty on the last page.
type WebhookAttemptList struct {
	Attempts   []WebhookAttempt `json:"attempts"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// Attempt list limits.
const (
	AttemptsDefaultLimit = 50
	AttemptsMaxLimit     = 200
)

// WebhookReplay asks the pod to send a reply once more (POST
// …/agent/channels/webhook/replay): the same webhook-id, a new timestamp
// and signature.
type WebhookReplay struct {
	CorrelationID string          `json:"correlationId"`
	CallbackURL   string          `json:"callbackUrl"`
	Reply         string          `json:"reply"`
	Metadata      json.RawMessage `json:"metadata"`
}

// WebhookTestCallback asks the pod to send a test message to an endpoint
// (POST …/agent/channels/webhook/test-callback); a 2xx re-enables a
// failing endpoint.
type WebhookTestCallback struct {
	CallbackURL string `json:"callbackUrl"`
}

// WebhookEndpointHealth is one callback endpoint's health.
type WebhookEndpointHealth struct {
	Endpoint            string    `json:"endpoint"`
	ConsecutiveFailures int       `json:"consecutiveFailures"`
	FailingSince        time.Time `json:"failingSince,omitzero"`
	// Failing: every attempt failed for the failing period; replies go
	// straight to the outbox until a test message succeeds.
	Failing       bool      `json:"failing"`
	DisabledAt    time.Time `json:"disabledAt,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
	LastAttemptAt time.Time `json:"lastAttemptAt"`
}

// WebhookEndpoint is the key endpoint health is counted by: the callback
// URL's scheme, host (lower case) and path, without query or fragment
// (per-message tokens in a query do not make a new endpoint).
func WebhookEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + path
}

// WebhookReplayRange asks the API to replay every reply of the channel
// created in [Since, Until) (either may be zero: open) whose final state
// (Message*) is Status (empty: any replayable state) — POST
// …/agent/channels/webhook/replay. Each message gets one attempt, kind
// replay, the same webhook-id, throttled per endpoint.
type WebhookReplayRange struct {
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	Status string    `json:"status,omitempty"`
}

// WebhookReplayStarted answers a range replay (202): how many messages
// are being replayed, how many matched but have no callback URL in the log
// (skipped), and whether the range held more than one call replays
// (Truncated: call again with Since after the last one).
type WebhookReplayStarted struct {
	Messages  int       `json:"messages"`
	Skipped   int       `json:"skipped"`
	Truncated bool      `json:"truncated"`
	Last      time.Time `json:"last,omitzero"`
}
