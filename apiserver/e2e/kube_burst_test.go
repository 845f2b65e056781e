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
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// kubeBurstEnv sets how many projects send their first message at once on
// the kwok cluster (default 8; the product's figures are 50 and 200, as many
// podagent processes as the machine holds: SVC_TEST_KUBE_BURST=50).
// kubeBurstPoolEnv sets the warm pool's size during the rush (default 4; 0:
// no pool), kubeBurstRoundsEnv how many rushes run one after the other, each
// with new projects and the pool full again before it (default 1).
const (
	kubeBurstEnv       = "SVC_TEST_KUBE_BURST"
	kubeBurstPoolEnv   = "SVC_TEST_KUBE_BURST_POOL"
	kubeBurstRoundsEnv = "SVC_TEST_KUBE_BURST_ROUNDS"
)

// seedProjects creates n projects named prefix-000… with a webhook channel
// (secret "hook-secret") in the world's workspace, straight in the
// database.
func seedProjects(t testing.TB, dbURL, workspace, prefix string, n int) []string {
	t.Helper()
	st, err := store.Open(dbURL, "")
	must(t, err)
	defer st.Close()
	ctx := context.Background()
	secret := "hook-secret"
	var ids []string
	for i := range n {
		p, err := st.CreateProject(ctx, workspace, fmt.Sprintf("%s-%03d", prefix, i))
		must(t, err)
		_, err = st.SetChannel(ctx, p.ID, &secret, nil)
		must(t, err)
		ids = append(ids, p.ID)
	}
	return ids
}

func envCount(t *testing.T, name string, def, least int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a count of at least %d", name, v, least)
	}
	return n
}

func TestKubernetesDriverFirstMessageBurst(t *testing.T) {
	t.Parallel()
	n := envCount(t, kubeBurstEnv, 8, 2)
	poolSize := envCount(t, kubeBurstPoolEnv, 4, 0)
	rounds := envCount(t, kubeBurstRoundsEnv, 1, 1)
	w := newKubeWorld(t, kubeOpts{pool: poolSize})
	// A gate narrower than the rush: some creations queue, and with a
	// small queue some are told to come back.
	a := w.startReplica(t, "SVC_RUNTIME_POD_CREATE_QPS=4", "SVC_RUNTIME_POD_CREATE_BURST=4",
		fmt.Sprintf("SVC_RUNTIME_POD_CREATE_QUEUE=%d", max(n/2, 1)), "SVC_RUNTIME_START_TIMEOUT=120s")
	var refills []time.Duration
	for round := range rounds {
		if poolSize > 0 {
			w.waitPool(t, a, poolSize) // the pool full before the rush
		}
		projects := seedProjects(t, w.e.dbURL, w.acc.workspace, fmt.Sprintf("rush%d", round), n)
		var watch *poolWatch
		if poolSize > 0 {
			watch = watchPool(a)
		}
		firstMessageRush(t, w, a, projects)
		if poolSize == 0 {
			continue
		}
		refill := watch.refilled(t, w, projects, poolSize)
		refills = append(refills, refill)
		t.Logf("round %d: the warm pool of %d was full again %s after the last claim", round+1, poolSize, refill)
		if round+1 < rounds {
			// The rush's pods go: the next round's podagents have the machine.
			must(t, w.c.Client.CoreV1().Pods(w.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: "svc.dev/project-id"}))
		}
	}
	if len(refills) > 0 {
		slices.Sort(refills)
		t.Logf("warm pool of %d refilled after a rush of %d: p50 %s, max %s over %d rounds", poolSize, n,
			refills[len(refills)/2], refills[len(refills)-1], len(refills))
	}
}

// firstMessageRush sends each project's first webhook message at the same
// moment and checks every answer: the project's reply, or 503 with
// Retry-After.
func firstMessageRush(t *testing.T, w *kubeWorld, a *api, projects []string) {
	t.Helper()
	n := len(projects)
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

// poolWatch samples the replica's warm pool gauge from the rush's start:
// when the pool was full again after the last claim is read from it.
type poolWatch struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []poolSample
}

type poolSample struct {
	at   time.Time
	size int
}

func watchPool(a *api) *poolWatch {
	pw := &poolWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			if size, ok := scrapeGauge(a.URL, "svc_runtime_warm_pool_size"); ok {
				pw.mu.Lock()
				pw.samples = append(pw.samples, poolSample{time.Now(), size})
				pw.mu.Unlock()
			}
			select {
			case <-pw.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return pw
}

// fullAfter is when the pool held size spares again after a claim at t:
// the first full sample after the dip the claim makes. (The gauge reads
// this replica's informer, which sees the claim a moment after its
// svc.dev/claimed-at: the samples just after t may still count the
// claimed spare. The dip lasts at least a pod start: a claimed slot's
// next spare cannot be warm sooner.)
func (pw *poolWatch) fullAfter(t time.Time, size int) (time.Time, bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	dipped := false
	for _, s := range pw.samples {
		switch {
		case !s.at.After(t):
		case s.size < size:
			dipped = true
		case dipped:
			return s.at, true
		}
	}
	return time.Time{}, false
}

// refilled waits (bounded: the test fails if the pool never refills) until
// the pool is full again after the rush's last claim (the latest
// svc.dev/claimed-at of the rush's pods), and returns how long after that
// claim the gauge first read full.
func (pw *poolWatch) refilled(t *testing.T, w *kubeWorld, projects []string, size int) time.Duration {
	t.Helper()
	defer func() {
		close(pw.stop)
		<-pw.done
	}()
	ours := map[string]bool{}
	for _, p := range projects {
		ours[p] = true
	}
	l, err := w.c.Client.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "svc.dev/project-id"})
	must(t, err)
	var last time.Time
	claims := 0
	for _, p := range l.Items {
		at, err := time.Parse(time.RFC3339Nano, p.Annotations["svc.dev/claimed-at"])
		if err != nil || !ours[p.Labels["svc.dev/project-id"]] {
			continue
		}
		claims++
		if at.After(last) {
			last = at
		}
	}
	if claims == 0 {
		t.Fatalf("no first message of the rush claimed a spare of the warm pool of %d", size)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if full, ok := pw.fullAfter(last, size); ok {
			return full.Sub(last)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool of %d was not full again within 3 minutes of the rush (%d claims, the last at %s; kubelet: %v)",
				size, claims, last.Format(time.RFC3339Nano), w.kubelet.Events())
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
}

// scrapeGauge reads an unlabelled gauge from the replica's /metrics.
func scrapeGauge(apiURL, name string) (int, bool) {
	res, err := http.Get(apiURL + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err == nil
		}
	}
	return 0, false
}
