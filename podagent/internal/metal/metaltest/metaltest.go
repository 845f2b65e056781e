// Package metaltest builds what micro-VM tests boot: a static podagent and
// the guest image, once per test process. A host without QEMU, the cloud
// kernel, lz4 or e2fsprogs fails the test with the missing piece named.
package metaltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/metal/disk"
	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
	"github.com/svc-dev/svc/podagent/internal/metal/vm"
)

var (
	once sync.Once
	img  guestimage.Image
	bin  string
	err  error
)

// CacheDir is where guest images are cached across test runs.
func CacheDir() string {
	if d := os.Getenv("SVC_METAL_CACHE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserCacheDir()
	return filepath.Join(home, "svc-metal")
}

// Image returns the guest image and the static podagent inside it.
func Image(t testing.TB) (guestimage.Image, string) {
	t.Helper()
	once.Do(func() {
		if err = vm.Check(""); err != nil {
			return
		}
		if err = (&disk.Tools{}).Check(); err != nil {
			return
		}
		if _, lerr := exec.LookPath("lz4"); lerr != nil {
			err = fmt.Errorf("lz4 not found (install the Debian package lz4): %w", lerr)
			return
		}
		bin = filepath.Join(os.Getenv("SVC_BIN_DIR"), "podagent-guest") // make test built it
		if _, serr := os.Stat(bin); os.Getenv("SVC_BIN_DIR") == "" || serr != nil {
			if bin, err = BuildAgent(filepath.Join(CacheDir(), "bin")); err != nil {
				return
			}
		}
		img, err = guestimage.Build(guestimage.Options{CacheDir: filepath.Join(CacheDir(), "images"), Agent: bin})
	})
	if err != nil {
		t.Fatalf("micro-VM tests need QEMU, the cloud kernel, lz4, e2fsprogs, git and git-lfs: %v", err)
	}
	return img, bin
}

// BuildAgent builds a static podagent (CGO_ENABLED=0) into dir.
func BuildAgent(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	modDir := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "podagent-guest")
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "./cmd/podagent")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the static podagent: %v\n%s", err, b)
	}
	return out, os.Rename(tmp, out) // atomic: parallel test binaries share it
}
