package e2e

// A morning rush on the kubernetes driver (kwok control plane, the fake
// kubelet running a real podagent per pod): many projects' first messages at
// the same moment. Every message is answered within the sync window, or told
// to come back (503 with Retry-After) by the driver's pod creation gate —
// never a timeout, never a 5xx without Retry-After.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// kubeBurstEnv sets how many projects send their first message at once on
// the kwok cluster (default 8; the product's figures are 50 and 200, as many
// podagent processes as the machine holds: SVC_TEST_KUBE_BURST=50).
const kubeBurstEnv = "SVC_TEST_KUBE_BURST"

// seedProjects creates n projects with a webhook channel (secret
// "hook-secret") in the world's workspace, straight in the database.
func seedProjects(t testing.TB, dbURL, workspace string, n int) []string {
	t.Helper()
	st, err := store.Open(dbURL, "")
	must(t, err)
	defer st.Close()
	ctx := context.Background()
	secret := "hook-secret"
	var ids []string
	for i := range n {
		p, err := st.CreateProject(ctx, workspace, fmt.Sprintf("rush-%03d", i))
		must(t, err)
		_, err = st.SetChannel(ctx, p.ID, &secret, nil)
		must(t, err)
		ids = append(ids, p.ID)
	}
	return ids
}

func TestKubernetesDriverFirstMessageBurst(t *testing.T) {
	t.Parallel()
	n := 8
	if v := os.Getenv(kubeBurstEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			t.Fatalf("%s=%q: want a count of at least 2", kubeBurstEnv, v)
		}
	}
	w := newKubeWorld(t, kubeOpts{})
	// A gate narrower than the rush: some creations queue, and with a
	// small queue some are told to come back.
	a := w.startReplica(t, "SVC_RUNTIME_POD_CREATE_QPS=4", "SVC_RUNTIME_POD_CREATE_BURST=4",
		fmt.Sprintf("SVC_RUNTIME_POD_CREATE_QUEUE=%d", max(n/2, 1)), "SVC_RUNTIME_START_TIMEOUT=120s")
	projects := seedProjects(t, w.e.dbURL, w.acc.workspace, n)

	type answer struct {
		project, retryAfter string
		status              int
		body                []byte
		err                 error
		took                time.Duration
	}
	start := make(chan struct{})
	answers := make(chan answer, n)
	hc := &http.Client{Timeout: 150 * time.Second} // past the 120 s sync window
	var wg sync.WaitGroup
	for _, p := range projects {
		wg.Go(func() {
			<-start
			began := time.Now()
			ans := answer{project: p}
			req, err := http.NewRequest(http.MethodPost, a.URL+"/api/projects/"+p+"/agent-proxy/agent/channels/webhook/incoming",
				bytes.NewReader([]byte(`{"message":"first of `+p+`"}`)))
			if err == nil {
				req.Header = hookHeaders()
				req.Header.Set("Authorization", "Bearer "+w.acc.key)
				var res *http.Response
				if res, err = hc.Do(req); err == nil {
					ans.status, ans.retryAfter = res.StatusCode, res.Header.Get("Retry-After")
					ans.body, err = io.ReadAll(res.Body)
					res.Body.Close()
				}
			}
			ans.err, ans.took = err, time.Since(began)
			answers <- ans
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	var took []time.Duration
	ok, later := 0, 0
	for ans := range answers {
		switch {
		case ans.err != nil:
			t.Errorf("%s: no answer: %v", ans.project, ans.err)
		case ans.status == http.StatusOK:
			ok++
			took = append(took, ans.took)
		case ans.status == http.StatusServiceUnavailable && ans.retryAfter != "":
			later++
		default:
			t.Errorf("%s: %d (Retry-After %q) %s", ans.project, ans.status, ans.retryAfter, ans.body)
		}
	}
	if ok == 0 {
		t.Fatalf("none of %d first messages was answered", n)
	}
	slices.Sort(took)
	t.Logf("%d first messages at once: %d answered (p50 %s, p95 %s, max %s), %d told to retry", n, ok,
		took[len(took)/2], took[len(took)*95/100], took[len(took)-1], later)
}
