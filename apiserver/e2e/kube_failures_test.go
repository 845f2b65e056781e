package e2e

// The kubernetes driver's failure paths on the real control plane:
// a lost node's pod whose podagent lives on after the API forgot it (its late
// writes are fenced by the durable object's conditional PUT), and pods that
// cannot start (image pull error reported by the kubelet, unschedulable as
// the real scheduler decides) → 503 agent_start_failed with the reason.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svc-dev/svc/shared/testenv/kubetest"
)

// etag is the ETag of an object of the world's bucket ("" if absent).
func (w *kubeWorld) etag(t *testing.T, key string) string {
	t.Helper()
	mc, err := minio.New(w.s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(w.s3.AccessKey, w.s3.SecretKey, "")})
	must(t, err)
	info, err := mc.StatObject(context.Background(), w.s3.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ""
	}
	return info.ETag
}

func procEnv(p *kubetest.Process, name string) string {
	for _, kv := range p.Env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// A node is lost: the API forgets its pod (deleted), but the podagent on it
// lives on. The next message recreates the pod elsewhere, restored from the
// durable .git; the orphan's later write is refused (FENCED: its /readyz
// fails, its flush answers "fenced", its shutdown writes nothing) and the
// durable object keeps the new pod's history.
func TestKubernetesDriverFencesOrphanedPod(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", size), func(t *testing.T) {
			t.Parallel()
			kubeDriverFencesOrphanedPod(t, size)
		})
	}
}

