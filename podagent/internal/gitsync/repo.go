package gitsync

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/wire"
)

// Author is the fixed identity of agent commits.
type Author struct{ Name, Email string }

// DefaultAuthor is used when Options.Author is empty.
var DefaultAuthor = Author{Name: "svc agent", Email: "agent@svc.invalid"}

// Branch is the branch pod repositories commit to.
const Branch = "main"

// Repo is the git side of the workspace: every git call goes through the
// runner, with the workspace as directory.
type Repo struct {
	Dir    string
	Runner *gitrun.Runner
	Author Author
}

func (r *Repo) git(args ...gitrun.Arg) *gitrun.Cmd {
	return r.Runner.Command(args...).Dir(r.Dir)
}

func (r *Repo) identityEnv() []string {
	return []string{
		"GIT_AUTHOR_NAME=" + r.Author.Name, "GIT_AUTHOR_EMAIL=" + r.Author.Email,
		"GIT_COMMITTER_NAME=" + r.Author.Name, "GIT_COMMITTER_EMAIL=" + r.Author.Email,
	}
}

// Init creates the repository (idempotent) on branch main.
func (r *Repo) Init(ctx context.Context) error {
	return r.git("init", "-q", "-b", Branch).Run(ctx)
}

// Configure applies the pod repository settings: gc.auto=0 (no automatic
// repack while a snapshot may run), no hooks, no signing, stable output.
func (r *Repo) Configure(ctx context.Context) error {
	settings := [][2]string{
		{"gc.auto", "0"},
		{"gc.autoDetach", "false"},
		{"maintenance.auto", "false"},
		{"core.hooksPath", "/dev/null"},
		{"core.autocrlf", "false"},
		{"core.quotePath", "false"},
		{"commit.gpgSign", "false"},
		{"tag.gpgSign", "false"},
		{"user.name", r.Author.Name},
		{"user.email", r.Author.Email},
	}
	for _, kv := range settings {
		if err := r.git("config", "--local").AddDynamic(kv[0], kv[1]).Run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// StageAll stages every change of the work tree (respecting .gitignore).
func (r *Repo) StageAll(ctx context.Context) error {
	return r.git("add", "-A").Run(ctx)
}

// HasStagedChanges reports whether the index differs from HEAD.
func (r *Repo) HasStagedChanges(ctx context.Context) (bool, error) {
	err := r.git("diff", "--cached", "--quiet", "--no-ext-diff").Run(ctx)
	if err == nil {
		return false, nil
	}
	if gitrun.ExitCode(err) == 1 {
		return true, nil
	}
	return false, err
}

// Commit commits the index with the fixed author and returns the new sha.
func (r *Repo) Commit(ctx context.Context, message string, allowEmpty bool) (string, error) {
	cmd := r.git("commit", "-q", "--no-verify", "--no-gpg-sign", "--cleanup=verbatim").Env(r.identityEnv()...)
	if allowEmpty {
		cmd.AddArgs("--allow-empty")
	}
	if err := cmd.AddOptionValue("--message", message).Run(ctx); err != nil {
		return "", err
	}
	return r.Head(ctx)
}

// Head returns the sha of HEAD, or "" for an unborn branch.
func (r *Repo) Head(ctx context.Context) (string, error) {
	sha, err := r.git("rev-parse", "--verify", "-q", "HEAD^{commit}").String(ctx)
	if err != nil {
		if gitrun.ExitCode(err) == 1 {
			return "", nil
		}
		return "", err
	}
	return sha, nil
}

// Tag creates the annotated tag name at HEAD. If the tag already exists on
// HEAD it succeeds (a retried publish); elsewhere it fails.
func (r *Repo) Tag(ctx context.Context, name, message string) error {
	head, err := r.Head(ctx)
	if err != nil {
		return err
	}
	if existing, err := r.git("rev-parse", "--verify", "-q").AddDynamic("refs/tags/" + name + "^{commit}").String(ctx); err == nil {
		if existing == head {
			return nil
		}
		return fmt.Errorf("%w: %s points at %s, not HEAD %s", ErrTagExists, name, existing, head)
	}
	return r.git("tag", "-a").AddOptionValue("--message", message).AddDynamic(name, "HEAD").Env(r.identityEnv()...).Run(ctx)
}

// ErrTagExists is returned when a tag name is taken by another commit.
var ErrTagExists = errors.New("gitsync: tag exists")

// Checkpoint builds the record of commit sha (docs/design.md §6).
func (r *Repo) Checkpoint(ctx context.Context, sha string) (wire.CheckpointRecord, error) {
	out, err := r.git("show", "-s", "--format="+wire.CommitFormat).AddDynamic(sha).String(ctx)
	if err != nil {
		return wire.CheckpointRecord{}, err
	}
	f := strings.SplitN(out, "\x00", 5)
	if len(f) != 5 {
		return wire.CheckpointRecord{}, fmt.Errorf("gitsync: unexpected show output for %s", sha)
	}
	stat, err := r.git("diff-tree", "--no-commit-id", "--numstat", "-r", "--root", "--no-renames").AddDynamic(sha).String(ctx)
	if err != nil {
		return wire.CheckpointRecord{}, err
	}
	rec := wire.CheckpointFromGit([5]string(f), stat)
	rec.Branch = Branch
	if b, err := r.git("symbolic-ref", "--short", "-q", "HEAD").String(ctx); err == nil && b != "" {
		rec.Branch = b
	}
	return rec, nil
}

// ResetHard resets the work tree and index to HEAD; untracked and ignored
// files are kept (spec 10.1.5).
func (r *Repo) ResetHard(ctx context.Context) error {
	return r.git("reset", "-q", "--hard", "HEAD").Run(ctx)
}

// FsckConnectivity runs git fsck --connectivity-only.
func (r *Repo) FsckConnectivity(ctx context.Context) error {
	return r.git("fsck", "--connectivity-only", "--no-progress").Run(ctx)
}

// ArchiveHEAD streams a tar of HEAD's tree, without node_modules, to w.
// An empty tree (a workspace seeded with no files) gives an empty tar.
func (r *Repo) ArchiveHEAD(ctx context.Context, w interface{ Write([]byte) (int, error) }) error {
	tree, err := r.git("rev-parse", "HEAD^{tree}").String(ctx)
	if err != nil {
		return err
	}
	if strings.TrimSpace(tree) == emptyTree {
		return tar.NewWriter(w).Close()
	}
	return r.git("archive", "--format=tar", "HEAD").
		AddDashesAndList(".", ":(exclude,glob)node_modules/**", ":(exclude,glob)**/node_modules/**").Stdout(w).Run(ctx)
}

// emptyTree is git's id of the tree with no entries.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// GitDir is <Dir>/.git.
func (r *Repo) GitDir() string { return filepath.Join(r.Dir, ".git") }
