// Package server assembles the API server's HTTP surface (DESIGN.md §5, HTTP
// surfaces): the public API under /api/v1 and /v1 (spec 4.1), the /internal
// routes pods call with their runtime token (spec 4.3, 5.3), and /healthz,
// /readyz, /metrics. Handlers live in their own packages; this one only wires.
package server

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/agentproxy"
	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/checkpointsapi"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/gitserver"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/objstoreopen"
	"github.com/svc-dev/svc/apiserver/internal/openapi"
	"github.com/svc-dev/svc/apiserver/internal/outboxapi"
	"github.com/svc-dev/svc/apiserver/internal/pairing"
	"github.com/svc-dev/svc/apiserver/internal/publicapi"
	"github.com/svc-dev/svc/apiserver/internal/publish"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
)

// Deps are what the server is built from.
type Deps struct {
	Store    *store.Store
	Catalog  *catalog.Catalog
	Upstream *upstream.Client
	// Routing tunes fallbacks, retries, breakers and key pools (its
	// Registerer, Tracer and Log are filled in here).
	Routing upstream.RouterOptions
	// Tracer records spans; nil: tracing off.
	Tracer        *tracing.Tracer
	Log           *zap.Logger
	RuntimeSecret []byte
	MaxBodyBytes  int64
	// Hydrate serves checkpoint reads and smart-HTTP git (nil: not mounted).
	Hydrate *hydrate.Manager
	// ObjectsHandler serves the fs object store's presigned URLs at
	// objstoreopen.FSBasePath (nil for s3).
	ObjectsHandler http.Handler
	// Objects is the object store (spec 2.7); the LFS batch endpoint signs
	// URLs of <projectId>/lfs/objects/<oid> with it (nil: not mounted).
	Objects objstore.Store
	// AgentProxy serves /api/projects/{id}/agent-proxy/* behind cloud auth
	// (nil: not mounted).
	AgentProxy *agentproxy.Proxy
	// Pairing serves /api/pairing/* for paired machines (nil: not mounted).
	Pairing *pairing.Hub
	// Relay serves /internal/projects/{id}/relay/* for the other replicas:
	// agent-proxy requests of a paired project whose tunnel is on this
	// replica (an agentproxy.Proxy with Relay set over Pairing.Local(); nil:
	// not mounted).
	Relay *agentproxy.Proxy
	// AnswerDeadline: an accepted async message neither answered nor
	// delivered by then is served by the outbox as unanswered (0: the
	// outboxapi default).
	AnswerDeadline time.Duration
	// Console mounts the web console and the JSON key API with these
	// options (issue 13; nil: not mounted). The server fills in its own
	// store, catalog, authenticator, checkpoint reads and runtime.
	Console *console.Options
}

// Server is the assembled HTTP server.
type Server struct {
	Echo     *echo.Echo
	Auth     *auth.Authenticator
	Registry *prometheus.Registry
	Usage    *metering.Recorder
	// Outbox is the durable webhook outbox (the pod's POST and the
	// integrations' long-poll).
	Outbox *outboxapi.API
	// Console is the web console (nil when Deps.Console is nil).
	Console *console.Console
	deps    Deps
}

// New wires every route.
func New(d Deps) *Server {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = apierr.Handler(d.Log)
	e.Use(middleware.RequestID())
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			d.Log.Error("panic in handler", zap.Error(err), zap.ByteString("stack", stack))
			return err
		},
	}))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := auth.New(d.Store, d.RuntimeSecret, d.Log.Named("auth"))
	s := &Server{Echo: e, Auth: a, Registry: reg, deps: d, Outbox: outboxapi.New(d.Store, d.Log.Named("outbox"))}
	s.Outbox.AnswerDeadline = d.AnswerDeadline
	if d.AgentProxy != nil && d.AgentProxy.Accepted == nil {
		d.AgentProxy.Accepted = s.Outbox.RecordAccepted
	}

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))

	s.Usage = metering.NewRecorder(d.Store, d.Log.Named("metering"))
	routing := d.Routing
	routing.Registerer, routing.Tracer, routing.Log = reg, d.Tracer, d.Log.Named("upstream")
	api := &publicapi.API{Catalog: d.Catalog, Meter: metering.New(d.Store, s.Usage),
		Router: upstream.NewRouter(d.Upstream, d.Catalog, routing), Tracer: d.Tracer,
		Log: d.Log.Named("publicapi"), MaxBody: d.MaxBodyBytes, Metrics: publicapi.NewMetrics(reg)}
	for _, prefix := range []string{"/api/v1", "/v1"} {
		// The OpenAPI document is public (no key), like the SDKs' own specs.
		e.GET(prefix+"/openapi.json", openapi.Handler)
		api.Register(e.Group(prefix, api.Observe, httpmw.APIKey(a)))
	}

	internal := e.Group(internalapi.ProjectGroup, httpmw.Runtime(a, "id"))
	internal.POST(internalapi.PathChatCompletions, api.ChatCompletions, api.Observe)
	s.registerInternal(internal)
	if d.Relay != nil {
		internal.Any(internalapi.PathRelay+"/*", d.Relay.Handle)
	}

	if d.Hydrate != nil {
		(&checkpointsapi.API{Hydrate: d.Hydrate, Store: d.Store, Log: d.Log.Named("checkpoints")}).
			Register(e, httpmw.APIKey(a), httpmw.ProjectMember(d.Store, "id"))
		(&gitserver.Server{Hydrate: d.Hydrate, Store: d.Store, Auth: a, Log: d.Log}).Register(e)
	}
	// The outbox poll is served from the database, before the proxy's
	// catch-all, so that it works while the agent is down.
	agentProxy := e.Group("/api/projects/:id/agent-proxy", httpmw.APIKey(a), httpmw.ProjectMember(d.Store, "id"))
	s.Outbox.RegisterPublic(agentProxy)
	if d.AgentProxy != nil {
		d.AgentProxy.Register(agentProxy)
		e.POST("/api/projects/:id/publish", (&publish.API{Runtime: d.AgentProxy.Runtime, Store: d.Store}).Handle,
			httpmw.APIKey(a), httpmw.ProjectMember(d.Store, "id"))
	}
	if d.Pairing != nil {
		d.Pairing.Register(e)
	}
	if d.ObjectsHandler != nil {
		e.Any(objstoreopen.FSBasePath+"/*", echo.WrapHandler(d.ObjectsHandler))
	}
	if d.Console != nil {
		s.registerConsole(e, *d.Console)
	}
	return s
}

// Close writes the usage records still queued; call it after the HTTP server
// has stopped taking requests.
func (s *Server) Close(ctx context.Context) error { return s.Usage.Close(ctx) }

func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2e9)
	defer cancel()
	if err := s.deps.Store.Ping(ctx); err != nil {
		return apierr.New(http.StatusServiceUnavailable, apierr.TypeServer, "database_unavailable", "Database is not reachable.")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
