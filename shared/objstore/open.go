package objstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// Backend names of SVC_STORAGE.
const (
	FS = "fs"
	S3 = "s3"
)

// Backends are the SVC_STORAGE values every binary of the service knows.
var Backends = []string{FS, S3}

// Config selects and configures one backend: SVC_STORAGE and SVC_S3_*
// (declared once in shared/settings), plus what the opener derives (the fs
// root from the data dir, the API's presigned-URL base and key).
type Config struct {
	// Backend is FS or S3; empty means FS.
	Backend string
	// Dir is the fs backend's root (shared/datadir.Store of the data dir).
	Dir string
	// BaseURL and SigningKey let the fs backend presign URLs (the API
	// server mounts its handler there); empty: no presigning.
	BaseURL    string
	SigningKey []byte
	// The s3 backend's connection.
	Endpoint, Bucket, AccessKey, SecretKey string
	UseSSL                                 bool
	// Logger receives the backend's warnings (nil: none).
	Logger *zap.Logger
}

// Validate reports a backend that is not one of Backends, or an s3 backend
// without an endpoint or bucket, in the words of the settings.
func (c Config) Validate() error {
	if err := ValidBackend(c.Backend); err != nil {
		return err
	}
	if c.Backend == S3 && (c.Endpoint == "" || c.Bucket == "") {
		return errors.New("SVC_STORAGE=s3 needs SVC_S3_ENDPOINT and SVC_S3_BUCKET")
	}
	return nil
}

// ValidBackend reports a backend name that is not one of Backends ("" is
// fs).
func ValidBackend(name string) error {
	if name == "" || slices.Contains(Backends, name) {
		return nil
	}
	return fmt.Errorf("SVC_STORAGE=%q is not a storage backend; choose one of: %s", name, strings.Join(Backends, ", "))
}

// Checker is a backend that can tell whether its storage answers (s3: the
// bucket exists). Open makes no network call; callers that want to know
// at start, or watch it, call Check.
type Checker interface {
	Check(ctx context.Context) error
}

// Opener builds a backend's Store from a validated Config.
type Opener func(ctx context.Context, c Config) (Store, error)

var (
	openersMu sync.Mutex
	openers   = map[string]Opener{}
)

// Register makes a backend available to Open; the backend packages
// (objstore/fs, objstore/s3) register themselves when imported, as Gitea's
// storage types do.
func Register(name string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers[name] = open
}

// Open validates c and opens its backend: the one way every binary opens
// its object store. An unknown backend is an error naming the valid ones.
func Open(ctx context.Context, c Config) (Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Backend == "" {
		c.Backend = FS
	}
	openersMu.Lock()
	open, ok := openers[c.Backend]
	var linked []string
	for n := range openers {
		linked = append(linked, n)
	}
	openersMu.Unlock()
	if !ok {
		sort.Strings(linked)
		return nil, fmt.Errorf("objstore: backend %q is not linked into this binary (import shared/objstore/%s); linked: %s",
			c.Backend, c.Backend, strings.Join(linked, ", "))
	}
	return open(ctx, c)
}
