package archivetest_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

func TestStoredEntries(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "a.txt"), []byte("hello"), 0o644)
	for _, member := range []int{0, 16} { // single- and multi-member gzip
		var buf bytes.Buffer
		if _, err := archive.CreateTarGz(&buf, src, archive.CreateOptions{MemberBytes: member}); err != nil {
			t.Fatal(err)
		}
		s, err := fs.New(t.TempDir(), fs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), "p/x.tar.gz", &buf, int64(buf.Len()), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		got := archivetest.StoredEntries(t, s, "p/x.tar.gz")
		if got["d/a.txt"] != "hello" {
			t.Fatalf("member size %d: entries %q", member, got)
		}
	}
}
