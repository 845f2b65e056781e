package guestimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Modules come out dependencies first, each once; built-in ones (absent
// from modules.dep) are skipped; compressed modules are refused.
func TestResolveModules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dep := strings.Join([]string{
		"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/virtio/virtio_ring.ko:",
		"kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
		"kernel/net/core/failover.ko:",
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko",
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := resolveModules(dir, []string{"virtio_mmio", "virtio_blk", "ext4", "virtio_net"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".ko"))
	}
	want := "virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net"
	if strings.Join(names, " ") != want {
		t.Fatalf("order %v, want %s", names, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte("kernel/x/virtio_mmio.ko.xz:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveModules(dir, []string{"virtio_mmio"}); err == nil || !strings.Contains(err.Error(), "compressed") {
		t.Fatalf("a compressed module: %v", err)
	}
}

// The initramfs is a newc archive: every header and body 4-byte aligned,
// ended by the trailer.
func TestCpioAlignment(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	c := &cpioWriter{w: &b}
	c.Dir("/etc", 0o755)
	c.File("/etc/a", 0o644, []byte("12345"))
	c.Symlink("/init", "/bin/podagent")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if len(s)%4 != 0 || !strings.HasPrefix(s, "070701") || !strings.Contains(s, "TRAILER!!!\x00") {
		t.Fatalf("archive of %d bytes: %q", len(s), s)
	}
	// Walk the headers: name size at field 12, file size at field 7.
	off, names := 0, []string{}
	for off < len(s) {
		h := s[off : off+110]
		var size, nameSize int
		_, _ = fmtSscanHex(h[54:62], &size)
		_, _ = fmtSscanHex(h[94:102], &nameSize)
		name := s[off+110 : off+110+nameSize-1]
		names = append(names, name)
		off = align4(off+110+nameSize) + align4(size)
		if name == "TRAILER!!!" {
			break
		}
	}
	if strings.Join(names, ",") != "etc,etc/a,init,TRAILER!!!" || off != len(s) {
		t.Fatalf("entries %v, end %d of %d", names, off, len(s))
	}
}

func align4(n int) int { return (n + 3) &^ 3 }

func fmtSscanHex(s string, v *int) (int, error) {
	n := 0
	for _, r := range s {
		n <<= 4
		switch {
		case r >= '0' && r <= '9':
			n += int(r - '0')
		case r >= 'A' && r <= 'F':
			n += int(r-'A') + 10
		}
	}
	*v = n
	return 1, nil
}

// Only the current image and the most recent others stay cached.
func TestPrune(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, name := range []string{"a", "b", "c", "d", "e", "cur"} {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		ts := time.Unix(int64(1000+i), 0)
		if err := os.Chtimes(p, ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	prune(dir, "cur", 2)
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "cur,d,e" {
		t.Fatalf("left %v", names)
	}
}
