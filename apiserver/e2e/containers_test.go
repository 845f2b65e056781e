package e2e

// The product in its own images under podman: the images
// `make images` builds (svc-image), run with the chart's security context —
// user 65532, read-only root, every capability dropped, no new privileges,
// writable only where the chart mounts volumes — against the harness's real
// PostgreSQL and MinIO and the fake upstream, all on the host's loopback
// (--network host). The podagent container is PID 1 of its own PID
// namespace, as in a Kubernetes pod.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// containerImages builds both images from static binaries with svc-image
// under a tag of this test, loads them into podman and returns their
// references (removed when the test ends).
func containerImages(t *testing.T, pm *testenv.Podman) (apiImage, agentImage string) {
	t.Helper()
	bins := staticBinaries(t)
	tag := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + fmt.Sprint("-", os.Getpid())
	out := t.TempDir()
	cmd := exec.Command(bins["svc-image"], "-out", out, "-repo", "localhost/svc-e2e", "-tag", tag,
		"apiserver="+bins["apiserver"], "podagent="+bins["podagent"])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("svc-image: %v\n%s", err, b)
	} else {
		t.Logf("svc-image:\n%s", b)
	}
	for _, n := range []string{"apiserver", "podagent"} {
		pm.Must(t, "load", "-q", "-i", filepath.Join(out, "svc-"+n+".oci.tar"))
		ref := "localhost/svc-e2e/svc-" + n + ":" + tag
		t.Cleanup(func() { _, _ = pm.Out("rmi", "-f", ref) })
	}
	return "localhost/svc-e2e/svc-apiserver:" + tag, "localhost/svc-e2e/svc-podagent:" + tag
}

// staticBinaries are apiserver, podagent and svc-image as `make build`
// leaves them in $SVC_BIN_DIR (static), else built here with CGO off.
func staticBinaries(t testing.TB) map[string]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	pkgs := map[string][2]string{"apiserver": {"apiserver", "./cmd/apiserver"}, "podagent": {"podagent", "./cmd/podagent"},
		"svc-image": {"podagent", "./cmd/svc-image"}}
	out := map[string]string{}
	dir := os.Getenv("SVC_BIN_DIR")
	for name, p := range pkgs {
		if dir != "" {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				out[name] = filepath.Join(dir, name)
				continue
			}
		}
		bin := filepath.Join(t.TempDir(), name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, p[1])
		cmd.Dir = filepath.Join(root, p[0])
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, b)
		}
		out[name] = bin
	}
	return out
}

// chartSecurity is the chart's securityContext as podman flags: writable
// only where volumes are mounted (no tmpfs podman would add by itself).
var chartSecurity = []string{"--network", "host", "--user", "65532:65532", "--read-only", "--read-only-tmpfs=false",
	"--cap-drop", "ALL", "--security-opt", "no-new-privileges"}

