package checkpointreads

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/shared/wire"
)

// GraphResponse is the body of GET …/checkpoints/graph.
type GraphResponse struct {
	Head       string   `json:"head"`
	Branch     string   `json:"branch"`
	Commits    []Commit `json:"commits"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// ReadGraph lists the commits reachable from any ref, newest first (date
// order, parents before children never). limit and cursor are the query
// parameters as given ("" for the defaults): ?limit= (default 50, max 500);
// ?cursor= is the nextCursor of the previous page: the next page starts
// after the last commit shown, so commits added in between do not shift it.
// The hydrate headers go to h when it is not nil (as for every read).
func (a *API) ReadGraph(ctx context.Context, projectID, limitParam, cursor string, h http.Header) (GraphResponse, error) {
	limit := DefaultLimit
	if v := limitParam; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return GraphResponse{}, wire.Coded("invalid_limit", fmt.Sprintf("limit must be an integer from 1 to %d.", MaxLimit))
		}
		limit = n
	}
	after := ""
	if v := cursor; v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || !validSHA(string(b)) || (len(b) != 40 && len(b) != 64) {
			return GraphResponse{}, wire.Coded("invalid_cursor", "cursor must be the nextCursor of a previous page.")
		}
		after = string(b)
	}
	r, err := a.acquire(ctx, projectID, h)
	if err != nil {
		return GraphResponse{}, err
	}
	defer r.Release()

	// HEAD and the tags are read while the log runs (each is one git
	// process; on an unchanged object they are most of a read's cost).
	var head, branch string
	var tags map[string][]string
	side, sctx := errgroup.WithContext(ctx)
	side.Go(func() (err error) { head, branch, err = headInfo(sctx, r); return err })
	side.Go(func() (err error) { tags, err = tagMap(sctx, r); return err })
	resp := GraphResponse{Commits: []Commit{}}
	var commits []Commit
	defer side.Wait() // on the error paths too, before the copy is released
	if after == "" {
		out, err := r.Git("log", "--all", "--date-order", logFormat).AddOptionValue("--max-count", strconv.Itoa(limit+1)).Output(ctx)
		if err != nil {
			return GraphResponse{}, wire.Internal(err)
		}
		if commits, err = parseLog(out); err != nil {
			return GraphResponse{}, wire.Internal(err)
		}
	} else {
		col := &lineCollector{after: after, limit: limit + 1}
		err := r.Git("rev-list", "--all", "--date-order").Stdout(col).Run(ctx)
		if err != nil && !col.done {
			return GraphResponse{}, wire.Internal(err)
		}
		if !col.found {
			return GraphResponse{}, wire.Coded("invalid_cursor", "The cursor's commit is no longer in the repository; start again without a cursor.")
		}
		if len(col.shas) > 0 {
			out, err := r.Git("log", "--no-walk=unsorted", "--stdin", logFormat).
				Stdin(strings.NewReader(strings.Join(col.shas, "\n") + "\n")).Output(ctx)
			if err != nil {
				return GraphResponse{}, wire.Internal(err)
			}
			if commits, err = parseLog(out); err != nil {
				return GraphResponse{}, wire.Internal(err)
			}
		}
	}
	if err := side.Wait(); err != nil {
		return GraphResponse{}, wire.Internal(err)
	}
	resp.Head, resp.Branch = head, branch
	if len(commits) > limit {
		commits = commits[:limit]
		resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(commits[limit-1].SHA))
	}
	decorate(commits, tags)
	if commits != nil {
		resp.Commits = commits
	}
	return resp, nil
}
