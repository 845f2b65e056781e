package console

import (
	"io/fs"
	"regexp"
	"testing"
)

// What users read speaks their language: no console page cites a section of
// the product specification (spec 2.5, §7); the docs and code comments do.
func TestPagesCiteNoSpecSections(t *testing.T) {
	t.Parallel()
	cite := regexp.MustCompile(`(?i)\bspec\s+[0-9]|§\s*[0-9]`)
	n := 0
	err := fs.WalkDir(templateFS, "templates", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(templateFS, path)
		if err != nil {
			return err
		}
		n++
		if m := cite.Find(b); m != nil {
			t.Errorf("%s cites %q", path, m)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("read %d templates: %v", n, err)
	}
}
