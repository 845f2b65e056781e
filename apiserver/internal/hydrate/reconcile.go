package hydrate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/wire"
)

// reconcile makes the copy's rows follow the rule of docs/sync-modes.md
// §1 (spec 2.6: one row per turn): every commit on the first-parent line
// of the branch without a row gets one, marked reconciled (spec 3.2), and
// a row for a commit the copy holds off that line (reachable only from a
// side ref, a tag or a merged second parent) is removed. It runs on each
// (re)hydrate of a git_only or dual_shadow project, whose durable .git is
// its history; an s3 project gets no rows (spec 3.1), even when storage
// still holds the .git of an earlier mode. A failure is logged and never
// fails the read.
func (m *Manager) reconcile(ctx context.Context, projectID, dir string) {
	if m.opts.Checkpoints == nil {
		return
	}
	mode, err := m.opts.Checkpoints.CloudSyncMode(ctx, projectID)
	if err != nil {
		m.log.Warn("reading the sync mode before reconciling checkpoint rows", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	if !mode.GitCheckpoints() {
		m.log.Debug("not reconciling checkpoint rows: the mode keeps no git history", zap.String("projectId", projectID),
			zap.String("mode", string(mode)))
		return
	}
	res, err := Reconcile(ctx, m.opts.Runner, dir, projectID, m.opts.Checkpoints)
	m.reconciled.Add(int64(res.Created))
	if err != nil {
		m.log.Warn("reconciling checkpoint rows", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	if res.Created > 0 || res.Removed > 0 {
		m.log.Info("reconciled checkpoint rows on hydrate", zap.String("projectId", projectID),
			zap.Int("rows", res.Created), zap.Int("removed", res.Removed))
	}
}

// ReconcileResult counts what Reconcile changed.
type ReconcileResult struct {
	// Created rows (source reconcile) for turns that had none.
	Created int
	// Removed rows for commits that are not turns.
	Removed int
}

// Reconcile records a row (source reconcile) for each commit on the
// first-parent line of HEAD (the project's branch), but its root (the
// seed), of the repository at
// gitDir that has none, and removes the rows of commits the repository
// holds that are not on that line (docs/sync-modes.md §1). A row for a
// commit the repository does not hold is left alone: it may be a turn
// newer than this copy.
func Reconcile(ctx context.Context, r *gitrun.Runner, gitDir, projectID string, cps Checkpoints) (ReconcileResult, error) {
	var res ReconcileResult
	run := func(args ...gitrun.Arg) *gitrun.Cmd { return r.Command(args...).Dir(gitDir).Env(gitEnv(gitDir)...) }
	turns, err := Turns(ctx, run, "HEAD")
	if err != nil {
		return res, err
	}
	if len(turns) == 0 {
		return res, nil // an unborn branch: nothing is a turn yet, nothing to judge
	}

	have, err := cps.CheckpointSHAs(ctx, projectID)
	if err != nil {
		return res, err
	}
	out, err := run("rev-list", "--all").String(ctx)
	if err != nil {
		return res, err
	}
	var stray []string
	for _, s := range strings.Fields(out) {
		if _, turn := turns[s]; !turn && have[s] {
			stray = append(stray, s)
		}
	}
	if len(stray) > 0 {
		n, err := cps.DeleteCheckpoints(ctx, projectID, stray)
		if err != nil {
			return res, err
		}
		res.Removed = int(n)
	}
	missing := make([]string, 0, len(turns))
	for s, n := range turns {
		// The root of the line is the seed commit the pod makes at its
		// first start: not a turn, so no row is made for it (one a writer
		// made is left alone), and it never shows as the last checkpoint.
		if !have[s] && n > 0 {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return res, nil
	}
	// Oldest first, so row creation order follows history.
	sort.Slice(missing, func(i, j int) bool { return turns[missing[i]] < turns[missing[j]] })
	branch, _ := run("symbolic-ref", "--short", "-q", "HEAD").String(ctx)
	recs, err := CommitRecords(ctx, run, missing)
	if err != nil {
		return res, err
	}
	for _, rec := range recs {
		rec.Branch = branch
		rec.Turn = TurnOf(turns, rec.CommitSHA)
		_, ok, err := cps.RecordCheckpoint(ctx, projectID, rec, SourceReconcile)
		if err != nil {
			return res, err
		}
		if ok {
			res.Created++
		}
	}
	return res, nil
}

// CommitRecords reads the checkpoint metadata of the given commits (in the
// order given) with one git log: parent, author, commit time, message and
// the files changed against the first parent. run starts a git command on
// the repository. Branch is left empty.
func CommitRecords(ctx context.Context, run func(...gitrun.Arg) *gitrun.Cmd, shas []string) ([]wire.CheckpointRecord, error) {
	for _, s := range shas {
		if !fullSHA(s) {
			return nil, fmt.Errorf("hydrate: not a full commit id: %q", s)
		}
	}
	out, err := run("log", "--no-walk=unsorted", "--stdin", "--diff-merges=first-parent", "--numstat",
		"--no-renames", "--no-ext-diff", "--no-textconv", "--format=%x1e"+wire.CommitFormat+"%x00").
		Stdin(strings.NewReader(strings.Join(shas, "\n") + "\n")).Output(ctx)
	if err != nil {
		return nil, err
	}
	var recs []wire.CheckpointRecord
	for _, chunk := range strings.Split(string(out), "\x1e") {
		if chunk == "" {
			continue
		}
		f := strings.SplitN(chunk, "\x00", 6)
		if len(f) != 6 {
			return nil, fmt.Errorf("hydrate: unexpected git log output")
		}
		rec := wire.CheckpointFromGit([5]string(f[:5]), f[5])
		rec.Message = truncateUTF8(rec.Message, maxReconcileMessage)
		recs = append(recs, rec)
	}
	return recs, nil
}

func fullSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Turns maps each commit on the first-parent line of rev to its turn number
// (its first-parent depth, the root being turn 0; docs/sync-modes.md §1),
// with one git call. An unborn rev gives an empty map.
func Turns(ctx context.Context, run func(...gitrun.Arg) *gitrun.Cmd, rev string) (map[string]int64, error) {
	if _, err := run("rev-parse", "--verify", "-q").AddDynamic(rev + "^{commit}").String(ctx); err != nil {
		return map[string]int64{}, nil
	}
	out, err := run("rev-list", "--first-parent", "--reverse").AddDynamic(rev).String(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for i, sha := range strings.Fields(out) {
		m[sha] = int64(i)
	}
	return m, nil
}

// TurnOf is turns[sha], or -1 (no turn number: the commit is not on the
// first-parent line) when absent.
func TurnOf(turns map[string]int64, sha string) int64 {
	if t, ok := turns[sha]; ok {
		return t
	}
	return -1
}
