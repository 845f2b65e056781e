package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Ctrl-C of the API server (`make run`: apiserver dev) stops its local pods
// before it closes its listener, so a pod's shutdown still reaches it: a
// dual_shadow pod's final flush commits what no turn committed and pushes
// it to the API's git endpoint, whose post-receive records its row.
func TestInterruptStopsPodsBeforeTheListener(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	w.e.admin("project", "set-sync-mode", "--id", w.project, "--mode", "dual_shadow")
	ws := filepath.Join(w.dataDir, "runtimes", w.project, "workspace")
	w.e.upstream.Script(agentScript("notes/a.txt", "one", "wrote a", nil))
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"write a"}`), hookHeaders())
	if res.StatusCode != http.StatusOK {
		t.Fatalf("message: %d %s", res.StatusCode, body)
	}
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["cloudSyncMode"] != "dual_shadow" {
		t.Fatalf("runtime %v, want a dual_shadow pod", ra)
	}
	// A change no turn committed: only the pod's final flush can push it.
	must(t, os.WriteFile(filepath.Join(ws, "pending.txt"), []byte("pending\n"), 0o644))

	must(t, w.api.cmd.Process.Signal(os.Interrupt))
	_ = w.api.cmd.Wait()

	out, err := exec.Command("git", "-C", ws, "log", "-1", "--format=%H", "--", "pending.txt").CombinedOutput()
	if err != nil {
		t.Fatalf("git log: %v %s", err, out)
	}
	head := strings.TrimSpace(string(out))
	if head == "" {
		t.Fatal("the pod's final flush did not commit pending.txt")
	}
	st, err := store.Open(w.e.dbURL, "")
	must(t, err)
	defer st.Close()
	shas, err := st.CheckpointSHAs(context.Background(), w.project)
	must(t, err)
	if !shas[head] {
		log, _ := os.ReadFile(filepath.Join(w.dataDir, "runtimes", w.project, "podagent.log"))
		t.Fatalf("the final flush's commit %s has no row: its push did not reach the API (rows %v)\npod log tail:\n%s",
			head, shas, tail(string(log), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
