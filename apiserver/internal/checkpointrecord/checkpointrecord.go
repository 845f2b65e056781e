// Package checkpointrecord is the API side of POST
// /internal/projects/{id}/checkpoints/record (spec 4.3, docs/design.md §6): the
// pod records commit metadata as one ProjectCheckpoint row, idempotent on
// (projectId, commitSha). Runtime-token authentication (the token of that
// project only) is the route's middleware; this package validates the
// payload and hands it to a Recorder.
package checkpointrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/shared/wire"
)

// SourcePod marks rows recorded by the pod (git_only). Receive-pack in
// dual_shadow records with another source.
const SourcePod = "pod"

// MaxBodyBytes bounds a record body.
const MaxBodyBytes = 256 << 10

// Limits of the text fields.
const (
	MaxMessageBytes = 64 << 10
	MaxAuthorBytes  = 512
	MaxBranchBytes  = 255
)

// Recorder stores a record; idempotent on (projectID, rec.CommitSHA):
// created is false when the row already existed (id is then the existing
// row's).
type Recorder interface {
	RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (id string, created bool, err error)
}

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// Handler answers 201 with {id, created:true} for a new row and 200 with
// {id, created:false} when the row existed; 400 lists the offending fields.
// The project comes from the path parameter "id".
func Handler(rec Recorder) echo.HandlerFunc {
	return func(c echo.Context) error {
		projectID := c.Param("id")
		if projectID == "" {
			return wire.Coded("invalid_project", "missing project id")
		}
		body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
		if err != nil {
			return wire.Coded("invalid_body", "cannot read body")
		}
		if len(body) > MaxBodyBytes {
			return wire.Coded("request_too_large", "checkpoint record body too large")
		}
		var r wire.CheckpointRecord
		if err := json.Unmarshal(body, &r); err != nil {
			return wire.Coded("invalid_body", "body must be a JSON checkpoint record: "+err.Error())
		}
		if err := Validate(r); err != nil {
			return wire.Coded("invalid_checkpoint", err.Error())
		}
		id, created, err := rec.RecordCheckpoint(c.Request().Context(), projectID, r, SourcePod)
		if err != nil {
			return err // the error handler maps typed errors; others are 500
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		return c.JSON(status, wire.CheckpointRecordResponse{ID: id, Created: created})
	}
}

// Validate checks a record and names every offending field.
func Validate(r wire.CheckpointRecord) error {
	var bad []string
	if !shaRE.MatchString(r.CommitSHA) {
		bad = append(bad, "commitSha: must be a full lowercase hex commit id (40 or 64 characters)")
	}
	if r.ParentSHA != "" && !shaRE.MatchString(r.ParentSHA) {
		bad = append(bad, "parentSha: must be empty (root commit) or a full lowercase hex commit id")
	}
	if r.ParentSHA != "" && r.ParentSHA == r.CommitSHA {
		bad = append(bad, "parentSha: must differ from commitSha")
	}
	if !utf8.ValidString(r.Message) || len(r.Message) > MaxMessageBytes {
		bad = append(bad, fmt.Sprintf("message: must be valid UTF-8 of at most %d bytes", MaxMessageBytes))
	}
	if strings.TrimSpace(r.Author) == "" || len(r.Author) > MaxAuthorBytes || !utf8.ValidString(r.Author) {
		bad = append(bad, fmt.Sprintf("author: required, at most %d bytes", MaxAuthorBytes))
	}
	if !validBranch(r.Branch) {
		bad = append(bad, "branch: required, a valid git branch name")
	}
	if r.FilesChanged < 0 || r.Additions < 0 || r.Deletions < 0 {
		bad = append(bad, "filesChanged, additions, deletions: must not be negative")
	}
	if r.CreatedAt.IsZero() {
		bad = append(bad, "createdAt: required (RFC 3339)")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func validBranch(b string) bool {
	if b == "" || len(b) > MaxBranchBytes || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") ||
		strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") {
		return false
	}
	for _, r := range b {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return true
}
