package testhook

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A pause point named in the environment does not stop the process unless
// the test prepared its FIFO.
func TestReachNeedsTheFIFO(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(dir string) error
	}{
		{"no hook dir", nil},
		{"no file", func(string) error { return nil }},
		{"regular file", func(dir string) error { return os.WriteFile(filepath.Join(dir, AfterCommit), nil, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ""
			if tc.prepare != nil {
				dir = t.TempDir()
				if err := tc.prepare(dir); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv(EnvPauseAt, AfterCommit)
			t.Setenv(EnvHookDir, dir)
			Reach(AfterCommit) // returns; a block would time the test out
		})
	}
}

func TestReachPausesAndContinues(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{AfterCommit, AfterCommit + ".go"} {
		if err := syscall.Mkfifo(filepath.Join(dir, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvPauseAt, "other,"+AfterCommit)
	t.Setenv(EnvHookDir, dir)
	done := make(chan struct{})
	go func() { Reach(AfterCommit); close(done) }()
	got, err := os.ReadFile(filepath.Join(dir, AfterCommit)) // blocks until Reach writes
	if err != nil || string(got) != AfterCommit {
		t.Fatalf("hook read %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, AfterCommit+".go"), []byte("go"), 0o644); err != nil {
		t.Fatal(err)
	}
	<-done
}
