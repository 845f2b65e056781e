package e2e

import (
	"context"
	"os/exec"
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
