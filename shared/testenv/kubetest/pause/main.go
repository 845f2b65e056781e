// Command pause is the pod sandbox's process on the harness's real node
// (shared/testenv/kubetest, node.go): it holds the pod's namespaces, reaps
// the zombies it inherits as PID 1 and exits 0 on SIGTERM or SIGINT, like
// Kubernetes' pause. The node's pause image is this static binary in an
// image svc-image builds, so the node needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
