package kubernetes

// The scale envelope of one API replica on the kwok control plane
// (docs/scale.md): registered projects in PostgreSQL, runtime pods applied
// by the driver itself from the chart's pod template, marked Ready with no
// process behind them. Per pod count it reports the informer's heap per
// cached pod with and without the lean transform, the routing lookup, the
// idle reaper's pass (its time and PostgreSQL statements and rows), pod
// creation throughput, the Kubernetes API requests per second while idle,
// and per routed request the PostgreSQL statements and rows it costs and
// the connections routing 16 at a time holds. docs/scale.md has the
// command.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/kubetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Scale settings: SVC_BENCH_SCALE_PROJECTS registered projects (default
// 10000) and SVC_BENCH_SCALE_PODS, a comma-separated list of running pod
// counts (default "1000,5000").
func scaleSettings(b *testing.B) (projects int, pods []int) {
	projects = 10000
	if v := os.Getenv("SVC_BENCH_SCALE_PROJECTS"); v != "" {
		var err error
		if projects, err = strconv.Atoi(v); err != nil {
			b.Fatalf("SVC_BENCH_SCALE_PROJECTS=%q", v)
		}
	}
	list := os.Getenv("SVC_BENCH_SCALE_PODS")
	if list == "" {
		list = "1000,5000"
	}
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > projects {
			b.Fatalf("SVC_BENCH_SCALE_PODS=%q: counts between 1 and the project count", list)
		}
		pods = append(pods, n)
	}
	return projects, pods
}

// chartPodTemplate is the runtime pod template of the chart's default
// render (its golden file), so the pods weigh what production pods weigh.
func chartPodTemplate(b *testing.B) *PodTemplate {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "charts", "tests", "testdata", "default.golden"))
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "  pod-template.yaml: |\n")
	if !ok {
		b.Fatal("the chart's golden render has no pod-template.yaml")
	}
	body, _, _ := strings.Cut(rest, "\n---")
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	t, err := ParsePodTemplate(strings.Join(lines, "\n"))
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// countingTransport counts the Kubernetes API requests of the driver.
type countingTransport struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func BenchmarkScaleEnvelope(b *testing.B) {
	nProjects, counts := scaleSettings(b)
	ctx := context.Background()
	cl := kubetest.Shared(b)
	st, err := store.Open(storetest.PostgresURL(b), "")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ws, err := st.CreateWorkspace(ctx, "fleet", "free")
	if err != nil {
		b.Fatal(err)
	}
	projects := make([]store.Project, nProjects)
	seedBegan := time.Now()
	for i := range projects {
		if projects[i], err = st.CreateProject(ctx, ws.ID, fmt.Sprintf("p%05d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d projects registered in %s", nProjects, time.Since(seedBegan).Round(time.Millisecond))
	tmpl := chartPodTemplate(b)
	for _, n := range counts {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) { scaleRound(b, cl, st, tmpl, projects[:n]) })
	}
}

