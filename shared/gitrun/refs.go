package gitrun

import (
	"context"
	"strings"
)

// Refs lists the refs of the repository at gitDir (its .git or a bare
// repository): refname → object id.
func (r *Runner) Refs(ctx context.Context, gitDir string) (map[string]string, error) {
	out, err := r.Command("for-each-ref", "--format=%(refname)%00%(objectname)").Env("GIT_DIR=" + gitDir).String(ctx)
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, sha, ok := strings.Cut(line, "\x00"); ok {
			refs[name] = sha
		}
	}
	return refs, nil
}
