package archive

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Both decoders — the zstd program (the system's, when installed) and the
// Go one — give back what CreateTarZstd wrote, and report a damaged
// (checksum) or truncated stream as an error rather than a short, clean end.
func TestZstdDecoders(t *testing.T) {
	src := t.TempDir()
	for i := 0; i < 50; i++ {
		body := strings.Repeat("module "+strings.Repeat("x", i)+"\n", 300)
		if err := os.WriteFile(filepath.Join(src, "f"+string(rune('a'+i%26))+strings.Repeat("z", i/26)+".js"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var layer bytes.Buffer
	if _, err := CreateTarZstd(&layer, src, CreateOptions{Prefix: "node_modules/"}); err != nil {
		t.Fatal(err)
	}
	plain := func(t *testing.T, in []byte) ([]byte, error) {
		zr, err := NewZstdReader(bytes.NewReader(in))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		return io.ReadAll(zr)
	}
	var want []byte
	decoders := []struct {
		name    string
		program bool
	}{{"go", false}, {"program", true}}
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			if d.program && zstdProgram() == "" {
				t.Fatal("the zstd program is not installed (.ci/run installs the zstd package)")
			}
			useZstdProgram = d.program
			t.Cleanup(func() { useZstdProgram = true })
			got, err := plain(t, layer.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if want == nil {
				want = got
			} else if !bytes.Equal(got, want) {
				t.Fatalf("the decoders disagree: %d and %d bytes", len(got), len(want))
			}
			if _, err := ExtractTar(bytes.NewReader(got), t.TempDir(), ExtractOptions{}); err != nil {
				t.Fatalf("the decompressed layer is not a tar: %v", err)
			}
			// The last byte is the frame's content checksum: a changed
			// byte elsewhere may decode to the same output (unused table
			// bits), one there cannot pass (CI once drew such a byte).
			damaged := bytes.Clone(layer.Bytes())
			damaged[len(damaged)-1] ^= 0xff
			for name, in := range map[string][]byte{"truncated": layer.Bytes()[:layer.Len()*2/3], "damaged": damaged, "not zstd": []byte("plain text")} {
				if _, err := plain(t, in); err == nil {
					t.Errorf("%s: decompressed without error", name)
				}
			}
		})
	}
}
