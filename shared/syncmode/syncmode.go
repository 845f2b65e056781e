// Package syncmode is the cloud sync mode of a project (spec 2.6 and 3.1):
// s3, dual_shadow or git_only (the default since the migration of spec 9),
// and the mode table: what each mode is, as facts a caller asks for instead
// of comparing modes. The pod's behaviour per mode is its strategy
// (podagent/internal/syncstrategy).
package syncmode

import "fmt"

// Mode is a project's cloud sync mode.
type Mode string

const (
	S3         Mode = "s3"
	DualShadow Mode = "dual_shadow"
	GitOnly    Mode = "git_only"
)

// Default is the mode of a new project (spec 9: the default flip).
const Default = GitOnly

// EnvVar is the pod environment variable that carries the mode (spec 3.1).
const EnvVar = "SVC_CLOUD_SYNC_MODE"

// Parse accepts exactly one of the three spellings; empty means Default.
func Parse(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return Default, nil
	case S3, DualShadow, GitOnly:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown cloud sync mode %q (want s3, dual_shadow or git_only)", s)
}

// traits is one row of the mode table.
type traits struct {
	keepsSourceArchive bool
	pushesToAPI        bool
	gitCheckpoints     bool
	cohortGuided       bool // a mode for a bounded cohort of projects (docs/sync-modes.md §10)
}

// table is the mode table: every mode and what it is.
var table = map[Mode]traits{
	S3:         {keepsSourceArchive: true},
	DualShadow: {keepsSourceArchive: true, pushesToAPI: true, gitCheckpoints: true, cohortGuided: true},
	GitOnly:    {gitCheckpoints: true},
}

// All is every mode, in a fixed order.
var All = []Mode{S3, DualShadow, GitOnly}

// KeepsSourceArchive reports whether a pod in mode m writes the project's
// files to object storage each turn (project-src.tar.gz and the assets) and
// a cold start restores them from there: s3 and dual_shadow. In git_only the
// durable .git alone holds them.
func (m Mode) KeepsSourceArchive() bool { return table[m].keepsSourceArchive }

// PushesToAPI reports whether a pod in mode m pushes each turn to the API's
// git endpoint (dual_shadow), so it cannot run without SVC_API_URL.
func (m Mode) PushesToAPI() bool { return table[m].pushesToAPI }

// GitCheckpoints reports whether a project in mode m gets its checkpoint
// rows from its durable git history (git_only, dual_shadow), so a hydrate
// may reconcile them from it. An s3 project produces none (spec 3.1), and a
// .git left in storage by an earlier mode is no history of it.
func (m Mode) GitCheckpoints() bool { return table[m].gitCheckpoints }

// AcceptsPodPush reports whether the API's git endpoint takes a push from
// the project's pod and makes it durable (dual_shadow): the API side of
// PushesToAPI, and the mode whose origin starts empty before the first push.
func (m Mode) AcceptsPodPush() bool { return table[m].pushesToAPI }

// CohortGuided reports whether switching a project to m is bounded by the
// cohort guidance (dual_shadow: a few projects for a few days).
func (m Mode) CohortGuided() bool { return table[m].cohortGuided }

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool { _, ok := table[m]; return ok }
