package server

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svc-dev/svc/apiserver/internal/gitserver"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/storage"
	"github.com/svc-dev/svc/shared/internalapi"
)

// routes is the API server's whole route table (docs/design.md §5, HTTP
// surfaces). It only mounts: the handlers are built once in New
// (handlers.go); every path and the middleware in front of it is declared
// here and nowhere else.
func (s *Server) routes(e *echo.Echo) {
	d, h := s.deps, s.h
	apiKey := httpmw.APIKey(s.Auth)
	member := httpmw.ProjectMember(d.Store, "id")
	// The non-streaming routes bound the writing of their answers (streams,
	// git, large files, the agent-proxy and tunnels do not: docs/gateway.md).
	wt := httpmw.WriteTimeout(d.Timeouts.Write)

	// Probes and metrics.
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) }, wt)
	e.GET("/readyz", s.ready, wt)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})), wt)

	// Public API (spec 4.1) under /api/v1 and, identically, /v1.
	api := h.api
	for _, prefix := range []string{"/api/v1", "/v1"} {
		// The OpenAPI document is public (no key), like the SDKs' own specs.
		e.GET(prefix+"/openapi.json", openAPI, wt)
		g := e.Group(prefix, wt, api.Observe, apiKey)
		g.GET("/models", api.ListModels)
		g.GET("/models/:id", api.RetrieveModel)
		g.POST("/chat/completions", api.ChatCompletions)
		g.POST("/responses", api.Responses)
		// Anthropic's wire format, errors included, from the first
		// middleware after timing (docs/gateway.md).
		e.POST(prefix+"/messages", api.Messages, wt, api.Observe, api.AnthropicErrors, httpmw.AnthropicKey(s.Auth))
	}

	// Internal routes pods call with their project's runtime token (spec
	// 4.3, 5.3, 10.3; package agentapi); the paths are shared/internalapi's.
	internal := e.Group(internalapi.ProjectGroup, httpmw.Runtime(s.Auth, "id"))
	internal.POST(internalapi.PathChatCompletions, api.ChatCompletions, api.Observe)
	internal.POST(internalapi.PathCheckpointRecord, h.agent.RecordCheckpoint)
	internal.GET(internalapi.PathChannel, h.agent.Channel)
	internal.POST(internalapi.PathOutbox, h.agent.OutboxPut) // durable webhook outbox
	internal.GET(internalapi.PathOutboxPending, h.agent.OutboxPending)
	internal.POST(internalapi.PathWebhookAttempts, h.agent.WebhookAttempts) // the callback attempt log
	if d.Objects != nil {
		internal.POST(internalapi.PathLFSBatch, h.agent.LFSBatch)
		internal.POST(internalapi.PathLFSVerify, h.agent.LFSVerify)
	}
	if d.Relay != nil {
		internal.Any(internalapi.PathRelay+"/*", d.Relay.Handle)
	}

	// Hydrate-only reads and smart-HTTP git (spec 4.2, 10.2).
	if reads := h.reads; reads != nil {
		// Route-level middleware (not a group): an unknown path under these
		// prefixes stays a 404, not an authentication challenge.
		const cp = "/api/projects/:id/checkpoints"
		e.GET(cp+"/graph", reads.Graph, apiKey, member)
		e.GET(cp+"/commits/:sha", reads.Commit, apiKey, member)
		e.GET(cp+"/diff", reads.Diff, apiKey, member)
		e.GET(cp+"/status", reads.Status, apiKey, member)
		// Reads follow the sync mode; rollback through the pod (docs/sync-modes.md §5, §6).
		e.GET(cp+"/files", reads.Files, apiKey, member)
		if d.AgentProxy != nil {
			e.POST(cp+"/:sha/restore", reads.Restore, apiKey, member)
		}
	}
	if git := h.git; git != nil {
		// The project's pod (runtime token) is let in too: the dual_shadow
		// origin (docs/sync-modes.md §2).
		memberOrPod := gitserver.MemberOrPod(member)
		const gp = "/api/projects/:id/git"
		e.GET(gp+"/info/refs", git.InfoRefs, git.Authenticate, memberOrPod)
		e.POST(gp+"/git-upload-pack", git.UploadPack, git.Authenticate, memberOrPod)
		e.POST(gp+"/git-receive-pack", git.ReceivePack, git.Authenticate, memberOrPod)
	}

	// Webhook channel through the agent-proxy (spec 3.3). The outbox poll is
	// served from the database, before the proxy's catch-all, so that it
	// works while the agent is down.
	proxy := e.Group("/api/projects/:id/agent-proxy", apiKey, member)
	proxy.GET(internalapi.PodWebhook+"/outbox/:channelId", h.webhooks.Poll)
	// The attempt log, endpoint health, replay and test messages
	// (docs/webhook-delivery.md), from the database; replay and test send through
	// the pod.
	proxy.GET(internalapi.PodWebhook+"/attempts", h.webhooks.List)
	proxy.GET(internalapi.PodWebhook+"/endpoints", h.webhooks.Endpoints)
	proxy.GET(internalapi.PodWebhook+"/signing-key", h.webhooks.SigningKey)
	proxy.POST(internalapi.PodWebhook+"/endpoints/test", h.webhooks.Test)
	proxy.POST(internalapi.PodWebhook+"/replay/:correlationId", h.webhooks.Replay)
	// Recovery: replay a time range and/or final state of the channel,
	// sent by the API itself (outside the agent-proxy: the pod's own
	// /replay keeps its place there).
	e.POST("/api/projects/:id/channels/webhook/replay", h.webhooks.ReplayRange, apiKey, member)
	if d.AgentProxy != nil {
		proxy.Any("/*", d.AgentProxy.Handle)
	}
	if h.publish != nil {
		e.POST("/api/projects/:id/publish", h.publish.Handle, apiKey, member)
	}

	// Paired machines (the tunnel runtime).
	if d.Pairing != nil {
		pg := e.Group("/api/pairing", d.Pairing.Authenticate)
		pg.GET("/session", d.Pairing.Session)
		pg.GET("/tunnel", d.Pairing.Tunnel)
	}

	// The fs object store's presigned URLs.
	if d.ObjectsHandler != nil {
		e.Any(storage.FSBasePath+"/*", echo.WrapHandler(d.ObjectsHandler))
	}

	// The web console and its JSON key API (console.go).
	if h.console != nil {
		mountConsole(e, h.console, wt)
	}
}
