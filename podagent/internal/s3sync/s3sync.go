// Package s3sync is S3Sync, the two object-storage layers of a workspace
// besides .git (spec 2.7, 3.1, 10.1.4):
//
//   - layer 1: node_modules as deps-<hash>.tar.gz, content-addressed by the
//     hash of the lockfile, uploaded only when the lockfile changed (and only
//     if no object has that hash yet), restored at cold start;
//   - layer 2: project-src.tar.gz, the cold-start source tarball of the live
//     work tree. In git_only it is created with suppressProjectArchive true
//     (layer 2 is not written per turn); the degrade machine turns the
//     suppression off and on; forceProjectArchive writes it regardless.
package s3sync

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// Lockfiles, in the order they are looked for.
var Lockfiles = repoarchive.Lockfiles

// DepsDir is the dependency directory of layer 1.
const DepsDir = "node_modules"

// Options configure an S3Sync.
type Options struct {
	Store     objstore.Store
	ProjectID string
	Workspace string
	// TempDir stages archives before upload; empty means os.TempDir().
	TempDir string
	// SuppressProjectArchive is the initial suppression (true in git_only).
	SuppressProjectArchive bool
	Log                    *zap.Logger
	// Exclude, when set, leaves more work-tree files out of layer 2 (the
	// large files offloaded as assets in s3 and dual_shadow).
	Exclude func(rel string) bool
	// Head, when set, names the commit layer 2 is taken at; it is recorded
	// in the archive's gzip comment (wire.SourceHeadComment).
	Head func(ctx context.Context) string
	// StateFile, when set, remembers the ETag of layer 2 as this pod last
	// wrote or restored it across restarts (SourceETag).
	StateFile string
}

// S3Sync is safe for concurrent use; uploads are serialised.
type S3Sync struct {
	opts     Options
	lease    *ownership.Lease
	log      *zap.Logger
	suppress atomic.Bool

	mu       sync.Mutex             // serialises uploads
	srcETag  string                 // guarded by mu: layer 2 as this pod last wrote or restored it
	lastDeps atomic.Pointer[string] // hash of the last deps layer known to exist

	bgCtx     context.Context // background uploads; Close cancels it
	bgCancel  context.CancelFunc
	bgMu      sync.Mutex
	bgRunning bool
	bgAgain   bool
	bgClosed  bool
	bgDone    chan struct{} // closed when the running background upload ends
}

// New returns an S3Sync whose writes lease fences (docs/sync-modes.md
// §11): layer 2 is written conditionally on the version this pod last
// wrote or restored, with the project's ownership checked before and after,
// and a fenced pod uploads no deps layer. The lease is required.
func New(lease *ownership.Lease, opts Options) *S3Sync {
	if lease == nil {
		panic("s3sync: New needs the pod's ownership lease")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	s := &S3Sync{opts: opts, lease: lease, log: opts.Log.Named("s3sync")}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.suppress.Store(opts.SuppressProjectArchive)
	return s
}

// SetSuppressProjectArchive is setSuppressProjectArchive of spec 3.2.
func (s *S3Sync) SetSuppressProjectArchive(v bool) {
	s.suppress.Store(v)
	s.log.Info("suppressProjectArchive", zap.Bool("value", v))
}

// SuppressProjectArchive reports the current suppression.
func (s *S3Sync) SuppressProjectArchive() bool { return s.suppress.Load() }

// AfterTurn is the per-turn S3 write: layer 1 when the lockfile changed,
// in the background (SyncDepsInBackground: a turn is not held up by the
// deps layer), and layer 2 unless suppressed.
func (s *S3Sync) AfterTurn(ctx context.Context) error {
	s.SyncDepsInBackground()
	if s.SuppressProjectArchive() {
		return nil
	}
	return s.WriteProjectArchive(ctx)
}

// SyncDepsInBackground runs SyncDeps on its own goroutine when the
// lockfile's hash differs from the last one handled. At most one
// runs at a time; a call while one runs makes it run once more after, so
// the last lockfile is always looked at. The upload is content-addressed
// and conditional (If-None-Match), so a retry or a race with another pod
// is free; a fenced pod uploads nothing. WaitDeps waits for it; EnsureDeps
// (git-flush, shutdown) makes sure the layer exists.
func (s *S3Sync) SyncDepsInBackground() {
	if hash, err := s.LockfileHash(); err != nil || hash == "" || hash == s.lastHash() {
		return
	}
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return
	}
	if s.bgRunning {
		s.bgAgain = true
		return
	}
	s.bgRunning, s.bgDone = true, make(chan struct{})
	go s.runBackground(s.bgCtx, s.bgDone)
}

