package server

import (
	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/console"
)

// mountConsole mounts the web console and its JSON key API behind wt (the
// write timeout of non-streamed answers).
func mountConsole(e *echo.Echo, c *console.Console, wt echo.MiddlewareFunc) {
	e.GET("/console/static/*", c.Static(), wt)
	e.GET("/console/sign-in", c.SignInPage, wt)
	e.POST("/console/sign-in", c.SignIn, wt)
	e.GET("/console/link/:token", c.LinkPage, wt)
	e.POST("/console/link", c.UseLink, wt)

	g := e.Group("/console", wt, c.RequireSession)
	w := g.Group("/w/:ws", c.Workspace)
	p := w.Group("/projects/:project", c.Project)
	keys := e.Group("/api/workspaces/:ws/keys", wt, c.KeysAPIAuth)
	g.GET("", c.Home)
	g.POST("/sign-out", c.SignOut)
	w.GET("", c.WorkspaceHome)
	w.GET("/keys", c.KeysPage)
	w.POST("/keys", c.CreateKey)
	w.POST("/keys/:key/revoke", c.RevokeKey)
	w.POST("/keys/:key/budget", c.SetKeyBudgetForm)
	w.GET("/usage", c.UsagePage)
	w.GET("/projects", c.ProjectsPage)
	p.GET("", c.ProjectPage)
	p.GET("/commits/:sha", c.CommitPage)
	p.GET("/channel", c.ChannelPage)
	p.POST("/channel/secret", c.SetSecret)
	p.POST("/channel/headers", c.SetHeaders)
	p.GET("/channel/live", c.ActivityFragment)
	p.POST("/channel/test", c.TestMessage)
	p.POST("/channel/replay/:correlationId", c.ReplayMessage)
	p.POST("/channel/replay-range", c.ReplayRange)
	p.POST("/channel/endpoint-test", c.TestEndpoint)
	keys.GET("", c.ListKeysJSON)
	keys.POST("", c.CreateKeyJSON)
	keys.DELETE("/:key", c.RevokeKeyJSON)
	keys.GET("/:key/budget", c.GetKeyBudgetJSON)
	keys.PUT("/:key/budget", c.SetKeyBudgetJSON)
	keys.DELETE("/:key/budget", c.DeleteKeyBudgetJSON)
}
