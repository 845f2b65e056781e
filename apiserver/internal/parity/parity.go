// Package parity is the rollout's parity check (spec 10.6.1, 10.6.4;
// docs/sync-modes.md §9): per project in dual_shadow or git_only, the
// checkpoint rows created in a window must be exactly one per turn. Turns
// are the pod's turn counter reported with each row (the commit's
// first-parent depth); the head recorded in project-src.tar.gz must have a
// row too. s3 projects write no rows by the spec and are reported skipped.
package parity

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wait"
)

// Defaults of the periodic job.
const (
	JobInterval = 5 * time.Minute
	Window      = 24 * time.Hour
)

// Statuses of a project's result.
const (
	StatusOK       = "ok"
	StatusMismatch = "mismatch"
	StatusSkipped  = "skipped"
)

// Duplicate is a turn with more than one row.
type Duplicate struct {
	Turn int64    `json:"turn"`
	SHAs []string `json:"commitShas"`
}

// Project is the result for one project.
type Project struct {
	ProjectID     string        `json:"projectId"`
	CloudSyncMode syncmode.Mode `json:"cloudSyncMode"`
	Status        string        `json:"status"`
	Reason        string        `json:"reason,omitempty"`
	// Checkpoints is the number of rows created in the window; Turns the
	// number of distinct turn numbers among them (first..last).
	Checkpoints int   `json:"checkpoints"`
	Turns       int   `json:"turns"`
	FirstTurn   int64 `json:"firstTurn,omitempty"`
	LastTurn    int64 `json:"lastTurn,omitempty"`
	// DurableHead is the branch tip the durable manifest names, and its
	// turn; the last turn must have a row (a record that failed and was
	// never retried is the mismatch that matters most).
	DurableHead       string `json:"durableHead,omitempty"`
	DurableHeadTurn   *int64 `json:"durableHeadTurn,omitempty"`
	DurableHeadHasRow *bool  `json:"durableHeadHasRow,omitempty"`
	// SourceHead is the head recorded in project-src.tar.gz.
	SourceHead       string      `json:"sourceHead,omitempty"`
	SourceHeadHasRow *bool       `json:"sourceHeadHasRow,omitempty"`
	Missing          []int64     `json:"missing,omitempty"`
	Duplicates       []Duplicate `json:"duplicates,omitempty"`
	// NotTurns are the commits of rows without a turn number: commits off
	// the branch's first-parent line, which are not turns
	// (docs/sync-modes.md §1); the next read-hydrate's reconcile removes
	// them.
	NotTurns []string `json:"notTurns,omitempty"`
}

// Report is the whole check.
type Report struct {
	Since      string    `json:"since"`
	OK         bool      `json:"ok"`
	Projects   []Project `json:"projects"`
	Mismatches []Project `json:"mismatches"`
	// Checkpoints is the row count of the single project asked for.
	Checkpoints *int `json:"checkpoints,omitempty"`
}

// Failed makes the CLI exit non-zero on a mismatch.
func (r Report) Failed() error {
	if r.OK {
		return nil
	}
	return ErrMismatch
}

// ErrMismatch is returned (after printing) when any project mismatched.
var ErrMismatch = mismatchError{}

type mismatchError struct{}

func (mismatchError) Error() string { return "parity-check: mismatches found" }

// Checker runs the check.
type Checker struct {
	Store   *store.Store
	Objects objstore.Store // nil: the project-src head is not checked
	Now     func() time.Time
}

// Run checks projectID ("" = every project in dual_shadow or git_only, and
// s3 ones reported skipped) over the window since.
func (c *Checker) Run(ctx context.Context, projectID string, since time.Duration) (Report, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	rep := Report{Since: since.String(), OK: true, Projects: []Project{}, Mismatches: []Project{}}
	var projects []store.Project
	if projectID != "" {
		p, err := c.Store.GetProject(ctx, projectID)
		if err != nil {
			return rep, err
		}
		projects = []store.Project{p}
	} else {
		ps, err := c.Store.ProjectsInModes(ctx)
		if err != nil {
			return rep, err
		}
		projects = ps
	}
	for _, p := range projects {
		res, err := c.project(ctx, p, now().Add(-since))
		if err != nil {
			return rep, err
		}
		rep.Projects = append(rep.Projects, res)
		if res.Status == StatusMismatch {
			rep.OK = false
			rep.Mismatches = append(rep.Mismatches, res)
		}
		if projectID != "" {
			n := res.Checkpoints
			rep.Checkpoints = &n
		}
	}
	return rep, nil
}

