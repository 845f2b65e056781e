// Package fs is the directory backend of objstore.Store (spec 2.7, "Durable
// objects in object storage"): the embedded default of `make run`, and the
// store two podagent processes on one machine may share.
//
// Layout under the root directory:
//
//	objects/<key>   one file per object: a fixed 512-byte header (ETag, size,
//	                content type) followed by the content
//	.tmp/           temp files of Puts in flight (same filesystem, so the
//	                final rename is atomic)
//	.locks/NN       striped flock files that serialise check-and-rename of
//	                conditional Puts across processes
//
// A Put writes the whole content to a temp file while hashing it, stores the
// MD5 (the S3-like ETag) in the header, fsyncs, then takes the key's flock,
// checks IfMatch/IfNoneMatch and renames into place. Head reads the header
// only. Presigned URLs (spec 4.3, LFS batch) are HMAC-signed links served by
// Handler.
package fs

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/objstore"
)

const (
	objectsDir = "objects"
	tmpDir     = ".tmp"
	locksDir   = ".locks"
	// staleTemp is the age after which New removes leftover temp files of
	// crashed writers.
	staleTemp = time.Hour
)

// Options configure a Store. All fields are optional.
type Options struct {
	// BaseURL is the public URL under which Handler is mounted, for
	// example "http://127.0.0.1:8080/objects". Without it PresignGet and
	// PresignPut return ErrNoBaseURL.
	BaseURL string
	// SigningKey is the HMAC key of presigned URLs. It is required when
	// BaseURL is set.
	SigningKey []byte
	// MaxPutBytes bounds the body of a presigned PUT (default 5 GiB).
	MaxPutBytes int64
	// Now is the clock of presigned URLs (default time.Now).
	Now func() time.Time
	// Logger receives warnings (default: no logs).
	Logger *zap.Logger
}

// ErrNoBaseURL is returned by PresignGet and PresignPut of a Store built
// without Options.BaseURL.
var ErrNoBaseURL = errors.New("objstore/fs: presigned URLs need a public base URL (Options.BaseURL)")

// Store is a directory-backed objstore.Store. It is safe for concurrent use
// by goroutines and by processes sharing the directory.
type Store struct {
	root    string
	objects string
	tmp     string
	locks   string
	opts    Options
	log     *zap.Logger
}

var _ objstore.Store = (*Store)(nil)

func init() {
	objstore.Register(objstore.FS, func(_ context.Context, c objstore.Config) (objstore.Store, error) {
		return New(c.Dir, Options{BaseURL: c.BaseURL, SigningKey: c.SigningKey, Logger: c.Logger})
	})
}

// New opens (creating if needed) a store rooted at dir.
func New(dir string, opts Options) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore/fs: root %q: %w", dir, err)
	}
	if opts.BaseURL != "" && len(opts.SigningKey) == 0 {
		return nil, errors.New("objstore/fs: Options.BaseURL needs Options.SigningKey")
	}
	if opts.MaxPutBytes <= 0 {
		opts.MaxPutBytes = 5 << 30 // no settings.PositiveOr: settings sits above objstore
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	s := &Store{
		root:    root,
		objects: filepath.Join(root, objectsDir),
		tmp:     filepath.Join(root, tmpDir),
		locks:   filepath.Join(root, locksDir),
		opts:    opts,
		log:     opts.Logger,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("objstore.fs")
	for _, d := range []string{s.objects, s.tmp, s.locks} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("objstore/fs: create %s: %w", d, err)
		}
	}
	s.removeStaleTemps()
	return s, nil
}

// Root returns the absolute root directory.
func (s *Store) Root() string { return s.root }

// path resolves a key to its object file. The key is validated first, and
// the result is checked to lie inside the objects directory.
func (s *Store) path(key string) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q", err, key)
	}
	p := filepath.Join(s.objects, filepath.FromSlash(key))
	if !strings.HasPrefix(p, s.objects+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q escapes the root", objstore.ErrInvalidKey, key)
	}
	return p, nil
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if len(opts.ContentType) > maxContentType {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: content type longer than %d bytes", maxContentType)
	}
	tmp, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h, err := writeObject(ctx, tmp, r, size, opts.ContentType)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
	}

	unlock, err := s.lock(key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer unlock()
	if opts.IfMatch != "" || opts.IfNoneMatch != "" {
		cur, err := readHeaderFile(p)
		exists := err == nil
		if err != nil && !errors.Is(err, objstore.ErrNotExist) {
			return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
		}
		if !preconditionHolds(opts, exists, cur.etag()) {
			return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, objstore.ErrPreconditionFailed)
		}
	}
	if err := s.rename(tmp.Name(), p); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
	}
	committed = true
	fi, err := os.Stat(p)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: put %q: %w", key, err)
	}
	return h.info(key, fi.ModTime()), nil
}

