package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/syncmode"
)

// Cohort guidance of spec 8 for dual_shadow (it doubles write traffic).
const (
	CohortMaxProjects = 10
	CohortMaxAge      = 7 * 24 * time.Hour
)

// ErrCohort: the change goes beyond the dual_shadow cohort guidance and
// --force was not given. The answer is printed before the non-zero exit.
var ErrCohort = errors.New("set-sync-mode: beyond the dual_shadow cohort guidance (at most 10 projects, at most 7 days); pass --force to proceed")

// SyncModeResult is the answer of project set-sync-mode.
type SyncModeResult struct {
	// The project row's fields, at the top level as before.
	*store.Project
	Changed bool `json:"changed"`
	// Cohort lists the dual_shadow projects after the change (or as they
	// would be, when refused); Warnings say what exceeds the guidance.
	Cohort   []CohortEntry `json:"cohort,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
	Refused  bool          `json:"refused,omitempty"`
}

// CohortEntry is one dual_shadow project.
type CohortEntry struct {
	ProjectID string     `json:"projectId"`
	Since     *time.Time `json:"since,omitempty"`
}

// Failed exits non-zero when the change was refused.
func (r SyncModeResult) Failed() error {
	if r.Refused {
		return ErrCohort
	}
	return nil
}

// SetSyncMode changes a project's mode; a change to dual_shadow beyond the
// cohort guidance is refused unless force.
func SetSyncMode(ctx context.Context, st *store.Store, id string, mode syncmode.Mode, force bool, now time.Time) (SyncModeResult, error) {
	p, err := st.GetProject(ctx, id)
	if err != nil {
		return SyncModeResult{}, err
	}
	var res SyncModeResult
	if mode.CohortGuided() {
		cohort, err := st.ProjectsInModes(ctx, mode)
		if err != nil {
			return res, err
		}
		in := false
		for _, c := range cohort {
			res.Cohort = append(res.Cohort, CohortEntry{ProjectID: c.ID, Since: c.SyncModeChangedAt})
			in = in || c.ID == p.ID
			if c.SyncModeChangedAt != nil && now.Sub(*c.SyncModeChangedAt) > CohortMaxAge {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s has been in dual_shadow for %s (guidance: at most 7 days)",
					c.ID, now.Sub(*c.SyncModeChangedAt).Round(time.Hour)))
			}
		}
		if !in {
			t := now.UTC()
			res.Cohort = append(res.Cohort, CohortEntry{ProjectID: p.ID, Since: &t})
		}
		if len(res.Cohort) > CohortMaxProjects {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%d projects would be in dual_shadow (guidance: at most %d)",
				len(res.Cohort), CohortMaxProjects))
		}
		if len(res.Warnings) > 0 && !force {
			res.Refused = true
			res.Project = &p
			return res, nil
		}
	}
	updated, err := st.SetSyncMode(ctx, id, mode)
	if err != nil {
		return res, err
	}
	res.Project, res.Changed = &updated, updated.CloudSyncMode != p.CloudSyncMode
	return res, nil
}
