package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// GraphPageSize is how many commits a project page shows.
const GraphPageSize = 30

type projectRow struct {
	store.Project
	Runtime        runtimes.Status
	LastCheckpoint *store.Checkpoint
}

// ProjectsPage is GET /console/w/{ws}/projects.
func (c *Console) ProjectsPage(ec echo.Context) error {
	p := newPage(ec, "Projects", "projects")
	ctx := ec.Request().Context()
	ps, err := c.o.Store.ListProjects(ctx, p.WS.ID)
	if err != nil {
		return err
	}
	rows := make([]projectRow, 0, len(ps))
	for _, pr := range ps {
		row := projectRow{Project: pr, Runtime: c.runtimeStatus(ctx, pr.ID)}
		last, err := c.o.Store.LastCheckpoint(ctx, pr.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			row.LastCheckpoint = &last
		}
		rows = append(rows, row)
	}
	p.Data = rows
	return c.render(ec, http.StatusOK, "projects", p)
}

func (c *Console) runtimeStatus(ctx context.Context, projectID string) runtimes.Status {
	if c.o.Runtime == nil {
		return runtimes.Status{State: "unknown"}
	}
	st, err := c.o.Runtime.Status(ctx, projectID)
	if err != nil {
		return runtimes.Status{State: "unknown", LastError: err.Error()}
	}
	return st
}

type projectData struct {
	Project   store.Project
	Runtime   runtimes.Status
	Status    *checkpointreads.StatusResponse
	Graph     *checkpointreads.GraphResponse
	ReadError string
	Cursor    string
}

// readError turns a read's error into a sentence for the page; "" when
// the error is not the reader's to explain (then it is returned).
func readError(err error) (string, error) {
	var e *wire.Error
	if errors.As(err, &e) && e.Status != http.StatusInternalServerError {
		return e.Message, nil
	}
	return "", err
}

// ProjectPage is GET /console/w/{ws}/projects/{project}[?cursor=]: status
// and the commit graph, newest first, publish/* tags with a Published badge.
func (c *Console) ProjectPage(ec echo.Context) error {
	proj := projectFrom(ec)
	p := newPage(ec, proj.Name, "projects")
	ctx := ec.Request().Context()
	d := projectData{Project: proj, Runtime: c.runtimeStatus(ctx, proj.ID), Cursor: ec.QueryParam("cursor")}
	if c.o.Checkpoints != nil {
		st, err := c.o.Checkpoints.ReadStatus(ctx, proj, nil)
		if err != nil {
			if d.ReadError, err = readError(err); err != nil {
				return err
			}
		} else {
			d.Status = &st
		}
		if d.Status != nil && d.Status.Durable.Exists {
			g, err := c.o.Checkpoints.ReadGraph(ctx, proj.ID, strconv.Itoa(GraphPageSize), d.Cursor, nil)
			if err != nil {
				if d.ReadError, err = readError(err); err != nil {
					return err
				}
			} else {
				d.Graph = &g
			}
		}
	}
	p.Data = d
	return c.render(ec, http.StatusOK, "project", p)
}

type commitData struct {
	Project   store.Project
	Commit    checkpointreads.CommitResponse
	Diff      checkpointreads.DiffResponse
	Files     []fileDiff
	Published bool
}

// fileDiff is one file's part of a unified diff.
type fileDiff struct {
	Path  string
	Lines []string
}

// CommitPage is GET /console/w/{ws}/projects/{project}/commits/{sha}: the
// commit's file changes and its diff against its first parent.
func (c *Console) CommitPage(ec echo.Context) error {
	proj := projectFrom(ec)
	p := newPage(ec, proj.Name, "projects")
	if c.o.Checkpoints == nil {
		return c.errorPage(ec, http.StatusNotFound, "Checkpoint reads are not available on this server.")
	}
	ctx := ec.Request().Context()
	cm, err := c.o.Checkpoints.ReadCommit(ctx, proj.ID, ec.Param("sha"), nil)
	if err != nil {
		var e *wire.Error
		if errors.As(err, &e) && e.Status < 500 {
			return c.errorPage(ec, e.Status, e.Message)
		}
		return err
	}
	diff, err := c.o.Checkpoints.ReadDiff(ctx, proj.ID, "", cm.SHA, nil)
	if err != nil {
		c.o.Log.Warn("console: diff", zap.String("project", proj.ID), zap.Error(err))
	}
	p.Title = cm.Subject
	p.Data = commitData{Project: proj, Commit: cm, Diff: diff, Files: splitDiff(diff.Diff),
		Published: cm.SHA == proj.PublishedCommitSHA || cm.Published}
	return c.render(ec, http.StatusOK, "commit", p)
}

// splitDiff cuts a unified diff into its files.
func splitDiff(diff string) []fileDiff {
	var out []fileDiff
	for _, line := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		if strings.HasPrefix(line, "diff --git ") || len(out) == 0 {
			path := strings.TrimPrefix(line, "diff --git ")
			if _, b, ok := strings.Cut(path, " b/"); ok {
				path = b
			}
			out = append(out, fileDiff{Path: path})
		}
		if line != "" || len(out[len(out)-1].Lines) > 0 {
			out[len(out)-1].Lines = append(out[len(out)-1].Lines, line)
		}
	}
	if len(out) == 1 && len(out[0].Lines) == 0 {
		return nil
	}
	return out
}
