// Package assets is the large-file handling of s3 and dual_shadow (spec
// 10.3, 2.7 "<projectId>/assets/<relpath>"): files over LARGE_FILE_BYTES
// are listed in a managed block of .git/info/exclude (the user's
// .gitignore is untouched), so git never commits them; each is uploaded to
// <projectId>/assets/<relpath> when new or changed, and the keys of files
// that were removed are deleted. Cold start downloads every asset. In
// git_only the same objects are the legacy offload that migrates lazily to
// git-lfs (Adopt, then the next turn tracks the files; Prune afterwards).
//
// Offloaded files are latest-only: they do not appear in the graph or diff.
package assets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/objstore"
)

// Markers of the managed block in .git/info/exclude.
const (
	blockBegin = "# >>> svc: large files offloaded to <projectId>/assets/ (managed, do not edit)"
	blockEnd   = "# <<< svc"
)

// Options configure Assets.
type Options struct {
	Store     objstore.Store
	ProjectID string
	Workspace string
	Threshold int64
	// StateFile remembers what was uploaded (size, mtime, sha256 per path).
	StateFile string
	// Untrack drops paths from git's index (kept on disk): a file that
	// grew over the threshold, or came from a git_only history, is tracked
	// and an exclude does not apply to tracked files.
	Untrack func(ctx context.Context, paths []string) error
	Log     *zap.Logger
}

type fileState struct {
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime"`
	SHA256  string `json:"sha256"`
	// ETag of the stored object as this pod last wrote or restored it.
	ETag string `json:"etag,omitempty"`
}

// Assets is safe for concurrent use; its operations are serialised.
type Assets struct {
	o     Options
	lease *ownership.Lease
	log   *zap.Logger

	mu      sync.Mutex
	state   map[string]fileState // relpath → last uploaded
	current map[string]bool      // relpaths excluded by the last scan
}

// New returns the asset handling of o.Workspace. The lease fences every upload and delete (docs/sync-modes.md §10, §11):
// uploads are conditional on the version this pod last wrote or restored,
// with the project's ownership checked before and after. It is required.
func New(lease *ownership.Lease, o Options) *Assets {
	if lease == nil {
		panic("assets: New needs the pod's ownership lease")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	a := &Assets{o: o, lease: lease, log: o.Log.Named("assets"), state: map[string]fileState{}, current: map[string]bool{}}
	if b, err := os.ReadFile(o.StateFile); err == nil {
		_ = json.Unmarshal(b, &a.state)
	}
	return a
}

// prefix is <projectId>/assets/.
func (a *Assets) prefix() string { return objstore.AssetKey(a.o.ProjectID, "") }

// skipDir reports the directories never scanned.
func skipDir(rel string) bool {
	return rel == ".git" || rel == "node_modules" || rel == ".git.restoring" || strings.HasPrefix(rel, ".deps-restoring-")
}

// withScan runs f, under a.mu, on a fresh scan of the large files.
func (a *Assets) withScan(f func(files map[string]fs.FileInfo) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	files, err := a.rescanLocked()
	if err != nil {
		return err
	}
	return f(files)
}

// rescanLocked scans the work tree and makes its large files the current
// set.
func (a *Assets) rescanLocked() (map[string]fs.FileInfo, error) {
	files, err := a.scan()
	if err != nil {
		return nil, err
	}
	a.current = make(map[string]bool, len(files))
	for rel := range files {
		a.current[rel] = true
	}
	return files, nil
}

// scan lists the regular files over the threshold, slash-separated.
func (a *Assets) scan() (map[string]fs.FileInfo, error) {
	out := map[string]fs.FileInfo{}
	err := filepath.WalkDir(a.o.Workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(a.o.Workspace, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // vanished
		}
		if fi.Size() > a.o.Threshold {
			out[rel] = fi
		}
		return nil
	})
	return out, err
}

// IsOffloaded reports whether rel was excluded by the last scan (layer 2
// leaves those files out).
func (a *Assets) IsOffloaded(rel string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.current[rel]
}

