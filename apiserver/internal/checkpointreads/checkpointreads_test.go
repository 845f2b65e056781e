package checkpointreads_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// getOK is get that requires a 200.
func getOK(t testing.TB, rawURL, key string, out any) *http.Response {
	t.Helper()
	resp, m := get(t, rawURL, key, out)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, m)
	}
	return resp
}

// get sends a GET with a bearer key ("" for none) and decodes the body.
func get(t testing.TB, rawURL, key string, out any) (*http.Response, map[string]any) {
	t.Helper()
	resp, b := testhttp.Get(t, rawURL, key)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("decoding %s: %v", b, err)
		}
	}
	return resp, m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// history is the pod-like repository of the read tests.
type history struct {
	w              *hydratetest.Work
	c1, c2, c3, c4 string
	tag            string
}

func newHistory(t *testing.T) *history {
	h := &history{w: hydratetest.NewWork(t), tag: "publish/site/1700000100"}
	h.c1 = h.w.Commit("init\n\nfirst turn", map[string]string{"README.md": "# app\n", "app.js": "a\nb\nc\n"})
	h.c2 = h.w.Commit("add logo", map[string]string{"app.js": "a\nB\nc\nd\n", "logo.png": "\x89PNG\x00\x01\x02binary\x00"})
	h.w.Remove("README.md")
	h.c3 = h.w.Commit("drop readme", nil)
	h.w.Tag(h.tag, "publish site")
	h.c4 = h.w.Commit("tweak", map[string]string{"app.js": "a\nB\nc\nd\ne\n"})
	return h
}

func (f *fx) url(path string) string { return f.URL + "/api/projects/" + f.Project.ID + path }

type fx struct{ *servertest.Hydrated }

func setup(t *testing.T) (*fx, *history) {
	f := &fx{servertest.NewHydrated(t, nil)}
	h := newHistory(t)
	h.w.Persist(f.Objects, f.Project.ID)
	return f, h
}

