package repoarchive_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/repoarchive"
)

const core = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"

// Sanitize removes what could run a command or read outside the
// repository, replaces the config and carries over only the object format.
func TestSanitize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, config, want, wantErr string
	}{
		{name: "sha1 with a hostile config", config: "[core]\n\tfsmonitor = touch /tmp/pwned\n[alias]\n\tx = !sh\n", want: core},
		{name: "sha256 carried over", config: "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tObjectFormat = \"SHA256\"\n",
			want: "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"},
		{name: "no config", want: core},
		{name: "unknown format", config: "[extensions]\n\tobjectformat = md5\n", wantErr: `unsupported object format "md5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, rel := range append(append([]string{}, repoarchive.Untrusted...), "extra/x", "objects/pack/keep") {
				p := filepath.Join(dir, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.config != "" {
				if err := os.WriteFile(filepath.Join(dir, "config"), []byte(tc.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := repoarchive.Sanitize(dir, core, "extra")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "config")); string(b) != tc.want {
				t.Errorf("config %q, want %q", b, tc.want)
			}
			for _, rel := range append(append([]string{}, repoarchive.Untrusted...), "extra") {
				if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(rel))); !os.IsNotExist(err) {
					t.Errorf("%s survived: %v", rel, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "objects/pack/keep")); err != nil {
				t.Errorf("objects were touched: %v", err)
			}
		})
	}
}
