package store

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// DriverPaired is the driver name of a runtime assignment that pins a project
// to a paired machine (`podagent paired`).
const DriverPaired = "paired"

// RuntimeAssignment pins a project to one runtime at a time (spec 10.1.1):
// which driver runs its agent, where, and with which sync mode it started.
type RuntimeAssignment struct {
	ProjectID string `gorm:"primaryKey" json:"projectId"`
	// Driver is local, kubernetes or paired.
	Driver string `json:"driver"`
	// Endpoint is the agent's base URL (local, kubernetes); for a paired
	// machine, the advertise URL of the API replica that holds its tunnel
	// (empty: not connected), so any replica can relay to it.
	Endpoint string `json:"endpoint"`
	// Instance names the holder: the apiserver process of a local runtime,
	// the pairing token id of a paired machine.
	Instance      string `json:"instance"`
	CloudSyncMode string `json:"cloudSyncMode"`
	// Generation numbers the runtimes a driver that replaces them (the
	// kubernetes driver: one pod name per generation) has assigned to the
	// project; 0 for drivers that do not use it.
	Generation int64     `json:"generation,omitempty"`
	AssignedAt time.Time `json:"assignedAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// GetRuntimeAssignment loads the runtime a project is pinned to; ErrNotFound
// when it has none yet.
func (s *Store) GetRuntimeAssignment(ctx context.Context, projectID string) (RuntimeAssignment, error) {
	return first[RuntimeAssignment](ctx, s.db, "project_id = ?", projectID)
}

// assignmentBatch bounds the project ids of one GetRuntimeAssignments
// statement: well inside SQLite's bound-variable limit and a short IN list
// for PostgreSQL's planner.
const assignmentBatch = 500

// GetRuntimeAssignments loads the assignments of projectIDs in one statement
// per assignmentBatch ids (the idle reaper's pass), keyed by project id; a
// project with no assignment has no key. Duplicate ids are read once.
func (s *Store) GetRuntimeAssignments(ctx context.Context, projectIDs []string) (map[string]RuntimeAssignment, error) {
	ids := make([]string, 0, len(projectIDs))
	seen := make(map[string]bool, len(projectIDs))
	for _, id := range projectIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	out := make(map[string]RuntimeAssignment, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), assignmentBatch)
		rows, err := all[RuntimeAssignment](ctx, s.db, "project_id IN ?", ids[:n])
		if err != nil {
			return nil, err
		}
		for _, a := range rows {
			out[a.ProjectID] = a
		}
		ids = ids[n:]
	}
	return out, nil
}

// PinRuntime records a's driver, endpoint and instance as the project's one
// runtime, replacing any previous assignment. AssignedAt changes only when
// the driver or the instance changes.
func (s *Store) PinRuntime(ctx context.Context, a RuntimeAssignment) (RuntimeAssignment, error) {
	if err := pin(s.db.WithContext(ctx), &a); err != nil {
		return RuntimeAssignment{}, err
	}
	return s.GetRuntimeAssignment(ctx, a.ProjectID)
}

func pin(tx *gorm.DB, a *RuntimeAssignment) error {
	now := time.Now().UTC()
	a.AssignedAt, a.UpdatedAt = now, now
	// One statement on both dialects: assigned_at survives an update by the
	// same holder (a restart reports a new endpoint, not a new assignment).
	return tx.Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "project_id"}},
		DoUpdates: clause.Set{
			{Column: clause.Column{Name: "driver"}, Value: gorm.Expr("excluded.driver")},
			{Column: clause.Column{Name: "endpoint"}, Value: gorm.Expr("excluded.endpoint")},
			{Column: clause.Column{Name: "instance"}, Value: gorm.Expr("excluded.instance")},
			{Column: clause.Column{Name: "cloud_sync_mode"}, Value: gorm.Expr("excluded.cloud_sync_mode")},
			{Column: clause.Column{Name: "updated_at"}, Value: gorm.Expr("excluded.updated_at")},
			{Column: clause.Column{Name: "assigned_at"}, Value: gorm.Expr(
				"CASE WHEN runtime_assignments.driver = excluded.driver AND runtime_assignments.instance = excluded.instance " +
					"THEN runtime_assignments.assigned_at ELSE excluded.assigned_at END")},
		},
	}).Create(a).Error
}

// UnpinRuntime removes the project's assignment when it is held by driver and
// instance (an empty instance matches any); it reports whether a row went.
func (s *Store) UnpinRuntime(ctx context.Context, projectID, driver, instance string) (bool, error) {
	q := s.db.WithContext(ctx).Where("project_id = ? AND driver = ?", projectID, driver)
	if instance != "" {
		q = q.Where("instance = ?", instance)
	}
	res := q.Delete(&RuntimeAssignment{})
	return res.RowsAffected > 0, res.Error
}
