package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
)

// In a container podagent is PID 1 of its own PID namespace (Kubernetes
// gives every container one). It must serve the pod as usual — not take
// itself for a micro-VM guest init and fail mounting /proc — and its
// SIGTERM must still run the final flush. The process runs here as PID 1
// of a new user+PID+mount namespace, as a container's entrypoint does.
func TestPID1InContainerServes(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		t.Skip("no user namespaces on this kernel")
	}
	e := newEnv(t, "fs")
	e.sys = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	e.write("index.js", "v0")
	p := e.start()
	status, err := os.ReadFile("/proc/" + itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nNSpid:\t"+itoa(p.cmd.Process.Pid)+"\t1\n") {
		t.Fatalf("podagent is not PID 1 of its namespace:\n%s", status)
	}
	e.write("index.js", "v1")
	sigterm(t, p)
	if src := archivetest.StoredEntries(t, e.store, objstore.SourceKey("p1")); src["index.js"] != "v1" {
		t.Fatalf("the final flush of PID 1 did not land: %v", src)
	}
	if logs := e.logs(); strings.Contains(logs, "[guest]") {
		t.Fatalf("PID 1 ran the guest init:\n%s", logs)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
