package syncstrategy_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/assets"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/syncstrategy"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testfile"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const token = "svc_rt_p1.test-token"

// For picks one strategy per mode from the table, the default for an empty
// mode, and refuses an unknown one naming the valid modes.
func TestForPicksOneStrategyPerMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[syncmode.Mode]syncmode.Mode{
		"": syncmode.Default, syncmode.GitOnly: syncmode.GitOnly, syncmode.S3: syncmode.S3, syncmode.DualShadow: syncmode.DualShadow,
	} {
		s, err := syncstrategy.For(in)
		if err != nil || s.Mode() != want {
			t.Errorf("For(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	if _, err := syncstrategy.For("gitonly"); err == nil || !strings.Contains(err.Error(), "git_only") {
		t.Errorf("For(gitonly) = %v, want an error naming the modes", err)
	}
}

// Each strategy wires its mode: the origin only in dual_shadow, layer 2
// suppressed (and written again while degraded) only in git_only, large
// files as assets in s3 and dual_shadow, git-lfs in git_only.
func TestEachStrategyWiresItsMode(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	lease := ownership.New(ownership.Options{ProjectID: "p1"})
	as := assets.New(lease, assets.Options{Workspace: ws, ProjectID: "p1"})
	cfg := &config.Config{ProjectID: "p1", APIURL: "http://127.0.0.1:1", RuntimeToken: token, LFS: true,
		LargeFileBytes: config.DefaultLargeFileBytes}
	parts := syncstrategy.Parts{Config: cfg, Workspace: ws, Assets: as, Log: zaptest.NewLogger(t), Lease: lease}
	for _, tc := range []struct {
		mode                          syncmode.Mode
		origin, suppressed, onDegrade bool
		assets                        bool
	}{
		{mode: syncmode.GitOnly, suppressed: true, onDegrade: true},
		{mode: syncmode.S3, assets: true},
		{mode: syncmode.DualShadow, origin: true, assets: true},
	} {
		s, err := syncstrategy.For(tc.mode)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Origin(parts) != nil; got != tc.origin {
			t.Errorf("%s: origin %v, want %v", tc.mode, got, tc.origin)
		}
		var o s3sync.Options
		s.Source(&o, as)
		if o.SuppressProjectArchive != tc.suppressed || (o.Exclude != nil) != tc.assets {
			t.Errorf("%s: layer 2 suppressed %v, excludes assets %v", tc.mode, o.SuppressProjectArchive, o.Exclude != nil)
		}
		if got := s.SuppressSource(s3sync.New(lease, o)) != nil; got != tc.onDegrade {
			t.Errorf("%s: degrade suppression callback %v, want %v", tc.mode, got, tc.onDegrade)
		}
		lf := s.LargeFiles(parts)
		if got := lf.Assets != nil && lf.Turn == syncstrategyTurn(as); got != tc.assets {
			t.Errorf("%s: large files as assets %v, want %v", tc.mode, got, tc.assets)
		}
		if got := lf.Cold != nil; got == tc.assets {
			t.Errorf("%s: git-lfs at cold start %v, want %v", tc.mode, got, !tc.assets)
		}
	}
}

// syncstrategyTurn is as as the engine's large-file hook.
func syncstrategyTurn(as *assets.Assets) gitsync.LargeFiles { return as }

// api is the API as a pod sees it: the record endpoint and, for
// dual_shadow, the project's git origin (real git http-backend).
type api struct {
	srv    *httptest.Server
	origin string // bare repository behind /api/projects/p1/git

	mu   sync.Mutex
	rows []string
}

func newAPI(t *testing.T) *api {
	a := &api{origin: filepath.Join(t.TempDir(), "git")}
	gitIn(t, "", "init", "-q", "--bare", "-b", "main", a.origin)
	gitIn(t, a.origin, "config", "http.receivepack", "true")
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Root: "/api/projects/p1",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(a.origin), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"}}
	mux := http.NewServeMux()
	mux.Handle("/api/projects/p1/git/", backend)
	mux.HandleFunc("POST /internal/projects/p1/checkpoints/record", func(w http.ResponseWriter, r *http.Request) {
		var rec wire.CheckpointRecord
		if r.Header.Get("Authorization") != "Bearer "+token || json.NewDecoder(r.Body).Decode(&rec) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.rows = append(a.rows, rec.CommitSHA)
		a.mu.Unlock()
		_ = json.NewEncoder(w).Encode(wire.CheckpointRecordResponse{ID: "row-" + rec.CommitSHA[:8], Created: true})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *api) recorded(sha string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.rows, sha)
}

// originHead is the branch at the origin ("" when it has none).
func (a *api) originHead(t *testing.T) string {
	out, err := exec.Command("git", "--git-dir", a.origin, "rev-parse", "--verify", "-q", "refs/heads/main").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Each strategy's turn writes what its mode writes (docs/sync-modes.md §1),
// and once another pod owns the project every strategy writes nothing more:
// no object, no push, no row — turns, flushes and the shutdown alike.
func TestEveryStrategyWritesItsModeAndNothingOnceFenced(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       syncmode.Mode
		durableGit bool // <p>/repo.git.tar.gz written by the turn
		source     bool // <p>/project-src.tar.gz written by the turn
		recorded   bool // the pod posts the turn's row
		pushed     bool // the origin holds the turn
	}{
		{mode: syncmode.GitOnly, durableGit: true, recorded: true},
		{mode: syncmode.S3, source: true},
		{mode: syncmode.DualShadow, source: true, pushed: true},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a := newAPI(t)
			store, err := fsstore.New(t.TempDir(), fsstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ws := t.TempDir()
			cfg := &config.Config{ProjectID: "p1", Mode: tc.mode, APIURL: a.srv.URL, RuntimeToken: token,
				Store: objstore.Config{Backend: "fs"}, WorkspaceDir: ws, LargeFileBytes: config.DefaultLargeFileBytes,
				DegradeAfterFailures: 3, HTTPAddr: "127.0.0.1:0", PersistRetryMin: time.Hour, PersistRetryMax: time.Hour}
			p, err := pod.Start(ctx, pod.Options{Config: cfg, Store: store, Log: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if p.Strategy.Mode() != tc.mode {
				t.Fatalf("strategy %s, want %s", p.Strategy.Mode(), tc.mode)
			}

			testfile.Write(t, filepath.Join(ws, "a.txt"), "one\n")
			sha, err := p.Turn(ctx, "turn 1")
			if err != nil || sha == "" {
				t.Fatalf("turn: %q, %v", sha, err)
			}
			keys := objects(t, store)
			if _, ok := keys["p1/repo.git.tar.gz"]; ok != tc.durableGit {
				t.Errorf("repo.git.tar.gz written = %v, want %v (keys %v)", ok, tc.durableGit, slices.Sorted(maps.Keys(keys)))
			}
			if _, ok := keys["p1/project-src.tar.gz"]; ok != tc.source {
				t.Errorf("project-src.tar.gz written = %v, want %v (keys %v)", ok, tc.source, slices.Sorted(maps.Keys(keys)))
			}
			if got := a.recorded(sha); got != tc.recorded {
				t.Errorf("row posted = %v, want %v", got, tc.recorded)
			}
			if got := a.originHead(t) == sha; got != tc.pushed {
				t.Errorf("origin at the turn = %v, want %v", got, tc.pushed)
			}

			// Another pod claims the project.
			other := ownership.New(ownership.Options{Store: store, ProjectID: "p1", Pod: "other"})
			if err := other.Claim(ctx); err != nil {
				t.Fatal(err)
			}
			before, originBefore := objects(t, store), a.originHead(t)
			testfile.Write(t, filepath.Join(ws, "b.txt"), "two\n")
			sha2, err := p.Turn(ctx, "turn 2")
			if !errors.Is(err, gitsync.ErrFenced) {
				t.Errorf("fenced turn: %q, %v; want ErrFenced", sha2, err)
			}
			testfile.Write(t, filepath.Join(ws, "c.txt"), "three\n")
			if _, err := p.Sync.Flush(ctx, gitsync.FlushOptions{}); !errors.Is(err, gitsync.ErrFenced) {
				t.Errorf("fenced flush: %v; want ErrFenced", err)
			}
			p.Sync.Resume(ctx)
			res := p.Shutdown(ctx)
			if after := objects(t, store); !maps.Equal(before, after) {
				t.Errorf("a fenced %s pod wrote to the store:\nbefore %v\nafter  %v (shutdown %+v)", tc.mode, before, after, res)
			}
			if got := a.originHead(t); got != originBefore {
				t.Errorf("a fenced pod pushed: origin %s, was %s", got, originBefore)
			}
			if sha2 != "" && a.recorded(sha2) {
				t.Errorf("a fenced pod posted the row of %s", sha2)
			}
		})
	}
}

// objects maps every key of the store but the ownership record to its ETag.
func objects(t *testing.T, store objstore.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := store.List(context.Background(), "", func(o objstore.ObjectInfo) error {
		if o.Key != objstore.OwnerKey("p1") {
			out[o.Key] = o.ETag
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gitIn runs a test-side git command.
func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}
