package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
)

// buildMetal builds metalhost and, beside it, the static podagent the
// guests boot (podagent-guest). QEMU, the cloud kernel, lz4 and e2fsprogs
// must be installed: a missing one fails the test by name.
func buildMetal(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"qemu-system-x86_64", "lz4", "mkfs.ext4", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("the metal e2e test needs %s (.ci/run installs qemu-system-x86, lz4, e2fsprogs): %v", bin, err)
		}
	}
	if ks, _ := filepath.Glob("/boot/vmlinuz-*"); len(ks) == 0 {
		t.Fatal("the metal e2e test needs a guest kernel under /boot (install linux-image-cloud-amd64)")
	}
	if dir := os.Getenv("SVC_BIN_DIR"); dir != "" { // make test built both
		_, err1 := os.Stat(filepath.Join(dir, "metalhost"))
		_, err2 := os.Stat(filepath.Join(dir, "podagent-guest"))
		if err1 == nil && err2 == nil {
			return filepath.Join(dir, "metalhost")
		}
	}
	_, file, _, _ := runtime.Caller(0)
	podagentDir := filepath.Join(filepath.Dir(file), "..", "..", "podagent")
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{{"metalhost", "./cmd/metalhost"}, {"podagent-guest", "./cmd/podagent"}} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = podagentDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b.out, err, out)
		}
	}
	return filepath.Join(dir, "metalhost")
}

// End to end: the API's metal driver asks a real metal host to
// boot a QEMU guest (TCG) running podagent in guest mode; a webhook turn
// through the API writes a file in the guest (the model and the checkpoint
// record go through the host's relay), the host's export lands the commit
// in MinIO, and stopping the host suspends the guest with the source
// archive written.
func TestMetalWebhookTurnExportsToMinIO(t *testing.T) {
	t.Parallel()
	metalhost := buildMetal(t)
	s3 := testenv.MinIO(t)
	hostPort, err := testenv.FreePort()
	must(t, err)
	hostURL := fmt.Sprintf("http://127.0.0.1:%d", hostPort)
	const hostToken = "metal-host-token"

	w, _ := webhookWorld(t, "SVC_RUNTIME_DRIVER=metal", "SVC_METAL_HOST_URL="+hostURL, "SVC_METAL_HOST_TOKEN="+hostToken,
		"SVC_RUNTIME_START_TIMEOUT=5m")
	cacheDir := os.Getenv("SVC_METAL_CACHE_DIR")
	if cacheDir == "" {
		home, _ := os.UserCacheDir()
		cacheDir = filepath.Join(home, "svc-metal", "images")
	}
	cmd := exec.Command(metalhost, "serve")
	cmd.Env = append(os.Environ(), "SVC_METAL_HTTP_ADDR="+strings.TrimPrefix(hostURL, "http://"),
		"SVC_METAL_HOST_TOKEN="+hostToken, "SVC_METAL_DIR="+t.TempDir(), "SVC_METAL_CACHE_DIR="+cacheDir,
		"SVC_API_URL="+w.api.URL, "SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+s3.Endpoint, "SVC_S3_BUCKET="+s3.Bucket,
		"SVC_S3_ACCESS_KEY="+s3.AccessKey, "SVC_S3_SECRET_KEY="+s3.SecretKey, "SVC_METAL_DISK_MB=128",
		"SVC_METAL_START_TIMEOUT=5m", "SVC_METAL_SNAPSHOTS=false", "SVC_LOG_LEVEL=info",
		"METAL_PROJECT_DATA_EXPORT_INTERVAL_MS=1000")
	logs := startProcess(t, "metalhost", cmd)
	waitReady(t, "metalhost", hostURL+"/healthz", 2*time.Minute, logs)

	w.e.upstream.Script(agentScript("notes/hello.txt", "hi from the micro-VM", "I wrote notes/hello.txt", nil))
	before := w.e.checkpointCount(w.project)
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"please write a note","sender_id":"u-1"}`), hookHeaders())
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "I wrote notes/hello.txt") {
		t.Fatalf("incoming through the metal driver: %d %s\nmetalhost:\n%s", res.StatusCode, body, logs.String())
	}
	// The guest recorded the turn's checkpoint through the host's relay.
	if n := w.e.checkpointCount(w.project); n != before+1 {
		t.Fatalf("checkpoint rows %d, want %d", n, before+1)
	}

	ctx := context.Background()
	store, err := s3store.New(ctx, s3store.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	must(t, err)
	// The host's export loop (every METAL_PROJECT_DATA_EXPORT_INTERVAL_MS)
	// lands the turn in MinIO without being asked.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := store.Head(ctx, objstore.DataKey(w.project)); err == nil {
			if data := archivetest.StoredEntries(t, store, objstore.DataKey(w.project)); data["notes/hello.txt"] == "hi from the micro-VM" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the periodic export never stored the turn\nmetalhost:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling object storage: no event to wait on
	}
	host := &internalapi.MetalHostClient{BaseURL: hostURL, Token: hostToken}
	if _, err := host.Export(ctx, w.project, false); err != nil {
		t.Fatalf("export on demand: %v", err)
	}
	repo := archivetest.StoredEntries(t, store, objstore.RepoKey(w.project))
	if _, ok := repo["HEAD"]; !ok {
		t.Fatalf("repo.git.tar.gz has no HEAD: %v", keys(repo))
	}
	if _, err := host.Export(ctx, "nope", false); err == nil {
		t.Fatal("export of a project without a VM succeeded")
	}
	// A wrong host token is refused.
	bad := &internalapi.MetalHostClient{BaseURL: hostURL, Token: "wrong"}
	if _, err := bad.Status(ctx, w.project); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("status with a wrong token: %v", err)
	}

	// SIGTERM suspends every guest: the source archive is written at suspend.
	must(t, cmd.Process.Signal(os.Interrupt))
	_ = cmd.Wait()
	src := archivetest.StoredEntries(t, store, objstore.SourceKey(w.project))
	if src["notes/hello.txt"] != "hi from the micro-VM" {
		t.Fatalf("project-src.tar.gz after suspend: %v\nmetalhost:\n%s", keys(src), logs.String())
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
