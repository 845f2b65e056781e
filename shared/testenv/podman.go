package testenv

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Podman runs containers for the tests with the flags this kind of host
// needs (shared/reference/containers: runc, since crun refuses cgroup v1
// hybrid hosts, and nofile/nproc limits under the host's hard limit).
type Podman struct {
	Bin string
}

// PodmanRunFlags are added to every `podman run`.
var PodmanRunFlags = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// NeedPodman fails t when podman is not installed (.ci/run installs it;
// a container test never skips).
func NeedPodman(t testing.TB) *Podman {
	t.Helper()
	RequireTool(t, "podman")
	RequireTool(t, "runc")
	p, _ := exec.LookPath("podman")
	return &Podman{Bin: p}
}

// Cmd is `podman --runtime runc ARGS…`.
func (p *Podman) Cmd(args ...string) *exec.Cmd {
	return exec.Command(p.Bin, append([]string{"--runtime", "runc"}, args...)...)
}

// Out runs podman and returns its trimmed stdout, or an error with stderr.
func (p *Podman) Out(args ...string) (string, error) {
	cmd := p.Cmd(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Must is Out that fails t.
func (p *Podman) Must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := p.Out(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Run starts a detached container (`podman run -d` with PodmanRunFlags and
// args) and removes it, with its logs in the test output on failure, when
// the test ends. It returns the container's id.
func (p *Podman) Run(t testing.TB, args ...string) string {
	t.Helper()
	id := p.Must(t, append(append([]string{"run", "-d"}, PodmanRunFlags...), args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.Cmd("logs", id).CombinedOutput()
			t.Logf("container %.12s logs:\n%s", id, logs)
		}
		_, _ = p.Out("rm", "-f", "-t", "0", id)
	})
	return id
}

// Volume creates a named volume removed when the test ends.
func (p *Podman) Volume(t testing.TB, name string) string {
	t.Helper()
	p.Must(t, "volume", "create", name)
	t.Cleanup(func() { _, _ = p.Out("volume", "rm", "-f", name) })
	return name
}

// Mountpoint is where the named volume's files are on the host.
func (p *Podman) Mountpoint(t testing.TB, volume string) string {
	t.Helper()
	return p.Must(t, "volume", "inspect", "--format", "{{.Mountpoint}}", volume)
}
