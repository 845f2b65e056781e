package gitrun

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newRepo(t *testing.T) (*Runner, string) {
	t.Helper()
	r := &Runner{Timeout: 30 * time.Second}
	dir := t.TempDir()
	if err := r.Command("init", "-q", "-b", "main").Dir(dir).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func TestRefusesDashValues(t *testing.T) {
	t.Parallel()
	r, dir := newRepo(t)
	for _, v := range []string{"--upload-pack=touch /tmp/pwned", "-c", "-"} {
		err := r.Command("log").AddDynamic(v).Dir(dir).Run(context.Background())
		if !errors.Is(err, ErrUnsafeArgument) {
			t.Fatalf("AddDynamic(%q): err = %v, want ErrUnsafeArgument", v, err)
		}
	}
	// After "--" a leading dash is a path, not an option.
	if err := os.WriteFile(filepath.Join(dir, "-x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Command("add").AddDashesAndList("-x").Dir(dir).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTypedErrorCarriesStderrAndExitCode(t *testing.T) {
	t.Parallel()
	r, dir := newRepo(t)
	err := r.Command("rev-parse", "--verify").AddDynamic("nosuchref").Dir(dir).Run(context.Background())
	var ge *Error
	if !errors.As(err, &ge) {
		t.Fatalf("err = %T %v", err, err)
	}
	if ge.ExitCode != 128 || !strings.Contains(ge.Stderr, "fatal") || ge.Args[0] != "rev-parse" {
		t.Fatalf("error = %+v", ge)
	}
	if ExitCode(err) != 128 {
		t.Fatal("ExitCode helper")
	}
}

func TestEnvironmentIsControlled(t *testing.T) {
	t.Setenv("GIT_AUTHOR_NAME", "leak")
	t.Setenv("LANG", "de_DE.UTF-8")
	r, dir := newRepo(t)
	out, err := r.Command("var", "GIT_AUTHOR_IDENT").Dir(dir).Env("GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b").String(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "a <a@b>") {
		t.Fatalf("ident = %q", out)
	}
	env := r.environ(nil)
	for _, want := range []string{"LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"} {
		found := false
		for _, kv := range env {
			found = found || kv == want
		}
		if !found {
			t.Errorf("env lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "GIT_AUTHOR_NAME=") {
			t.Errorf("parent env leaked: %s", kv)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	r, dir := newRepo(t)
	// hash-object --stdin waits for stdin that never ends.
	pr, pw := newBlockingReader()
	defer pw()
	err := r.Command("hash-object", "--stdin").Dir(dir).Stdin(pr).Timeout(200 * time.Millisecond).Run(context.Background())
	var ge *Error
	if !errors.As(err, &ge) || !ge.TimedOut {
		t.Fatalf("err = %v, want timeout", err)
	}
}

func TestStreaming(t *testing.T) {
	t.Parallel()
	r, dir := newRepo(t)
	var out bytes.Buffer
	err := r.Command("hash-object", "--stdin").Dir(dir).Stdin(strings.NewReader("hello\n")).Stdout(&out).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "ce013625030ba8dba906f756967f9e9ca394464a" {
		t.Fatalf("hash = %s", got)
	}
}

func newBlockingReader() (*os.File, func()) {
	pr, pw, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return pr, func() { pw.Close(); pr.Close() }
}
