package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// kill9Point is where TestKill9 kills a pod with SIGKILL.
type kill9Point struct {
	name string
	// landed: the killed turn's manifest is stored (durable, not yet
	// acknowledged — or, for a compaction, acknowledged before it began).
	landed bool
	// compaction: the pause is in the background compaction the turn
	// started (the pod runs with one increment allowed).
	compaction bool
}

// kill -9 at every point of a persist and of a compaction loses no
// acknowledged turn and never reads an increment no manifest names: after
// the kill the durable state (base + listed increments, refs from the
// manifest) passes fsck and holds what it should; a restart on the same
// disk persists and records the killed turn; and a pod on an empty disk
// restores every turn.
func TestKill9(t *testing.T) {
	t.Parallel()
	points := []kill9Point{
		{name: "after-commit"},
		{name: "mid-upload"},
		{name: "after-increment"},
		{name: "after-manifest", landed: true},
		{name: "compact-base", landed: true, compaction: true},
		{name: "compact-repoint", landed: true, compaction: true},
	}
	for _, storage := range []string{"fs", "minio"} {
		for _, point := range points {
			t.Run(storage+"/"+point.name, func(t *testing.T) {
				ctx := context.Background()
				e := newEnv(t, storage)
				e.write("a.txt", "0")
				p1 := e.start()
				e.write("a.txt", "1")
				c1 := p1.flushSHA(t)
				sigterm(t, p1)
				before, err := e.store.Head(ctx, objstore.RepoManifestKey("p1"))
				if err != nil {
					t.Fatal(err)
				}

				e.mkHook(point.name, false)
				extra := []string{"SVC_TEST_PAUSE_AT=" + point.name}
				if point.compaction {
					extra = append(extra, "SVC_DURABLE_MAX_INCREMENTS=1")
				}
				p2 := e.start(extra...)
				e.write("a.txt", "2")
				go p2.flush(t, "")
				e.waitHook(point.name, p2)
				p2.cmd.Process.Kill() // kill -9
				p2.wait(t)

				after, err := e.store.Head(ctx, objstore.RepoManifestKey("p1"))
				if err != nil {
					t.Fatal(err)
				}
				if changed := after.ETag != before.ETag; changed != point.landed {
					t.Fatalf("manifest changed by the killed pod: %v, want %v", changed, point.landed)
				}
				head, _ := e.durableHead() // fsck of base + listed increments
				if !point.landed && head != c1 {
					t.Fatalf("durable head = %s, want %s", head, c1)
				}
				if got := e.api.shas(); !point.compaction && (len(got) != 1 || got[0] != c1) {
					t.Fatalf("records = %v", got)
				}

				// Restart on the same disk: the commit made before the kill is
				// persisted and recorded at start.
				p3 := e.start()
				recs := e.api.shas()
				if len(recs) != 2 || recs[0] != c1 {
					t.Fatalf("records after restart = %v", recs)
				}
				c2 := recs[1]
				if head, _ := e.durableHead(); head != c2 {
					t.Fatalf("durable head after restart = %s, want %s", head, c2)
				}
				// The next turn persists everything.
				e.write("a.txt", "3")
				c3 := p3.flushSHA(t)
				head, list := e.durableHead()
				if head != c3 || !strings.Contains(list, c1) || !strings.Contains(list, c2) {
					t.Fatalf("durable history = %s", list)
				}
				if got := e.api.shas(); len(got) != 3 || got[2] != c3 {
					t.Fatalf("records = %v", got)
				}
				// The turn was written as an increment, not as the whole base.
				if man, _, err := repoarchive.GetManifest(ctx, e.store, "p1"); !point.compaction && (err != nil || len(man.Increments) == 0 ||
					!strings.Contains(man.Increments[len(man.Increments)-1].Key, "/repo.git.inc/")) {
					t.Fatalf("manifest after a turn: %+v, %v", man, err)
				}
				sigterm(t, p3)

				// An empty disk restores every acknowledged turn.
				ws := t.TempDir()
				p4 := e.start("SVC_WORKSPACE_DIR=" + ws)
				out, err := exec.Command("git", "-C", ws, "rev-list", "HEAD").CombinedOutput()
				if err != nil || !strings.HasPrefix(string(out), c3) || !strings.Contains(string(out), c1) || !strings.Contains(string(out), c2) {
					t.Fatalf("cold start on an empty disk: %s %v", out, err)
				}
				if out, err := exec.Command("git", "-C", ws, "fsck", "--connectivity-only").CombinedOutput(); err != nil {
					t.Fatalf("fsck after the cold start: %s %v", out, err)
				}
				sigterm(t, p4)
			})
		}
	}
}
