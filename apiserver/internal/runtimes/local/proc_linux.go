package local

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts a pod in its own process group (a terminal's Ctrl-C goes
// to the API server, which stops its pods in order) and has the kernel send
// it SIGTERM if the API server dies without stopping it.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
