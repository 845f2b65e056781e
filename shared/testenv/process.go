package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a started server process with its log file.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // exit status, valid after exited is closed
	log    string
}

// startProcess starts cmd with its output appended to logPath. The child
// gets its own process group (a ^C to `go test` does not kill it before we
// stop it cleanly) and dies with us if we die first (parent-death signal).
func startProcess(cmd *exec.Cmd, logPath string, cred *syscall.Credential) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends sig, waits up to grace for the exit, then kills the group.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// logTail returns the last lines of the process log, for error messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}
