package durable

import (
	"fmt"

	"github.com/svc-dev/svc/shared/repoarchive"
)

// podConfig is the fresh .git/config of a restored work tree (git init's
// core settings).
const podConfig = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"

// Sanitize makes a restored .git (gitDir, before any git command touches
// it) safe to run git in (docs/design.md §7 "restored repositories") with
// repoarchive.Sanitize, the API's hydrate does the same: the archive's
// config is replaced by a fresh one — so no core.fsmonitor,
// filter.<x>.smudge/clean, diff or merge driver, core.sshCommand,
// include.path or alias it names can take effect, and a .gitattributes in
// the tree that routes files to such a driver names one that is not
// configured (git then leaves the content as it is) — and the untrusted
// parts are removed. Only the object format is carried over. The pod then
// re-applies its own settings (gitsync.Repo.Configure, the large-file
// filter of lfs.Setup) through git config.
func Sanitize(gitDir string) error {
	if err := repoarchive.Sanitize(gitDir, podConfig); err != nil {
		return fmt.Errorf("durable: restored config: %w", err)
	}
	return nil
}