func scaleRound(b *testing.B, cl *kubetest.Cluster, st *store.Store, tmpl *PodTemplate, projects []store.Project) {
	ctx := context.Background()
	ns := cl.Namespace(b, "scale")
	var requests atomic.Int64
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{n: &requests, next: rt} }
	client, err := k8s.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	// The chart's runtime pods run as its runtime ServiceAccount.
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-runtime"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	newDriver := func(full bool) *Driver {
		d, err := newDriverWith(ctx, Options{Client: client, Namespace: ns, Template: tmpl, Store: st,
			RuntimeSecret: []byte("scale"), IdleTimeout: 24 * time.Hour, ReapInterval: time.Hour,
			CreateQPS: 1000, CreateBurst: 1000, CreateQueue: len(projects)}, full)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}

	// Creation throughput: the driver's own server-side apply, 16 at a time.
	d := newDriver(false)
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan store.Project)
	for range 16 {
		wg.Go(func() {
			for p := range work {
				a, err := st.ClaimRuntime(ctx, p.ID, Name, "s3")
				if err == nil {
					_, err = d.applyPod(ctx, p, "s3", a.Generation)
				}
				if err == nil {
					err = markReady(ctx, client, ns, PodName(p.ID, a.Generation))
				}
				if err == nil {
					// the chart's podagent port at the pod's IP
					err = st.SetRuntimeEndpoint(ctx, p.ID, Name, a.Generation, "http://127.0.0.1:8081", PodName(p.ID, a.Generation), "s3")
				}
				if err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, p := range projects {
		work <- p
	}
	close(work)
	wg.Wait()
	created := time.Since(began)
	_ = d.Close(ctx)
	if b.Failed() {
		return
	}

	// Heap per cached pod, lean and full: a fresh informer each, its heap
	// growth after a GC divided by the pods it holds.
	heap := func(full bool) (*Driver, float64) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d := newDriver(full)
		runtime.GC()
		runtime.ReadMemStats(&after)
		return d, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(projects))
	}
	dFull, fullBytes := heap(true)
	_ = dFull.Close(ctx)
	d, leanBytes := heap(false)
	defer d.Close(ctx)

	// From here the store runs on one connection, so the PostgreSQL
	// counters of the benchmark's database are the measured work's alone.
	st.SetMaxConns(1)
	meter := storetest.NewPGMeter(ctx, b, st.DB())

	// The idle reaper's pass: its assignments in one statement per 500
	// projects. A first pass prepares the pass's statements on the
	// connection, as a long-running replica has; the second is measured.
	// Then the Kubernetes API requests while idle (the reaper reads
	// PostgreSQL only).
	d.reap(ctx, time.Now())
	r0 := requests.Load()
	idleFrom := time.Now()
	var reapTook time.Duration
	reapPG := meter.Measure(ctx, b, func() {
		began := time.Now()
		d.reap(ctx, began)
		reapTook = time.Since(began)
	})
	idleWindow := 10 * time.Second
	<-time.After(idleWindow - min(time.Since(idleFrom), idleWindow)) // the measured window itself, not a synchronisation
	idleRPS := float64(requests.Load()-r0) / time.Since(idleFrom).Seconds()

	// A routed request, as a webhook message to a running pod makes it:
	// the Router reads the project's assignment, the driver finds the pod
	// Ready in the informer and builds the endpoint. Every running project
	// once, one at a time: statements and rows per request.
	router := &runtimes.Router{Store: st, Default: d}
	route := func(p store.Project) {
		if _, err := router.Ensure(ctx, p); err != nil {
			b.Error(err)
		}
	}
	var routedTook time.Duration
	routePG := meter.Measure(ctx, b, func() {
		began := time.Now()
		for _, p := range projects {
			route(p)
		}
		routedTook = time.Since(began)
	})
	if b.Failed() {
		return
	}

	// Connections: the store's own pool again, routed requests 16 at a
	// time; the pool's peak use and the database's backends.
	st.SetMaxConns(store.DefaultMaxConns)
	db := st.DB()
	waits0 := db.Stats().WaitCount
	var peak atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if n := int64(db.Stats().InUse); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	work = make(chan store.Project)
	for range 16 {
		wg.Go(func() {
			for p := range work {
				route(p)
			}
		})
	}
	for _, p := range projects {
		work <- p
	}
	close(work)
	wg.Wait()
	close(stopSampling)
	<-sampled
	pool := db.Stats()
	var backends int64
	if err := db.QueryRowContext(ctx, "SELECT numbackends FROM pg_stat_database WHERE datname = current_database()").Scan(&backends); err != nil {
		b.Fatal(err)
	}

	// The routing lookup: the assignment at hand (the Router loaded it),
	// the pod found Ready in the informer.
	as := make([]store.RuntimeAssignment, len(projects))
	for i, p := range projects {
		if as[i], err = st.GetRuntimeAssignment(ctx, p.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % len(projects)
		if _, err := d.EnsureAssigned(ctx, projects[k], &as[k]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(leanBytes, "B/pod-lean")
	b.ReportMetric(fullBytes, "B/pod-full")
	b.ReportMetric(float64(len(projects))/created.Seconds(), "pods/s-created")
	b.ReportMetric(reapTook.Seconds(), "s/reap-pass")
	reapPG.Report(b, 1, "/reap-pass")
	b.ReportMetric(idleRPS, "req/s-idle")
	b.ReportMetric(float64(routedTook.Nanoseconds())/float64(len(projects)), "ns/routed-req")
	routePG.Report(b, len(projects), "/req")
	b.ReportMetric(float64(pool.OpenConnections), "pg-conns-open")
	b.ReportMetric(float64(peak.Load()), "pg-conns-in-use-peak")
	b.ReportMetric(float64(pool.MaxOpenConnections), "pg-conns-max-open")
	b.ReportMetric(float64(pool.WaitCount-waits0)/float64(len(projects)), "pg-conn-waits/req")
	b.ReportMetric(float64(backends), "pg-backends")
}

// markReady gives a pod with no process behind it the status of a running
// one (scheduled, an IP, Ready).
func markReady(ctx context.Context, c k8s.Interface, ns, name string) error {
	// The scheduler (and kwok) write the pod too: read, set, retry on a
	// conflict.
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "127.0.0.1"
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}
