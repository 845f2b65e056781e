package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svc-dev/svc/shared/wire"
)

// A full workspace disk is an error an operator can act on (issue 28): on
// a small tmpfs filled to the last byte, a flush answers 507
// insufficient_storage naming the workspace (not 500 "Internal error."),
// and once space is freed the next flush commits what was pending. The
// test mounts the tmpfs itself (it runs as root, like the harness's
// PostgreSQL start).
func TestFullWorkspaceDiskAnswers507(t *testing.T) {
	t.Parallel()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", 0, "size=8m,mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs (the test needs root, as make test has): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(ws, unix.MNT_DETACH) })

	e := newEnv(t, "fs")
	e.ws = ws
	p := e.start("SVC_WORKSPACE_DIR=" + ws)
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("first flush: %d %s", code, body)
	}
	e.write("b.txt", "pending\n")
	filler := filepath.Join(ws, "filler.bin")
	fill(t, filler)

	code, body := p.flush(t, `{}`)
	var eb wire.ErrorBody
	_ = json.Unmarshal([]byte(body), &eb)
	if code != 507 || eb.Error.Code != "insufficient_storage" || eb.Error.Type != "server_error" ||
		!strings.Contains(eb.Error.Message, "SVC_WORKSPACE_DIR") {
		t.Fatalf("flush on a full disk: %d %s, want 507 insufficient_storage naming SVC_WORKSPACE_DIR", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush after freeing space: %d %s", code, body)
	}
	e.requireCommitted("b.txt", "pending\n")
}

// fill writes path until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// The last partial blocks too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}
