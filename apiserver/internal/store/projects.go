package store

import (
	"context"
	"errors"
	"time"

	"github.com/svc-dev/svc/shared/syncmode"
)

// Project is one agent workspace (spec 2.6).
type Project struct {
	ID                 string        `gorm:"primaryKey" json:"id"`
	WorkspaceID        string        `json:"workspaceId"`
	Name               string        `json:"name"`
	CloudSyncMode      syncmode.Mode `json:"cloudSyncMode"`
	PublishedCommitSHA string        `gorm:"column:published_commit_sha" json:"publishedCommitSha"`
	PublishedTag       string        `json:"publishedTag"`
	CreatedAt          time.Time     `json:"createdAt"`
	// SyncModeChangedAt is when set-sync-mode last changed the mode (nil:
	// never since migration 00008).
	SyncModeChangedAt *time.Time `json:"syncModeChangedAt,omitempty"`
}

// CreateProject adds a project; its sync mode is the column default
// (git_only since the migration of spec 9).
func (s *Store) CreateProject(ctx context.Context, workspaceID, name string) (Project, error) {
	p := Project{ID: NewID("prj"), WorkspaceID: workspaceID, Name: name, CreatedAt: time.Now().UTC()}
	err := s.db.WithContext(ctx).Omit("cloud_sync_mode").Create(&p).Error
	if err != nil {
		return Project{}, err
	}
	return s.GetProject(ctx, p.ID)
}

// GetProject loads one project.
func (s *Store) GetProject(ctx context.Context, id string) (Project, error) {
	return first[Project](ctx, s.db, "id = ?", id)
}

// CloudSyncMode is the project's sync mode (hydrate's reconcile asks it).
func (s *Store) CloudSyncMode(ctx context.Context, projectID string) (syncmode.Mode, error) {
	p, err := s.GetProject(ctx, projectID)
	if err != nil {
		return "", err
	}
	if p.CloudSyncMode == "" {
		return syncmode.Default, nil
	}
	return p.CloudSyncMode, nil
}

// ListProjects lists a workspace's projects by name.
func (s *Store) ListProjects(ctx context.Context, workspaceID string) ([]Project, error) {
	return all[Project](ctx, s.db.Order("name, id"), "workspace_id = ?", workspaceID)
}

// SetSyncMode changes a project's cloud sync mode (spec 3.1; takes effect on
// the next pod assignment).
func (s *Store) SetSyncMode(ctx context.Context, id string, mode syncmode.Mode) (Project, error) {
	if !mode.Valid() {
		return Project{}, errors.New("store: invalid sync mode")
	}
	now := time.Now().UTC()
	res := s.db.WithContext(ctx).Model(&Project{}).Where("id = ? AND cloud_sync_mode <> ?", id, mode).
		Updates(map[string]any{"cloud_sync_mode": mode, "sync_mode_changed_at": now})
	if res.Error != nil {
		return Project{}, res.Error
	}
	// Changed, unchanged, or no such project (ErrNotFound).
	return s.GetProject(ctx, id)
}

// SetPublished stores the commit and tag of the latest publish (spec 10.4.3).
func (s *Store) SetPublished(ctx context.Context, id, sha, tag string) (Project, error) {
	res := s.db.WithContext(ctx).Model(&Project{}).Where("id = ?", id).
		Updates(map[string]any{"published_commit_sha": sha, "published_tag": tag})
	if res.Error != nil {
		return Project{}, res.Error
	}
	if res.RowsAffected == 0 {
		return Project{}, ErrNotFound
	}
	return s.GetProject(ctx, id)
}

// ProjectsInModes lists the projects whose sync mode is one of modes (all
// projects when none is given), oldest first.
func (s *Store) ProjectsInModes(ctx context.Context, modes ...syncmode.Mode) ([]Project, error) {
	q := s.db.WithContext(ctx).Order("created_at ASC, id ASC")
	if len(modes) > 0 {
		q = q.Where("cloud_sync_mode IN ?", modes)
	}
	var ps []Project
	return ps, q.Find(&ps).Error
}
