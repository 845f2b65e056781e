package fs

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
)

// FuzzPathStaysInRoot: every key either is refused or resolves to a path
// strictly inside the objects directory.
func FuzzPathStaysInRoot(f *testing.F) {
	for _, k := range []string{"a", "../a", "a/../../b", "/etc/passwd", `..\x`, "a/./b", "...", "a//b", "p/lfs/objects/ab"} {
		f.Add(k)
	}
	s, err := New(f.TempDir(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p, err := s.path(key)
		if err != nil {
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("path(%q): %v, want ErrInvalidKey", key, err)
			}
			return
		}
		rel, err := filepath.Rel(s.objects, p)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.ToSlash(rel) != key {
			t.Fatalf("key %q resolved to %q (rel %q)", key, p, rel)
		}
	})
}

// FuzzHeader: unmarshalHeader never panics and round-trips what marshal
// writes.
func FuzzHeader(f *testing.F) {
	f.Add(header{size: 42, contentType: "text/plain"}.marshal())
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := unmarshalHeader(b)
		if err != nil {
			return
		}
		if again, err := unmarshalHeader(h.marshal()); err != nil || again != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, again, err)
		}
	})
}
