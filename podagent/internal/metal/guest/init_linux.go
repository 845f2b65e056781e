package guest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Init does what PID 1 of the guest must before the agent starts: mount
// the kernel filesystems, load the virtio modules listed in moduleList
// (the cloud kernel ships them as modules), bring up lo and eth0 at the
// user network's fixed guest address, and mount the workspace disk
// (/dev/vda, ext4) at DataDir.
func Init(moduleList string, logf func(string, ...any)) error {
	for _, m := range []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}, {"tmpfs", "/tmp", "tmpfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	loadModules(moduleList, logf)
	if err := ifUp("lo", "127.0.0.1/8"); err != nil {
		logf("lo: %v", err)
	}
	if err := waitPath("/sys/class/net/eth0", 5*time.Second); err != nil {
		return fmt.Errorf("no network device: %w", err)
	}
	if err := ifUp("eth0", GuestCIDR); err != nil {
		return fmt.Errorf("eth0: %w", err)
	}
	if err := waitPath("/dev/vda", 5*time.Second); err != nil {
		return fmt.Errorf("no workspace disk: %w", err)
	}
	_ = os.MkdirAll(DataDir, 0o755)
	if err := unix.Mount("/dev/vda", DataDir, "ext4", unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount the workspace disk: %w", err)
	}
	return nil
}

// PowerOff flushes and unmounts the disk and ends the VM (QEMU runs with
// -no-reboot, so a restart ends the process).
func PowerOff() {
	unix.Sync()
	_ = unix.Unmount(DataDir, 0)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

// Sync flushes every dirty page to the disk, so a host that finds the VM
// dead reads what the guest last committed.
func Sync() { unix.Sync() }

// InitEnv is the variable that makes PID 1 a guest init. The host puts
// KernelArg on the guest kernel's command line; the kernel hands an unknown
// name=value parameter to init as an environment variable.
const InitEnv = "SVC_METAL_GUEST_INIT"

// KernelArg is the kernel command-line parameter of every guest boot.
const KernelArg = InitEnv + "=1"

// IsInit reports whether this process is a micro-VM guest's PID 1: PID 1
// with InitEnv=1 from the kernel command line. PID 1 alone is not enough:
// in a container (Kubernetes, podman) podagent is PID 1 of its own PID
// namespace and must run the pod normally, not mount /proc.
func IsInit() bool { return isInit(os.Getpid(), os.Getenv) }

func isInit(pid int, getenv func(string) string) bool {
	return pid == 1 && getenv(InitEnv) == "1"
}

func loadModules(list string, logf func(string, ...any)) {
	f, err := os.Open(list)
	if err != nil {
		logf("module list: %v", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" {
			continue
		}
		fd, err := os.Open(p)
		if err != nil {
			logf("module %s: %v", p, err)
			continue
		}
		err = unix.FinitModule(int(fd.Fd()), "", 0)
		fd.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			logf("module %s: %v", p, err)
		}
	}
}

func waitPath(p string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Stat(p)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // device discovery has no event to wait on here
	}
}

func ifUp(name, cidr string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ip, ipn, err := net.ParseCIDR(cidr)
	if err != nil {
		return err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := ifr.SetInet4Addr(ip.To4()); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("SIOCSIFADDR: %w", err)
	}
	ifr, _ = unix.NewIfreq(name)
	if err := ifr.SetInet4Addr(net.IP(ipn.Mask).To4()); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("SIOCSIFNETMASK: %w", err)
	}
	ifr, _ = unix.NewIfreq(name)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
