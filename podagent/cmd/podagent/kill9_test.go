package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/testhook"
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
	// merge: the pause is in the background merge of increments the turn
	// started (two increments allowed, no grace for unlisted increments):
	// the merged increment is stored and no manifest names it. The restart
	// must never read it and, as the owner, removes it at its first merge.
	merge bool
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
		{name: "merge-increment", landed: true, compaction: true, merge: true},
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
				var merging []string
				switch {
				case point.merge:
					merging = []string{"SVC_DURABLE_MAX_INCREMENTS=2", "SVC_DURABLE_RETIRE_GRACE=1ns"}
					extra = append(extra, merging...)
				case point.compaction:
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

				var orphans []string
				if point.merge {
					if orphans = unlisted(t, e); len(orphans) == 0 {
						t.Fatal("the killed merge left no merged increment in the store")
					}
					// Read as every reader does, the state holds only what the
					// manifest lists: the turn killed during its merge.
					if head, _ := e.durableHead(); head == c1 {
						t.Fatalf("durable head = %s, the turn before the killed one", head)
					}
				}

				// Restart on the same disk: the commit made before the kill is
				// persisted and recorded at start.
				var p3 *proc
				if point.merge {
					e.mkHook(testhook.Collected, true)
					p3 = e.start(append([]string{"SVC_TEST_PAUSE_AT=" + testhook.Collected}, merging...)...)
				} else {
					p3 = e.start()
				}
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
				if point.merge {
					// The owner's next merge removes the increment the killed
					// merge left (and the ones it retires, grace 1 ns) — and
					// nothing the manifest lists.
					e.waitHook(testhook.Collected, p3)
					left := map[string]bool{}
					for _, k := range unlisted(t, e) {
						left[k] = true
					}
					for _, k := range orphans {
						if left[k] {
							t.Fatalf("the orphan merged increment %s is still stored after the owner's merge", k)
						}
					}
					e.release(testhook.Collected)
				}
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

// unlisted returns the stored increments the current manifest does not
// list (a reader never opens them).
func unlisted(t *testing.T, e *env) []string {
	t.Helper()
	ctx := context.Background()
	man, _, err := repoarchive.GetManifest(ctx, e.store, "p1")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, inc := range man.Increments {
		listed[inc.Key] = true
	}
	var keys []string
	err = e.store.List(ctx, objstore.RepoIncrementPrefix("p1"), func(oi objstore.ObjectInfo) error {
		if !listed[oi.Key] && strings.HasSuffix(oi.Key, ".tar") {
			keys = append(keys, oi.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
