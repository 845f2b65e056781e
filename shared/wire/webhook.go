package wire

import (
	"encoding/json"
	"time"
)

// Webhook channel (spec 2.4, 2.5, 4.2; docs/design.md §5 and §6).
//
// The API's agent-proxy forwards /api/projects/{id}/agent-proxy/agent/channels/webhook/*
// to the pod's /agent/channels/webhook/* with the project's runtime token as
// a bearer, X-Webhook-Secret and the body unchanged.

// HeaderWebhookSecret carries the channel secret (spec 5.2); the pod-side
// prefix of the webhook routes is internalapi.PodWebhook.
const HeaderWebhookSecret = "X-Webhook-Secret"

// ChannelConfig is the answer of GET /internal/projects/{id}/channel: the
// webhook channel of the project, read by the pod with its runtime token so
// that `apiserver admin channel set` reaches it without a restart.
type ChannelConfig struct {
	// Configured is false when no channel row exists (then Secret is empty
	// and every external request is rejected).
	Configured bool   `json:"configured"`
	ChannelID  string `json:"channelId"`
	// Secret is the channel secret; empty rejects every external request.
	Secret string `json:"secret"`
	// CallbackHeaders are the default headers sent on every callback
	// (decoded from the JSON object stored with the channel; non-string
	// values are sent as their JSON text).
	CallbackHeaders map[string]string `json:"callbackHeaders"`
	// PreviousSecrets are secrets replaced by a rotation whose overlap has
	// not ended: X-Webhook-Secret may still carry one, and every callback is
	// signed with them too (one webhook-signature entry per secret).
	PreviousSecrets []string `json:"previousSecrets,omitempty"`
	// FailingEndpoints are the callback endpoints (WebhookEndpoint) marked
	// failing: replies for them go straight to the outbox.
	FailingEndpoints []string `json:"failingEndpoints,omitempty"`
	// SigningKey, when set, is the channel's ed25519 key (whsk_): every
	// callback carries a v1a signature by it beside the v1 ones.
	SigningKey string `json:"signingKey,omitempty"`
}

