package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/metal/disk"
	"github.com/svc-dev/svc/podagent/internal/metal/host"
	"github.com/svc-dev/svc/podagent/internal/metal/metaltest"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type world struct {
	h       *host.Host
	store   objstore.Store
	gw      *fakegateway.Server
	stopped chan [2]string
	dir     string
}

func newWorld(t testing.TB, project, token string, snapshots bool, afterDisk func(ctx context.Context, projectID, image string) error) *world {
	t.Helper()
	img, bin := metaltest.Image(t)
	env := testenv.MinIO(t)
	store, err := s3store.New(context.Background(), s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	gw := fakegateway.New(t, project, token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "sec"}, 0)
	pipe := pipeBinary(t)
	w := &world{store: store, gw: gw, stopped: make(chan [2]string, 16), dir: t.TempDir()}
	w.h, err = host.New(host.Options{Store: store, Image: img, Dir: w.dir, APIURL: gw.URL, DiskMB: 128,
		// The host's SSRF guard lets callbacks reach the test's receiver on
		// 127.0.0.1 only; the guests' own early check lets everything
		// through (as a hostile guest would), so the host's guard decides.
		CallbackAllowedNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		// Files above 300 kB are large files (git-lfs through the host; the
		// benchmark's busy 260 kB file stays an ordinary blob).
		GuestEnv:       map[string]string{"SVC_CALLBACK_ALLOWED_NETS": "0.0.0.0/0,::/0", "LARGE_FILE_BYTES": "300000"},
		ExportInterval: time.Hour, Snapshots: snapshots, HealthInterval: time.Second, StartTimeout: 5 * time.Minute, PipeCommand: []string{pipe, "pipe"}, Registry: prometheus.NewRegistry(),
		Log: zaptest.NewLogger(t), AfterDisk: afterDisk,
		OnStopped: func(id, state string) { w.stopped <- [2]string{id, state} }})
	if err != nil {
		t.Fatal(err)
	}
	_ = bin
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = w.h.Close(ctx)
	})
	return w
}

// pipeBinary builds metalhost (its pipe subcommand is QEMU's guestfwd).
func pipeBinary(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("SVC_BIN_DIR"); dir != "" { // make test built it
		if _, err := os.Stat(filepath.Join(dir, "metalhost")); err == nil {
			return filepath.Join(dir, "metalhost")
		}
	}
	out := filepath.Join(t.TempDir(), "metalhost")
	cmd := exec.Command("go", "build", "-o", out, "../../../cmd/metalhost")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building metalhost: %v\n%s", err, b)
	}
	return out
}

func (w *world) waitStopped(t testing.TB, project, want string) {
	t.Helper()
	select {
	case got := <-w.stopped:
		if got != [2]string{project, want} {
			t.Fatalf("stopped %v, want %s %s", got, project, want)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s never became %s: %+v", project, want, w.h.Status(project))
	}
}

// turn sends a sync webhook turn to the guest whose tool loop writes path.
func (w *world) turn(t testing.TB, st wire.MetalProject, token, path, content string) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"path": path, "content": content})
	w.gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: "1", Name: "write_file", Arguments: string(args)}}},
		fakegateway.Reply{Text: "wrote " + path},
	)
	res := postIncoming(t, st, token, `{"message":"write `+path+`"}`)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), "wrote "+path) {
		console, _ := os.ReadFile(filepath.Join(w.dir, "projects", st.ProjectID, "run", "console.log"))
		t.Fatalf("turn: %d %s\nguest console (end):\n%s", res.StatusCode, b, console[max(0, len(console)-6000):])
	}
}

// seed stores a project whose HEAD has a.txt=v1, a source archive of it,
// and a data archive where a.txt was edited and notes/local.txt is new.
func seed(t testing.TB, store objstore.Store, project string) {
	t.Helper()
	ws := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", ws, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, b)
		}
	}
	git("init", "-q", "-b", "main")
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("v1\n"), 0o644))
	git("add", "-A")
	git("commit", "-q", "-m", "seed")
	var repo, src, data bytes.Buffer
	_, err := repoarchive.Create(&repo, filepath.Join(ws, ".git"), repoarchive.Options{})
	must(t, err)
	noGit := archive.CreateOptions{Exclude: func(rel string, _ os.DirEntry) bool { return rel == ".git" }}
	_, err = archive.CreateTarGz(&src, ws, noGit)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("local edit\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(ws, "notes"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "notes", "local.txt"), []byte("untracked\n"), 0o644))
	_, err = archive.CreateTarGz(&data, ws, noGit)
	must(t, err)
	ctx := context.Background()
	for key, b := range map[string][]byte{objstore.RepoKey(project): repo.Bytes(), objstore.SourceKey(project): src.Bytes(),
		objstore.DataKey(project): data.Bytes()} {
		_, err := store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{})
		must(t, err)
	}
}