func (s *S3Sync) runBackground(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		start := time.Now()
		if err := s.SyncDeps(ctx); err != nil {
			s.log.Warn("background deps layer upload failed (git-flush and shutdown retry it)", zap.Error(err))
		} else {
			s.log.Debug("background deps layer sync done", zap.Duration("took", time.Since(start)))
		}
		s.bgMu.Lock()
		if !s.bgAgain {
			s.bgRunning = false
			s.bgMu.Unlock()
			return
		}
		s.bgAgain = false
		s.bgMu.Unlock()
	}
}

// Close cancels a running background upload and waits for it to end.
func (s *S3Sync) Close() {
	s.bgMu.Lock()
	s.bgClosed = true
	s.bgMu.Unlock()
	s.bgCancel()
	_ = s.WaitDeps(context.Background())
}

// WaitDeps waits for the background deps upload, if one runs.
func (s *S3Sync) WaitDeps(ctx context.Context) error {
	s.bgMu.Lock()
	done, running := s.bgDone, s.bgRunning
	s.bgMu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnsureDeps waits for the background upload and then runs SyncDeps, so
// the deps layer of the current lockfile exists when it returns nil.
func (s *S3Sync) EnsureDeps(ctx context.Context) error {
	if err := s.WaitDeps(ctx); err != nil {
		return err
	}
	return s.SyncDeps(ctx)
}

func (s *S3Sync) lastHash() string {
	if p := s.lastDeps.Load(); p != nil {
		return *p
	}
	return ""
}

func (s *S3Sync) setLastHash(h string) { s.lastDeps.Store(&h) }

// Flush writes layer 1 (if the lockfile changed) and layer 2 (unless
// suppressed and not forced). forceProjectArchive is spec 10.2.4.
func (s *S3Sync) Flush(ctx context.Context, forceProjectArchive bool) error {
	depsErr := s.EnsureDeps(ctx)
	if depsErr != nil {
		s.log.Warn("deps layer upload failed", zap.Error(depsErr))
	}
	if s.SuppressProjectArchive() && !forceProjectArchive {
		return depsErr
	}
	return errors.Join(depsErr, s.WriteProjectArchive(ctx))
}

// LockfileHash returns the sha256 (hex) of the first lockfile found, or ""
// when the workspace has none.
func (s *S3Sync) LockfileHash() (string, error) {
	for _, name := range Lockfiles {
		f, err := os.Open(filepath.Join(s.opts.Workspace, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	return "", nil
}

// SyncDeps uploads node_modules as deps-<hash>.tar.gz when the lockfile's
// hash differs from the last one handled and no object has that key yet.
func (s *S3Sync) SyncDeps(ctx context.Context) error {
	hash, err := s.LockfileHash()
	if err != nil || hash == "" {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hash == s.lastHash() {
		return nil
	}
	if s.lease.Fenced() {
		return nil // another pod owns the project
	}
	depsDir := filepath.Join(s.opts.Workspace, DepsDir)
	if fi, err := os.Stat(depsDir); err != nil || !fi.IsDir() {
		return nil // lockfile without installed deps: nothing to upload yet
	}
	// Either form of the layer will do (content-addressed); pods write
	// zstd (docs/performance.md) and still read the gzip form.
	key := objstore.DepsKeyZstd(hash)
	for _, k := range []string{key, objstore.DepsKey(hash)} {
		if _, err := s.opts.Store.Head(ctx, k); err == nil {
			s.setLastHash(hash)
			return nil
		} else if !errors.Is(err, objstore.ErrNotExist) {
			return fmt.Errorf("s3sync: head %s: %w", k, err)
		}
	}
	// The layer is keyed by the lockfile: if the lockfile changed while
	// node_modules was being archived (an install running), the archive may
	// mix two installs and is not uploaded under either key.
	err = s.uploadIf(ctx, key, depsDir, archive.CreateOptions{Prefix: DepsDir + "/", SkipVanished: true},
		objstore.PutOptions{IfNoneMatch: "*"}, func() error {
			if now, err := s.LockfileHash(); err != nil || now != hash {
				return fmt.Errorf("%w (lockfile changed while node_modules was archived)", errDepsChanged)
			}
			return nil
		})
	if errors.Is(err, errDepsChanged) {
		s.log.Info("deps layer not uploaded: the lockfile changed meanwhile", zap.String("key", key))
		return nil // the next turn (or flush) handles the new lockfile
	}
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		err = nil // another pod uploaded the same content-addressed layer
	}
	if err != nil {
		return err
	}
	s.setLastHash(hash)
	s.log.Info("deps layer uploaded", zap.String("key", key))
	return nil
}

// RestoreDeps extracts deps-<hash>.tar.gz into the workspace when the
// workspace has a lockfile and no node_modules. It reports whether it did.
func (s *S3Sync) RestoreDeps(ctx context.Context) (bool, error) {
	hash, err := s.LockfileHash()
	if err != nil || hash == "" {
		return false, err
	}
	return s.RestoreDepsHash(ctx, hash)
}

// RestoreDepsHash extracts deps-<hash>.tar.gz into the workspace unless
// node_modules is already there. Cold start calls it with the hash of
// HEAD's lockfile, in parallel with the work-tree reset. The archive is
// streamed: download, gunzip and extraction overlap (read-ahead buffers
// between the stages), and it lands in a staging directory that is renamed
// into place, so a crash never leaves half a node_modules.
func (s *S3Sync) RestoreDepsHash(ctx context.Context, hash string) (bool, error) {
	target := filepath.Join(s.opts.Workspace, DepsDir)
	if _, err := os.Lstat(target); err == nil {
		return false, nil // installed locally; SyncDeps uploads it if the layer is missing
	}
	key, extract := objstore.DepsKeyZstd(hash), ExtractTarZstd
	rc, _, err := s.opts.Store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) { // a layer written before zstd
		key, extract = objstore.DepsKey(hash), ExtractTarGz
		rc, _, err = s.opts.Store.Get(ctx, key)
	}
	if errors.Is(err, objstore.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("s3sync: get %s: %w", key, err)
	}
	defer rc.Close()
	staging, err := os.MkdirTemp(s.opts.Workspace, ".deps-restoring-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(staging)
	if _, err := extract(rc, staging, archive.ExtractOptions{}); err != nil {
		return false, fmt.Errorf("s3sync: extract %s: %w", key, err)
	}
	if err := os.Rename(filepath.Join(staging, DepsDir), target); err != nil {
		if _, serr := os.Lstat(target); serr == nil {
			return false, nil // node_modules appeared meanwhile (tracked in git): keep it
		}
		return false, fmt.Errorf("s3sync: %s has no %s/: %w", key, DepsDir, err)
	}
	s.setLastHash(hash)
	return true, nil
}

// WriteProjectArchive uploads a tar.gz of the live work tree (without .git
// and node_modules) as <projectId>/project-src.tar.gz.
func (s *S3Sync) WriteProjectArchive(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	excl := func(rel string, d fs.DirEntry) bool {
		if rel == ".git" || rel == DepsDir || rel == ".git.restoring" {
			return true
		}
		return s.opts.Exclude != nil && !d.IsDir() && s.opts.Exclude(rel)
	}
	head := ""
	if s.opts.Head != nil {
		head = s.opts.Head(ctx)
	}
	f, err := os.CreateTemp(s.opts.TempDir, "s3sync-src-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	zw := gzip.NewWriter(f)
	zw.Header.Comment = wire.SourceHeadComment(head)
	_, err = archive.CreateTar(zw, s.opts.Workspace, archive.CreateOptions{Exclude: excl, SkipVanished: true})
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("s3sync: archive for %s: %w", objstore.SourceKey(s.opts.ProjectID), err)
	}
	return s.putSourceLocked(ctx, f.Name())
}

// putSourceLocked writes layer 2 from the file at path, fenced by the
// lease. s.mu is held.
func (s *S3Sync) putSourceLocked(ctx context.Context, path string) error {
	key := objstore.SourceKey(s.opts.ProjectID)
	info, err := s.lease.Put(ctx, s.opts.Store, key, s.srcETag, ownership.FileBody(path), objstore.PutOptions{ContentType: "application/gzip"})
	if err != nil {
		if errors.Is(err, ownership.ErrFenced) {
			return err
		}
		return fmt.Errorf("s3sync: put %s: %w", key, err)
	}
	s.setSourceETagLocked(info.ETag)
	return nil
}

// setSourceETagLocked remembers layer 2's ETag (s.mu held).
func (s *S3Sync) setSourceETagLocked(etag string) {
	s.srcETag = etag
	if s.opts.StateFile == "" {
		return
	}
	err := os.MkdirAll(filepath.Dir(s.opts.StateFile), 0o755)
	if err == nil {
		err = atomicfile.Write(s.opts.StateFile, []byte(etag), 0o600)
	}
	if err != nil {
		s.log.Warn("saving the ETag of layer 2", zap.Error(err))
	}
}

// SourceETag returns the ETag of layer 2 as this pod (or this disk's last
// pod) last wrote or restored it; "" when unknown.
func (s *S3Sync) SourceETag() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srcETag == "" && s.opts.StateFile != "" {
		if b, err := os.ReadFile(s.opts.StateFile); err == nil {
			s.srcETag = string(b)
		}
	}
	return s.srcETag
}

// ProjectArchiveHead returns the head recorded in project-src.tar.gz ("" if
// none or no object), reading only the first bytes.
func (s *S3Sync) ProjectArchiveHead(ctx context.Context) (string, error) {
	head, _, err := s.ProjectArchiveInfo(ctx)
	return head, err
}

// ProjectArchiveInfo is ProjectArchiveHead with the object's ETag ("" when
// there is no object).
func (s *S3Sync) ProjectArchiveInfo(ctx context.Context) (head, etag string, err error) {
	rc, info, err := s.opts.Store.Get(ctx, objstore.SourceKey(s.opts.ProjectID))
	if errors.Is(err, objstore.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(rc, 4096))
	if err != nil {
		return "", info.ETag, nil
	}
	return wire.SourceHead(zr.Header.Comment), info.ETag, nil
}

// RestoreProjectArchive extracts <projectId>/project-src.tar.gz into the
// workspace (cold start in s3 and dual_shadow). It reports whether the
// object existed and the head it records ("" when none).
func (s *S3Sync) RestoreProjectArchive(ctx context.Context) (bool, string, error) {
	key := objstore.SourceKey(s.opts.ProjectID)
	rc, info, err := s.opts.Store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("s3sync: get %s: %w", key, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return false, "", fmt.Errorf("s3sync: %s: %w", key, err)
	}
	defer zr.Close()
	head := wire.SourceHead(zr.Header.Comment)
	if _, err := archive.ExtractTar(zr, s.opts.Workspace, archive.ExtractOptions{}); err != nil {
		return false, "", fmt.Errorf("s3sync: extract %s: %w", key, err)
	}
	s.mu.Lock()
	s.setSourceETagLocked(info.ETag)
	s.mu.Unlock()
	return true, head, nil
}

// UploadProjectArchive uploads an already built project-src.tar.gz stream
// (the HEAD snapshot of spec 10.2.3).
func (s *S3Sync) UploadProjectArchive(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putSourceLocked(ctx, path)
}

// errDepsChanged: the lockfile changed during a deps archive.
var errDepsChanged = errors.New("s3sync: deps changed")

// uploadIf archives dir, then calls check (when set) before the PUT; an
// error from check cancels the upload.
func (s *S3Sync) uploadIf(ctx context.Context, key, dir string, copts archive.CreateOptions, popts objstore.PutOptions, check func() error) error {
	f, err := os.CreateTemp(s.opts.TempDir, "s3sync-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	create, ctype := archive.CreateTarGz, "application/gzip"
	if strings.HasSuffix(key, ".zst") {
		create, ctype = archive.CreateTarZstd, "application/zstd"
	}
	popts.ContentType = ctype
	_, err = create(f, dir, copts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("s3sync: archive for %s: %w", key, err)
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return s.putFile(ctx, key, f.Name(), popts)
}

func (s *S3Sync) putFile(ctx context.Context, key, path string, popts objstore.PutOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if popts.ContentType == "" {
		popts.ContentType = "application/gzip"
	}
	if _, err := s.opts.Store.Put(ctx, key, f, fi.Size(), popts); err != nil {
		return fmt.Errorf("s3sync: put %s: %w", key, err)
	}
	return nil
}