// WebhookIncoming is the documented body of POST .../incoming (spec 2.4).
// The pod parses the body itself (snake_case spellings, type checks) into
// this type and journals it with each accepted async message.
type WebhookIncoming struct {
	Message     string          `json:"message"`
	SenderID    string          `json:"senderId,omitempty"`
	SenderName  string          `json:"senderName,omitempty"`
	CallbackURL string          `json:"callbackUrl,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// WebhookReply is the sync answer (200).
type WebhookReply struct {
	Reply string `json:"reply"`
}

// WebhookAccepted is the async answer (202).
type WebhookAccepted struct {
	Status  string `json:"status"` // always "accepted"
	Message string `json:"message"`
	// CorrelationID is the id the callback (or the outbox message) will carry.
	CorrelationID string `json:"correlationId"`
}

// WebhookCallback is the body POSTed to callbackUrl (spec 2.5, 6), signed
// with Standard Webhooks headers (webhook-id, webhook-timestamp,
// webhook-signature) keyed by the channel secret.
type WebhookCallback struct {
	Reply         string          `json:"reply"`
	CorrelationID string          `json:"correlationId"`
	Metadata      json.RawMessage `json:"metadata"`
}

// WebhookHealth is GET .../health (spec 2.5). It is always a 200 that
// reports: the API answers it itself whenever the agent is not serving
// (and never starts or wakes one for it), the pod when it is.
type WebhookHealth struct {
	// Connected: the agent answered, reached the API for the channel
	// config and is ready to take turns.
	Connected bool `json:"connected"`
	// Reason says why Connected is false (one of the HealthReason values);
	// empty when connected.
	Reason string `json:"reason,omitempty"`
	// RetryAfter, in whole seconds, is when a message is worth trying
	// again after a failed start; absent for the other reasons.
	RetryAfter int  `json:"retryAfter,omitempty"`
	HasSecret  bool `json:"hasSecret"`
	// MessageCount is the number of inbound messages accepted since the pod
	// started.
	MessageCount int64 `json:"messageCount"`
	// OutboxPending is the number of outbox replies waiting for a poll:
	// with an API (production) those the pod has not yet handed to the
	// API's durable outbox plus those the durable outbox holds (GET
	// .../outbox/{channelId} serves them); without one, those not yet
	// fetched from the pod.
	OutboxPending int `json:"outboxPending"`
}

// Why a webhook channel is not connected (WebhookHealth.Reason;
// docs/webhook-delivery.md explains each to users).
const (
	// HealthStopped: no agent runs (never started, or stopped when idle);
	// the next message starts one.
	HealthStopped = "stopped"
	// HealthStarting: the agent is being started.
	HealthStarting = "starting"
	// HealthStartFailed: the last start failed; RetryAfter says when a
	// message is worth sending again.
	HealthStartFailed = "start_failed"
	// HealthOffline: the project is pinned to a paired machine that is not
	// connected.
	HealthOffline = "offline"
	// HealthFenced: the agent lost the project to a newer one and takes no
	// more messages; the next message reaches the newer one.
	HealthFenced = "fenced"
	// HealthShuttingDown: the agent is stopping (its final flush).
	HealthShuttingDown = "shutting_down"
	// HealthConfigUnavailable: the agent runs but could not read the
	// channel's configuration from the API.
	HealthConfigUnavailable = "config_unavailable"
	// HealthUnreachable: the agent is recorded as running but did not
	// answer.
	HealthUnreachable = "unreachable"
)

// Activity directions and statuses.
const (
	DirectionInbound  = "inbound"
	DirectionOutbound = "outbound"

	ActivityProcessing = "processing" // inbound: the agent is working
	ActivityReplied    = "replied"    // inbound: reply given (sync 200 or async done)
	ActivityTimedOut   = "timed_out"  // inbound: sync reply_timeout (504); reply goes to the outbox
	ActivityFailed     = "failed"     // inbound: the agent failed; outbound: not delivered
	ActivityDelivering = "delivering" // outbound: callback in progress
	ActivityDelivered  = "delivered"  // outbound: callback answered 2xx
	ActivityOutboxed   = "outboxed"   // outbound: reply put in the outbox
	ActivityFetched    = "fetched"    // outbound: reply taken from the outbox
)

// ActivityEvent is one entry of GET .../activity.
type ActivityEvent struct {
	ID            string `json:"id"`
	Direction     string `json:"direction"` // inbound or outbound
	CorrelationID string `json:"correlationId,omitempty"`
	SenderID      string `json:"senderId,omitempty"`
	SenderName    string `json:"senderName,omitempty"`
	// Mode is sync, async or outbox.
	Mode string `json:"mode,omitempty"`
	// Preview is the start of the message (inbound) or the reply (outbound).
	Preview    string `json:"preview"`
	Status     string `json:"status"`
	Error      string `json:"error,omitempty"`
	Attempts   int    `json:"attempts,omitempty"` // outbound callbacks
	DurationMS int64  `json:"durationMs"`
	// CreatedAt is when the event started; LastTriggeredAt when it last changed.
	CreatedAt       time.Time `json:"createdAt"`
	LastTriggeredAt time.Time `json:"lastTriggeredAt"`
	FinishedAt      time.Time `json:"finishedAt,omitzero"`
}

// WebhookActivity is GET .../activity: at most the last 50 events, newest first.
type WebhookActivity struct {
	Events []ActivityEvent `json:"events"`
}

// OutboxReply is what every outbox message carries: in the pod's outbox, on
// its way to the API (OutboxPut) and in a poll's answer (OutboxMessage).
type OutboxReply struct {
	CorrelationID string          `json:"correlationId"`
	Reply         string          `json:"reply"`
	Metadata      json.RawMessage `json:"metadata"`
	// CreatedAt is when the pod put the reply in the outbox; messages are
	// fetched oldest first.
	CreatedAt time.Time `json:"createdAt"`
	// Status is empty or OutboxStatusReplied for a reply to serve. The API
	// serves OutboxStatusUnanswered for an accepted async message that no
	// reply reached by its deadline (the reply is empty; a reply that comes
	// later is returned again, replied). A pod puts OutboxStatusDelivered
	// when the callback delivered the reply (nothing to serve).
	Status string `json:"status,omitempty"`
	// Continue is set by a pod stopped in the middle of its callback
	// schedule (pod to API only; never served by a poll): the callback its
	// retries were on, which the API's delivery queue continues at once
	// with the same webhook-id, numbering its attempts after the pod's.
	Continue *OutboxContinue `json:"continue,omitempty"`
}

// OutboxContinue is the callback a pod handed to the API mid-schedule.
type OutboxContinue struct {
	CallbackURL string `json:"callbackUrl"`
	WebhookID   string `json:"webhookId"`
	// Attempts is how many attempts the pod made (each in the attempt log).
	Attempts int `json:"attempts"`
}

// OutboxMessage is one pending outbound message (docs/design.md §6).
type OutboxMessage struct {
	ID string `json:"id"`
	OutboxReply
}

// Outbox message states (docs/design.md §7: what no pod answers shows up in the
// outbox with a status).
const (
	OutboxStatusReplied    = "replied"
	OutboxStatusUnanswered = "unanswered"
	// OutboxStatusDelivered is what a pod puts for an async reply its
	// callback delivered: the API closes its record of the accepted message
	// and never serves it.
	OutboxStatusDelivered = "delivered"
)

// OutboxResponse is GET .../outbox/{channelId}?wait=&limit=: the messages
// returned are acknowledged (removed) by the call.
type OutboxResponse struct {
	Messages []OutboxMessage `json:"messages"`
}

// Outbox limits (docs/design.md §6), the same on the API and the pod.
const (
	OutboxMaxWait      = 30 * time.Second
	OutboxDefaultLimit = 20
	OutboxMaxLimit     = 100
)

// OutboxPut is the body of POST /internal/projects/{id}/outbox: the pod
// hands one outbox message to the API, which keeps it in its database until
// an integration fetches it. Idempotent on (project, correlationId): a pod
// retrying a message the API already has (even one already fetched) gets
// 200 with created false and nothing is delivered twice.
type OutboxPut struct {
	ChannelID string `json:"channelId"`
	OutboxReply
}

// OutboxPending answers GET /internal/projects/{id}/outbox/pending: how
// many messages of the project's channel the API's durable outbox holds for
// a poll (the pod adds them to its health's outboxPending).
type OutboxPending struct {
	ChannelID string `json:"channelId"`
	Pending   int64  `json:"pending"`
}

// OutboxPutResponse answers OutboxPut: 201 when the row was created, 200
// when it existed.
type OutboxPutResponse struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
}
