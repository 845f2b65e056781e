package server

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svc-dev/svc/apiserver/internal/channelapi"
	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/checkpointrecord"
	"github.com/svc-dev/svc/apiserver/internal/gitserver"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/lfsbatch"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/objstoreopen"
	"github.com/svc-dev/svc/apiserver/internal/openapi"
	"github.com/svc-dev/svc/apiserver/internal/publicapi"
	"github.com/svc-dev/svc/apiserver/internal/publish"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/internalapi"
)

// routes is the API server's whole route table (docs/design.md §5, HTTP
// surfaces). Handler packages export handlers; every path and the
// middleware in front of it is declared here and nowhere else.
func (s *Server) routes(e *echo.Echo) {
	d := s.deps
	apiKey := httpmw.APIKey(s.Auth)
	member := httpmw.ProjectMember(d.Store, "id")

	// Probes and metrics.
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})))

	// Public API (spec 4.1) under /api/v1 and, identically, /v1.
	routing := d.Routing
	routing.Registerer, routing.Tracer, routing.Log = s.Registry, d.Tracer, d.Log.Named("upstream")
	api := &publicapi.API{Catalog: d.Catalog, Meter: metering.New(d.Store, s.Usage),
		Router: upstream.NewRouter(d.Upstream, d.Catalog, routing), Tracer: d.Tracer,
		Log: d.Log.Named("publicapi"), MaxBody: d.MaxBodyBytes, Metrics: publicapi.NewMetrics(s.Registry),
		Streams: s.Streams}
	for _, prefix := range []string{"/api/v1", "/v1"} {
		// The OpenAPI document is public (no key), like the SDKs' own specs.
		e.GET(prefix+"/openapi.json", openapi.Handler)
		g := e.Group(prefix, api.Observe, apiKey)
		g.GET("/models", api.ListModels)
		g.GET("/models/:id", api.RetrieveModel)
		g.POST("/chat/completions", api.ChatCompletions)
	}

	// Internal routes pods call with their project's runtime token (spec
	// 4.3, 5.3, 10.3); the paths are shared/internalapi's.
	internal := e.Group(internalapi.ProjectGroup, httpmw.Runtime(s.Auth, "id"))
	internal.POST(internalapi.PathChatCompletions, api.ChatCompletions, api.Observe)
	internal.POST(internalapi.PathCheckpointRecord, checkpointrecord.Handler(d.Store))
	internal.GET(internalapi.PathChannel, channelapi.Handler(d.Store))
	internal.POST(internalapi.PathOutbox, s.Outbox.Put) // durable webhook outbox
	internal.GET(internalapi.PathOutboxPending, s.Outbox.Pending)
	wh := &webhooklog.Handlers{Log: s.Webhooks}
	if d.AgentProxy != nil {
		wh.Pod = webhooklog.PodFromRuntime(d.AgentProxy.Runtime, d.AgentProxy.Transport)
	}
	internal.POST(internalapi.PathWebhookAttempts, wh.Put) // the callback attempt log (issue 24)
	if d.Objects != nil {
		lfs := lfsbatch.New(d.Objects, d.Log)
		internal.POST(internalapi.PathLFSBatch, lfs.Batch)
		internal.POST(internalapi.PathLFSVerify, lfs.Verify)
	}
	if d.Relay != nil {
		internal.Any(internalapi.PathRelay+"/*", d.Relay.Handle)
	}

	// Hydrate-only reads and smart-HTTP git (spec 4.2, 10.2).
	if d.Hydrate != nil {
		reads := (&checkpointreads.API{Hydrate: d.Hydrate, Store: d.Store, Objects: d.Objects, Log: d.Log.Named("checkpoints")}).WithDefaults()
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
			reads.Runtime = d.AgentProxy.Runtime
			e.POST(cp+"/:sha/restore", reads.Restore, apiKey, member)
		}

		// The project's pod (runtime token) is let in too: the dual_shadow
		// origin (docs/sync-modes.md §2).
		git := (&gitserver.Server{Hydrate: d.Hydrate, Objects: d.Objects, Store: d.Store, Auth: s.Auth, Log: d.Log}).WithDefaults()
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
	proxy.GET(internalapi.PodWebhook+"/outbox/:channelId", s.Outbox.Poll)
	// The attempt log, endpoint health, replay and test messages (issue
	// 24), from the database; replay and test send through the pod.
	proxy.GET(internalapi.PodWebhook+"/attempts", wh.List)
	proxy.GET(internalapi.PodWebhook+"/endpoints", wh.Endpoints)
	proxy.POST(internalapi.PodWebhook+"/endpoints/test", wh.Test)
	proxy.POST(internalapi.PodWebhook+"/replay/:correlationId", wh.Replay)
	if d.AgentProxy != nil {
		proxy.Any("/*", d.AgentProxy.Handle)
		e.POST("/api/projects/:id/publish", (&publish.API{Runtime: d.AgentProxy.Runtime, Store: d.Store}).Handle,
			apiKey, member)
	}

	// Paired machines (the tunnel runtime).
	if d.Pairing != nil {
		pg := e.Group("/api/pairing", d.Pairing.Authenticate)
		pg.GET("/session", d.Pairing.Session)
		pg.GET("/tunnel", d.Pairing.Tunnel)
	}

	// The fs object store's presigned URLs.
	if d.ObjectsHandler != nil {
		e.Any(objstoreopen.FSBasePath+"/*", echo.WrapHandler(d.ObjectsHandler))
	}

	// The web console and its JSON key API (console.go).
	if d.Console != nil {
		s.registerConsole(e, *d.Console)
	}
}