// One deployment's life in containers: migrate and serve (the chart's init
// container and API container), a chat completion, a paired podagent
// container whose webhook turn writes a file, a smart-HTTP clone that shows
// it, `podman stop` of the podagent → its final flush lands within the stop
// timeout (a file written after the turn reaches the durable .git), and a
// new podagent container on empty volumes restores the whole history.
func TestContainersUnderPodman(t *testing.T) {
	t.Parallel()
	pm := testenv.NeedPodman(t)
	apiImage, agentImage := containerImages(t, pm)
	e := newEnv(t)
	s3 := testenv.MinIO(t)
	catalog := filepath.Dir(e.models)
	for _, p := range []string{catalog, e.models, e.plans} {
		must(t, os.Chmod(p, 0o755)) // read by user 65532 through a read-only bind mount
	}
	s3Env := []string{"-e", "SVC_STORAGE=s3", "-e", "SVC_S3_ENDPOINT=" + s3.Endpoint, "-e", "SVC_S3_BUCKET=" + s3.Bucket,
		"-e", "SVC_S3_ACCESS_KEY=" + s3.AccessKey, "-e", "SVC_S3_SECRET_KEY=" + s3.SecretKey}
	port, err := testenv.FreePort()
	must(t, err)
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	id := fmt.Sprint(time.Now().UnixNano())
	apiArgs := append(append([]string{}, chartSecurity...), s3Env...)
	apiArgs = append(apiArgs, "-e", "SVC_DATABASE_URL="+e.dbURL, "-e", "SVC_RUNTIME_AUTH_SECRET=e2e-runtime-secret",
		"-e", "FAKE_UPSTREAM_KEY=upstream-secret", "-e", "SVC_DATA_DIR=/data", "-e", "SVC_LOG_LEVEL=info",
		"-e", "SVC_MODELS_FILE=/etc/svc/catalog/"+filepath.Base(e.models), "-e", "SVC_PLANS_FILE=/etc/svc/catalog/"+filepath.Base(e.plans),
		"-e", fmt.Sprintf("SVC_HTTP_ADDR=127.0.0.1:%d", port),
		"-v", pm.Volume(t, "svc-e2e-api-data-"+id)+":/data", "-v", pm.Volume(t, "svc-e2e-api-tmp-"+id)+":/tmp",
		"-v", catalog+":/etc/svc/catalog:ro")
	pm.Must(t, append(append(append([]string{"run", "--rm"}, testenv.PodmanRunFlags...), apiArgs...), apiImage, "migrate")...)
	pm.Run(t, append(append([]string{"--name", "svc-e2e-api-" + id}, apiArgs...), apiImage, "serve")...)
	waitReady(t, "apiserver container", apiURL+"/readyz", 60*time.Second, &logBuffer{})

	acc := e.account("free")
	resp, err := client(apiURL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("hello from a container"))
	if err != nil || len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("chat completion through the apiserver container: %v %+v", err, resp)
	}

	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "containers")["id"].(string)
	e.admin("channel", "set", "--project", project, "--secret", "hook-secret")
	token := e.admin("pairing", "create", "--project", project, "--name", "podman")["token"].(string)
	startAgent := func(name string) (container, workspace string) {
		ws := pm.Volume(t, "svc-e2e-ws-"+name+"-"+id)
		args := append(append([]string{"--name", "svc-e2e-agent-" + name + "-" + id}, chartSecurity...), s3Env...)
		args = append(args, "-e", "SVC_WORKSPACE_DIR=/workspace", "-e", "SVC_DATA_DIR=/data", "-e", "HOME=/tmp",
			"-e", "SVC_LOG_LEVEL=info", "-e", "SVC_SHUTDOWN_GRACE=20s",
			"-v", ws+":/workspace", "-v", pm.Volume(t, "svc-e2e-data-"+name+"-"+id)+":/data",
			"-v", pm.Volume(t, "svc-e2e-tmp-"+name+"-"+id)+":/tmp",
			agentImage, "paired", "--api", apiURL, "--token", token)
		c := pm.Run(t, args...)
		waitAgent(t, apiURL, project, acc.key, pm, c)
		return c, pm.Mountpoint(t, ws)
	}
	agent, ws := startAgent("first")

	e.upstream.Script(agentScript("notes/hello.txt", "hi from the container", "I wrote notes/hello.txt", nil))
	res, body := proxyDo(t, apiURL, project, acc.key, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"please write a note","senderId":"ops"}`), hookHeaders())
	var reply struct{ Reply string }
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &reply) != nil || reply.Reply != "I wrote notes/hello.txt" {
		t.Fatalf("webhook turn: %d %s", res.StatusCode, body)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes", "hello.txt")); err != nil || string(b) != "hi from the container" {
		t.Fatalf("the turn's file in the workspace volume: %q %v", b, err)
	}
	remote, _ := url.Parse(apiURL + "/api/projects/" + project + "/git")
	remote.User = url.UserPassword("ops", acc.key)
	clone := filepath.Join(t.TempDir(), "clone")
	readsGit(t, "", "clone", remote.String(), clone)
	if b, err := os.ReadFile(filepath.Join(clone, "notes", "hello.txt")); err != nil || string(b) != "hi from the container" {
		t.Fatalf("smart-HTTP clone from the durable .git: %q %v", b, err)
	}

	// A change only the final flush can persist, then podman stop: SIGTERM
	// to PID 1, which drains and flushes within the stop timeout.
	must(t, os.WriteFile(filepath.Join(ws, "after-turn.txt"), []byte("flushed on stop\n"), 0o644))
	const stopTimeout = 30 * time.Second
	start := time.Now()
	pm.Must(t, "stop", "-t", fmt.Sprint(int(stopTimeout.Seconds())), agent)
	took := time.Since(start)
	if code := pm.Must(t, "inspect", "--format", "{{.State.ExitCode}}", agent); code != "0" || took >= stopTimeout {
		t.Fatalf("podman stop: exit code %s after %v (SIGKILL at %v)", code, took, stopTimeout)
	}
	t.Logf("podman stop of the podagent container took %v", took)
	readsGit(t, clone, "pull", "-q")
	if b, err := os.ReadFile(filepath.Join(clone, "after-turn.txt")); err != nil || string(b) != "flushed on stop\n" {
		t.Fatalf("the final flush did not reach the durable .git: %q %v", b, err)
	}
	want := readsGit(t, clone, "log", "--format=%H")

	// A new container on empty volumes: the cold start restores the history.
	_, ws2 := startAgent("second")
	got, err := exec.Command("git", "-c", "safe.directory=*", "-C", ws2, "log", "--format=%H").CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != want {
		t.Fatalf("restored history:\n%s (%v)\nwant:\n%s", got, err, want)
	}
	for f, body := range map[string]string{"notes/hello.txt": "hi from the container", "after-turn.txt": "flushed on stop\n"} {
		if b, err := os.ReadFile(filepath.Join(ws2, f)); err != nil || string(b) != body {
			t.Fatalf("restored %s: %q %v", f, b, err)
		}
	}
}

// waitAgent polls the project's webhook health through the API until the
// paired podagent container answers (a poll with a deadline), failing
// early when the container exits.
func waitAgent(t *testing.T, apiURL, project, key string, pm *testenv.Podman, container string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		res, body := proxyDo(t, apiURL, project, key, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		var h wire.WebhookHealth
		if res.StatusCode == http.StatusOK && json.Unmarshal(body, &h) == nil && h.Connected {
			return
		}
		if st, _ := pm.Out("inspect", "--format", "{{.State.Status}}", container); st != "running" {
			t.Fatalf("podagent container %s: %s", st, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("podagent container not serving: %d %s", res.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}
