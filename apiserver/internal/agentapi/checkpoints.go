package agentapi

import (
	"errors"
	"fmt"
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

// MaxCheckpointBodyBytes bounds a record body.
const MaxCheckpointBodyBytes = 256 << 10

// Limits of the text fields.
const (
	MaxMessageBytes = 64 << 10
	MaxAuthorBytes  = 512
	MaxBranchBytes  = 255
)

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// RecordCheckpoint is POST /internal/projects/{id}/checkpoints/record: the
// pod records a commit's metadata as one ProjectCheckpoint row (spec 4.3),
// idempotent on (projectId, commitSha). It answers 201 with {id,
// created:true} for a new row and 200 with {id, created:false} when the row
// existed; 400 lists the offending fields.
func (a *API) RecordCheckpoint(c echo.Context) error {
	projectID := c.Param("id")
	if projectID == "" {
		return wire.Coded("invalid_project", "missing project id")
	}
	var r wire.CheckpointRecord
	if err := readJSON(c, MaxCheckpointBodyBytes, &r, "a JSON checkpoint record"); err != nil {
		return err
	}
	if err := ValidateCheckpoint(r); err != nil {
		return wire.Coded("invalid_checkpoint", err.Error())
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	id, created, err := a.Store.RecordCheckpoint(ctx, projectID, r, SourcePod)
	if err != nil {
		return err // the error handler maps typed errors; others are 500
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, wire.CheckpointRecordResponse{ID: id, Created: created})
}

// ValidateCheckpoint checks a record and names every offending field.
func ValidateCheckpoint(r wire.CheckpointRecord) error {
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
