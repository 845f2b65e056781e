// Package archivetest reads stored archives back in tests: the durable .git
// (spec 2.7 repo.git.tar.gz), the cold-start source tarball and the deps layer
// are all gzip tars in object storage.
package archivetest

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
)

// MaxContent bounds the content kept per entry.
const MaxContent = 1 << 20

// StoredEntries reads the gzip tar stored under key and returns its entries,
// name (without a leading "./") → content (the first MaxContent bytes;
// empty for directories and links). A missing object or a broken archive
// fails the test.
func StoredEntries(t testing.TB, s objstore.Store, key string) map[string]string {
	t.Helper()
	tr, closeAll := openStored(t, s, key)
	defer closeAll()
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxContent))
		if err != nil {
			t.Fatalf("%s: %s: %v", key, h.Name, err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = string(b)
	}
}

// FirstEntry returns the name and content of the first entry of the gzip
// tar stored under key.
func FirstEntry(t testing.TB, s objstore.Store, key string) (string, []byte) {
	t.Helper()
	tr, closeAll := openStored(t, s, key)
	defer closeAll()
	h, err := tr.Next()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	b, err := io.ReadAll(io.LimitReader(tr, MaxContent))
	if err != nil {
		t.Fatalf("%s: %s: %v", key, h.Name, err)
	}
	return h.Name, b
}

// openStored opens the gzip tar stored under key; closeAll closes the
// decompressor and the object.
func openStored(t testing.TB, s objstore.Store, key string) (tr *tar.Reader, closeAll func()) {
	t.Helper()
	rc, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	zr, err := archive.NewGzipReader(rc, 0)
	if err != nil {
		rc.Close()
		t.Fatalf("%s: %v", key, err)
	}
	return tar.NewReader(zr), func() { zr.Close(); rc.Close() }
}
