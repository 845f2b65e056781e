package e2e

// A morning rush on the local driver, on `make run`'s defaults (SQLite and the
// fs object store under the data dir, the real podagent): many projects'
// first messages at the same moment. Each pod is started on a listener the
// driver opened, and its readiness names its project, so no message can
// reach another project's pod (which would refuse it with 401
// invalid_runtime_token).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// burstProjectsEnv sets how many projects send their first message at once
// (default 24; the figure the product promises is 200:
// SVC_TEST_BURST_PROJECTS=200).
const burstProjectsEnv = "SVC_TEST_BURST_PROJECTS"

func burstProjects(t *testing.T) int {
	t.Helper()
	n := 24
	if v := os.Getenv(burstProjectsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			t.Fatalf("%s=%q: want a count of at least 2", burstProjectsEnv, v)
		}
	}
	return n
}

// sqliteEnv is an env on the embedded defaults: no database URL (SQLite under
// the data dir), the fs store, and the fake upstream behind the catalog.
func sqliteEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := &env{t: t, upstream: fakeupstream.New(t)}
	dir := t.TempDir()
	e.models, e.plans = filepath.Join(dir, "models.yaml"), filepath.Join(dir, "plans.yaml")
	e.writeModels()
	must(t, os.WriteFile(e.plans, []byte(plansYAML), 0o600))
	return e, t.TempDir()
}

type burstWorld struct {
	key      string
	projects []string
	secrets  map[string]string
}

// seedBurst creates a workspace on the bench plan, a member's key and n
// projects with a channel secret each, straight in the SQLite store.
func seedBurst(t *testing.T, dataDir string, n int) burstWorld {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open("", dataDir)
	must(t, err)
	defer st.Close()
	ws, err := st.CreateWorkspace(ctx, "rush", "bench")
	must(t, err)
	u, err := st.CreateUser(ctx, "rush@acme.test")
	must(t, err)
	_, err = st.SetMember(ctx, ws.ID, u.ID, store.RoleOwner)
	must(t, err)
	k, err := apikey.Issue(ctx, st, ws.ID, u.ID, "rush")
	must(t, err)
	w := burstWorld{key: k.Key, secrets: map[string]string{}}
	for i := range n {
		p, err := st.CreateProject(ctx, ws.ID, fmt.Sprintf("p%03d", i))
		must(t, err)
		secret := "hook-" + p.ID
		_, err = st.SetChannel(ctx, p.ID, &secret, nil)
		must(t, err)
		w.projects = append(w.projects, p.ID)
		w.secrets[p.ID] = secret
	}
	return w
}

type burstAnswer struct {
	project string
	status  int
	body    []byte
	err     error
	took    time.Duration
}

func TestLocalDriverFirstMessageBurst(t *testing.T) {
	t.Parallel()
	n := burstProjects(t)
	e, dataDir := sqliteEnv(t)
	// The first start migrates the SQLite database; the seed goes in while
	// it runs (WAL: one writer at a time, readers alongside).
	a := e.startAPI("SVC_DATA_DIR="+dataDir, "SVC_PODAGENT_BIN="+podagentBin(t), "SVC_RUNTIME_STOP_GRACE=10s")
	w := seedBurst(t, dataDir, n)

	start := make(chan struct{})
	answers := make(chan burstAnswer, n)
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 3 * time.Minute}
	for _, p := range w.projects {
		wg.Go(func() {
			<-start
			began := time.Now()
			ans := burstAnswer{project: p}
			req, err := http.NewRequest(http.MethodPost,
				a.URL+"/api/projects/"+p+"/agent-proxy/agent/channels/webhook/incoming",
				bytes.NewReader([]byte(`{"message":"first message of `+p+`"}`)))
			if err != nil {
				ans.err = err
				answers <- ans
				return
			}
			req.Header.Set("Authorization", "Bearer "+w.key)
			req.Header.Set("X-Webhook-Secret", w.secrets[p])
			req.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(req)
			if err == nil {
				ans.status = res.StatusCode
				ans.body, err = io.ReadAll(res.Body)
				res.Body.Close()
			}
			ans.err, ans.took = err, time.Since(began)
			answers <- ans
		})
	}
	close(start)
	wg.Wait()
	close(answers)

	var took []time.Duration
	for ans := range answers {
		switch {
		case ans.err != nil:
			t.Errorf("%s: %v", ans.project, ans.err)
		case ans.status != http.StatusOK:
			t.Errorf("%s: %d %s", ans.project, ans.status, ans.body)
		default:
			var reply struct{ Reply string }
			if err := json.Unmarshal(ans.body, &reply); err != nil || !strings.Contains(reply.Reply, "first message of "+ans.project) {
				t.Errorf("%s: reply %s, want its own message echoed", ans.project, ans.body)
			}
		}
		took = append(took, ans.took)
	}
	slices.Sort(took)
	t.Logf("%d first messages at once: p50 %s, p95 %s, max %s", n, took[len(took)/2],
		took[len(took)*95/100], took[len(took)-1])

	// Every project runs on its own pod, at its own address.
	st, err := store.Open("", dataDir)
	must(t, err)
	defer st.Close()
	seen := map[string]string{}
	for _, p := range w.projects {
		ra, err := st.GetRuntimeAssignment(context.Background(), p)
		if err != nil {
			t.Errorf("%s: runtime assignment: %v", p, err)
			continue
		}
		if other, dup := seen[ra.Endpoint]; dup {
			t.Errorf("%s and %s share the endpoint %s", other, p, ra.Endpoint)
		}
		seen[ra.Endpoint] = p
	}
}
