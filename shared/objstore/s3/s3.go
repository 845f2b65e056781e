// Package s3 is the S3 backend of objstore.Store (spec 2.7, "Durable objects
// in object storage"), for MinIO or any S3, through minio-go v7. Conditional
// Puts use If-Match / If-None-Match (MinIO and S3 both honour them on
// PutObject and CompleteMultipartUpload); presigned URLs (spec 4.3, LFS batch)
// come from minio-go's V4 presigner.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/svc-dev/svc/shared/objstore"
)

// DefaultPartSize is the multipart part size of a Put of unknown length. A
// Put of unknown length that fits in one part is sent as a single PUT.
const DefaultPartSize = 16 << 20

// Config is the connection of a Store.
type Config struct {
	Endpoint  string // host:port, without scheme
	Bucket    string
	AccessKey string
	SecretKey string
	UseSSL    bool
	Region    string
	// CreateBucket makes New create the bucket when it does not exist.
	CreateBucket bool
	// PartSize overrides DefaultPartSize (minimum 5 MiB).
	PartSize uint64
	// Transport overrides the HTTP transport (tests, custom CAs).
	Transport http.RoundTripper
}

// Store is an S3 bucket as an objstore.Store.
type Store struct {
	client   *minio.Client
	bucket   string
	partSize uint64
	cfg      Config
}

var _ objstore.Store = (*Store)(nil)

func init() {
	// No network call: a process starts while storage is down; Check (or
	// every use of the store) reports it.
	objstore.Register(objstore.S3, func(_ context.Context, c objstore.Config) (objstore.Store, error) {
		return Open(Config{Endpoint: c.Endpoint, Bucket: c.Bucket, AccessKey: c.AccessKey, SecretKey: c.SecretKey, UseSSL: c.UseSSL})
	})
}

// New connects to cfg.Endpoint and checks (or creates) the bucket.
func New(ctx context.Context, cfg Config) (*Store, error) {
	s, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open validates cfg and builds the client without a network call, so a
// process can start while object storage is down; Check
// then tells whether the bucket is reachable.
func Open(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("objstore/s3: Endpoint and Bucket are required")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("objstore/s3: Endpoint %q must be host:port without scheme (set UseSSL for https)", cfg.Endpoint)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.UseSSL,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore/s3: client for %s: %w", cfg.Endpoint, err)
	}
	s := &Store{client: client, bucket: cfg.Bucket, partSize: cfg.PartSize}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if s.partSize < 5<<20 {
		return nil, fmt.Errorf("objstore/s3: PartSize %d is below the S3 minimum of 5 MiB", cfg.PartSize)
	}
	s.cfg = cfg
	return s, nil
}

