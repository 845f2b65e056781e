package repoarchive

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Untrusted are the parts of a restored .git that could make git run a
// command or read outside the repository: hook scripts, per-worktree
// config, alternates, attributes (filter/diff/merge drivers), links to
// other git directories, and the pod's own state of another pod.
var Untrusted = []string{"hooks", "config.worktree", "objects/info/alternates", "objects/info/http-alternates",
	"info/attributes", "commondir", "gitdir", "worktrees", "modules", StateDirName}

// objectFormatRE reads extensions.objectformat from a config as text.
var objectFormatRE = regexp.MustCompile(`(?im)^\s*objectformat\s*=\s*"?([a-z0-9]+)"?\s*$`)

// ObjectFormat reads the object format of the .git at gitDir from its
// config as text (git would also act on the rest of it): "sha1", also when
// the config names none or is missing, or "sha256"; any other is an error.
func ObjectFormat(gitDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(gitDir, "config"))
	if err != nil {
		return "sha1", nil
	}
	m := objectFormatRE.FindSubmatch(b)
	if m == nil {
		return "sha1", nil
	}
	switch f := strings.ToLower(string(m[1])); f {
	case "sha1", "sha256":
		return f, nil
	default:
		return "", fmt.Errorf("unsupported object format %q", f)
	}
}

// Sanitize makes a restored .git (gitDir, before any git command touches
// it) safe to run git in (docs/design.md §7 "restored repositories"), for
// the pod and the API alike: the Untrusted parts and extra (paths relative
// to gitDir) are removed, and the archive's config is replaced by core —
// the caller's fresh config, with "repositoryformatversion = 0" — so no
// core.fsmonitor, filter, diff or merge driver, core.sshCommand,
// include.path or alias the archive names can take effect. Only the object
// format is carried over.
func Sanitize(gitDir, core string, extra ...string) error {
	format, err := ObjectFormat(gitDir)
	if err != nil {
		return err
	}
	for _, rel := range append(append([]string{}, Untrusted...), extra...) {
		if err := os.RemoveAll(filepath.Join(gitDir, filepath.FromSlash(rel))); err != nil {
			return err
		}
	}
	if format == "sha256" {
		core = strings.Replace(core, "repositoryformatversion = 0", "repositoryformatversion = 1", 1) +
			"[extensions]\n\tobjectformat = sha256\n"
	}
	return os.WriteFile(filepath.Join(gitDir, "config"), []byte(core), 0o644)
}