func TestGraphNewestFirstWithPublishedBadge(t *testing.T) {
	t.Parallel()
	f, h := setup(t)
	var g checkpointreads.GraphResponse
	resp := getOK(t, f.url("/checkpoints/graph"), f.Key, &g)
	if resp.Header.Get(hydrate.HeaderETag) == "" || resp.Header.Get(hydrate.HeaderStale) != "" {
		t.Fatalf("hydrate headers: %v", resp.Header)
	}
	if g.Head != h.c4 || g.Branch != "main" || g.NextCursor != "" {
		t.Fatalf("head=%s branch=%s cursor=%q", g.Head, g.Branch, g.NextCursor)
	}
	want := []string{h.c4, h.c3, h.c2, h.c1}
	if len(g.Commits) != 4 {
		t.Fatalf("%d commits", len(g.Commits))
	}
	for i, c := range g.Commits {
		if c.SHA != want[i] {
			t.Fatalf("commit %d = %s, want %s", i, c.SHA, want[i])
		}
		wantPublished := c.SHA == h.c3
		if c.Published != wantPublished {
			t.Fatalf("commit %s published=%v", c.SHA, c.Published)
		}
		if c.Author.Name != hydratetest.AuthorName || c.Author.Email != hydratetest.AuthorEmail || c.CommittedAt.IsZero() {
			t.Fatalf("commit %d metadata %+v", i, c)
		}
	}
	if got := g.Commits[1].Tags; len(got) != 1 || got[0] != h.tag {
		t.Fatalf("tags of c3 = %v", got)
	}
	if g.Commits[3].Message != "init\n\nfirst turn" || g.Commits[3].Subject != "init" || len(g.Commits[3].Parents) != 0 {
		t.Fatalf("root commit %+v", g.Commits[3])
	}
	if len(g.Commits[0].Parents) != 1 || g.Commits[0].Parents[0] != h.c3 {
		t.Fatalf("parents of head %v", g.Commits[0].Parents)
	}

	// The hydrate reconciled a row for every turn (the pod recorded none);
	// the root (the seed commit) is not a turn.
	cps, err := f.Store.ListCheckpoints(context.Background(), f.Project.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 {
		t.Fatalf("%d reconciled rows, want 3", len(cps))
	}
	for _, cp := range cps {
		if !cp.Reconciled {
			t.Fatalf("row %+v not marked reconciled", cp)
		}
	}
}

func TestGraphCursorPagination(t *testing.T) {
	t.Parallel()
	f, h := setup(t)
	var p1, p2 checkpointreads.GraphResponse
	get(t, f.url("/checkpoints/graph?limit=2"), f.Key, &p1)
	if len(p1.Commits) != 2 || p1.Commits[0].SHA != h.c4 || p1.Commits[1].SHA != h.c3 || p1.NextCursor == "" {
		t.Fatalf("page 1: %+v", p1)
	}
	// New commits arrive between pages: the next page does not shift.
	h.w.Commit("later", map[string]string{"x.txt": "x\n"})
	h.w.Persist(f.Objects, f.Project.ID)
	get(t, f.url("/checkpoints/graph?limit=2&cursor="+url.QueryEscape(p1.NextCursor)), f.Key, &p2)
	if len(p2.Commits) != 2 || p2.Commits[0].SHA != h.c2 || p2.Commits[1].SHA != h.c1 || p2.NextCursor != "" {
		t.Fatalf("page 2: %+v", p2)
	}
}

func TestCommitFiles(t *testing.T) {
	t.Parallel()
	f, h := setup(t)
	var c checkpointreads.CommitResponse
	getOK(t, f.url("/checkpoints/commits/"+h.c2[:7]), f.Key, &c)
	if c.SHA != h.c2 || c.Message != "add logo" || len(c.Files) != 2 {
		t.Fatalf("commit %+v", c)
	}
	byPath := map[string]checkpointreads.FileChange{}
	for _, fc := range c.Files {
		byPath[fc.Path] = fc
	}
	if js := byPath["app.js"]; js.Status != "modified" || js.Additions != 2 || js.Deletions != 1 || js.Binary {
		t.Fatalf("app.js %+v", js)
	}
	if png := byPath["logo.png"]; png.Status != "added" || !png.Binary {
		t.Fatalf("logo.png %+v", png)
	}
	if c.Stats.FilesChanged != 2 || c.Stats.Additions != 2 || c.Stats.Deletions != 1 {
		t.Fatalf("stats %+v", c.Stats)
	}

	var c3 checkpointreads.CommitResponse
	get(t, f.url("/checkpoints/commits/"+h.c3), f.Key, &c3)
	if !c3.Published || len(c3.Files) != 1 || c3.Files[0].Status != "deleted" || c3.Files[0].Deletions != 1 {
		t.Fatalf("c3 %+v", c3)
	}
	var root checkpointreads.CommitResponse
	get(t, f.url("/checkpoints/commits/"+h.c1), f.Key, &root)
	if len(root.Files) != 2 || root.Stats.Additions != 4 {
		t.Fatalf("root %+v", root)
	}

	resp, m := get(t, f.url("/checkpoints/commits/deadbeefdeadbeef"), f.Key, nil)
	if resp.StatusCode != 404 || errCode(m) != "commit_not_found" {
		t.Fatalf("unknown sha: %d %v", resp.StatusCode, m)
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	f, h := setup(t)
	var d checkpointreads.DiffResponse
	getOK(t, f.url("/checkpoints/diff"), f.Key, &d)
	if d.To != h.c4 || d.From != h.c3 || d.Truncated || !strings.Contains(d.Diff, "diff --git a/app.js b/app.js") || !strings.Contains(d.Diff, "+e\n") {
		t.Fatalf("default diff %+v", d)
	}
	get(t, f.url("/checkpoints/diff?from="+h.c1+"&to="+url.QueryEscape(h.tag)), f.Key, &d)
	if d.From != h.c1 || d.To != h.c3 || !strings.Contains(d.Diff, "deleted file mode") || !strings.Contains(d.Diff, "Binary files") {
		t.Fatalf("tag diff %+v", d)
	}
	get(t, f.url("/checkpoints/diff?to="+h.c1), f.Key, &d)
	if d.From != "" || !strings.HasPrefix(d.Diff, "diff --git ") || !strings.Contains(d.Diff, "new file mode") {
		t.Fatalf("root diff %+v", d)
	}

	// A diff over the cap is cut with a clear marker.
	var big strings.Builder
	for i := 0; big.Len() < 2<<20; i++ {
		fmt.Fprintf(&big, "line %d of a large generated file\n", i)
	}
	h.w.Commit("big", map[string]string{"big.txt": big.String()})
	h.w.Persist(f.Objects, f.Project.ID)
	resp, _ := get(t, f.url("/checkpoints/diff"), f.Key, &d)
	if !d.Truncated || resp.Header.Get("X-Svc-Diff-Truncated") != "true" ||
		!strings.HasSuffix(d.Diff, fmt.Sprintf(checkpointreads.TruncationMarker, checkpointreads.DefaultMaxDiffBytes)) ||
		len(d.Diff) > checkpointreads.DefaultMaxDiffBytes+200 {
		t.Fatalf("truncated=%v len=%d", d.Truncated, len(d.Diff))
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	f, h := setup(t)
	ctx := context.Background()
	if _, err := f.Store.SetPublished(ctx, f.Project.ID, h.c3, h.tag); err != nil {
		t.Fatal(err)
	}
	var s checkpointreads.StatusResponse
	getOK(t, f.url("/checkpoints/status"), f.Key, &s)
	if s.Head != h.c4 || s.Branch != "main" || s.SyncMode != "git_only" {
		t.Fatalf("status %+v", s)
	}
	if !s.Durable.Exists || s.Durable.ETag == "" || s.Durable.AgeSeconds == nil || *s.Durable.AgeSeconds < 0 || s.Durable.Stale {
		t.Fatalf("durable %+v", s.Durable)
	}
	if s.Published == nil || s.Published.SHA != h.c3 || s.Published.Tag != h.tag {
		t.Fatalf("published %+v", s.Published)
	}
	// The first read reconciled the rows; the second status shows the last.
	get(t, f.url("/checkpoints/status"), f.Key, &s)
	if s.LastCheckpoint == nil || !s.LastCheckpoint.Reconciled {
		t.Fatalf("last checkpoint %+v", s.LastCheckpoint)
	}
}

func TestMissingAndCorruptObject(t *testing.T) {
	t.Parallel()
	f := &fx{servertest.NewHydrated(t, nil)}
	resp, m := get(t, f.url("/checkpoints/graph"), f.Key, nil)
	if resp.StatusCode != 404 || errCode(m) != hydrate.CodeNotFound {
		t.Fatalf("missing: %d %v", resp.StatusCode, m)
	}
	var s checkpointreads.StatusResponse
	resp, _ = get(t, f.url("/checkpoints/status"), f.Key, &s)
	if resp.StatusCode != 200 || s.Durable.Exists || s.SyncMode != "git_only" {
		t.Fatalf("status without object: %d %+v", resp.StatusCode, s)
	}

	hydratetest.PutObject(t, f.Objects, f.Project.ID, []byte("not a tarball"))
	resp, m = get(t, f.url("/checkpoints/graph"), f.Key, nil)
	if resp.StatusCode != http.StatusBadGateway || errCode(m) != hydrate.CodeCorrupt {
		t.Fatalf("corrupt without copy: %d %v", resp.StatusCode, m)
	}

	h := newHistory(t)
	h.w.Persist(f.Objects, f.Project.ID)
	get(t, f.url("/checkpoints/graph"), f.Key, nil)
	hydratetest.PutObject(t, f.Objects, f.Project.ID, []byte("corrupt again"))
	var g checkpointreads.GraphResponse
	resp, _ = get(t, f.url("/checkpoints/graph"), f.Key, &g)
	if resp.StatusCode != 200 || resp.Header.Get(hydrate.HeaderStale) != "true" ||
		resp.Header.Get(hydrate.HeaderError) != hydrate.CodeCorrupt || g.Head != h.c4 {
		t.Fatalf("corrupt with copy: %d %v head=%s", resp.StatusCode, resp.Header, g.Head)
	}
}

func TestHostileInputs(t *testing.T) {
	t.Parallel()
	f, _ := setup(t)
	cases := []struct {
		path   string
		status int
		code   string
	}{
		{"/checkpoints/commits/zzzz", 400, "invalid_sha"},
		{"/checkpoints/commits/abc", 400, "invalid_sha"},
		{"/checkpoints/commits/--output=x", 400, "invalid_sha"},
		{"/checkpoints/commits/" + url.PathEscape("HEAD~1"), 400, "invalid_sha"},
		{"/checkpoints/commits/" + strings.Repeat("a", 41), 400, "invalid_sha"},
		{"/checkpoints/diff?to=--output=x", 400, "invalid_ref"},
		{"/checkpoints/diff?from=--output=/tmp/x", 400, "invalid_ref"},
		{"/checkpoints/diff?to=-p", 400, "invalid_ref"},
		{"/checkpoints/diff?from=main..HEAD", 400, "invalid_ref"},
		{"/checkpoints/diff?to=refs/heads/../../config", 400, "invalid_ref"},
		{"/checkpoints/diff?to=" + url.QueryEscape("HEAD~1"), 400, "invalid_ref"},
		{"/checkpoints/diff?to=" + url.QueryEscape("HEAD@{1}"), 400, "invalid_ref"},
		{"/checkpoints/diff?to=" + url.QueryEscape("main:secret"), 400, "invalid_ref"},
		{"/checkpoints/diff?to=" + url.QueryEscape("a b"), 400, "invalid_ref"},
		{"/checkpoints/diff?to=no-such-branch", 404, "commit_not_found"},
		{"/checkpoints/graph?limit=0", 400, "invalid_limit"},
		{"/checkpoints/graph?limit=--all", 400, "invalid_limit"},
		{"/checkpoints/graph?cursor=--all", 400, "invalid_cursor"},
		{"/checkpoints/graph?cursor=" + "ZGVhZGJlZWZkZWFkYmVlZmRlYWRiZWVmZGVhZGJlZWZkZWFkYmVlZg", 400, "invalid_cursor"},
	}
	for _, tc := range cases {
		resp, m := get(t, f.url(tc.path), f.Key, nil)
		if resp.StatusCode != tc.status || errCode(m) != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.path, resp.StatusCode, m, tc.status, tc.code)
		}
	}
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	f, _ := setup(t)
	paths := []string{"/checkpoints/graph", "/checkpoints/status", "/checkpoints/diff", "/checkpoints/commits/abcd"}
	cases := []struct {
		name, key string
		status    int
		code      string
	}{
		{"no key", "", 401, "invalid_api_key"},
		{"bad key", "svc_sk_notarealkey", 401, "invalid_api_key"},
		{"garbage", "hello", 401, "invalid_api_key"},
		{"runtime token", f.RuntimeToken, 401, "invalid_api_key"},
		{"other workspace", f.OtherKey, 403, "project_access_denied"},
	}
	for _, p := range paths {
		for _, tc := range cases {
			resp, m := get(t, f.url(p), tc.key, nil)
			if resp.StatusCode != tc.status || errCode(m) != tc.code {
				t.Errorf("%s %s: %d %v, want %d %s", tc.name, p, resp.StatusCode, m, tc.status, tc.code)
			}
		}
	}
	resp, m := get(t, f.URL+"/api/projects/prj_nope/checkpoints/graph", f.Key, nil)
	if resp.StatusCode != 403 || errCode(m) != "project_access_denied" {
		t.Errorf("unknown project: %d %v", resp.StatusCode, m)
	}
	if f.Objects.Heads.Load() != 0 {
		t.Errorf("unauthorised requests reached object storage (%d probes)", f.Objects.Heads.Load())
	}
}

// BenchmarkGraphUnchangedETag: GET graph (limit 50) of a 1,000-commit
// repository whose object did not change: auth, membership, one HEAD
// probe to MinIO, git log. Reports the median as p50-ms.
func BenchmarkGraphUnchangedETag(b *testing.B) {
	f := &fx{servertest.NewHydrated(b, nil)}
	w := hydratetest.NewWork(b)
	w.Generate(1000, 200, false)
	w.Tag("publish/bench/1700000000", "publish")
	w.Persist(f.Objects, f.Project.ID)
	u := f.url("/checkpoints/graph")
	var g checkpointreads.GraphResponse
	if resp, m := get(b, u, f.Key, &g); resp.StatusCode != 200 || len(g.Commits) != 50 {
		b.Fatalf("warm-up: %d %v", resp.StatusCode, m)
	}
	gets := f.Objects.Gets.Load()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+f.Key)
	var durs []time.Duration
	b.ResetTimer()
	for b.Loop() {
		d, err := testhttp.Timed(http.DefaultClient, req)
		if err != nil {
			b.Fatal(err)
		}
		durs = append(durs, d)
	}
	b.StopTimer()
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
	if f.Objects.Gets.Load() != gets {
		b.Fatalf("an unchanged object was downloaded again")
	}
}

func TestEmptyRepository(t *testing.T) {
	t.Parallel()
	f := &fx{servertest.NewHydrated(t, nil)}
	w := hydratetest.NewWork(t) // git init only: unborn main
	w.Persist(f.Objects, f.Project.ID)
	var g checkpointreads.GraphResponse
	resp, m := get(t, f.url("/checkpoints/graph"), f.Key, &g)
	if resp.StatusCode != 200 || g.Head != "" || g.Branch != "main" || len(g.Commits) != 0 {
		t.Fatalf("empty repo graph: %d %v %+v", resp.StatusCode, m, g)
	}
	resp, m = get(t, f.url("/checkpoints/diff"), f.Key, nil)
	if resp.StatusCode != 404 || errCode(m) != "commit_not_found" {
		t.Fatalf("empty repo diff: %d %v", resp.StatusCode, m)
	}
}
