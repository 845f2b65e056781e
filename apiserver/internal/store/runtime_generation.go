package store

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ClaimRuntime returns the project's assignment to driver, creating it at
// generation 1 when the project has none, and taking it over (next
// generation, no endpoint) from any other non-paired driver. Replicas racing
// here agree: the insert is ON CONFLICT DO NOTHING and the takeover a
// compare-and-set.
func (s *Store) ClaimRuntime(ctx context.Context, projectID, driver, mode string) (RuntimeAssignment, error) {
	db := s.db.WithContext(ctx)
	now := time.Now().UTC()
	a := RuntimeAssignment{ProjectID: projectID, Driver: driver, CloudSyncMode: mode, Generation: 1,
		AssignedAt: now, UpdatedAt: now}
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&a).Error; err != nil {
		return RuntimeAssignment{}, err
	}
	cur, err := s.GetRuntimeAssignment(ctx, projectID)
	if err != nil || (cur.Driver == driver && cur.Generation > 0) || cur.Driver == DriverPaired {
		return cur, err
	}
	err = db.Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver = ? AND generation = ?", projectID, cur.Driver, cur.Generation).
		Updates(map[string]any{"driver": driver, "generation": cur.Generation + 1, "endpoint": "",
			"instance": "", "cloud_sync_mode": mode, "assigned_at": now, "updated_at": now}).Error
	if err != nil {
		return RuntimeAssignment{}, err
	}
	return s.GetRuntimeAssignment(ctx, projectID)
}

// AdvanceRuntime moves the project's assignment to driver from generation
// from to from+1 (clearing its endpoint), unless another replica already
// did; either way it returns the current assignment, whose generation is
// then above from.
func (s *Store) AdvanceRuntime(ctx context.Context, projectID, driver string, from int64) (RuntimeAssignment, error) {
	now := time.Now().UTC()
	err := s.db.WithContext(ctx).Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver = ? AND generation = ?", projectID, driver, from).
		Updates(map[string]any{"generation": from + 1, "endpoint": "", "instance": "",
			"assigned_at": now, "updated_at": now}).Error
	if err != nil {
		return RuntimeAssignment{}, err
	}
	return s.GetRuntimeAssignment(ctx, projectID)
}

// ErrStaleGeneration: the assignment moved to another generation (or
// driver) since the caller read it.
var ErrStaleGeneration = errors.New("store: the runtime assignment moved to another generation")

// SetRuntimeEndpoint records where generation gen of the project's runtime
// listens (and as which instance, with which sync mode it started), only
// while the assignment is still at that generation.
func (s *Store) SetRuntimeEndpoint(ctx context.Context, projectID, driver string, gen int64, endpoint, instance, mode string) error {
	res := s.db.WithContext(ctx).Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver = ? AND generation = ?", projectID, driver, gen).
		Updates(map[string]any{"endpoint": endpoint, "instance": instance, "cloud_sync_mode": mode,
			"updated_at": time.Now().UTC()})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return ErrStaleGeneration
	}
	return nil
}

// RestartRuntime asks for a new runtime of the project: it advances the
// generation of its assignment (any driver but a paired machine), so the
// driver replaces the current runtime on the next request and the project's
// current sync mode applies (spec 3.1). It reports the new assignment;
// ErrNotFound when the project has no runtime yet (its first one starts with
// the current mode anyway).
func (s *Store) RestartRuntime(ctx context.Context, projectID string) (RuntimeAssignment, error) {
	now := time.Now().UTC()
	err := s.db.WithContext(ctx).Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver <> ?", projectID, DriverPaired).
		Updates(map[string]any{"generation": gorm.Expr("generation + 1"), "endpoint": "", "instance": "",
			"assigned_at": now, "updated_at": now}).Error
	if err != nil {
		return RuntimeAssignment{}, err
	}
	return s.GetRuntimeAssignment(ctx, projectID)
}

// ReserveRuntimeInstance names the runtime of generation gen of the
// project before it exists (the kubernetes driver: the pod it creates or the
// warm pool's spare it claims), unless another replica named one first; it
// returns the assignment, whose Instance is then the one that won.
// ErrStaleGeneration when the assignment moved to another generation.
func (s *Store) ReserveRuntimeInstance(ctx context.Context, projectID, driver string, gen int64, instance string) (RuntimeAssignment, error) {
	err := s.db.WithContext(ctx).Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver = ? AND generation = ? AND instance = ?", projectID, driver, gen, "").
		Updates(map[string]any{"instance": instance, "updated_at": time.Now().UTC()}).Error
	if err != nil {
		return RuntimeAssignment{}, err
	}
	a, err := s.GetRuntimeAssignment(ctx, projectID)
	if err != nil {
		return RuntimeAssignment{}, err
	}
	if a.Driver != driver || a.Generation != gen {
		return a, ErrStaleGeneration
	}
	return a, nil
}
