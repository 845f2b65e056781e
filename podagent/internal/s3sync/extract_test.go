package s3sync

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/svc-dev/svc/shared/archive"
)

type entry struct {
	name, body, link string
	typ              byte
}

func tarGz(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestExtractParallel(t *testing.T) {
	t.Parallel()
	var entries []entry
	entries = append(entries, entry{name: "node_modules/", typ: tar.TypeDir})
	for i := 0; i < 200; i++ {
		entries = append(entries, entry{name: fmt.Sprintf("node_modules/pkg%02d/f%03d.js", i%17, i), body: fmt.Sprintf("module %d\n", i)})
	}
	entries = append(entries,
		entry{name: "node_modules/.bin/tool", typ: tar.TypeSymlink, link: "../pkg01/f001.js"},
		entry{name: "node_modules/pkg16/hard.js", typ: tar.TypeLink, link: "node_modules/pkg03/f003.js"})
	dst := t.TempDir()
	st, err := ExtractTarGz(bytes.NewReader(tarGz(t, entries)), dst, archive.ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != len(entries) {
		t.Fatalf("entries = %d, want %d", st.Entries, len(entries))
	}
	for i := 0; i < 200; i++ {
		b, err := os.ReadFile(filepath.Join(dst, fmt.Sprintf("node_modules/pkg%02d/f%03d.js", i%17, i)))
		if err != nil || string(b) != fmt.Sprintf("module %d\n", i) {
			t.Fatalf("file %d: %q %v", i, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "node_modules/.bin/tool")); err != nil || string(b) != "module 1\n" {
		t.Fatalf("symlink: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "node_modules/pkg16/hard.js")); err != nil || string(b) != "module 3\n" {
		t.Fatalf("hard link: %q %v", b, err)
	}
}

// Files over maxInMemoryEntry are streamed to their writer rather than read
// into memory: their content arrives whole, beside small ones, and a writer
// that refuses such an entry stops the feed (no hang, its own error).
func TestExtractParallelLargeEntries(t *testing.T) {
	t.Parallel()
	big := func(seed byte) string {
		b := bytes.Repeat([]byte{seed}, maxInMemoryEntry+12345)
		b[len(b)-1] = '!'
		return string(b)
	}
	entries := []entry{{name: "node_modules/a/small.js", body: "small\n"}, {name: "node_modules/a/big.bin", body: big('a')},
		{name: "node_modules/b/big.bin", body: big('b')}, {name: "node_modules/b/small.js", body: "after\n"}}
	dst := t.TempDir()
	if _, err := ExtractTarGz(bytes.NewReader(tarGz(t, entries)), dst, archive.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(dst, e.name)); err != nil || string(b) != e.body {
			t.Fatalf("%s: %d bytes, %v", e.name, len(b), err)
		}
	}
	// Over the per-entry limit: refused by the writer mid-feed.
	_, err := ExtractTarGz(bytes.NewReader(tarGz(t, entries)), t.TempDir(), archive.ExtractOptions{MaxEntryBytes: maxInMemoryEntry})
	if !errors.Is(err, archive.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

// TestExtractParallelRefusesHostile: the shared extractor's checks hold
// through the parallel path, whichever writer gets the entry.
func TestExtractParallelRefusesHostile(t *testing.T) {
	t.Parallel()
	filler := func() []entry {
		var es []entry
		for i := 0; i < 20; i++ {
			es = append(es, entry{name: fmt.Sprintf("d%d/f", i), body: "x"})
		}
		return es
	}
	tests := []struct {
		name    string
		entries []entry
		kind    error
	}{
		{"dot-dot", []entry{{name: "a/../../escape", body: "x"}}, archive.ErrUnsafeEntry},
		{"absolute", []entry{{name: "/etc/escape", body: "x"}}, archive.ErrUnsafeEntry},
		{"symlink out", []entry{{name: "a/link", typ: tar.TypeSymlink, link: "../../outside"}}, archive.ErrUnsafeEntry},
		{"hard link out", []entry{{name: "a/hard", typ: tar.TypeLink, link: "../outside"}}, archive.ErrUnsafeEntry},
		{"device", []entry{{name: "a/dev", typ: tar.TypeChar}}, archive.ErrUnsafeEntry},
		// A chain split over writers resolves outside.
		{"symlink chain", []entry{{name: "a", typ: tar.TypeSymlink, link: "."},
			{name: "a/a/logs", typ: tar.TypeSymlink, link: "../../outside"}}, archive.ErrUnsafeEntry},
		{"chain, user first", []entry{{name: "d/l", typ: tar.TypeSymlink, link: "../up/up/../.."},
			{name: "up", typ: tar.TypeSymlink, link: "."}}, archive.ErrUnsafeEntry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			es := append(filler(), tt.entries...)
			es = append(es, filler()...)
			_, err := ExtractTarGz(bytes.NewReader(tarGz(t, es)), dst, archive.ExtractOptions{})
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			if _, err := os.Lstat(filepath.Join(parent, "escape")); err == nil {
				t.Fatal("an entry escaped the target")
			}
		})
	}
	t.Run("total limit", func(t *testing.T) {
		_, err := ExtractTarGz(bytes.NewReader(tarGz(t, filler())), t.TempDir(), archive.ExtractOptions{MaxTotalBytes: 10})
		if !errors.Is(err, archive.ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge", err)
		}
	})
	t.Run("entry limit", func(t *testing.T) {
		_, err := ExtractTarGz(bytes.NewReader(tarGz(t, filler())), t.TempDir(), archive.ExtractOptions{MaxEntries: 5})
		if !errors.Is(err, archive.ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge", err)
		}
	})
	t.Run("corrupt stream", func(t *testing.T) {
		b := tarGz(t, filler())
		_, err := ExtractTarGz(bytes.NewReader(b[:len(b)/2]), t.TempDir(), archive.ExtractOptions{})
		if err == nil {
			t.Fatal("a truncated archive extracted without error")
		}
	})
}

// BenchmarkExtractDeps extracts a node_modules layer (SVC_BENCH_DEPS_MB,
// default 50; 16 KiB text files in 300 packages) from memory with 1..8
// writers: the extraction part of the cold start.
func BenchmarkExtractDeps(b *testing.B) {
	mb := 50
	if v := os.Getenv("SVC_BENCH_DEPS_MB"); v != "" {
		fmt.Sscan(v, &mb)
	}
	raw := make([]byte, 8<<10)
	var es []entry
	for i := 0; i*16<<10 < mb<<20; i++ {
		rand.Read(raw)
		es = append(es, entry{name: fmt.Sprintf("node_modules/pkg%03d/lib%05d.js", i%300, i), body: hex.EncodeToString(raw)})
	}
	data := tarGz(b, es)
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			b.SetBytes(int64(mb) << 20)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dst := b.TempDir()
				b.StartTimer()
				zr, _ := gzip.NewReader(bytes.NewReader(data))
				if _, err := ExtractTarParallel(zr, dst, archive.ExtractOptions{}, n); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dst)
				b.StartTimer()
			}
		})
	}
}
