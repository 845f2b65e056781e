package lfsgc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/lfsgc"
	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// aged is the real store with the listed objects' ages shifted back (the
// grace period is days; a test cannot wait for it).
type aged struct {
	objstore.Store
	older map[string]time.Duration
}

func (a *aged) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	return a.Store.List(ctx, prefix, func(oi objstore.ObjectInfo) error {
		oi.LastModified = oi.LastModified.Add(-a.older[oi.Key])
		return fn(oi)
	})
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func pointer(content []byte) (string, string) {
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	return oid, fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", oid, len(content))
}

// The retention job deletes only objects no ref or tag reaches and older
// than the grace period: an object reachable only from a publish tag
// survives, so does a pushed-but-not-yet-committed one (recent), and a
// dry run deletes nothing.
func TestGCKeepsTagObjectsAndRecentPushes(t *testing.T) {
	ctx := context.Background()
	env := testenv.MinIO(t)
	real, err := s3store.New(ctx, s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	const project = "prj_gc"
	store := &aged{Store: real, older: map[string]time.Duration{}}
	contents := map[string][]byte{}
	oids := map[string]string{}
	for _, name := range []string{"onMain", "onTagOnly", "orphanOld", "pushedNotCommitted"} {
		c := bytes.Repeat([]byte(name), 5000)
		oid, _ := pointer(c)
		contents[name], oids[name] = c, oid
		key := objstore.LFSKey(project, oid)
		if _, err := real.Put(ctx, key, bytes.NewReader(c), int64(len(c)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if name != "pushedNotCommitted" {
			store.older[key] = 30 * 24 * time.Hour
		}
	}

	// History: main has onMain; a publish tag sits on a commit no branch
	// reaches any more, holding onTagOnly.
	ws := t.TempDir()
	git(t, ws, "init", "-q", "-b", "main")
	_, p := pointer(contents["onMain"])
	if err := os.WriteFile(filepath.Join(ws, "main.bin"), []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "add", "-A")
	git(t, ws, "commit", "-q", "-m", "main")
	git(t, ws, "checkout", "-q", "-b", "release")
	_, p = pointer(contents["onTagOnly"])
	if err := os.WriteFile(filepath.Join(ws, "video.mp4"), []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "add", "-A")
	git(t, ws, "commit", "-q", "-m", "published")
	git(t, ws, "tag", "-a", "-m", "publish", "publish/site/1700000000")
	git(t, ws, "checkout", "-q", "main")
	git(t, ws, "branch", "-q", "-D", "release")
	var buf bytes.Buffer
	if _, err := repoarchive.Create(&buf, filepath.Join(ws, ".git"), repoarchive.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := real.Put(ctx, objstore.RepoKey(project), bytes.NewReader(buf.Bytes()), int64(buf.Len()), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	gc := &lfsgc.GC{Objects: store, Log: zaptest.NewLogger(t), TempDir: t.TempDir()}
	dry, err := gc.Project(ctx, project, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Deleted) != 1 || dry.Deleted[0].OID != oids["orphanOld"] || dry.Reachable != 2 || dry.KeptRecent != 1 {
		t.Fatalf("dry run %+v", dry)
	}
	if _, err := real.Head(ctx, objstore.LFSKey(project, oids["orphanOld"])); err != nil {
		t.Fatalf("a dry run deleted: %v", err)
	}
	res, err := gc.Project(ctx, project, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 1 || res.Deleted[0].OID != oids["orphanOld"] {
		t.Fatalf("gc %+v", res)
	}
	for name, oid := range oids {
		_, err := real.Head(ctx, objstore.LFSKey(project, oid))
		if gone := err != nil; gone != (name == "orphanOld") {
			t.Errorf("%s: deleted=%v", name, gone)
		}
	}
	// No durable repository: nothing can be proven unreachable.
	if _, err := gc.Project(ctx, "prj_without_repo", false); err != lfsgc.ErrNoRepository {
		t.Fatalf("project without a repository: %v", err)
	}
}
