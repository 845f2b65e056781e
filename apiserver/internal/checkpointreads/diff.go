package checkpointreads

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/svc-dev/svc/shared/wire"
)

// DiffResponse is the body of GET …/checkpoints/diff.
type DiffResponse struct {
	From      string `json:"from"` // "" for the empty tree (to is a root commit)
	To        string `json:"to"`
	Diff      string `json:"diff"`
	Truncated bool   `json:"truncated"`
	// MaxBytes is the cap the diff was cut at when Truncated.
	MaxBytes int `json:"maxBytes"`
}

// TruncationMarker ends a diff cut at the size cap.
const TruncationMarker = "\n[svc: diff truncated at %d bytes; request a narrower range with from= and to=]\n"

// ReadDiff returns the unified diff from..to. to defaults to HEAD; from
// defaults to to's first parent (the empty tree for a root commit).
func (a *API) ReadDiff(ctx context.Context, projectID, from, to string, h http.Header) (DiffResponse, error) {
	if to == "" {
		to = "HEAD"
	}
	if !validRev(to) {
		return DiffResponse{}, invalidRev("to")
	}
	if from != "" && !validRev(from) {
		return DiffResponse{}, invalidRev("from")
	}
	r, toSHA, err := a.acquireAt(ctx, projectID, h, to, fmt.Sprintf("to=%s does not name a commit of the project's repository.", to))
	if err != nil {
		return DiffResponse{}, err
	}
	defer r.Release()
	fromSHA := ""
	if from != "" {
		fromSHA, err = resolveNamed(ctx, r, from, fmt.Sprintf("from=%s does not name a commit of the project's repository.", from))
		if err != nil {
			return DiffResponse{}, err
		}
	} else {
		p, err := resolve(ctx, r, toSHA+"^")
		if err != nil && !errors.Is(err, errNoCommit) {
			return DiffResponse{}, wire.Internal(err)
		}
		fromSHA = p
	}
	cmd := r.Git("diff-tree", "-p", "-r", "--no-commit-id", "--no-ext-diff", "--no-textconv", "--no-color", "--full-index")
	if fromSHA == "" {
		cmd.AddArgs("--root").AddDynamic(toSHA)
	} else {
		cmd.AddDynamic(fromSHA, toSHA)
	}
	w := &capWriter{max: a.MaxDiffBytes}
	if err := cmd.Stdout(w).Run(ctx); err != nil && !w.truncated {
		return DiffResponse{}, wire.Internal(err)
	}
	resp := DiffResponse{From: fromSHA, To: toSHA, Diff: w.buf.String(), Truncated: w.truncated, MaxBytes: a.MaxDiffBytes}
	if w.truncated {
		resp.Diff += fmt.Sprintf(TruncationMarker, a.MaxDiffBytes)
	}
	return resp, nil
}
