package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// hostileGitDir builds a real repository whose .git/config would run
// commands: core.fsmonitor and a filter driver that .gitattributes routes
// every *.txt file to, each touching a marker file when git runs it.
func hostileGitDir(t *testing.T, markers string) string {
	t.Helper()
	repo := t.TempDir()
	gitc := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitc("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, ".gitattributes"), []byte("*.txt filter=evil diff=evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitc("add", "-A")
	gitc("commit", "-q", "-m", "seed")
	hook := filepath.Join(repo, ".git", "fsmonitor.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+filepath.Join(markers, "fsmonitor")+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitc("config", "core.fsmonitor", hook)
	gitc("config", "filter.evil.smudge", "touch "+filepath.Join(markers, "smudge")+"; cat")
	gitc("config", "filter.evil.clean", "touch "+filepath.Join(markers, "clean")+"; cat")
	gitc("config", "diff.evil.command", "touch "+filepath.Join(markers, "diff"))
	if err := os.WriteFile(filepath.Join(repo, ".git", "info", "attributes"), []byte("* filter=evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(repo, ".git")
}

func putRepoArchive(t *testing.T, e *env, data []byte) {
	t.Helper()
	if _, err := e.store.Put(context.Background(), objstore.RepoKey("p1"), bytes.NewReader(data), int64(len(data)),
		objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A durable .git whose config names core.fsmonitor and a
// filter driver (with a matching .gitattributes) ran them on cold start and
// on the next turn. The pod replaces the restored config with its own:
// nothing of it runs, the turn commits, the file's content is untouched.
func TestRestoredGitConfigRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	markers := t.TempDir()
	var buf bytes.Buffer
	if _, err := archive.CreateTarGz(&buf, hostileGitDir(t, markers), archive.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	putRepoArchive(t, e, buf.Bytes())

	p := e.start("SVC_LFS=false")
	if b, err := os.ReadFile(filepath.Join(e.ws, "notes.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("restored tree: %q %v", b, err)
	}
	e.write("more.txt", "more\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush: %d %s\n%s", code, body, e.logs())
	}
	e.requireCommitted("more.txt", "more\n")
	ran, _ := os.ReadDir(markers)
	if len(ran) > 0 {
		var names []string
		for _, r := range ran {
			names = append(names, r.Name())
		}
		t.Fatalf("commands from the restored config ran: %v", names)
	}
	cfg, _ := os.ReadFile(filepath.Join(e.ws, ".git", "config"))
	if strings.Contains(string(cfg), "evil") || strings.Contains(string(cfg), "fsmonitor") {
		t.Fatalf("restored config kept:\n%s", cfg)
	}
}

// A .git archive never needs a link; the pod refuses to
// restore one that holds a symlink or a hard link, even one that stays
// inside, and never starts on it.
func TestRestoreRefusesLinksInGitArchive(t *testing.T) {
	t.Parallel()
	for _, link := range []*tar.Header{
		{Name: "logs2", Typeflag: tar.TypeSymlink, Linkname: "refs"},
		{Name: "description2", Typeflag: tar.TypeLink, Linkname: "description"},
	} {
		t.Run(link.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "fs")
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			// A whole, valid .git (the pod would start on it) plus the link.
			src := hostileGitDir(t, t.TempDir())
			err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
				if err != nil || path == src {
					return err
				}
				rel, _ := filepath.Rel(src, path)
				if d.IsDir() {
					return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
					return err
				}
				_, err = tw.Write(b)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			link.Mode = 0o777
			_ = tw.WriteHeader(link)
			_ = tw.Close()
			_ = zw.Close()
			putRepoArchive(t, e, buf.Bytes())

			// The pod must refuse to start: run it without the readiness wait.
			cmd := exec.Command(podagentBin, "serve")
			cmd.Env = append(append([]string{}, e.vars...), "SVC_HTTP_ADDR=127.0.0.1:0", "SVC_LFS=false")
			done := make(chan error, 1)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(out.String(), "links are not allowed") {
					t.Fatalf("podagent: %v\n%s", err, out.String())
				}
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("podagent started on a .git archive with a link\n%s", out.String())
			}
			if _, err := os.Stat(filepath.Join(e.ws, ".git")); err == nil {
				t.Fatal("a .git was put in place")
			}
		})
	}
}

// /agent/git-flush had no body limit (the whole body was
// read into memory and a tag message of any size written). Beyond 64 KiB it
// answers 413, with or without a Content-Length, and nothing is tagged.
func TestGitFlushBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	p := e.start()
	body := `{"tag":"publish/site/1700000001","tagMessage":"` + strings.Repeat("m", 100<<10) + `"}`
	for _, chunked := range []bool{false, true} {
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // no Content-Length
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/git-flush", r)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb wire.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Error.Code != "request_too_large" {
			t.Fatalf("chunked=%v: %d %+v", chunked, resp.StatusCode, eb)
		}
	}
	if out, _ := exec.Command("git", "-C", e.ws, "tag", "-l").Output(); len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("tagged: %s", out)
	}
}
