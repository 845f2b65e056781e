package archive

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkExtract extracts a tree shaped like a node_modules layer: 2,000
// files of 4 KiB in 200 directories, three levels deep, into a fresh dir.
func BenchmarkExtract(b *testing.B) {
	src := b.TempDir()
	payload := bytes.Repeat([]byte("module.exports = 1;\n"), 205)
	for i := 0; i < 2000; i++ {
		p := filepath.Join(src, fmt.Sprintf("pkg%03d", i%200), "lib", fmt.Sprintf("f%04d.js", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, payload, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var tarball bytes.Buffer
	if _, err := CreateTar(&tarball, src, CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(tarball.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(b.TempDir(), "x")
		if _, err := ExtractTar(bytes.NewReader(tarball.Bytes()), dst, ExtractOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
