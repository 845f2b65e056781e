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
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// Lockfiles, in the order they are looked for.
var Lockfiles = []string{"package-lock.json", "pnpm-lock.yaml", "yarn.lock", "bun.lockb", "bun.lock"}

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
}

// S3Sync is safe for concurrent use; uploads are serialised.
type S3Sync struct {
	opts     Options
	log      *zap.Logger
	suppress atomic.Bool

	mu           sync.Mutex // serialises uploads
	lastDepsHash string
}

// New returns an S3Sync.
func New(opts Options) *S3Sync {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	s := &S3Sync{opts: opts, log: opts.Log.Named("s3sync")}
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
// layer 2 unless suppressed.
func (s *S3Sync) AfterTurn(ctx context.Context) error {
	return s.Flush(ctx, false)
}

// Flush writes layer 1 (if the lockfile changed) and layer 2 (unless
// suppressed and not forced). forceProjectArchive is spec 10.2.4.
func (s *S3Sync) Flush(ctx context.Context, forceProjectArchive bool) error {
	depsErr := s.SyncDeps(ctx)
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
	if hash == s.lastDepsHash {
		return nil
	}
	depsDir := filepath.Join(s.opts.Workspace, DepsDir)
	if fi, err := os.Stat(depsDir); err != nil || !fi.IsDir() {
		return nil // lockfile without installed deps: nothing to upload yet
	}
	key := objstore.DepsKey(hash)
	if _, err := s.opts.Store.Head(ctx, key); err == nil {
		s.lastDepsHash = hash
		return nil
	} else if !errors.Is(err, objstore.ErrNotExist) {
		return fmt.Errorf("s3sync: head %s: %w", key, err)
	}
	err = s.upload(ctx, key, depsDir, archive.CreateOptions{Prefix: DepsDir + "/", SkipVanished: true,
		MemberBytes: archive.DefaultMemberBytes, Level: 1}, objstore.PutOptions{IfNoneMatch: "*"})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		err = nil // another pod uploaded the same content-addressed layer
	}
	if err != nil {
		return err
	}
	s.lastDepsHash = hash
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
	key := objstore.DepsKey(hash)
	rc, _, err := s.opts.Store.Get(ctx, key)
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
	if _, err := ExtractTarGz(rc, staging, archive.ExtractOptions{}); err != nil {
		return false, fmt.Errorf("s3sync: extract %s: %w", key, err)
	}
	if err := os.Rename(filepath.Join(staging, DepsDir), target); err != nil {
		if _, serr := os.Lstat(target); serr == nil {
			return false, nil // node_modules appeared meanwhile (tracked in git): keep it
		}
		return false, fmt.Errorf("s3sync: %s has no %s/: %w", key, DepsDir, err)
	}
	s.mu.Lock()
	s.lastDepsHash = hash
	s.mu.Unlock()
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
	return s.putFile(ctx, objstore.SourceKey(s.opts.ProjectID), f.Name(), objstore.PutOptions{})
}

// ProjectArchiveHead returns the head recorded in project-src.tar.gz ("" if
// none or no object), reading only the first bytes.
func (s *S3Sync) ProjectArchiveHead(ctx context.Context) (string, error) {
	rc, _, err := s.opts.Store.Get(ctx, objstore.SourceKey(s.opts.ProjectID))
	if errors.Is(err, objstore.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(rc, 4096))
	if err != nil {
		return "", nil
	}
	return wire.SourceHead(zr.Header.Comment), nil
}

// RestoreProjectArchive extracts <projectId>/project-src.tar.gz into the
// workspace (cold start in s3 and dual_shadow). It reports whether the
// object existed and the head it records ("" when none).
func (s *S3Sync) RestoreProjectArchive(ctx context.Context) (bool, string, error) {
	key := objstore.SourceKey(s.opts.ProjectID)
	rc, _, err := s.opts.Store.Get(ctx, key)
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
	return true, head, nil
}

// UploadProjectArchive uploads an already built project-src.tar.gz stream
// (the HEAD snapshot of spec 10.2.3).
func (s *S3Sync) UploadProjectArchive(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putFile(ctx, objstore.SourceKey(s.opts.ProjectID), path, objstore.PutOptions{})
}

func (s *S3Sync) upload(ctx context.Context, key, dir string, copts archive.CreateOptions, popts objstore.PutOptions) error {
	f, err := os.CreateTemp(s.opts.TempDir, "s3sync-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = archive.CreateTarGz(f, dir, copts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("s3sync: archive for %s: %w", key, err)
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
	popts.ContentType = "application/gzip"
	if _, err := s.opts.Store.Put(ctx, key, f, fi.Size(), popts); err != nil {
		return fmt.Errorf("s3sync: put %s: %w", key, err)
	}
	return nil
}
