package testenv

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// Admin runs `<apiserver> admin <args…>` with env and returns its JSON
// answer. A failed run (with its stderr) or an answer that is not a JSON
// object fails t.
func Admin(t testing.TB, apiserver string, env []string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(apiserver, append([]string{"admin"}, args...)...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("admin %v: %v\n%s", args, err, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("admin %v: %v: %s", args, err, out.String())
	}
	return m
}