// TrackLarge runs before each stage: it rewrites the managed exclude block
// with the files over the threshold, so git leaves them out of the commit.
// (The name matches gitsync.LargeFiles.)
func (a *Assets) TrackLarge(ctx context.Context) error {
	return a.withScan(func(files map[string]fs.FileInfo) error {
		rels := make([]string, 0, len(files))
		for rel := range files {
			rels = append(rels, rel)
		}
		if err := a.writeExcludeLocked(); err != nil {
			return err
		}
		if a.o.Untrack != nil && len(rels) > 0 {
			sort.Strings(rels)
			return a.o.Untrack(ctx, rels)
		}
		return nil
	})
}

// Push uploads new and changed large files and deletes the keys of files
// that are gone (the per-turn asset write; gitsync.LargeFiles).
func (a *Assets) Push(ctx context.Context) error {
	return a.withScan(func(files map[string]fs.FileInfo) error {
		var errs []error
		for rel, fi := range files {
			st, ok := a.state[rel]
			if ok && st.Size == fi.Size() && st.ModTime == fi.ModTime().UnixNano() {
				continue
			}
			sum, etag, err := a.upload(ctx, rel, fi.Size(), st.ETag)
			if errors.Is(err, ownership.ErrFenced) {
				return err
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			a.state[rel] = fileState{Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), SHA256: sum, ETag: etag}
			a.log.Info("asset uploaded", zap.String("key", objstore.AssetKey(a.o.ProjectID, rel)), zap.Int64("bytes", fi.Size()))
		}
		// Prune: every stored key whose file is gone.
		var stale []string
		err := a.o.Store.List(ctx, a.prefix(), func(oi objstore.ObjectInfo) error {
			rel := strings.TrimPrefix(oi.Key, a.prefix())
			if !a.current[rel] {
				stale = append(stale, rel)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("assets: list: %w", err))
		}
		for _, rel := range stale {
			if err := a.delete(ctx, objstore.AssetKey(a.o.ProjectID, rel)); err != nil {
				if errors.Is(err, ownership.ErrFenced) {
					return err
				}
				errs = append(errs, err)
				continue
			}
			delete(a.state, rel)
			a.log.Info("asset pruned", zap.String("key", objstore.AssetKey(a.o.ProjectID, rel)))
		}
		for rel := range a.state {
			if !a.current[rel] {
				delete(a.state, rel)
			}
		}
		errs = append(errs, a.saveLocked())
		return errors.Join(errs...)
	})
}

func (a *Assets) upload(ctx context.Context, rel string, size int64, prev string) (string, string, error) {
	path := filepath.Join(a.o.Workspace, filepath.FromSlash(rel))
	key := objstore.AssetKey(a.o.ProjectID, rel)
	h := sha256.New()
	var body ownership.Body = func() (io.ReadCloser, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		h.Reset()
		return struct {
			io.Reader
			io.Closer
		}{io.TeeReader(f, h), f}, size, nil
	}
	opts := objstore.PutOptions{ContentType: "application/octet-stream"}
	var info objstore.ObjectInfo
	var err error
	info, err = a.lease.Put(ctx, a.o.Store, key, prev, body, opts)
	if errors.Is(err, ownership.ErrFenced) {
		return "", "", err
	}
	if err != nil {
		return "", "", fmt.Errorf("assets: put %s: %w", rel, err)
	}
	return hex.EncodeToString(h.Sum(nil)), info.ETag, nil
}

// delete deletes key, after the ownership check.
func (a *Assets) delete(ctx context.Context, key string) error {
	return a.lease.Delete(ctx, a.o.Store, key)
}

// Restore downloads every asset that is not in the work tree yet (cold
// start) and writes the exclude block. It returns the paths it wrote.
func (a *Assets) Restore(ctx context.Context) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var keys []objstore.ObjectInfo
	if err := a.o.Store.List(ctx, a.prefix(), func(oi objstore.ObjectInfo) error {
		keys = append(keys, oi)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("assets: list: %w", err)
	}
	root, err := os.OpenRoot(a.o.Workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var wrote []string
	for _, oi := range keys {
		rel := strings.TrimPrefix(oi.Key, a.prefix())
		if !validRel(rel) {
			a.log.Warn("asset key with an unsafe path skipped", zap.String("key", oi.Key))
			continue
		}
		a.current[rel] = true
		if fi, err := root.Lstat(filepath.FromSlash(rel)); err == nil && fi.Size() == oi.Size {
			continue
		}
		if err := a.download(ctx, root, oi.Key, rel); err != nil {
			return wrote, err
		}
		wrote = append(wrote, rel)
		if fi, err := root.Lstat(filepath.FromSlash(rel)); err == nil {
			a.state[rel] = fileState{Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), ETag: oi.ETag}
		}
	}
	sort.Strings(wrote)
	return wrote, errors.Join(a.writeExcludeLocked(), a.saveLocked())
}

func (a *Assets) download(ctx context.Context, root *os.Root, key, rel string) error {
	rc, _, err := a.o.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("assets: get %s: %w", key, err)
	}
	defer rc.Close()
	if err := atomicfile.WriteIn(root, filepath.FromSlash(rel), rc, 0o644); err != nil {
		return fmt.Errorf("assets: write %s: %w", rel, err)
	}
	return nil
}