// Check verifies that the bucket exists (creating it when the config says
// so).
func (s *Store) Check(ctx context.Context) error {
	cfg := s.cfg
	ok, err := s.client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return fmt.Errorf("objstore/s3: bucket %q at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		if !cfg.CreateBucket {
			return fmt.Errorf("objstore/s3: bucket %q does not exist at %s", cfg.Bucket, cfg.Endpoint)
		}
		err := s.client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if err != nil && !isCode(err, "BucketAlreadyOwnedByYou") {
			return fmt.Errorf("objstore/s3: create bucket %q: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// Client exposes the minio-go client (for operators' tooling and tests).
func (s *Store) Client() *minio.Client { return s.client }

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Put implements objstore.Store. With size -1 it reads up to one part: a
// short stream becomes a single PUT (MD5 ETag), a longer one a multipart
// upload of PartSize parts (buffered one part at a time).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %q", err, key)
	}
	po := minio.PutObjectOptions{ContentType: opts.ContentType, PartSize: s.partSize}
	if opts.IfMatch != "" {
		po.SetMatchETag(opts.IfMatch)
	}
	if opts.IfNoneMatch != "" {
		po.SetMatchETagExcept(opts.IfNoneMatch)
	}
	if size < 0 {
		// Buffer up to one part; the buffer grows only as far as the
		// stream goes, so small objects stay cheap.
		var first bytes.Buffer
		n, err := io.CopyN(&first, r, int64(s.partSize))
		switch {
		case err == io.EOF:
			r, size = bytes.NewReader(first.Bytes()), n
		case err != nil:
			return objstore.ObjectInfo{}, fmt.Errorf("objstore/s3: put %q: read: %w", key, err)
		default:
			r = io.MultiReader(&first, r)
		}
	}
	up, err := s.client.PutObject(ctx, s.bucket, key, r, size, po)
	if err != nil {
		if (opts.IfMatch != "" || opts.IfNoneMatch != "") && isNotExist(err) {
			// If-Match on a missing key: S3 answers 404, the contract
			// says the precondition failed.
			err = fmt.Errorf("%w (%v)", objstore.ErrPreconditionFailed, err)
		}
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/s3: put %q: %w", key, mapErr(err))
	}
	info := objstore.ObjectInfo{Key: key, Size: up.Size, ETag: trimETag(up.ETag), LastModified: up.LastModified, ContentType: opts.ContentType}
	if info.LastModified.IsZero() || info.Size == 0 && size != 0 {
		// PUT and CompleteMultipartUpload do not always report these.
		if hi, err := s.Head(ctx, key); err == nil && hi.ETag == info.ETag {
			info = hi
		}
	}
	return info, nil
}

// Get implements objstore.Store. The first request is made here, so a
// missing key fails now and the reader streams that one version.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: %q", err, key)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("objstore/s3: get %q: %w", key, mapErr(err))
	}
	st, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, objstore.ObjectInfo{}, fmt.Errorf("objstore/s3: get %q: %w", key, mapErr(err))
	}
	return obj, toInfo(st), nil
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %q", err, key)
	}
	st, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("objstore/s3: head %q: %w", key, mapErr(err))
	}
	return toInfo(st), nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %q", err, key)
	}
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !isNotExist(err) {
		return fmt.Errorf("objstore/s3: delete %q: %w", key, mapErr(err))
	}
	return nil
}

// List implements objstore.Store; S3 lists keys in UTF-8 binary order.
func (s *Store) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine when fn fails
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("objstore/s3: list %q: %w", prefix, mapErr(obj.Err))
		}
		if err := fn(toInfo(obj)); err != nil {
			return err
		}
	}
	return nil
}

// PresignGet implements objstore.Store (V4 query signature; expiry between
// one second and seven days).
func (s *Store) PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q", err, key)
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, expiry, nil)
	if err != nil {
		return "", fmt.Errorf("objstore/s3: presign get %q: %w", key, err)
	}
	return u.String(), nil
}

// PresignPut implements objstore.Store.
func (s *Store) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q", err, key)
	}
	u, err := s.client.PresignedPutObject(ctx, s.bucket, key, expiry)
	if err != nil {
		return "", fmt.Errorf("objstore/s3: presign put %q: %w", key, err)
	}
	return u.String(), nil
}

func toInfo(o minio.ObjectInfo) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: o.Key, Size: o.Size, ETag: trimETag(o.ETag), LastModified: o.LastModified, ContentType: o.ContentType}
}

func trimETag(etag string) string { return strings.Trim(etag, `"`) }

func isCode(err error, code string) bool { return minio.ToErrorResponse(err).Code == code }

func isNotExist(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey || (r.StatusCode == http.StatusNotFound && r.Code != minio.NoSuchBucket)
}

// mapErr wraps MinIO's answers in the objstore sentinels, keeping the
// original error in the message.
func mapErr(err error) error {
	if errors.Is(err, objstore.ErrPreconditionFailed) || errors.Is(err, objstore.ErrNotExist) {
		return err
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.Code == minio.PreconditionFailed || r.StatusCode == http.StatusPreconditionFailed:
		return fmt.Errorf("%w (%v)", objstore.ErrPreconditionFailed, err)
	case isNotExist(err):
		return fmt.Errorf("%w (%v)", objstore.ErrNotExist, err)
	}
	return err
}
