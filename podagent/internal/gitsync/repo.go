package gitsync

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/repoarchive"
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

	mu sync.Mutex // the repository lock: stage+commit, a tag, the .git snapshot, a repack

	lockMu   sync.Mutex
	lockBlob string // blob id of the lockfile last hashed
	lockHash string // its sha256
}

// Lock takes the repository lock (the "one lock around commit + snapshot"
// of docs/design.md §6): the engine holds it around stage+commit and a
// tag, the sync mode around its .git snapshot, so a snapshot never sees a
// half-written commit.
func (r *Repo) Lock() { r.mu.Lock() }

// Unlock releases the repository lock.
func (r *Repo) Unlock() { r.mu.Unlock() }

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
// repack while a snapshot may run; the pod packs itself, see Repack), no
// hooks, no signing, stable output. The whole .git/config is written in one
// atomic write (ten `git config` processes took 50-65 ms of every
// cold start); whatever a restored config held is dropped (only its object
// format is kept), so nothing from it can run a command. Settings added later (the large-file filter) are
// written after this.
func (r *Repo) Configure(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path := filepath.Join(r.GitDir(), "config")
	format, err := repoarchive.ObjectFormat(r.GitDir()) // the one thing carried over
	if err != nil {
		return fmt.Errorf("gitsync: %w", err)
	}
	return atomicfile.Write(path, []byte(r.configText(format == "sha256")), 0o644)
}

// configText is the pod's .git/config (git init's core settings plus ours).
func (r *Repo) configText(sha256 bool) string {
	var b strings.Builder
	version := "0"
	if sha256 {
		version = "1"
	}
	b.WriteString("[core]\n\trepositoryformatversion = " + version + "\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n" +
		"\thooksPath = /dev/null\n\tautocrlf = false\n\tquotePath = false\n" +
		"[gc]\n\tauto = 0\n\tautoDetach = false\n" +
		"[maintenance]\n\tauto = false\n" +
		"[commit]\n\tgpgSign = false\n" +
		"[tag]\n\tgpgSign = false\n" +
		"[user]\n")
	fmt.Fprintf(&b, "\tname = %s\n\temail = %s\n", configQuote(r.Author.Name), configQuote(r.Author.Email))
	if sha256 {
		b.WriteString("[extensions]\n\tobjectformat = sha256\n")
	}
	return b.String()
}

// configQuote writes v as a git config value: double-quoted, with
// backslash, quote and control characters escaped (newlines cannot be
// represented and become spaces).
func configQuote(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range v {
		switch {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
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
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := smudgeTar(pr, w, filepath.Join(r.GitDir(), "lfs", "objects"))
		pr.CloseWithError(err)
		done <- err
	}()
	err = r.git("archive", "--format=tar", "HEAD").
		AddDashesAndList(".", ":(exclude,glob)node_modules/**", ":(exclude,glob)**/node_modules/**").Stdout(pw).Run(ctx)
	pw.CloseWithError(err)
	if serr := <-done; err == nil {
		err = serr
	}
	return err
}

// emptyTree is git's id of the tree with no entries.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// GitDir is <Dir>/.git.
func (r *Repo) GitDir() string { return filepath.Join(r.Dir, ".git") }

// LockfileHash is s3sync.LockfileHash of HEAD's tree: the sha256 (hex) of
// the first of repoarchive.Lockfiles that HEAD holds at its root, or "" (also
// for an unborn HEAD). It is the deps-layer key of HEAD, read from the
// object database, so it needs no work tree; the hash of the last blob seen
// is cached, so an unchanged lockfile costs one ls-tree.
func (r *Repo) LockfileHash(ctx context.Context) (string, error) {
	out, err := r.git("ls-tree", "-z", "HEAD").AddDashesAndList(repoarchive.Lockfiles...).Output(ctx)
	if err != nil {
		if head, herr := r.Head(ctx); herr == nil && head == "" {
			return "", nil
		}
		return "", err
	}
	blobs := map[string]string{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 && f[1] == "blob" {
			blobs[name] = f[2]
		}
	}
	for _, name := range repoarchive.Lockfiles {
		oid, ok := blobs[name]
		if !ok {
			continue
		}
		r.lockMu.Lock()
		if r.lockBlob == oid {
			h := r.lockHash
			r.lockMu.Unlock()
			return h, nil
		}
		r.lockMu.Unlock()
		h := sha256.New()
		if err := r.git("cat-file", "blob").AddDynamic(oid).Stdout(h).Run(ctx); err != nil {
			return "", err
		}
		sum := hex.EncodeToString(h.Sum(nil))
		r.lockMu.Lock()
		r.lockBlob, r.lockHash = oid, sum
		r.lockMu.Unlock()
		return sum, nil
	}
	return "", nil
}

// LooseObjects counts the loose objects of the repository.
func (r *Repo) LooseObjects() (int, error) {
	objects := filepath.Join(r.GitDir(), "objects")
	dirs, err := os.ReadDir(objects)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range dirs {
		if name := d.Name(); !d.IsDir() || len(name) != 2 || !isHex(name) {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(objects, d.Name()))
		if err != nil {
			return 0, err
		}
		n += len(entries)
	}
	return n, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// maxPacks is the pack count past which Repack packs everything into one.
const maxPacks = 16

// Repack packs the loose objects into a new pack and deletes them (git
// repack -d); once there are more than maxPacks packs it packs everything
// into one (-a -d). No object is dropped: unreachable loose objects are
// packed too (no -l, no prune). It returns the number of packs after.
func (r *Repo) Repack(ctx context.Context) (int, error) {
	cmd := r.git("repack", "-d", "-q", "--no-write-bitmap-index")
	if packs, err := r.Packs(); err == nil && packs >= maxPacks {
		cmd = r.git("repack", "-a", "-d", "-q", "--no-write-bitmap-index")
	}
	if err := cmd.Run(ctx); err != nil {
		return 0, err
	}
	return r.Packs()
}

// Packs counts the pack files of the repository.
func (r *Repo) Packs() (int, error) {
	m, err := filepath.Glob(filepath.Join(r.GitDir(), "objects", "pack", "*.pack"))
	return len(m), err
}
