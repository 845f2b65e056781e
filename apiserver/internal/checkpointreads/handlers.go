package checkpointreads

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
)

// The HTTP side of the reads: each handler passes the project, its query
// or path parameters and the response headers to its Read function, which
// the console calls too.

// Graph serves GET …/checkpoints/graph (ReadGraph).
func (a *API) Graph(c echo.Context) error {
	resp, err := a.ReadGraph(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.QueryParam("limit"), c.QueryParam("cursor"), c.Response().Header())
	return reply(c, resp, err)
}

// Commit serves GET …/checkpoints/commits/:sha (ReadCommit).
func (a *API) Commit(c echo.Context) error {
	resp, err := a.ReadCommit(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.Param("sha"), c.Response().Header())
	return reply(c, resp, err)
}

// Diff serves GET …/checkpoints/diff (ReadDiff); a diff cut at the size cap
// also says so in X-Svc-Diff-Truncated.
func (a *API) Diff(c echo.Context) error {
	resp, err := a.ReadDiff(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.QueryParam("from"), c.QueryParam("to"), c.Response().Header())
	if err == nil && resp.Truncated {
		c.Response().Header().Set("X-Svc-Diff-Truncated", "true")
	}
	return reply(c, resp, err)
}

// Status serves GET …/checkpoints/status (ReadStatus).
func (a *API) Status(c echo.Context) error {
	resp, err := a.ReadStatus(c.Request().Context(), httpmw.ProjectFrom(c), c.Response().Header())
	return reply(c, resp, err)
}

// Files serves GET …/checkpoints/files (ReadFiles).
func (a *API) Files(c echo.Context) error {
	resp, err := a.ReadFiles(c.Request().Context(), httpmw.ProjectFrom(c), c.Response().Header())
	return reply(c, resp, err)
}

// reply writes a read's result as a 200 JSON body, or returns its error for
// the error handler to answer.
func reply[T any](c echo.Context, resp T, err error) error {
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}
