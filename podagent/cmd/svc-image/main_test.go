package main

import (
	"path/filepath"
	"testing"
)

// Bad arguments exit 2 and write no archive; the building itself is
// tested in internal/ociimage (TestBuildIsReproducible).
func TestRunRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no image", nil, 2},
		{"not NAME=BINARY", []string{"apiserver"}, 2},
		{"empty binary", []string{"apiserver="}, 2},
		{"unknown flag", []string{"-push", "a=b"}, 2},
		{"missing binary", []string{"apiserver=/nonexistent/apiserver"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			if got := run(append([]string{"-out", out}, tc.args...)); got != tc.want {
				t.Fatalf("run(%q) = %d, want %d", tc.args, got, tc.want)
			}
			if m, _ := filepath.Glob(filepath.Join(out, "*.oci.tar")); len(m) != 0 {
				t.Fatalf("archives written: %v", m)
			}
		})
	}
}
