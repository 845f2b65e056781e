package assets

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
)

func TestPatternEscapes(t *testing.T) {
	t.Parallel()
	for rel, want := range map[string]string{
		"media/clip.bin":  "/media/clip.bin",
		"a*b?[c].mp4":     `/a\*b\?\[c\].mp4`,
		"trailing space ": `/trailing space\ `,
		"#not-a-comment":  "/#not-a-comment",
		`back\slash.bin`:  `/back\\slash.bin`,
		"!not-a-negation": "/!not-a-negation",
	} {
		if got := Pattern(rel); got != want {
			t.Errorf("Pattern(%q) = %q, want %q", rel, got, want)
		}
	}
}

func TestValidRelRefusesEscapes(t *testing.T) {
	t.Parallel()
	for rel, want := range map[string]bool{"media/a.bin": true, "../x": false, ".git/config": false,
		"/abs": false, "a/../../b": false, "": false, `a\b`: false} {
		if got := validRel(rel); got != want {
			t.Errorf("validRel(%q) = %v, want %v", rel, got, want)
		}
	}
}

// The managed block lists the large files and keeps the user's own lines;
// uploads and pruning follow the work tree; Restore brings the files back.
func TestSyncExcludeUploadPruneRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ws := t.TempDir()
	store, err := fsstore.New(t.TempDir(), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, ".git", "info"), 0o755))
	must(os.WriteFile(filepath.Join(ws, ".git", "info", "exclude"), []byte("# mine\n*.log\n"), 0o644))
	must(os.MkdirAll(filepath.Join(ws, "media"), 0o755))
	big := bytes.Repeat([]byte("x"), 200)
	must(os.WriteFile(filepath.Join(ws, "media", "a.bin"), big, 0o644))
	must(os.WriteFile(filepath.Join(ws, "media", "b.bin"), big, 0o644))
	must(os.WriteFile(filepath.Join(ws, "small.txt"), []byte("s"), 0o644))
	a := New(ownership.New(ownership.Options{Store: store, ProjectID: "p1"}), Options{Store: store, ProjectID: "p1", Workspace: ws, Threshold: 100, StateFile: filepath.Join(ws, ".git", "svc-agent", "assets.json")})
	must(a.TrackLarge(ctx))
	must(a.Push(ctx))
	ex, _ := os.ReadFile(filepath.Join(ws, ".git", "info", "exclude"))
	if !strings.HasPrefix(string(ex), "# mine\n*.log\n") || !strings.Contains(string(ex), "/media/a.bin\n/media/b.bin\n") || strings.Contains(string(ex), "small") {
		t.Fatalf("exclude file:\n%s", ex)
	}
	keys, err := a.Keys(ctx)
	must(err)
	if strings.Join(keys, ",") != "media/a.bin,media/b.bin" {
		t.Fatalf("keys %v", keys)
	}
	must(os.Remove(filepath.Join(ws, "media", "a.bin")))
	must(a.TrackLarge(ctx))
	must(a.Push(ctx))
	keys, _ = a.Keys(ctx)
	if strings.Join(keys, ",") != "media/b.bin" {
		t.Fatalf("after removal: keys %v", keys)
	}
	if _, err := store.Head(ctx, objstore.AssetKey("p1", "media/a.bin")); err == nil {
		t.Fatal("removed file's asset not pruned")
	}
	// A fresh workspace gets the assets back.
	ws2 := t.TempDir()
	b := New(ownership.New(ownership.Options{Store: store, ProjectID: "p1", Pod: "b"}), Options{Store: store, ProjectID: "p1", Workspace: ws2, Threshold: 100})
	wrote, err := b.Restore(ctx)
	must(err)
	got, _ := os.ReadFile(filepath.Join(ws2, "media", "b.bin"))
	if len(wrote) != 1 || !bytes.Equal(got, big) || !b.IsOffloaded("media/b.bin") {
		t.Fatalf("restore wrote %v, %d bytes", wrote, len(got))
	}
	must(b.ClearExclude())
	ex, _ = os.ReadFile(filepath.Join(ws2, ".git", "info", "exclude"))
	if strings.Contains(string(ex), "svc") {
		t.Fatalf("exclude block not cleared: %s", ex)
	}
}
