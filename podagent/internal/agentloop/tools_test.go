package agentloop

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tc := range []struct {
		in        string
		allowRoot bool
		want      string // "" = refused
	}{
		{"a.txt", false, "a.txt"},
		{"./sub/deep/x.go", false, "sub/deep/x.go"},
		{"sub//y", false, "sub/y"},
		{"new/dir/file", false, "new/dir/file"},
		{"", true, "."},
		{".", true, "."},
		{"", false, ""},
		{".", false, ""},
		{"/etc/passwd", false, ""},
		{"../x", false, ""},
		{"sub/../../x", false, ""},
		{"sub/..", true, ""},
		{".git", false, ""},
		{".git/config", false, ""},
		{"sub/.Git/x", false, ""},
		{"link/x", false, ""},
		{"link", false, ""},
		{"a\x00b", false, ""},
		{`a\..\b`, false, ""},
	} {
		got, err := w.Resolve(tc.in, tc.allowRoot)
		if tc.want == "" {
			if !errors.Is(err, ErrPathRefused) {
				t.Errorf("Resolve(%q) = %q, %v; want refused", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestToolsRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if out, ch := w.Call("list_files", `{}`); out != "(no files)" || ch {
		t.Fatalf("empty list: %q", out)
	}
	if out, ch := w.Call("write_file", `{"path":"d/e.txt","content":"hi"}`); !ch || !strings.HasPrefix(out, "wrote d/e.txt") {
		t.Fatalf("write: %q", out)
	}
	if out, _ := w.Call("read_file", `{"path":"d/e.txt"}`); out != "hi" {
		t.Fatalf("read: %q", out)
	}
	if out, _ := w.Call("read_file", `{"path":"d"}`); !strings.HasPrefix(out, "error:") {
		t.Fatalf("read dir: %q", out)
	}
	if out, _ := w.Call("read_file", `{"path":"missing"}`); !strings.HasPrefix(out, "error:") || strings.Contains(out, dir) {
		t.Fatalf("read missing: %q", out)
	}
	if out, _ := w.Call("write_file", `{"path":"x"}`); !strings.HasPrefix(out, "error: content") {
		t.Fatalf("write without content: %q", out)
	}
	if out, _ := w.Call("nope", `{}`); !strings.HasPrefix(out, "error: unknown tool") {
		t.Fatalf("unknown: %q", out)
	}
	if out, _ := w.Call("read_file", `not json`); !strings.HasPrefix(out, "error: arguments") {
		t.Fatalf("bad args: %q", out)
	}
	if out, ch := w.Call("delete_file", `{"path":"d/e.txt"}`); !ch || out != "deleted d/e.txt" {
		t.Fatalf("delete: %q", out)
	}
}
