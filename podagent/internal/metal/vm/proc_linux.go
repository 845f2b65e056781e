package vm

import (
	"os/exec"
	"syscall"
)

// setProcAttr kills QEMU with the host daemon: a guest nobody exports is
// better stopped (its disk stays for the next rescue).
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
