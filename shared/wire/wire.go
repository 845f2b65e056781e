// Package wire holds the request and response bodies of every internal call
// between apiserver and podagent, so the two binaries cannot drift apart.
package wire

import "time"

// CheckpointRecord is the body of POST /internal/projects/{id}/checkpoints/record
// (spec 4.3; field list fixed in DESIGN.md §6). Idempotent on (projectId, commitSha).
type CheckpointRecord struct {
	CommitSHA    string    `json:"commitSha"`
	ParentSHA    string    `json:"parentSha,omitempty"`
	Message      string    `json:"message"`
	Author       string    `json:"author"`
	Branch       string    `json:"branch"`
	FilesChanged int       `json:"filesChanged"`
	Additions    int       `json:"additions"`
	Deletions    int       `json:"deletions"`
	CreatedAt    time.Time `json:"createdAt"`
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

// GitFlushResponse returns the flushed (and, with a tag, tagged) commit.
type GitFlushResponse struct {
	SHA string `json:"sha"`
	Tag string `json:"tag,omitempty"`
}
