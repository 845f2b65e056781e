// Package internalapi is the one seam between the two binaries (spec 4.3,
// 5.3, 10.3, 10.4): the path of every internal route and a typed client per
// direction, as coder's agentsdk. The API server and the pod register their
// routes from these constants, and the pod (Client) and the API (PodClient)
// call them only through the methods here, so neither side spells a path.
//
// The request and response bodies are the types of package wire.
package internalapi

import (
	"net/url"
	"strings"
)

// Routes the API serves to pods, under ProjectGroup (runtime token of the
// project in the path as a bearer).
const (
	// ProjectGroup is the echo pattern of the per-project internal group.
	ProjectGroup = "/internal/projects/:id"

	PathCheckpointRecord = "/checkpoints/record"
	PathChannel          = "/channel"
	PathOutbox           = "/outbox"
	// PathOutboxPending counts what the durable outbox holds for a poll.
	PathOutboxPending   = PathOutbox + "/pending"
	PathChatCompletions = "/chat/completions"
	// PathWebhookAttempts takes the pod's callback attempt records.
	PathWebhookAttempts = "/webhook/attempts"
	// PathLFS is the lfs.url suffix; git-lfs appends /objects/batch.
	PathLFS       = "/lfs"
	PathLFSBatch  = PathLFS + "/objects/batch"
	PathLFSVerify = PathLFS + "/verify"
	// PathRelay is the prefix other replicas forward a paired project's
	// agent-proxy requests to.
	PathRelay = "/relay"
)

// Routes the pod serves to the API.
const (
	PodHealthz = "/healthz"
	PodReadyz  = "/readyz"
	PodMetrics = "/metrics"
	PodAgent   = "/agent"
	// PodClaim hands a warm pool's spare pod its project (wire.PodClaim),
	// with the pod's bootstrap token as bearer; an assigned pod does not
	// serve it.
	PodClaim    = "/pod/claim"
	PodGitFlush = PodAgent + "/git-flush"
	// PodRestore is the rollback of docs/sync-modes.md §6.
	PodRestore = PodAgent + "/restore"
	// PodChannels is the prefix of the channel routes the agent-proxy forwards.
	PodChannels = PodAgent + "/channels/"
	// PodWebhook is the prefix of the webhook channel's routes (spec 4.2);
	// the console also calls the three below.
	PodWebhook         = PodChannels + "webhook"
	PodWebhookIncoming = PodWebhook + "/incoming"
	PodWebhookHealth   = PodWebhook + "/health"
	PodWebhookActivity = PodWebhook + "/activity"
	// PodWebhookReplay re-sends a reply once, PodWebhookTest
	// sends a test message to an endpoint; the API calls them for a member.
	PodWebhookReplay = PodWebhook + "/replay"
	PodWebhookTest   = PodWebhook + "/test-callback"
)

// ProjectURL is base + ProjectPath(projectID, path).
func ProjectURL(base, projectID, path string) string {
	return strings.TrimRight(base, "/") + ProjectPath(projectID, path)
}

// ProjectPath is /internal/projects/{projectID} + path, with the id escaped
// as one path segment.
func ProjectPath(projectID, path string) string {
	return "/internal/projects/" + url.PathEscape(projectID) + path
}
