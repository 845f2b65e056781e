package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var podagentOnce struct {
	sync.Once
	path string
	err  error
}

// podagentBinary returns $SVC_BIN_DIR/podagent when make built it, else
// builds the podagent module once per test process.
func podagentBinary() (string, error) {
	podagentOnce.Do(func() {
		if dir := os.Getenv("SVC_BIN_DIR"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "podagent")); err == nil {
				podagentOnce.path = filepath.Join(dir, "podagent")
				return
			}
		}
		_, file, _, _ := runtime.Caller(0)
		out := filepath.Join(os.TempDir(), fmt.Sprintf("svc-e2e-podagent-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", out, "./cmd/podagent")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "podagent")
		cmd.Stderr = os.Stderr
		podagentOnce.path, podagentOnce.err = out, cmd.Run()
	})
	return podagentOnce.path, podagentOnce.err
}
