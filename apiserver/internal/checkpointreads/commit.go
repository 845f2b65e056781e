package checkpointreads

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/shared/wire"
)

// CommitResponse is the body of GET …/checkpoints/commits/:sha.
type CommitResponse struct {
	Commit
	Files          []FileChange `json:"files"`
	FilesTruncated bool         `json:"filesTruncated,omitempty"`
	Stats          CommitStats  `json:"stats"`
}

// CommitStats sums Files.
type CommitStats struct {
	FilesChanged int `json:"filesChanged"`
	Additions    int `json:"additions"`
	Deletions    int `json:"deletions"`
}

// ReadCommit returns one commit with the files it changed against its first
// parent; binary files are marked binary and carry no line counts.
func (a *API) ReadCommit(ctx context.Context, projectID, sha string, h http.Header) (CommitResponse, error) {
	sha = strings.ToLower(sha)
	if !validSHA(sha) {
		return CommitResponse{}, invalidSHA("sha", sha)
	}
	r, full, err := a.acquireAt(ctx, projectID, h, sha, fmt.Sprintf("No commit %s in the project's repository.", sha))
	if err != nil {
		return CommitResponse{}, err
	}
	defer r.Release()
	out, err := r.Git("log", "-1", logFormat).AddDynamic(full).Output(ctx)
	if err != nil {
		return CommitResponse{}, wire.Internal(err)
	}
	commits, err := parseLog(out)
	if err != nil || len(commits) != 1 {
		return CommitResponse{}, wire.Internal(fmt.Errorf("checkpointreads: reading commit %s: %v", full, err))
	}
	tags, err := tagMap(ctx, r)
	if err != nil {
		return CommitResponse{}, wire.Internal(err)
	}
	decorate(commits, tags)
	resp := CommitResponse{Commit: commits[0]}
	parent := ""
	if len(resp.Parents) > 0 {
		parent = resp.Parents[0]
	}
	resp.Files, resp.FilesTruncated, err = changedFiles(ctx, r, full, parent, MaxFiles)
	if err != nil {
		return CommitResponse{}, wire.Internal(err)
	}
	if resp.Files == nil {
		resp.Files = []FileChange{}
	}
	for _, f := range resp.Files {
		resp.Stats.FilesChanged++
		resp.Stats.Additions += f.Additions
		resp.Stats.Deletions += f.Deletions
	}
	return resp, nil
}
