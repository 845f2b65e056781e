// Package webhooksend is one attempt of an async webhook callback (spec
// 2.5 and 6, docs/webhook-delivery.md "What the receiver's answer means"),
// shared by the pod's deliverer (podagent/internal/callback, the fast
// path) and the API's delivery queue (apiserver/internal/webhookqueue, the
// long tail): the SSRF guard and SVC_CALLBACK_ALLOWED_NETS (guard.go), the
// Standard Webhooks headers and signatures — v1 HMAC, one entry per valid
// secret, and v1a ed25519 when the channel has a signing key (sign.go) —
// the POST and the reading of its answer, and the attempt record of the
// log (send.go). Schedules and retries are the callers'.
package webhooksend
