package local

import (
	"slices"
	"testing"
)

func TestBaseEnvKeepsNoSecrets(t *testing.T) {
	t.Parallel()
	got := baseEnv([]string{
		"PATH=/bin", "HOME=/root", "LC_ALL=C", "SVC_LOG_LEVEL=debug",
		"SVC_DATABASE_URL=postgres://u:p@db/x", "SVC_RUNTIME_AUTH_SECRET=s", "SVC_S3_SECRET_KEY=k",
		"OPENAI_API_KEY=sk", "SVC_POD_WEBHOOK_SYNC_TIMEOUT=3s", "SVC_POD_=x", "noequals",
	})
	want := []string{"PATH=/bin", "HOME=/root", "LC_ALL=C", "SVC_LOG_LEVEL=debug", "SVC_WEBHOOK_SYNC_TIMEOUT=3s"}
	if !slices.Equal(got, want) {
		t.Fatalf("baseEnv = %q, want %q", got, want)
	}
}

func TestPodEnv(t *testing.T) {
	t.Parallel()
	if got := PodEnv("fs", "e", "b", "a", "s", false, ""); !slices.Equal(got, []string{"SVC_STORAGE=fs"}) {
		t.Errorf("fs: %q", got)
	}
	got := PodEnv("s3", "minio:9000", "bkt", "ak", "sk", true, "127.0.0.0/8")
	want := []string{"SVC_STORAGE=s3", "SVC_S3_ENDPOINT=minio:9000", "SVC_S3_BUCKET=bkt", "SVC_S3_ACCESS_KEY=ak",
		"SVC_S3_SECRET_KEY=sk", "SVC_S3_USE_SSL=true", "SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8"}
	if !slices.Equal(got, want) {
		t.Errorf("s3: %q", got)
	}
}
