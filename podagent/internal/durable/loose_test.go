package durable_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

// A project's first base is written from its work repository and keeps its
// loose objects; after the next turn the background compaction rewrites it
// as one pack, so cold starts stop paying a file per object.
func TestLooseFirstBaseIsPacked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	p := podWith(t, st, ws, "pod", durable.CompactionOptions{})
	newRepo(t, ws, 1024)
	for i := 0; i < 300; i++ {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%03d.txt", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	turn(t, ws, 0)
	if _, err := persist(ctx, p); err != nil {
		t.Fatal(err)
	}
	if m := readManifest(t, st); m.Base.Loose <= 300 {
		t.Fatalf("first base holds %d loose objects, want the work repository's (> 300)", m.Base.Loose)
	}
	head := turn(t, ws, 1)
	if _, err := persist(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.WaitBackground()
	m := readManifest(t, st)
	if m.Base.Loose != 0 || len(m.Increments) != 0 || m.Base.Refs["refs/heads/main"] != head {
		t.Fatalf("after the first turn: base loose %d, %d increments, base main %s; want a packed base at %s",
			m.Base.Loose, len(m.Increments), m.Base.Refs["refs/heads/main"], head)
	}
	// Packed bases are not rewritten again by this rule.
	turn(t, ws, 2)
	if _, err := persist(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.WaitBackground()
	if m := readManifest(t, st); len(m.Increments) != 1 {
		t.Fatalf("a turn on a packed base left %d increments, want 1", len(m.Increments))
	}
}
