package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `admin project restart` with the local driver, as the kubernetes case
// (TestKubernetesDriver step 4): a mode change leaves the running pod
// alone (spec 3.1); after the restart the next request stops that pod
// gracefully — its shutdown flush commits and persists what was pending —
// and starts one with the row's mode.
func TestLocalDriverProjectRestart(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	ws := filepath.Join(w.dataDir, "runtimes", w.project, "workspace")
	message := func(text string) {
		t.Helper()
		res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"`+text+`"}`), hookHeaders())
		if res.StatusCode != http.StatusOK {
			t.Fatalf("message %q: %d %s", text, res.StatusCode, body)
		}
	}
	w.e.upstream.Script(agentScript("notes/a.txt", "one", "wrote a", nil))
	message("write a")
	first := w.e.admin("runtime", "show", "--project", w.project)
	if first["driver"] != "local" || first["cloudSyncMode"] != "git_only" {
		t.Fatalf("first runtime %v", first)
	}

	// A mode change alone keeps the running pod.
	w.e.admin("project", "set-sync-mode", "--id", w.project, "--mode", "dual_shadow")
	w.e.upstream.Script(agentScript("notes/b.txt", "two", "wrote b", nil))
	message("write b")
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["endpoint"] != first["endpoint"] || ra["cloudSyncMode"] != "git_only" {
		t.Fatalf("the mode change replaced the running pod: %v (was %v)", ra, first)
	}

	// A change no turn committed yet: the old pod's shutdown flush keeps it.
	must(t, os.WriteFile(filepath.Join(ws, "pending.txt"), []byte("pending\n"), 0o644))
	r := w.e.admin("project", "restart", "--id", w.project)
	if r["restarted"] != true || r["driver"] != "local" {
		t.Fatalf("restart: %v", r)
	}
	w.e.upstream.Script(agentScript("notes/c.txt", "three", "wrote c", nil))
	message("after restart")
	ra := w.e.admin("runtime", "show", "--project", w.project)
	if ra["driver"] != "local" || ra["endpoint"] == first["endpoint"] || ra["cloudSyncMode"] != "dual_shadow" {
		t.Fatalf("runtime after the restart %v, want a new local pod in dual_shadow (was %v)", ra, first)
	}
	// pending.txt was committed by the old pod's shutdown flush, not by the
	// new pod's first turn.
	out, err := exec.Command("git", "-C", ws, "log", "--format=%s", "--", "pending.txt").CombinedOutput()
	if err != nil {
		t.Fatalf("git log: %v %s", err, out)
	}
	subjects := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(subjects) != 1 || subjects[0] == "" || strings.Contains(subjects[0], "after restart") {
		t.Fatalf("pending.txt committed by %q, want one commit of the old pod's shutdown flush", subjects)
	}
}
