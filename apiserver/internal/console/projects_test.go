package console_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

// The project page reads the durable .git through the same hydrate path as
// the checkpoint API: newest first, paginated, the publish/* tag with a
// Published badge on the highlighted published commit, and the commit view
// with its diff.
func TestProjectPages(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		objs, err := fs.New(filepath.Join(t.TempDir(), "objects"), fs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hyd := hydratetest.NewManager(t, hydrate.Options{Store: objs, Dir: filepath.Join(t.TempDir(), "hydrated"), Checkpoints: st}, nil)
		w := newWorldTB(t, st, hyd)
		b := w.browser(t)
		b.signIn(w.member)
		proj := "/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID

		if r := b.get(proj); r.status != http.StatusOK || !strings.Contains(r.body, "No durable repository yet") {
			t.Fatalf("before the first persist: %d", r.status)
		}

		work := hydratetest.NewWork(t)
		n := console.GraphPageSize + 3
		var shas []string
		for i := 0; i < n; i++ {
			shas = append(shas, work.Commit(fmt.Sprintf("turn %02d", i), map[string]string{"notes.txt": fmt.Sprintf("line %d\n", i)}))
		}
		published, tag := shas[n-2], "publish/site/1700000000"
		work.Git("tag", "-a", "-m", "publish", tag, published)
		work.Persist(objs, w.projA.ID)
		if _, err := st.SetPublished(ctx, w.projA.ID, published, tag); err != nil {
			t.Fatal(err)
		}

		r := b.get(proj)
		commitRE := regexp.MustCompile(`<li class="commit( published-commit)?">`)
		if got := len(commitRE.FindAllString(r.body, -1)); r.status != http.StatusOK || got != console.GraphPageSize {
			t.Fatalf("first page: %d, %d commits", r.status, got)
		}
		if strings.Index(r.body, fmt.Sprintf("turn %02d", n-1)) > strings.Index(r.body, fmt.Sprintf("turn %02d", n-2)) {
			t.Fatal("the graph is not newest first")
		}
		hl := regexp.MustCompile(`(?s)<li class="commit published-commit">.*?</li>`).FindString(r.body)
		if !strings.Contains(hl, published) || !strings.Contains(hl, `class="badge published"`) || !strings.Contains(hl, tag) {
			t.Fatalf("published commit entry: %q", hl)
		}
		if strings.Count(r.body, `class="badge published"`) != 1 {
			t.Fatal("more than one commit has the Published badge")
		}
		next := regexp.MustCompile(`href="([^"]+\?cursor=[^"]+)" rel="next"`).FindStringSubmatch(r.body)
		if next == nil {
			t.Fatal("no link to older commits")
		}
		r = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
		if got := len(commitRE.FindAllString(r.body, -1)); got != 3 || !strings.Contains(r.body, "turn 00") || strings.Contains(r.body, `rel="next"`) {
			t.Fatalf("second page: %d commits", got)
		}

		r = b.get(proj + "/commits/" + published)
		if r.status != http.StatusOK || !strings.Contains(r.body, `class="badge published"`) ||
			!strings.Contains(r.body, `<span class="add">&#43;line 31`) || !strings.Contains(r.body, `<span class="del">-line 30`) ||
			!strings.Contains(r.body, "notes.txt") {
			t.Fatalf("commit page: %d %.3000s", r.status, r.body)
		}
		for _, c := range []struct {
			sha  string
			want int
		}{{strings.Repeat("0", 40), http.StatusNotFound}, {"not-a-sha", http.StatusBadRequest}} {
			if r := b.get(proj + "/commits/" + c.sha); r.status != c.want {
				t.Fatalf("commit %s: %d, want %d", c.sha, r.status, c.want)
			}
		}
		// The projects list shows the publish and the last checkpoint row
		// that the hydrate reconciled.
		r = b.get("/console/w/" + w.wsA.ID + "/projects")
		if !strings.Contains(r.body, tag) || !strings.Contains(r.body, `class="badge published"`) {
			t.Fatal("the projects list lacks the publish")
		}
	})
}
