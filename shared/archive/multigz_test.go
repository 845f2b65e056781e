package archive

import (
	"bytes"
	stdgzip "compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/testenv"
)

func multi(t testing.TB, data []byte, member int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := newMultiGzipWriter(&buf, 1, member)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func randomText(n int) []byte {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return []byte(hex.EncodeToString(b))
}

// A multi-member file is one valid gzip stream for every reader, and the
// parallel reader yields exactly the input, for any number of workers.
func TestMultiGzipRoundTrip(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 1000, 64 << 10, 64<<10 + 1, 1 << 20} {
		data := randomText(size)
		z := multi(t, data, 64<<10)
		std, err := stdgzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(std)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: the standard library reads %d bytes, %v", size, len(got), err)
		}
		for _, workers := range []int{1, 2, 8} {
			r, err := NewGzipReader(bytes.NewReader(z), workers)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d workers %d: %d bytes, %v", size, workers, len(got), err)
			}
		}
	}
}

// The gzip tool accepts the file too.
func TestMultiGzipWithGzipTool(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "gzip")
	data := randomText(300 << 10)
	path := filepath.Join(t.TempDir(), "x.gz")
	if err := os.WriteFile(path, multi(t, data, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gzip", "-dc", path).Output()
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("gzip -dc: %d bytes, %v", len(out), err)
	}
}

// Plain gzip, and a plain member appended after ours, still read whole.
func TestGzipReaderFallbacks(t *testing.T) {
	t.Parallel()
	data := randomText(200 << 10)
	var plain bytes.Buffer
	zw := stdgzip.NewWriter(&plain)
	zw.Write(data)
	zw.Close()
	mixed := append(multi(t, data, 64<<10), plain.Bytes()...)
	for name, tc := range map[string]struct {
		z    []byte
		want []byte
	}{"plain": {plain.Bytes(), data}, "mixed": {mixed, append(append([]byte(nil), data...), data...)}} {
		r, err := NewGzipReader(bytes.NewReader(tc.z), 4)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Fatalf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

// Damaged input is an error, never a hang or a silent short read.
func TestGzipReaderDamage(t *testing.T) {
	t.Parallel()
	z := multi(t, randomText(300<<10), 64<<10)
	truncated := z[:len(z)-100]
	lying := append([]byte(nil), z...)
	lying[sizeOffset], lying[sizeOffset+1], lying[sizeOffset+2], lying[sizeOffset+3] = 5, 0, 0, 0
	flipped := append([]byte(nil), z...)
	flipped[len(flipped)/2] ^= 0xff
	for name, in := range map[string][]byte{"truncated": truncated, "lying length": lying, "flipped byte": flipped} {
		r, err := NewGzipReader(bytes.NewReader(in), 4)
		if err != nil {
			continue
		}
		if _, err := io.ReadAll(r); err == nil {
			t.Errorf("%s: read without error", name)
		}
		r.Close()
	}
}

// CreateTarGz with MemberBytes round-trips through ExtractTarGz.
func TestCreateExtractMultiMember(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	for i := 0; i < 50; i++ {
		p := filepath.Join(src, "d", strings.Repeat("x", i%5+1), "f"+hex.EncodeToString([]byte{byte(i)}))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, randomText(10<<10), 0o644)
	}
	var buf bytes.Buffer
	if _, err := CreateTarGz(&buf, src, CreateOptions{MemberBytes: 64 << 10, Level: 1}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	st, err := ExtractTarGz(&buf, dst, ExtractOptions{})
	if err != nil || st.Entries < 50 {
		t.Fatalf("extract: %+v %v", st, err)
	}
	err = filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs: %v", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func BenchmarkInflate(b *testing.B) {
	data := randomText(64 << 20)
	var single bytes.Buffer
	zw, _ := stdgzip.NewWriterLevel(&single, 1)
	zw.Write(data)
	zw.Close()
	multiZ := multi(b, data, DefaultMemberBytes)
	for name, z := range map[string][]byte{"single-member": single.Bytes(), "multi-member": multiZ} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				r, err := NewGzipReader(bytes.NewReader(z), 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}
