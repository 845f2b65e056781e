//go:build unix

package gitrun

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs git in its own process group and, on cancel or
// timeout, kills the whole group, so helpers git spawned (git-lfs,
// pack-objects, remote helpers) do not outlive it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
