package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An unknown runtime driver or storage backend stops `apiserver serve` at
// start with a message naming the valid choices (not a warning and 503s).
func TestServeRefusesUnknownSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, want string }{
		{"SVC_RUNTIME_DRIVER=nope", `SVC_RUNTIME_DRIVER="nope" is not a runtime driver of this build; choose one of: local, kubernetes, metal`},
		{"SVC_STORAGE=nope", "SVC_STORAGE"},
		// A known driver that cannot run as configured refuses too.
		{"SVC_RUNTIME_DRIVER=metal", "SVC_RUNTIME_DRIVER=metal: runtime driver metal needs SVC_METAL_HOST_URL and SVC_METAL_HOST_TOKEN"},
		{"SVC_RUNTIME_DRIVER=kubernetes", "SVC_RUNTIME_DRIVER=kubernetes needs SVC_RUNTIME_POD_TEMPLATE_FILE"},
		{"SVC_LOG_FORMAT=xml", `SVC_LOG_FORMAT: log format "xml": choose json or console`},
		// A mistyped variable refuses rather than falling back to a default.
		{"SVC_RUNTIME_DRIVR=local", "SVC_RUNTIME_DRIVR (did you mean SVC_RUNTIME_DRIVER?)"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, apiserverBin, "serve")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "SVC_DATA_DIR=" + t.TempDir(), "SVC_HTTP_ADDR=127.0.0.1:0", tc.env}
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("serve with %s: err %v (context %v), want a prompt start-up error\n%s", tc.env, err, ctx.Err(), out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve with %s said:\n%s\nwant it to contain %q", tc.env, out, tc.want)
			}
		})
	}
}

// A data directory has one owner: a second `apiserver serve` on
// the same SVC_DATA_DIR refuses to start with an error naming the running
// one (its pid and host, from <data dir>/svc.lock) before it clears
// anything; the first replica's hydrated copies survive and it keeps
// answering.
func TestSecondServerOnOneDataDirRefusesToStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	first := e.startAPI("SVC_DATA_DIR=" + dir)
	marker := filepath.Join(dir, "hydrated", "prj_marker", "v00000001", "HEAD")
	must(t, os.MkdirAll(filepath.Dir(marker), 0o755))
	must(t, os.WriteFile(marker, []byte("ref: refs/heads/main\n"), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, apiserverBin, "serve")
	cmd.Env = append(e.baseEnv(), "SVC_DATA_DIR="+dir, "SVC_HTTP_ADDR=127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second serve: err %v (context %v), want a prompt refusal\n%s", err, ctx.Err(), out)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"SVC_DATA_DIR " + dir, fmt.Sprintf("in use by process %d on host %s", first.cmd.Process.Pid, host),
		filepath.Join(dir, "svc.lock")} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not name %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the second process cleared the first one's hydrated copies: %v", err)
	}
	if resp, body := do(t, "GET", first.URL+"/readyz", "", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("the first replica after the refused start: %d %s", resp.StatusCode, body)
	}
}
