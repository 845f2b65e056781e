package hydratetest

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
)

// MinIOStore is a fresh bucket on the real MinIO, wrapped to count calls.
func MinIOStore(t testing.TB) *CountingStore {
	t.Helper()
	env := testenv.MinIO(t)
	st, err := s3.New(context.Background(), s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return &CountingStore{Store: st}
}

// NewManager starts a hydrate manager on opts, as mod (when not nil) adjusts
// them, and waits for its background work when the test ends.
func NewManager(t testing.TB, opts hydrate.Options, mod func(*hydrate.Options)) *hydrate.Manager {
	t.Helper()
	if mod != nil {
		mod(&opts)
	}
	m, err := hydrate.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Wait)
	return m
}
