// Package storage opens the API server's object store (spec 2.7) from
// its configuration: the s3 backend (MinIO or any S3) when SVC_STORAGE=s3,
// else the fs backend under <data dir>/store (shared/datadir.Store), whose presigned URLs
// (LFS batch, spec 4.3) point at SVC_PUBLIC_URL + "/objects" and are signed with
// a key derived from the runtime auth secret.
package storage

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	_ "github.com/svc-dev/svc/shared/objstore/s3" // registers the s3 backend
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

// Open opens the configured store through objstore.Open, adding what the
// API server needs on top: the fs root under the data dir, the fs backend's
// presigned URLs and their handler, and the s3 backend's health watch.
func Open(ctx context.Context, cfg *config.Config, log *zap.Logger) (Opened, error) {
	if log == nil {
		log = zap.NewNop()
	}
	sc := cfg.Store
	sc.Logger = log
	var o Opened
	if sc.Backend == "" || sc.Backend == objstore.FS {
		sc.Dir = datadir.Store(cfg.DataDir)
		if cfg.RuntimeAuthSecret != "" {
			sc.BaseURL = PublicURL(cfg) + FSBasePath
			sc.SigningKey = SigningKey(cfg.RuntimeAuthSecret)
		} else {
			log.Warn("no runtime auth secret: the fs object store cannot sign presigned URLs")
		}
		o.FSDir = sc.Dir
	}
	// No network call here: the server starts while storage is down and
	// Health reports and retries it.
	st, err := objstore.Open(ctx, sc)
	if err != nil {
		return Opened{}, fmt.Errorf("storage: %w", err)
	}
	o.Store = st
	switch s := st.(type) {
	case *fsstore.Store:
		o.Handler = fsstore.Handler(s, FSBasePath)
	case objstore.Checker:
		o.Health = newHealth(s.Check, log.Named("objstore"))
	}
	return o, nil
}
