// Package wire holds the request and response bodies of every internal call
// between apiserver and podagent, so the two binaries cannot drift apart.
package wire

import "time"

// CheckpointRecord is the body of POST /internal/projects/{id}/checkpoints/record
// (spec 4.3; field list fixed in docs/design.md §6). Idempotent on (projectId, commitSha).
type CheckpointRecord struct {
	CommitSHA string `json:"commitSha"`
	ParentSHA string `json:"parentSha,omitempty"`
	CommitSummary
	CreatedAt time.Time `json:"createdAt"`
	// Turn is the commit's turn number, its first-parent depth (the seed
	// commit is 0): the pod's turn counter that parity checks rows against
	// (docs/sync-modes.md §1).
	Turn int64 `json:"turn"`
}

// CommitSummary is what a checkpoint says of its commit besides its ids:
// the message, author and branch, and the diff's size. The record body and
// the API's checkpoint row embed it, so their JSON fields are the same.
type CommitSummary struct {
	Message      string `json:"message"`
	Author       string `json:"author"`
	Branch       string `json:"branch"`
	FilesChanged int    `json:"filesChanged"`
	Additions    int    `json:"additions"`
	Deletions    int    `json:"deletions"`
}

// CheckpointRecordResponse answers a record call.
type CheckpointRecordResponse struct {
	ID      string `json:"id"`
	Created bool   `json:"created"` // false when the row already existed
}

// GitFlushRequest is the body of POST /agent/git-flush (spec 4.3, 10.4).
// Tag and TagMessage are set together, for publish.
type GitFlushRequest struct {
	Tag        string `json:"tag,omitempty"`
	TagMessage string `json:"tagMessage,omitempty"`
}

// RestoreRequest is the body of the pod's POST /agent/restore (rollback,
// docs/sync-modes.md §6).
type RestoreRequest struct {
	SHA string `json:"sha"`
}

// RestoreResponse is the answer of a rollback, from the pod and from
// POST /api/projects/{id}/checkpoints/{sha}/restore: the new commit (empty
// when the work tree already had that tree) and the restored one.
type RestoreResponse struct {
	SHA          string `json:"sha"`
	RestoredFrom string `json:"restoredFrom"`
}

// GitFlushResponse returns the flushed (and, with a tag, tagged) commit.
type GitFlushResponse struct {
	SHA string `json:"sha"`
	Tag string `json:"tag,omitempty"`
}
