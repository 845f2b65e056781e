// Package vm runs one QEMU micro-VM (spec 10.5): the microvm machine with an
// accelerator from the configuration (kvm on real hosts, tcg where nested
// KVM is unusable), a virtio-blk workspace disk, and user-mode networking
// restricted to explicit forwards: the host reaches the guest's agent
// through a loopback hostfwd, and the guest reaches nothing but the
// guestfwd targets the host names (its relay to the API). QMP on a unix
// socket stops the VM and saves its state to a file (migrate to exec:),
// which a later Start resumes with -incoming.
package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wait"
)

// Config describes one VM.
type Config struct {
	// QEMU is the emulator binary (default qemu-system-x86_64 in PATH).
	QEMU string
	// Accel is tcg or kvm (default tcg).
	Accel    string
	MemoryMB int // default 256
	CPUs     int // default 1
	Kernel   string
	Initrd   string
	// Disk is the raw ext4 workspace image (virtio-blk).
	Disk string
	// Dir holds the QMP socket and the console log.
	Dir string
	// HostAddr is the loopback address:port forwarded to GuestPort.
	HostAddr  string
	GuestPort int
	// GuestFwd forwards guest connections to Addr (an IP:port inside the
	// user network) to a command spawned per connection.
	GuestFwd []GuestFwd
	// Incoming resumes a state file written by Save instead of booting.
	Incoming string
	// Append is added to the kernel command line.
	Append string
}

// GuestFwd is one guest-to-host forward.
type GuestFwd struct {
	Addr string
	Cmd  []string
}

