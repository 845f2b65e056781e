package s3_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/objstoretest"
	"github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newStore(t *testing.T) *s3.Store {
	t.Helper()
	env := testenv.MinIO(t)
	s, err := s3.New(t.Context(), s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newStore(t) })
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	env := testenv.MinIO(t)
	tests := []struct {
		name    string
		cfg     s3.Config
		wantErr string
	}{
		{"missing bucket, no create", s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket + "-new", AccessKey: env.AccessKey, SecretKey: env.SecretKey}, "does not exist"},
		{"scheme in endpoint", s3.Config{Endpoint: "http://" + env.Endpoint, Bucket: env.Bucket}, "without scheme"},
		{"no bucket", s3.Config{Endpoint: env.Endpoint}, "required"},
		{"small parts", s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, PartSize: 1 << 20}, "5 MiB"},
		{"wrong secret", s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: "wrong"}, "signature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s3.New(t.Context(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCreateBucket(t *testing.T) {
	t.Parallel()
	env := testenv.MinIO(t)
	cfg := s3.Config{Endpoint: env.Endpoint, Bucket: env.Bucket + "-created", AccessKey: env.AccessKey, SecretKey: env.SecretKey, CreateBucket: true}
	s, err := s3.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Client().RemoveBucket(context.Background(), cfg.Bucket) })
	if _, err := s.Head(t.Context(), "absent"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Head in the created bucket: %v", err)
	}
	if _, err := s3.New(t.Context(), cfg); err != nil {
		t.Fatalf("New on an existing bucket with CreateBucket: %v", err)
	}
}
