//go:build unix && !linux

package local

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts a pod in its own process group, so a terminal's Ctrl-C
// goes to the API server, which stops its pods in order.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