// preconditionHolds applies S3's conditional-write rules.
func preconditionHolds(opts objstore.PutOptions, exists bool, etag string) bool {
	if opts.IfMatch != "" {
		if !exists || (opts.IfMatch != "*" && opts.IfMatch != etag) {
			return false
		}
	}
	if opts.IfNoneMatch != "" && exists {
		if opts.IfNoneMatch == "*" || opts.IfNoneMatch == etag {
			return false
		}
	}
	return true
}

// writeObject writes header placeholder, content and then the real header
// to f, and fsyncs it.
func writeObject(ctx context.Context, f *os.File, r io.Reader, size int64, contentType string) (header, error) {
	if _, err := f.Write(make([]byte, headerSize)); err != nil {
		return header{}, err
	}
	sum := md5.New()
	n, err := io.Copy(io.MultiWriter(f, sum), ctxReader{ctx, r})
	if err != nil {
		return header{}, err
	}
	if size >= 0 && n != size {
		return header{}, fmt.Errorf("read %d bytes, want %d", n, size)
	}
	h := header{size: n, contentType: contentType}
	copy(h.md5[:], sum.Sum(nil))
	if _, err := f.WriteAt(h.marshal(), 0); err != nil {
		return header{}, err
	}
	return h, f.Sync()
}

// rename moves a finished temp file into place, creating parent
// directories. A concurrent Delete may prune a parent between MkdirAll and
// Rename, so it retries a few times.
func (s *Store) rename(tmp, p string) error {
	dir := filepath.Dir(p)
	var err error
	for range 5 {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err = os.Rename(tmp, p); err == nil {
			return syncDir(dir)
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, objstore.ObjectInfo, error) {
	f, info, err := s.open(key)
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return &objectReader{SectionReader: newSection(f, info.Size), f: f}, info, nil
}

// newSection is the content of an open object file.
func newSection(f *os.File, size int64) *io.SectionReader {
	return io.NewSectionReader(f, headerSize, size)
}

// open opens the object file of key and reads its header. The open file
// keeps reading the version it opened even if a Put replaces it.
func (s *Store) open(key string) (*os.File, objstore.ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: get %q: %w", key, mapNotExist(err))
	}
	h, fi, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, objstore.ObjectInfo{}, fmt.Errorf("objstore/fs: get %q: %w", key, err)
	}
	return f, h.info(key, fi.ModTime()), nil
}

type objectReader struct {
	*io.SectionReader
	f *os.File
}

func (o *objectReader) Close() error { return o.f.Close() }

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	f, info, err := s.open(key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	f.Close()
	return info, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	unlock, err := s.lock(key)
	if err != nil {
		return err
	}
	defer unlock()
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return nil // a "directory" is not an object
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(mapNotExist(err), objstore.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("objstore/fs: delete %q: %w", key, err)
	}
	// Prune now-empty parents; Remove fails harmlessly on a non-empty one.
	for dir := filepath.Dir(p); dir != s.objects; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// mapNotExist turns "no such file", "not a directory" (a parent is an
// object) and "is a directory" (the key is a prefix of others) into
// objstore.ErrNotExist.
func mapNotExist(err error) error {
	if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) {
		return fmt.Errorf("%w (%v)", objstore.ErrNotExist, err)
	}
	return err
}

func (s *Store) removeStaleTemps() {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && time.Since(fi.ModTime()) > staleTemp {
			if err := os.Remove(filepath.Join(s.tmp, e.Name())); err == nil {
				s.log.Info("removed stale temp file", zap.String("name", e.Name()))
			}
		}
	}
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// etagHex formats an MD5 as S3 does, without quotes.
func etagHex(sum [md5.Size]byte) string { return hex.EncodeToString(sum[:]) }