func (c *Checker) project(ctx context.Context, p store.Project, since time.Time) (Project, error) {
	res := Project{ProjectID: p.ID, CloudSyncMode: p.CloudSyncMode, Status: StatusOK}
	cps, err := c.Store.CheckpointsSince(ctx, p.ID, since)
	if err != nil {
		return res, err
	}
	res.Checkpoints = len(cps)
	if !p.CloudSyncMode.GitCheckpoints() {
		res.Status, res.Reason = StatusSkipped, "s3 writes no checkpoint rows"
		return res, nil
	}
	byTurn := map[int64][]string{}
	rowOf := map[string]int64{}
	for _, cp := range cps {
		if cp.Turn == nil {
			// Every writer computes the turn number (migration 00008 is
			// older than any window), so a row without one is for a
			// commit that is not a turn.
			res.NotTurns = append(res.NotTurns, cp.CommitSHA)
			continue
		}
		byTurn[*cp.Turn] = append(byTurn[*cp.Turn], cp.CommitSHA)
		rowOf[cp.CommitSHA] = *cp.Turn
	}
	// Turn 0 is the seed commit, not a turn.
	delete(byTurn, 0)
	turns := make([]int64, 0, len(byTurn))
	for t := range byTurn {
		turns = append(turns, t)
	}
	sort.Slice(turns, func(i, j int) bool { return turns[i] < turns[j] })
	if c.Objects != nil {
		src, err := hydrate.SourceHead(ctx, c.Objects, p.ID)
		if err != nil {
			return res, err
		}
		if src.Head != "" {
			res.SourceHead = src.Head
			has, err := c.hasRow(ctx, p.ID, src.Head)
			if err != nil {
				return res, err
			}
			res.SourceHeadHasRow = &has
			if !has {
				res.Status, res.Reason = StatusMismatch, "the head of project-src.tar.gz has no checkpoint row"
			}
			if t, ok := rowOf[src.Head]; ok && len(turns) > 0 && t > turns[len(turns)-1] {
				turns = append(turns, t)
			}
		}
	}
	if c.Objects != nil {
		if err := c.durableHead(ctx, p.ID, &res, rowOf, &turns); err != nil {
			return res, err
		}
	}
	if len(res.NotTurns) > 0 {
		res.Status = StatusMismatch
		if res.Reason == "" {
			res.Reason = "rows for commits that are not turns (off the branch's first-parent line)"
		}
	}
	if len(turns) == 0 {
		return res, nil
	}
	res.FirstTurn, res.LastTurn, res.Turns = turns[0], turns[len(turns)-1], len(byTurn)
	for t := res.FirstTurn; t <= res.LastTurn; t++ {
		shas := byTurn[t]
		switch {
		case len(shas) == 0:
			res.Missing = append(res.Missing, t)
		case len(shas) > 1:
			res.Duplicates = append(res.Duplicates, Duplicate{Turn: t, SHAs: shas})
		}
	}
	if len(res.Missing) > 0 || len(res.Duplicates) > 0 {
		res.Status = StatusMismatch
		if res.Reason == "" {
			res.Reason = "turns without exactly one checkpoint row"
		}
	}
	return res, nil
}

// durableHead compares the rows with the head of the durable manifest:
// a turn (turn ≥ 1) there without a row is a mismatch, and it extends the
// range checked for missing turns. A project without a manifest (nothing
// durable yet, or a legacy object) has nothing to compare here.
func (c *Checker) durableHead(ctx context.Context, projectID string, res *Project, rowOf map[string]int64, turns *[]int64) error {
	man, _, err := repoarchive.GetManifest(ctx, c.Objects, projectID)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	head := man.Refs[man.Head]
	if head == "" || man.HeadTurn == nil || *man.HeadTurn < 1 {
		return nil // no turn yet: the seed commit has no row
	}
	res.DurableHead, res.DurableHeadTurn = head, man.HeadTurn
	has, err := c.hasRow(ctx, projectID, head)
	if err != nil {
		return err
	}
	res.DurableHeadHasRow = &has
	if !has {
		res.Status = StatusMismatch
		if res.Reason == "" {
			res.Reason = fmt.Sprintf("the durable head (turn %d) has no checkpoint row", *man.HeadTurn)
		}
	}
	if _, ok := rowOf[head]; !ok && len(*turns) > 0 && *man.HeadTurn > (*turns)[len(*turns)-1] {
		*turns = append(*turns, *man.HeadTurn)
	}
	return nil
}

func (c *Checker) hasRow(ctx context.Context, projectID, sha string) (bool, error) {
	shas, err := c.Store.CheckpointSHAs(ctx, projectID)
	return shas[sha], err
}

// Gauge is svc_parity_mismatches{mode}: projects whose last check found a
// mismatch, per mode.
type Gauge struct{ g *prometheus.GaugeVec }

// NewGauge registers the gauge.
func NewGauge(reg prometheus.Registerer) *Gauge {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svc_parity_mismatches",
		Help: "Projects whose last parity check found missing or duplicate checkpoint rows, per sync mode."},
		[]string{"mode"})
	reg.MustRegister(g)
	return &Gauge{g: g}
}

// Set records a report.
func (g *Gauge) Set(r Report) {
	counts := map[syncmode.Mode]int{}
	for _, m := range syncmode.All {
		if m.GitCheckpoints() {
			counts[m] = 0
		}
	}
	for _, p := range r.Mismatches {
		counts[p.CloudSyncMode]++
	}
	for m, n := range counts {
		g.g.WithLabelValues(string(m)).Set(float64(n))
	}
}

// Job runs the check periodically and sets the gauge.
func (c *Checker) Job(ctx context.Context, g *Gauge, every, window time.Duration, onErr func(error)) {
	wait.EveryFromNow(ctx, every, func(ctx context.Context) {
		rep, err := c.Run(ctx, "", window)
		if err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		} else if err == nil {
			g.Set(rep)
		}
	})
}
