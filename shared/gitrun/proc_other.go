//go:build !unix

package gitrun

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}