func kubeDriverFencesOrphanedPod(t *testing.T, size int) {
	pool := fmt.Sprintf("fence-%d-%d", size, time.Now().UnixNano())
	lost := "lost-" + pool
	// A label key of its own: the subtests run side by side and each labels
	// the shared node for its replacement pod, so one key would leave that
	// node with only the last subtest's value.
	key := fmt.Sprintf("e2e-fence-%d", size)
	w := newKubeWorld(t, kubeOpts{
		orphan: func(p *corev1.Pod) bool { return p.Spec.NodeName == lost },
		sets:   []string{"runtime.nodeSelector." + key + "=" + pool},
		pool:   size,
	})
	ctx := context.Background()
	// The project's pods can only go to its own node (the nodeSelector),
	// whose pod CIDR no other pod shares: the subtests run side by side, so
	// each lost node gets a /24 of its own (a shared one hands both the same
	// pod IPs, and the orphan of one answers at the other's pod address).
	cidr := fmt.Sprintf("127.2.%d.0/24", size)
	must(t, w.c.AddNode(ctx, lost, cidr, map[string]string{key: pool}))
	t.Cleanup(func() { _ = w.c.Client.CoreV1().Nodes().Delete(context.Background(), lost, metav1.DeleteOptions{}) })
	a := w.startReplica(t)
	if size > 0 {
		w.waitPool(t, a, size)
	}

	// 1. The first pod, on the node about to be lost, writes history.
	w.e.upstream.Script(agentScript("notes/a.txt", "first", "wrote a", nil))
	if res, body := w.message(t, a, "write a"); res.StatusCode != 200 {
		t.Fatalf("first message: %d %s (kubelet: %v)", res.StatusCode, body, w.kubelet.Events())
	}
	first := w.onePod(t)
	if first.Spec.NodeName != lost {
		t.Fatalf("the first pod ran on %s, want %s", first.Spec.NodeName, lost)
	}
	orphan := w.kubelet.Process(first.Name)
	etagA := w.etag(t, w.project+"/repo.git.manifest.json")
	if orphan == nil || etagA == "" {
		t.Fatalf("no podagent process or no durable .git (its manifest) after the first turn (kubelet: %v)", w.kubelet.Events())
	}

	// 2. The node is lost: no new pod goes there, the project may go to the
	// fake node, and the API forgets the pod; its podagent keeps running.
	_, err := w.c.Client.CoreV1().Nodes().Patch(ctx, lost, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	must(t, err)
	labelNode(t, w, kubetest.NodeName, key, pool)
	must(t, w.c.Client.CoreV1().Pods(w.ns).Delete(ctx, first.Name, metav1.DeleteOptions{}))
	w.waitEvent(t, "orphan "+first.Name)
	podURL := "http://" + orphan.IP + ":8081"
	if st := getStatus(t, podURL+"/readyz"); st != 200 {
		t.Fatalf("the orphaned podagent is not serving before the replacement: /readyz %d", st)
	}

	// 3. The next message recreates the pod on the other node; it restores
	// the durable .git and writes the next turn (a newer object).
	w.e.upstream.Script(agentScript("notes/b.txt", "second", "wrote b", nil))
	if res, body := w.message(t, a, "write b"); res.StatusCode != 200 || !strings.Contains(string(body), "wrote b") {
		t.Fatalf("message after the node was lost: %d %s (kubelet: %v)", res.StatusCode, body, w.kubelet.Events())
	}
	second := w.onePod(t)
	// (A spare already running on the lost node may be claimed: the
	// node is lost for the test, not for the scheduler's past choices.)
	if second.UID == first.UID || (size == 0 && second.Spec.NodeName != kubetest.NodeName) {
		t.Fatalf("replacement pod %s on %s, want a new pod on %s", second.Name, second.Spec.NodeName, kubetest.NodeName)
	}
	etagB := w.etag(t, w.project+"/repo.git.manifest.json")
	if etagB == "" || etagB == etagA {
		t.Fatalf("the replacement's turn did not write a newer durable .git (%q → %q)", etagA, etagB)
	}
	commits, checkpoints := w.graphCommits(t, a), w.e.checkpointCount(w.project)

	// 4. The orphan's late write: a change in its workspace and a flush with
	// its own token. Refused as fenced; the durable object is untouched.
	ws := procEnv(orphan, "SVC_WORKSPACE_DIR")
	token, err := os.ReadFile(procEnv(orphan, "SVC_RUNTIME_TOKEN_FILE")) // the kubelet's copy outlives the Secret
	if claimedSpare(first) {
		// A claimed spare's token came with its claim, kept in its data dir.
		var claim struct{ RuntimeToken string }
		b, rerr := os.ReadFile(procEnv(orphan, "SVC_DATA_DIR") + "/pod-claim.json")
		err = errors.Join(rerr, json.Unmarshal(b, &claim))
		token = []byte(claim.RuntimeToken)
	}
	if ws == "" || err != nil {
		t.Fatalf("the orphan's workspace %q / token: %v", ws, err)
	}
	must(t, os.WriteFile(ws+"/late-write.txt", []byte("written by the pod of a lost node\n"), 0o644))
	req, _ := http.NewRequest(http.MethodPost, podURL+"/agent/git-flush", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	var flush map[string]any
	_ = json.NewDecoder(res.Body).Decode(&flush)
	res.Body.Close()
	if res.StatusCode < 400 || !strings.Contains(fmt.Sprint(flush), "fenced") {
		t.Errorf("the orphan's flush: %d %v, want the fenced refusal", res.StatusCode, flush)
	}
	if st := getStatus(t, podURL+"/readyz"); st == 200 {
		t.Error("the fenced orphan still reports ready")
	}
	if !strings.Contains(orphan.Log(), "FENCED") {
		t.Errorf("the orphan did not log FENCED:\n%s", orphan.Log())
	}
	if e := w.etag(t, w.project+"/repo.git.manifest.json"); e != etagB {
		t.Errorf("the orphan's late write replaced the durable .git (%q → %q)", etagB, e)
	}

	// 5. The orphan finally stops: its shutdown sequence writes nothing.
	orphan.Stop(30 * time.Second)
	if e := w.etag(t, w.project+"/repo.git.manifest.json"); e != etagB {
		t.Errorf("the orphan's shutdown replaced the durable .git (%q → %q)", etagB, e)
	}
	if w.object(t, w.project+"/project-src.tar.gz") {
		t.Error("the fenced orphan's shutdown wrote the cold-start tarball")
	}

	// 6. The history is the replacement's: the next turn builds on it.
	w.e.upstream.Script(agentScript("notes/c.txt", "third", "wrote c", nil))
	if res, body := w.message(t, a, "write c"); res.StatusCode != 200 {
		t.Fatalf("message after the orphan's write: %d %s", res.StatusCode, body)
	}
	if p := w.onePod(t); p.UID != second.UID {
		t.Errorf("the replacement was replaced: %s → %s", second.Name, p.Name)
	}
	if n := w.e.checkpointCount(w.project); n != checkpoints+1 {
		t.Errorf("checkpoint rows %d, want %d (the replacement's and the last turn's; none from the orphan)", n, checkpoints+1)
	}
	t.Logf("checkpoint rows: %d before the orphan's write, %d after the next turn", checkpoints, checkpoints+1)
	if n := w.graphCommits(t, a); n != commits+1 {
		t.Errorf("graph: %d commits, want %d (the replacement's history plus the last turn)", n, commits+1)
	}
}

// labelNode sets a label on a node for the test's duration.
func labelNode(t *testing.T, w *kubeWorld, node, key, value string) {
	t.Helper()
	patch := func(v any) error {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
		_, err := w.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	must(t, patch(value))
	t.Cleanup(func() { _ = patch(nil) })
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// Pods that cannot start answer 503 agent_start_failed with Retry-After
// and the reason, at once (not after the start timeout): the kubelet cannot
// pull the podagent image; no node matches the pod (the real scheduler).
func TestKubernetesDriverStartFailures(t *testing.T) {
	t.Parallel()
	pullErr := &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
		Message: `Back-off pulling image "ghcr.io/svc-dev/svc-podagent:missing"`}
	for _, tc := range []struct {
		name string
		o    kubeOpts
		want []string
	}{
		{"image pull error", kubeOpts{waiting: func(*corev1.Pod) *corev1.ContainerStateWaiting { return pullErr }},
			[]string{"container podagent: ImagePullBackOff", "Back-off pulling image"}},
		{"unschedulable", kubeOpts{sets: []string{"runtime.nodeSelector.e2e-pool=nowhere"}},
			[]string{"unschedulable", "didn't match Pod's node affinity/selector"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newKubeWorld(t, tc.o)
			a := w.startReplica(t) // start timeout 60 s
			began := time.Now()
			res, body := w.message(t, a, "hello")
			if res.StatusCode != 503 || errCode(t, body) != "agent_start_failed" || res.Header.Get("Retry-After") == "" {
				t.Fatalf("%d %s (Retry-After %q, kubelet: %v)", res.StatusCode, body, res.Header.Get("Retry-After"), w.kubelet.Events())
			}
			for _, want := range tc.want {
				if !strings.Contains(string(body), want) {
					t.Errorf("the 503 does not carry %q: %s", want, body)
				}
			}
			if strings.Contains(string(body), "not Ready within") {
				t.Errorf("the failure waited for the start timeout instead of reporting its reason: %s", body)
			}
			for _, ev := range w.kubelet.Events() {
				if strings.HasPrefix(ev, "start ") {
					t.Errorf("a podagent ran for a pod that cannot start: %v", w.kubelet.Events())
				}
			}
			t.Logf("503 after %s: %s", time.Since(began).Round(time.Millisecond), body)
		})
	}
}