// repoOf extracts the stored .git and runs git in it.
func repoOf(t *testing.T, store objstore.Store, project string) func(args ...string) string {
	t.Helper()
	rc, _, err := store.Get(context.Background(), objstore.RepoKey(project))
	must(t, err)
	defer rc.Close()
	dir := filepath.Join(t.TempDir(), "repo.git")
	_, err = archive.ExtractTarGz(rc, dir, archive.ExtractOptions{})
	must(t, err)
	return func(args ...string) string {
		out, err := exec.Command("git", append([]string{"--git-dir", dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// One guest through its life (guests are few: TCG boots take seconds):
// cold boot from storage (hydrate, pre-hydrate ref) into a workspace owned
// by another user (GIT_UNUSABLE logged, remedy applied: every later turn
// still commits), a webhook turn through the relay, export, suspend with
// snapshot, resume, a turn then kill -9 of QEMU (rescue from the disk:
// nothing lost), a stale snapshot skipped, and an unreadable disk
// quarantined. Async callbacks leave through the host (signed, refused
// for an SSRF target).
func TestGuestLifecycle(t *testing.T) {
	t.Parallel()
	const project, token = "prj_metal", "svc_rt_prj_metal.test"
	tools := &disk.Tools{}
	w := newWorld(t, project, token, true, func(ctx context.Context, _, image string) error {
		return tools.SetOwner(ctx, image, "/workspace", 1234) // a foreign-owned workspace
	})
	seed(t, w.store, project)
	ctx := context.Background()

	st, err := w.h.Ensure(ctx, project, token)
	must(t, err)
	if st.State != host.StateRunning || st.BootKind != "cold" || st.URL == "" {
		t.Fatalf("status after start: %+v", st)
	}
	console, err := os.ReadFile(filepath.Join(w.dir, "projects", project, "run", "console.log"))
	must(t, err)
	if !strings.Contains(string(console), "GIT_UNUSABLE") || !strings.Contains(string(console), "safe.directory") {
		t.Fatalf("no GIT_UNUSABLE diagnostic with its remedy on the guest console:\n%s", console)
	}
	w.turn(t, st, token, "hello.txt", "hi from the guest\n")
	must(t, w.h.Export(ctx, project, false))

	git := repoOf(t, w.store, project)
	if got := git("show", "HEAD:hello.txt"); got != "hi from the guest" {
		t.Fatalf("hello.txt at the exported HEAD: %q", got)
	}
	if got := git("show", "HEAD:a.txt"); got != "v1" {
		t.Fatalf("a.txt at HEAD %q: the hydrate must reset tracked files to HEAD", got)
	}
	refs := git("for-each-ref", "--format=%(refname)", "refs/shogo-neutral/pre-hydrate/")
	if !strings.HasPrefix(refs, "refs/shogo-neutral/pre-hydrate/") {
		t.Fatalf("no pre-hydrate ref: %q", refs)
	}
	if got := git("show", refs+":a.txt"); got != "local edit" {
		t.Fatalf("the pre-hydrate ref keeps a.txt as %q", got)
	}
	data := archivetest.StoredEntries(t, w.store, objstore.DataKey(project))
	if data["hello.txt"] != "hi from the guest\n" || data["notes/local.txt"] != "untracked\n" {
		t.Fatalf("data archive: %v", data)
	}
	if len(w.gw.Records()) == 0 {
		t.Fatal("no checkpoint record reached the API through the relay")
	}

	// Async callbacks leave through the host's forwarder: signed with the
	// channel secret, the webhook-id derived from the correlation id; a
	// metadata-service target is refused by the host's SSRF guard and the
	// reply goes to the outbox.
	rcv := newCallbackReceiver(t)
	corr := w.asyncTurn(t, st, token, rcv.URL+"/hook", "async hello")
	cb := rcv.wait(t)
	if err := callback.Verify("sec", cb.body, cb.header); err != nil {
		t.Fatalf("callback signature: %v (%v)", err, cb.header)
	}
	var payload wire.WebhookCallback
	must(t, json.Unmarshal(cb.body, &payload))
	if id := cb.header.Get(callback.HeaderID); id != "msg_"+strings.TrimPrefix(corr, "cor_") || payload.CorrelationID != corr ||
		payload.Reply != "async hello" {
		t.Fatalf("callback: webhook-id %q, body %s (correlation %s)", id, cb.body, corr)
	}
	if put := w.waitOutbox(t, corr); put.Status != wire.OutboxStatusDelivered {
		t.Fatalf("the delivered callback's outbox notice: %+v", put)
	}
	corr = w.asyncTurn(t, st, token, "http://169.254.169.254/latest/meta-data/", "not for the metadata service")
	if put := w.waitOutbox(t, corr); put.Reply != "not for the metadata service" || put.Status == wire.OutboxStatusDelivered {
		t.Fatalf("the refused callback's reply in the outbox: %+v", put)
	}
	if f, r := testutil.ToFloat64(w.h.Metrics.CallbackForwards.WithLabelValues("forwarded")),
		testutil.ToFloat64(w.h.Metrics.CallbackForwards.WithLabelValues("refused")); f != 1 || r != 1 {
		t.Fatalf("metal_callback_forwards_total: forwarded %v, refused %v", f, r)
	}

	// Large files: a file above LARGE_FILE_BYTES goes through git-lfs in
	// the guest and the host's transfer endpoint into
	// <projectId>/lfs/objects/<oid>; HEAD holds its pointer.
	big := strings.Repeat("a line of a large file written in the guest\n", 8000) // 352 kB
	sum := sha256.Sum256([]byte(big))
	oid := hex.EncodeToString(sum[:])
	w.turn(t, st, token, "big.txt", big)
	must(t, w.h.Export(ctx, project, false))
	git = repoOf(t, w.store, project)
	if ptr := git("show", "HEAD:big.txt"); !strings.Contains(ptr, "oid sha256:"+oid) {
		t.Fatalf("big.txt at the exported HEAD is not its lfs pointer: %.200q", ptr)
	}
	if got := storedObject(t, w.store, objstore.LFSKey(project, oid)); got != big {
		t.Fatalf("the large file in object storage: %.80q", got)
	}
	if n := testutil.ToFloat64(w.h.Metrics.LFSTransfers.WithLabelValues("upload")); n != 1 {
		t.Fatalf("large-file uploads through the host: %v", n)
	}

	// Suspend: everything exported (the source archive too), VM state saved.
	st, err = w.h.Stop(ctx, project, wire.MetalStopSuspend)
	must(t, err)
	w.waitStopped(t, project, host.StateSuspended)
	if src := archivetest.StoredEntries(t, w.store, objstore.SourceKey(project)); src["hello.txt"] != "hi from the guest\n" {
		t.Fatalf("source archive at suspend: %v", src)
	}
	// Resume: the snapshot's archives are unchanged, so it is used.
	st, err = w.h.Ensure(ctx, project, token)
	must(t, err)
	if st.BootKind != "snapshot" {
		t.Fatalf("resume: %+v", st)
	}
	if n := testutil.ToFloat64(w.h.Metrics.StaleSnapshotSkipped); n != 0 {
		t.Fatalf("stale snapshots %v", n)
	}

	// A turn, then QEMU dies before any export: the reaper rescues the
	// disk (the guest cannot answer) and nothing is lost.
	w.turn(t, st, token, "second.txt", "written before the crash\n")
	must(t, syscall.Kill(st.PID, syscall.SIGKILL))
	w.waitStopped(t, project, host.StateRescued)
	git = repoOf(t, w.store, project)
	if got := git("show", "HEAD:second.txt"); got != "written before the crash" {
		t.Fatalf("second.txt at the rescued HEAD: %q", got)
	}
	if data := archivetest.StoredEntries(t, w.store, objstore.DataKey(project)); data["second.txt"] != "written before the crash\n" {
		t.Fatalf("data archive after the rescue: %v", data)
	}
	if n := testutil.ToFloat64(w.h.Metrics.RescueFailedQuarantined); n != 0 {
		t.Fatalf("quarantined %v after a successful rescue", n)
	}

	// Cold boot from the rescued archives, suspend with a snapshot, then
	// another writer overwrites the data and source archives: the snapshot
	// is stale.
	st, err = w.h.Ensure(ctx, project, token)
	must(t, err)
	if st.BootKind != "cold" {
		t.Fatalf("boot after the rescue: %+v", st)
	}
	_, err = w.h.Stop(ctx, project, wire.MetalStopSuspend)
	must(t, err)
	w.waitStopped(t, project, host.StateSuspended)
	emptyArchives(t, w.store, project)
	st, err = w.h.Ensure(ctx, project, token)
	must(t, err)
	if st.BootKind != "cold" || testutil.ToFloat64(w.h.Metrics.StaleSnapshotSkipped) != 1 {
		t.Fatalf("after overwriting an archive: %+v, stale skipped %v", st, testutil.ToFloat64(w.h.Metrics.StaleSnapshotSkipped))
	}
	// The large file survived the cold boot without the data and source
	// archives: HEAD's pointer was checked out, and the pod's cold-start
	// `git lfs pull` fetched the bytes from object storage through the
	// host (the .git archive leaves pushed large files out).
	must(t, w.h.Export(ctx, project, false))
	if data := archivetest.StoredEntries(t, w.store, objstore.DataKey(project)); data["big.txt"] != big {
		t.Fatalf("big.txt after a cold boot from the .git archive alone: %.80q", data["big.txt"])
	}
	if n := testutil.ToFloat64(w.h.Metrics.LFSTransfers.WithLabelValues("download")); n != 1 {
		t.Fatalf("large-file downloads through the host: %v", n)
	}

	// The VM freezes and its disk becomes unreadable: the health gate
	// discards it, neither the guest nor the disk can be read, so the disk
	// is quarantined with a note and the metric counts it.
	must(t, syscall.Kill(st.PID, syscall.SIGSTOP))
	zeroFile(t, filepath.Join(w.dir, "projects", project, "disk.ext4"))
	w.waitStopped(t, project, host.StateQuarantined)
	if n := testutil.ToFloat64(w.h.Metrics.RescueFailedQuarantined); n != 1 {
		t.Fatalf("metal_rescue_failed_quarantined_total = %v", n)
	}
	notes, _ := filepath.Glob(filepath.Join(w.dir, "quarantine", project+"-*.json"))
	if len(notes) != 1 {
		t.Fatalf("quarantine notes: %v", notes)
	}
	var note struct {
		ProjectID, Reason, Disk string
		Errors                  []string
	}
	b, err := os.ReadFile(notes[0])
	must(t, err)
	must(t, json.Unmarshal(b, &note))
	if note.ProjectID != project || note.Disk == "" || len(note.Errors) == 0 || !strings.HasPrefix(note.Reason, "health gate") {
		t.Fatalf("note: %s", b)
	}
	if _, err := os.Stat(note.Disk); err != nil {
		t.Fatalf("quarantined disk: %v", err)
	}
}

// emptyArchives replaces the data and source archives with valid empty
// ones, as another writer would (the overwrite that makes a snapshot
// stale; the cold boot then has only the durable .git).
func emptyArchives(t *testing.T, store objstore.Store, project string) {
	t.Helper()
	var b bytes.Buffer
	_, err := archive.CreateTarGz(&b, t.TempDir(), archive.CreateOptions{})
	must(t, err)
	for _, key := range []string{objstore.DataKey(project), objstore.SourceKey(project)} {
		_, err = store.Put(context.Background(), key, bytes.NewReader(b.Bytes()), int64(b.Len()), objstore.PutOptions{})
		must(t, err)
	}
}

// zeroFile overwrites a file with zeros, keeping its size.
func zeroFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	zero := make([]byte, 1<<20)
	for off := int64(0); off < fi.Size(); off += int64(len(zero)) {
		if _, err := f.WriteAt(zero[:min(int64(len(zero)), fi.Size()-off)], off); err != nil {
			t.Fatal(err)
		}
	}
}

// storedObject reads one object.
func storedObject(t *testing.T, store objstore.Store, key string) string {
	t.Helper()
	rc, _, err := store.Get(context.Background(), key)
	must(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	must(t, err)
	return string(b)
}
