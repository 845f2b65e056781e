package store

import (
	"context"
	"time"
)

// Workspace owns API keys, projects and usage (spec 1, 5.1.3).
type Workspace struct {
	ID   string `gorm:"primaryKey" json:"id"`
	Name string `json:"name"`
	Billing
	CreatedAt time.Time `json:"createdAt"`
}

// Billing is how a workspace pays: its plan, and whether it pays for usage
// beyond the plan's windows instead of being refused with
// usage_limit_reached (spec 5.1.3). Authentication carries it from the
// workspace row to every request.
type Billing struct {
	Plan              string `json:"plan"`
	UsageBasedPricing bool   `json:"usageBasedPricing"`
}

// CreateWorkspace adds a workspace on plan.
func (s *Store) CreateWorkspace(ctx context.Context, name, plan string) (Workspace, error) {
	w := Workspace{ID: NewID("ws"), Name: name, Billing: Billing{Plan: plan}, CreatedAt: time.Now().UTC()}
	return w, s.db.WithContext(ctx).Create(&w).Error
}

// GetWorkspace loads one workspace.
func (s *Store) GetWorkspace(ctx context.Context, id string) (Workspace, error) {
	return first[Workspace](ctx, s.db, "id = ?", id)
}

// FindWorkspaceByName returns the oldest workspace with name.
func (s *Store) FindWorkspaceByName(ctx context.Context, name string) (Workspace, error) {
	return first[Workspace](ctx, s.db.Order("created_at"), "name = ?", name)
}

// UpdateWorkspace changes the plan and/or the usage-based pricing flag.
func (s *Store) UpdateWorkspace(ctx context.Context, id string, plan *string, usageBased *bool) (Workspace, error) {
	updates := map[string]any{}
	if plan != nil {
		updates["plan"] = *plan
	}
	if usageBased != nil {
		updates["usage_based_pricing"] = *usageBased
	}
	if len(updates) > 0 {
		res := s.db.WithContext(ctx).Model(&Workspace{}).Where("id = ?", id).Updates(updates)
		if res.Error != nil {
			return Workspace{}, res.Error
		}
		if res.RowsAffected == 0 {
			return Workspace{}, ErrNotFound
		}
	}
	return s.GetWorkspace(ctx, id)
}
