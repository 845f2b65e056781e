package objstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

// Open is the one way the binaries open their store: it refuses an unknown
// backend naming the valid ones, and an s3 backend without its endpoint.
func TestOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	for _, tc := range []struct {
		name    string
		cfg     objstore.Config
		wantErr string
		check   func(objstore.Store) bool
	}{
		{name: "empty is fs", cfg: objstore.Config{Dir: dir}, check: func(s objstore.Store) bool { _, ok := s.(*fsstore.Store); return ok }},
		{name: "fs", cfg: objstore.Config{Backend: "fs", Dir: dir}, check: func(s objstore.Store) bool { _, ok := s.(*fsstore.Store); return ok }},
		{name: "s3 without a network call", cfg: objstore.Config{Backend: "s3", Endpoint: "127.0.0.1:1", Bucket: "b"},
			check: func(s objstore.Store) bool {
				_, ok := s.(*s3store.Store)
				_, chk := s.(objstore.Checker)
				return ok && chk
			}},
		{name: "unknown", cfg: objstore.Config{Backend: "gcs"}, wantErr: `SVC_STORAGE="gcs" is not a storage backend; choose one of: fs, s3`},
		{name: "s3 without endpoint", cfg: objstore.Config{Backend: "s3", Bucket: "b"}, wantErr: "SVC_STORAGE=s3 needs SVC_S3_ENDPOINT and SVC_S3_BUCKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := objstore.Open(context.Background(), tc.cfg)
			tabletest.Check(t, st, err, tc.wantErr, tc.check)
		})
	}
}
