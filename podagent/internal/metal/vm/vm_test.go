package vm

import (
	"strings"
	"testing"
)

// The guest's network is restricted to the explicit forwards; command
// lines that QEMU's option parser would split are refused.
func TestArgs(t *testing.T) {
	t.Parallel()
	c := Config{Accel: "tcg", MemoryMB: 256, CPUs: 1, Kernel: "k", Initrd: "i", Disk: "/d/disk.ext4", Dir: "/d/run",
		HostAddr: "127.0.0.1:4000", GuestPort: 8080, GuestFwd: []GuestFwd{{Addr: "10.0.2.100:80", Cmd: []string{"/bin/metalhost", "pipe", "127.0.0.1:5000"}}}}
	args, err := c.args()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"-M microvm", "-accel tcg,tb-size=64", "-nodefaults",
		"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:4000-:8080,guestfwd=tcp:10.0.2.100:80-cmd:/bin/metalhost pipe 127.0.0.1:5000",
		"virtio-blk-device,drive=ws", "file=/d/disk.ext4,format=raw"} {
		if !strings.Contains(line, want) {
			t.Errorf("missing %q in %s", want, line)
		}
	}
	if hostTSCkHz() > 0 && !strings.Contains(line, "tsc_early_khz=") {
		t.Errorf("TCG boot without the TSC frequency: %s", line)
	}
	kvm := c
	kvm.Accel = "kvm"
	args, _ = kvm.args()
	if line := strings.Join(args, " "); !strings.Contains(line, "-cpu host") || strings.Contains(line, "tsc_early_khz") {
		t.Errorf("kvm: %s", line)
	}
	bad := c
	bad.GuestFwd = []GuestFwd{{Addr: "10.0.2.100:80", Cmd: []string{"/bin/x,hostfwd=tcp::22-:22"}}}
	if _, err := bad.args(); err == nil {
		t.Fatal("a guestfwd command with a comma was accepted")
	}
	bad = c
	bad.Incoming = "/tmp/snap; rm -rf /"
	if _, err := bad.args(); err == nil {
		t.Fatal("a snapshot path with shell characters was accepted")
	}
}
