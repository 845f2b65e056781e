// Package objstoreopen opens the API server's object store (spec 2.7) from
// its configuration: the s3 backend (MinIO or any S3) when SVC_STORAGE=s3,
// else the fs backend under <data dir>/store (FSDir), whose presigned URLs
// (LFS batch, spec 4.3) point at SVC_PUBLIC_URL + "/objects" and are signed with
// a key derived from the runtime auth secret.
package objstoreopen

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
)

// FSBasePath is where the fs backend's presigned-URL handler is mounted.
const FSBasePath = "/objects"

// Opened is the store and, for the fs backend, the handler that serves its
// presigned URLs (mount it at FSBasePath); Handler is nil for s3.
type Opened struct {
	Store   objstore.Store
	Handler http.Handler
	// FSDir is the fs backend's root ("" for s3): pods sharing the
	// store on one machine must use the same directory.
	FSDir string
	// Health watches the s3 backend once started (nil for fs).
	Health *Health
}

// FSDir is the fs backend's root for cfg: <data dir>/store, the directory
// podagent uses too (local runtimes share it with the API).
func FSDir(cfg *config.Config) string { return filepath.Join(cfg.DataDir, "store") }

// SigningKey derives the fs presign key from the runtime auth secret, so
// every replica signs alike without one more secret to distribute.
func SigningKey(runtimeSecret string) []byte {
	m := hmac.New(sha256.New, []byte(runtimeSecret))
	m.Write([]byte("svc objstore fs presign v1"))
	return m.Sum(nil)
}

// PublicURL is cfg.PublicURL, or http://<http addr> when unset.
func PublicURL(cfg *config.Config) string {
	if cfg.PublicURL != "" {
		return strings.TrimSuffix(cfg.PublicURL, "/")
	}
	return "http://" + cfg.HTTPAddr
}

// Open opens the configured store.
func Open(ctx context.Context, cfg *config.Config, log *zap.Logger) (Opened, error) {
	if log == nil {
		log = zap.NewNop()
	}
	switch cfg.Storage {
	case "s3":
		if cfg.S3Endpoint == "" || cfg.S3Bucket == "" {
			return Opened{}, errors.New("objstoreopen: SVC_STORAGE=s3 needs SVC_S3_ENDPOINT and SVC_S3_BUCKET")
		}
		// No network call here: the server starts while storage is down
		// and Health reports and retries it.
		st, err := s3store.Open(s3store.Config{Endpoint: cfg.S3Endpoint, Bucket: cfg.S3Bucket,
			AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey, UseSSL: cfg.S3UseSSL})
		if err != nil {
			return Opened{}, err
		}
		return Opened{Store: st, Health: newHealth(st.Check, log.Named("objstore"))}, nil
	case "", "fs":
		opts := fsstore.Options{Logger: log}
		if cfg.RuntimeAuthSecret != "" {
			opts.BaseURL = PublicURL(cfg) + FSBasePath
			opts.SigningKey = SigningKey(cfg.RuntimeAuthSecret)
		} else {
			log.Warn("no runtime auth secret: the fs object store cannot sign presigned URLs")
		}
		dir := FSDir(cfg)
		st, err := fsstore.New(dir, opts)
		if err != nil {
			return Opened{}, err
		}
		return Opened{Store: st, Handler: fsstore.Handler(st, FSBasePath), FSDir: dir}, nil
	}
	return Opened{}, fmt.Errorf("objstoreopen: SVC_STORAGE=%q is not a storage backend; choose one of: fs, s3", cfg.Storage)
}