// Keys lists the stored asset paths.
func (a *Assets) Keys(ctx context.Context) ([]string, error) {
	var out []string
	err := a.o.Store.List(ctx, a.prefix(), func(oi objstore.ObjectInfo) error {
		out = append(out, strings.TrimPrefix(oi.Key, a.prefix()))
		return nil
	})
	return out, err
}

// Delete removes the stored asset of rel (after its migration to git-lfs).
func (a *Assets) Delete(ctx context.Context, rel string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.state, rel)
	delete(a.current, rel)
	if err := a.delete(ctx, objstore.AssetKey(a.o.ProjectID, rel)); err != nil {
		return err
	}
	a.log.Info("legacy asset migrated to git-lfs; key deleted", zap.String("key", objstore.AssetKey(a.o.ProjectID, rel)))
	return a.saveLocked()
}

// ClearExclude removes the managed block (git_only: the files go to
// git-lfs instead).
func (a *Assets) ClearExclude() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.current = map[string]bool{}
	return a.writeExcludeLocked()
}

func (a *Assets) excludePath() string {
	return filepath.Join(a.o.Workspace, ".git", "info", "exclude")
}

// writeExcludeLocked replaces the managed block with a.current, keeping
// every other line of the file.
func (a *Assets) writeExcludeLocked() error {
	p := a.excludePath()
	old, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var keep []string
	in := false
	for _, line := range strings.Split(strings.TrimRight(string(old), "\n"), "\n") {
		switch {
		case line == blockBegin:
			in = true
		case line == blockEnd && in:
			in = false
		case !in && line != "":
			keep = append(keep, line)
		case !in:
			keep = append(keep, line)
		}
	}
	for len(keep) > 0 && keep[len(keep)-1] == "" {
		keep = keep[:len(keep)-1]
	}
	if len(a.current) > 0 {
		rels := make([]string, 0, len(a.current))
		for rel := range a.current {
			rels = append(rels, rel)
		}
		sort.Strings(rels)
		keep = append(keep, blockBegin)
		for _, rel := range rels {
			keep = append(keep, Pattern(rel))
		}
		keep = append(keep, blockEnd)
	}
	out := strings.Join(keep, "\n")
	if out != "" {
		out += "\n"
	}
	if out == string(old) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(p, []byte(out), 0o644)
}

// Pattern is the gitignore pattern that matches exactly the file rel:
// anchored with a leading slash, wildcard and special characters escaped.
func Pattern(rel string) string {
	var b strings.Builder
	b.WriteByte('/')
	for i, r := range rel {
		switch r {
		case '\\', '*', '?', '[', ']':
			b.WriteByte('\\')
		case ' ':
			if i == len(rel)-1 {
				b.WriteByte('\\')
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

// validRel refuses a stored key that would escape the work tree or write
// into .git.
func validRel(rel string) bool {
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || strings.ContainsAny(rel, "\\\x00") {
		return false
	}
	first, _, _ := strings.Cut(rel, "/")
	return first != ".." && first != ".git" && !strings.HasPrefix(rel, "../")
}

func (a *Assets) saveLocked() error {
	if a.o.StateFile == "" {
		return nil
	}
	b, err := json.Marshal(a.state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(a.o.StateFile), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(a.o.StateFile, b, 0o644)
}
