package gitrun_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/svc-dev/svc/shared/gitrun"
)

// Values with quotes, "!" and spaces reach git as they were: git itself
// reads them back.
func TestConfigParametersRoundTrip(t *testing.T) {
	t.Parallel()
	want := `Authorization: Bearer it's! a "token"`
	cmd := exec.CommandContext(context.Background(), "git", "config", "--get", "http.https://api/x.extraheader")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + t.TempDir(),
		gitrun.ConfigParameters([][2]string{{"http.https://api/x.extraHeader", want}, {"credential.helper", ""}})}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git config: %v", err)
	}
	if got := string(out); got != want+"\n" {
		t.Fatalf("git read %q, want %q", got, want)
	}
}
