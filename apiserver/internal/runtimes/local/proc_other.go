//go:build !unix

package local

import "os/exec"

func setProcAttr(*exec.Cmd) {}
