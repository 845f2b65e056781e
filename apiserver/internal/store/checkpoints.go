package store

import (
	"context"
	"time"

	"gorm.io/gorm/clause"

	"github.com/svc-dev/svc/shared/wire"
)

// Checkpoint is a ProjectCheckpoint row: one per chat turn that writes files.
type Checkpoint struct {
	ID        string `gorm:"primaryKey" json:"id"`
	ProjectID string `json:"projectId"`
	CommitSHA string `gorm:"column:commit_sha" json:"commitSha"`
	ParentSHA string `gorm:"column:parent_sha" json:"parentSha,omitempty"`
	wire.CommitSummary
	Source      string     `json:"source"`
	Reconciled  bool       `json:"reconciled"`
	CommittedAt *time.Time `json:"committedAt,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	// Turn is the commit's turn number (docs/sync-modes.md §1).
	Turn *int64 `json:"turn,omitempty"`
}

// TableName maps Checkpoint to project_checkpoints.
func (Checkpoint) TableName() string { return "project_checkpoints" }

// Checkpoint sources.
const (
	SourcePod         = "pod"          // the pod's record call (spec 4.3)
	SourceReceivePack = "receive-pack" // a push-back through the git backend
	SourceReconcile   = "reconcile"    // found on a read-hydrate (spec 3.2)
)

// RecordCheckpoint inserts one ProjectCheckpoint row for (projectID,
// rec.CommitSHA); a second call for the same commit returns the existing row
// with created false.
func (s *Store) RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (string, bool, error) {
	cp := Checkpoint{
		ID: NewID("cp"), ProjectID: projectID, CommitSHA: rec.CommitSHA, ParentSHA: rec.ParentSHA,
		CommitSummary: rec.CommitSummary, Source: source,
		Reconciled: source == SourceReconcile, CreatedAt: time.Now().UTC(),
	}
	if rec.Turn >= 0 {
		turn := rec.Turn
		cp.Turn = &turn
	}
	if !rec.CreatedAt.IsZero() {
		t := rec.CreatedAt.UTC()
		cp.CommittedAt = &t
	}
	res := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&cp)
	if res.Error != nil {
		return "", false, res.Error
	}
	if res.RowsAffected == 1 {
		return cp.ID, true, nil
	}
	var existing Checkpoint
	err := s.db.WithContext(ctx).Select("id").
		First(&existing, "project_id = ? AND commit_sha = ?", projectID, rec.CommitSHA).Error
	return existing.ID, false, notFound(err)
}

// ListCheckpoints returns a project's rows, newest first, at most limit.
func (s *Store) ListCheckpoints(ctx context.Context, projectID string, limit int) ([]Checkpoint, error) {
	return all[Checkpoint](ctx, s.db.Order("created_at DESC, id DESC").Limit(limit), "project_id = ?", projectID)
}

// LastCheckpoint returns the row of a project's last turn: last in the
// branch's history (the highest turn number), not last inserted — a
// reconcile row written later for an older commit is not "last"; the
// seed commit (turn 0) is not a turn. ErrNotFound when there is none.
func (s *Store) LastCheckpoint(ctx context.Context, projectID string) (Checkpoint, error) {
	var cp Checkpoint
	err := s.db.WithContext(ctx).Where("project_id = ? AND turn > 0", projectID).
		Order("turn DESC, created_at DESC, id DESC").First(&cp).Error
	return cp, notFound(err)
}

// CheckpointSHAs returns the set of commit shas that have a row.
func (s *Store) CheckpointSHAs(ctx context.Context, projectID string) (map[string]bool, error) {
	var shas []string
	err := s.db.WithContext(ctx).Model(&Checkpoint{}).Where("project_id = ?", projectID).
		Pluck("commit_sha", &shas).Error
	out := make(map[string]bool, len(shas))
	for _, s := range shas {
		out[s] = true
	}
	return out, err
}

// DeleteCheckpoints removes a project's rows for the given commits (the
// reconcile's rows that are not turns, docs/sync-modes.md §1) and returns
// how many it removed.
func (s *Store) DeleteCheckpoints(ctx context.Context, projectID string, shas []string) (int64, error) {
	if len(shas) == 0 {
		return 0, nil
	}
	res := s.db.WithContext(ctx).Where("project_id = ? AND commit_sha IN ?", projectID, shas).Delete(&Checkpoint{})
	return res.RowsAffected, res.Error
}

// CheckpointsSince returns a project's rows created at or after since,
// oldest first (the parity check of spec 10.6.4).
func (s *Store) CheckpointsSince(ctx context.Context, projectID string, since time.Time) ([]Checkpoint, error) {
	return all[Checkpoint](ctx, s.db.Order("created_at ASC, id ASC"), "project_id = ? AND created_at >= ?",
		projectID, since.UTC())
}

// CountCheckpointsSince counts rows created after since (the parity check of
// spec 10.6.4).
func (s *Store) CountCheckpointsSince(ctx context.Context, projectID string, since time.Time) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Checkpoint{}).
		Where("project_id = ? AND created_at >= ?", projectID, since.UTC()).Count(&n).Error
	return n, err
}
