package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// A Ready pod whose address still answers as another project's pod (a
// recycled IP whose previous pod has not let go of it) is asked again, not
// given up on and never routed to: the start succeeds once the project's own
// podagent answers there, and fails with the wrong pod's identity if it never
// does.
func TestWaitReadyOutlastsAnotherPodAtItsAddress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		wrongFor  int64 // readiness answers given as another project's pod
		wantReady bool
	}{
		{"the project's podagent takes over the address", 3, true},
		{"another project's pod keeps answering", 1 << 40, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != internalapi.PodReadyz {
					http.NotFound(w, r)
					return
				}
				r2 := wire.PodReadiness{Status: "ok", ProjectID: "prj_mine", Generation: 1}
				if asked.Add(1) <= c.wrongFor {
					r2 = wire.PodReadiness{Status: "ok", ProjectID: "prj_other", Generation: 1}
				}
				_ = json.NewEncoder(w).Encode(r2)
			}))
			defer srv.Close()
			host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			p, _ := strconv.Atoi(port)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "svc-rt-mine-g1", Namespace: "rt"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: PodagentContainer,
					Ports: []corev1.ContainerPort{{ContainerPort: int32(p)}}}}},
				Status: corev1.PodStatus{PodIP: host, Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
					{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			}
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(pod); err != nil {
				t.Fatal(err)
			}
			d := &Driver{o: Options{Namespace: "rt", RuntimeSecret: []byte("secret"), StartTimeout: 2 * time.Second},
				log: zap.NewNop(), pods: listerscorev1.NewPodLister(idx), client: srv.Client(),
				changed: make(chan struct{}), lastUsed: map[string]time.Time{}, inFlight: map[string]int{},
				marked: map[string]time.Time{}}
			ctx, cancel := context.WithTimeout(context.Background(), d.o.StartTimeout)
			defer cancel()
			ep, u, err := d.waitReady(ctx, "prj_mine", 1, pod.Name, newMetrics().phases(time.Now()))
			if c.wantReady {
				if err != nil {
					t.Fatalf("waitReady: %v (after %d answers)", err, asked.Load())
				}
				if u != srv.URL || ep.URL == nil {
					t.Fatalf("endpoint %q, want %q", u, srv.URL)
				}
				if n := asked.Load(); n != c.wrongFor+1 {
					t.Fatalf("asked %d times, want %d (the wrong answers, then the right one)", n, c.wrongFor+1)
				}
				return
			}
			var wrong *wire.WrongPodError
			if !errors.As(err, &wrong) || wrong.Got != "prj_other" {
				t.Fatalf("waitReady = %v, %q; want the other pod's identity in the error", err, u)
			}
			if asked.Load() < 2 {
				t.Fatalf("asked %d times: the pod was given up on at the first wrong answer", asked.Load())
			}
		})
	}
}
