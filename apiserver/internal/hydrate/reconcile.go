package hydrate

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/wire"
)

// reconcile gives every commit of the copy in dir that has no
// ProjectCheckpoint row one, marked reconciled (spec 3.2). It runs on each
// (re)hydrate; a failure is logged and never fails the read.
func (m *Manager) reconcile(ctx context.Context, projectID, dir string) {
	if m.opts.Checkpoints == nil {
		return
	}
	n, err := Reconcile(ctx, m.opts.Runner, dir, projectID, m.opts.Checkpoints)
	m.reconciled.Add(int64(n))
	if err != nil {
		m.log.Warn("reconciling checkpoint rows", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	if n > 0 {
		m.log.Info("reconciled checkpoint rows on hydrate", zap.String("projectId", projectID), zap.Int("rows", n))
	}
}

// Reconcile records a row (source reconcile) for each commit reachable from
// a ref of the repository at gitDir that has none, and returns how many rows
// it created.
func Reconcile(ctx context.Context, r *gitrun.Runner, gitDir, projectID string, cps Checkpoints) (int, error) {
	run := func(args ...gitrun.Arg) *gitrun.Cmd { return r.Command(args...).Dir(gitDir).Env(gitEnv(gitDir)...) }
	out, err := run("rev-list", "--all").String(ctx)
	if err != nil {
		return 0, err
	}
	shas := strings.Fields(out)
	if len(shas) == 0 {
		return 0, nil
	}
	have, err := cps.CheckpointSHAs(ctx, projectID)
	if err != nil {
		return 0, err
	}
	var missing []string
	for _, s := range shas {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return 0, nil
	}
	branch, _ := run("symbolic-ref", "--short", "-q", "HEAD").String(ctx)
	recs, err := CommitRecords(ctx, run, missing)
	if err != nil {
		return 0, err
	}
	turns, err := Turns(ctx, run, "HEAD")
	if err != nil {
		return 0, err
	}
	created := 0
	// Oldest first, so row creation order follows history.
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		rec.Branch = branch
		rec.Turn = TurnOf(turns, rec.CommitSHA)
		_, ok, err := cps.RecordCheckpoint(ctx, projectID, rec, SourceReconcile)
		if err != nil {
			return created, err
		}
		if ok {
			created++
		}
	}
	return created, nil
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
