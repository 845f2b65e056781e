package gitrun_test

import (
	"context"
	"maps"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/gitrun"
)

func TestRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &gitrun.Runner{}
	dir := t.TempDir()
	gitDir := filepath.Join(dir, ".git")
	refs, err := r.Refs(ctx, t.TempDir()) // not a repository
	if err == nil {
		t.Fatalf("refs of a plain directory: %v, want an error", refs)
	}
	for _, args := range [][]gitrun.Arg{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "seed"},
		{"tag", "v1"},
	} {
		if err := r.Command(args...).Dir(dir).Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	head, err := r.Command("rev-parse", "HEAD").Dir(dir).String(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err = r.Refs(ctx, gitDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"refs/heads/main": head, "refs/tags/v1": head}; !maps.Equal(refs, want) {
		t.Fatalf("refs = %v, want %v", refs, want)
	}
}
