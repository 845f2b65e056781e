package store

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// PairingToken lets one machine serve one project's agent through a tunnel.
type PairingToken struct {
	Credential
	ProjectID       string     `json:"projectId"`
	TokenHash       string     `json:"-"`
	LastConnectedAt *time.Time `json:"lastConnectedAt,omitempty"`
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
	return all[PairingToken](ctx, s.db.Order("created_at"), "project_id = ?", projectID)
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
