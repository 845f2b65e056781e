package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// objectFormatRE reads extensions.objectformat from a config as text.
var objectFormatRE = regexp.MustCompile(`(?im)^\s*objectformat\s*=\s*"?([a-z0-9]+)"?\s*$`)

// untrusted are the parts of a restored .git that could make git run a
// command or read outside the repository: hook scripts, per-worktree
// config, alternates, attributes (filter/diff/merge drivers), links to
// other git directories, and the pod's own state of another pod.
var untrusted = []string{"hooks", "config.worktree", "objects/info/alternates", "objects/info/http-alternates",
	"info/attributes", "commondir", "gitdir", "worktrees", "modules", StateDirName}

// Sanitize makes a restored .git (gitDir, before any git command touches
// it) safe to run git in (docs/design.md §7 "restored
// repositories"): the archive's config is replaced by a fresh one — so no
// core.fsmonitor, filter.<x>.smudge/clean, diff or merge driver,
// core.sshCommand, include.path or alias it names can take effect, and a
// .gitattributes in the tree that routes files to such a driver names one
// that is not configured (git then leaves the content as it is) — and the
// untrusted parts are removed. Only the object format is carried over. The
// pod then re-applies its own settings (gitsync.Repo.Configure, the
// large-file filter of lfs.Setup) through git config.
func Sanitize(gitDir string) error {
	objectFormat := ""
	if b, err := os.ReadFile(filepath.Join(gitDir, "config")); err == nil {
		if m := objectFormatRE.FindSubmatch(b); m != nil {
			objectFormat = strings.ToLower(string(m[1]))
		}
	}
	for _, rel := range untrusted {
		if err := os.RemoveAll(filepath.Join(gitDir, filepath.FromSlash(rel))); err != nil {
			return err
		}
	}
	cfg := "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
	switch objectFormat {
	case "", "sha1":
	case "sha256":
		cfg = strings.Replace(cfg, "repositoryformatversion = 0", "repositoryformatversion = 1", 1) +
			"[extensions]\n\tobjectformat = sha256\n"
	default:
		return fmt.Errorf("durable: unsupported object format %q in the restored config", objectFormat)
	}
	return os.WriteFile(filepath.Join(gitDir, "config"), []byte(cfg), 0o644)
}