// VM is a running QEMU process.
type VM struct {
	cfg     Config
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

// ConsoleLog is the guest's serial console, in Dir.
func (c Config) ConsoleLog() string { return filepath.Join(c.Dir, "console.log") }

func (c Config) qmpPath() string { return filepath.Join(c.Dir, "qmp.sock") }

// Check reports whether the emulator can run, naming what is missing.
func Check(qemu string) error {
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	if _, err := exec.LookPath(qemu); err != nil {
		return fmt.Errorf("vm: %s not found (install the Debian package qemu-system-x86): %w", qemu, err)
	}
	return nil
}

// Start launches QEMU. It returns once the process runs; readiness of the
// guest is the caller's to probe. With Incoming set it also waits for the
// state to load and continues the VM.
func Start(ctx context.Context, c Config) (*VM, error) {
	if c.QEMU == "" {
		c.QEMU = "qemu-system-x86_64"
	}
	if err := Check(c.QEMU); err != nil {
		return nil, err
	}
	if c.Accel == "" {
		c.Accel = "tcg"
	}
	c.MemoryMB = settings.PositiveOr(c.MemoryMB, 256)
	c.CPUs = settings.PositiveOr(c.CPUs, 1)
	if c.GuestPort == 0 {
		c.GuestPort = 8080
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(c.qmpPath())
	args, err := c.args()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.QEMU, args...)
	logf, err := os.OpenFile(filepath.Join(c.Dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm: exec %s: %w", c.QEMU, err)
	}
	v := &VM{cfg: c, cmd: cmd, done: make(chan struct{})}
	go func() {
		v.exitErr = cmd.Wait()
		close(v.done)
	}()
	if c.Incoming != "" {
		if err := v.resume(ctx); err != nil {
			v.Kill()
			return nil, err
		}
	}
	return v, nil
}

func (c Config) args() ([]string, error) {
	cpu := "max"
	if c.Accel == "kvm" {
		cpu = "host"
	}
	host, port, err := net.SplitHostPort(c.HostAddr)
	if err != nil {
		return nil, fmt.Errorf("vm: HostAddr %q: %w", c.HostAddr, err)
	}
	netdev := fmt.Sprintf("user,id=n0,restrict=on,hostfwd=tcp:%s:%s-:%d", host, port, c.GuestPort)
	for _, g := range c.GuestFwd {
		cmdline := strings.Join(g.Cmd, " ")
		if strings.ContainsAny(cmdline, ",'\"") {
			return nil, fmt.Errorf("vm: guestfwd command %q may not contain commas or quotes", cmdline)
		}
		netdev += fmt.Sprintf(",guestfwd=tcp:%s-cmd:%s", g.Addr, cmdline)
	}
	kargs := "console=ttyS0 reboot=t panic=-1 quiet"
	if c.Accel == "tcg" {
		// Under TCG the guest's TSC is the host's, but calibrating it against
		// the emulated PIT fails on a busy host and the boot then crawls:
		// tell the kernel the frequency and skip the delay-loop calibration.
		if khz := hostTSCkHz(); khz > 0 {
			kargs += fmt.Sprintf(" tsc_early_khz=%d tsc=reliable lpj=%d", khz, khz*1000/250)
		}
	}
	if c.Append != "" {
		kargs += " " + c.Append
	}
	accel := c.Accel
	if accel == "tcg" {
		accel += ",tb-size=64" // the translation cache (1 GiB by default) costs ~65 MB of RSS per guest otherwise
	}
	args := []string{
		"-M", "microvm", "-accel", accel, "-cpu", cpu,
		"-m", strconv.Itoa(c.MemoryMB), "-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", c.Kernel, "-initrd", c.Initrd, "-append", kargs,
		"-serial", "file:" + c.ConsoleLog(),
		"-drive", "id=ws,file=" + c.Disk + ",format=raw,if=none,cache=writeback",
		"-device", "virtio-blk-device,drive=ws",
		"-netdev", netdev, "-device", "virtio-net-device,netdev=n0",
		"-qmp", "unix:" + c.qmpPath() + ",server=on,wait=off",
	}
	if c.Incoming != "" {
		if strings.ContainsAny(c.Incoming, " '\";|&$`") {
			return nil, fmt.Errorf("vm: snapshot path %q has shell characters", c.Incoming)
		}
		args = append(args, "-incoming", "exec:cat "+c.Incoming)
	}
	return args, nil
}

// PID is QEMU's process id.
func (v *VM) PID() int { return v.cmd.Process.Pid }

// Done is closed when QEMU has exited.
func (v *VM) Done() <-chan struct{} { return v.done }

// ExitErr is QEMU's exit status, once Done is closed.
func (v *VM) ExitErr() error { return v.exitErr }

// Alive reports whether QEMU still runs.
func (v *VM) Alive() bool { return !wait.Closed(v.done) }

// Kill ends QEMU at once and waits for it.
func (v *VM) Kill() {
	_ = v.cmd.Process.Kill()
	<-v.done
}

func (v *VM) qmp(ctx context.Context) (*qmp, error) {
	var q *qmp
	err := waitFor(ctx, func() (bool, error) {
		if !v.Alive() {
			return false, fmt.Errorf("vm: QEMU exited: %v", v.exitErr)
		}
		var err error
		q, err = dialQMP(ctx, v.cfg.qmpPath())
		return err == nil, nil
	})
	return q, err
}

// Save stops the guest, writes its state (RAM and devices, not the disk)
// to path, and ends QEMU. The disk must stay unchanged until a resume.
func (v *VM) Save(ctx context.Context, path string) error {
	if strings.ContainsAny(path, " '\";|&$`") {
		return fmt.Errorf("vm: snapshot path %q has shell characters", path)
	}
	q, err := v.qmp(ctx)
	if err != nil {
		return err
	}
	defer q.close()
	if _, err := q.do("stop", nil); err != nil {
		return err
	}
	if _, err := q.do("migrate", map[string]string{"uri": "exec:cat > " + path}); err != nil {
		return err
	}
	err = waitFor(ctx, func() (bool, error) {
		raw, err := q.do("query-migrate", nil)
		if err != nil {
			return false, err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return false, err
		}
		switch st.Status {
		case "completed":
			return true, nil
		case "failed", "cancelled":
			return false, fmt.Errorf("vm: saving the state failed: %s %s", st.Status, st.ErrorDesc)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	_, _ = q.do("quit", nil)
	select {
	case <-v.done:
	case <-ctx.Done():
		v.Kill()
	}
	return nil
}

// resume waits until the incoming state is loaded, then continues the VM.
func (v *VM) resume(ctx context.Context) error {
	q, err := v.qmp(ctx)
	if err != nil {
		return err
	}
	defer q.close()
	err = waitFor(ctx, func() (bool, error) {
		st, err := q.status()
		if err != nil {
			return false, err
		}
		return st == "paused" || st == "running", nil
	})
	if err != nil {
		return fmt.Errorf("vm: loading the snapshot: %w", err)
	}
	_, err = q.do("cont", nil)
	return err
}

// Quit asks QEMU to exit (the guest gets no notice) and waits up to grace,
// then kills it.
func (v *VM) Quit(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if q, err := dialQMP(ctx, v.cfg.qmpPath()); err == nil {
		_, _ = q.do("quit", nil)
		q.close()
	}
	select {
	case <-v.done:
	case <-ctx.Done():
		v.Kill()
	}
}

// ErrExited is returned when QEMU is gone.
var ErrExited = errors.New("vm: QEMU has exited")

// hostTSCkHz is the host CPU's clock in kHz from /proc/cpuinfo (0 when
// unknown).
func hostTSCkHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0
			}
			return int(mhz * 1000)
		}
	}
	return 0
}
