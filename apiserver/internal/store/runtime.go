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

// PairingToken lets one machine serve one project's agent through a tunnel.
// Only the SHA-256 of the token's secret part is stored.
type PairingToken struct {
	ID              string     `gorm:"primaryKey" json:"id"`
	ProjectID       string     `json:"projectId"`
	Name            string     `json:"name"`
	Prefix          string     `json:"prefix"`
	TokenHash       string     `json:"-"`
	CreatedAt       time.Time  `json:"createdAt"`
	LastConnectedAt *time.Time `json:"lastConnectedAt,omitempty"`
	RevokedAt       *time.Time `json:"revokedAt,omitempty"`
}

// GetRuntimeAssignment loads the runtime a project is pinned to; ErrNotFound
// when it has none yet.
func (s *Store) GetRuntimeAssignment(ctx context.Context, projectID string) (RuntimeAssignment, error) {
	return first[RuntimeAssignment](ctx, s.db, "project_id = ?", projectID)
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

// CreatePairingToken stores t (its hash and prefix computed by the caller) and
// pins the project to the paired machine in the same transaction.
func (s *Store) CreatePairingToken(ctx context.Context, t PairingToken) (PairingToken, error) {
	t.CreatedAt = time.Now().UTC()
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&Project{}).Where("id = ?", t.ProjectID).Count(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		if err := tx.Create(&t).Error; err != nil {
			return err
		}
		return pin(tx, &RuntimeAssignment{ProjectID: t.ProjectID, Driver: DriverPaired, Instance: t.ID})
	})
	return t, err
}

// GetPairingToken loads a pairing token by id (revoked ones included).
func (s *Store) GetPairingToken(ctx context.Context, id string) (PairingToken, error) {
	return first[PairingToken](ctx, s.db, "id = ?", id)
}

// ListPairingTokens lists a project's pairing tokens (never their secrets).
func (s *Store) ListPairingTokens(ctx context.Context, projectID string) ([]PairingToken, error) {
	var ts []PairingToken
	err := s.db.WithContext(ctx).Where("project_id = ?", projectID).Order("created_at").Find(&ts).Error
	return ts, err
}

// RevokePairingToken marks a token revoked (the first time is kept) and, if
// the project is pinned to the machine of this token, unpins it so the next
// request goes to the default driver.
func (s *Store) RevokePairingToken(ctx context.Context, id string) (PairingToken, error) {
	now := time.Now().UTC()
	var t PairingToken
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Model(&PairingToken{}).Where("id = ? AND revoked_at IS NULL", id).Update("revoked_at", now).Error; err != nil {
			return err
		}
		if err := tx.First(&t, "id = ?", id).Error; err != nil {
			return notFound(err)
		}
		return tx.Where("project_id = ? AND driver = ? AND instance = ?", t.ProjectID, DriverPaired, id).
			Delete(&RuntimeAssignment{}).Error
	})
	return t, err
}

// PairMachine records that the machine of token id connected to the API
// replica reachable at holder: it stamps the token and pins the token's
// project to that machine and replica (the last machine to connect holds the
// project; revoked tokens are ErrNotFound).
func (s *Store) PairMachine(ctx context.Context, id, holder string, at time.Time) (PairingToken, error) {
	var t PairingToken
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.First(&t, "id = ? AND revoked_at IS NULL", id).Error; err != nil {
			return notFound(err)
		}
		at := at.UTC()
		t.LastConnectedAt = &at
		if err := tx.Model(&PairingToken{}).Where("id = ?", id).UpdateColumn("last_connected_at", at).Error; err != nil {
			return err
		}
		return pin(tx, &RuntimeAssignment{ProjectID: t.ProjectID, Driver: DriverPaired, Instance: t.ID, Endpoint: holder})
	})
	return t, err
}

// ReleasePairedMachine records that the tunnel of token id on the replica at
// holder is gone: it clears the project's endpoint only while the assignment
// still names that token and that replica (a newer connection elsewhere
// keeps its own). It reports whether the row changed.
func (s *Store) ReleasePairedMachine(ctx context.Context, projectID, id, holder string) (bool, error) {
	res := s.db.WithContext(ctx).Model(&RuntimeAssignment{}).
		Where("project_id = ? AND driver = ? AND instance = ? AND endpoint = ?", projectID, DriverPaired, id, holder).
		Updates(map[string]any{"endpoint": "", "updated_at": time.Now().UTC()})
	return res.RowsAffected > 0, res.Error
}
