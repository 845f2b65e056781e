package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, link string
	typ        byte
	body       string
	size       int64 // header size when it should differ from len(body)
}

func buildTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, ModTime: time.Unix(1700000000, 0)}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
			if e.size != 0 {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg && e.size == 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(entries) > 0 && entries[len(entries)-1].size != 0 {
		// A lying header: stop without padding; the reader fails or the
		// size check refuses first.
		return buf.Bytes()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	t.Parallel()
	limits := ExtractOptions{MaxEntryBytes: 1 << 20, MaxTotalBytes: 2 << 20}
	tests := []struct {
		name    string
		entries []entry
		kind    error
		msg     string
	}{
		{"dotdot escape", []entry{{name: "../evil", typ: tar.TypeReg, body: "x"}}, ErrUnsafeEntry, `path contains ".."`},
		{"nested dotdot", []entry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, ErrUnsafeEntry, `".."`},
		{"absolute path", []entry{{name: "/etc/evil", typ: tar.TypeReg, body: "x"}}, ErrUnsafeEntry, "absolute path"},
		{"symlink absolute", []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc/passwd"}}, ErrUnsafeEntry, "absolute path"},
		{"symlink out", []entry{{name: "a/l", typ: tar.TypeSymlink, link: "../../outside"}}, ErrUnsafeEntry, "points outside"},
		{"symlink then write through it", []entry{
			{name: "l", typ: tar.TypeSymlink, link: "../"},
			{name: "l/evil", typ: tar.TypeReg, body: "x"},
		}, ErrUnsafeEntry, "points outside"},
		{"hardlink out", []entry{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}, ErrUnsafeEntry, "outside the target"},
		{"hardlink absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, ErrUnsafeEntry, "outside the target"},
		{"char device", []entry{{name: "dev", typ: tar.TypeChar}}, ErrUnsafeEntry, "device files"},
		{"block device", []entry{{name: "dev", typ: tar.TypeBlock}}, ErrUnsafeEntry, "device files"},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, ErrUnsafeEntry, "FIFO"},
		{"huge entry", []entry{{name: "big", typ: tar.TypeReg, size: 1 << 40}}, ErrTooLarge, "exceeds the per-entry limit"},
		{"total too large", []entry{
			{name: "a", typ: tar.TypeReg, body: strings.Repeat("a", 900<<10)},
			{name: "b", typ: tar.TypeReg, body: strings.Repeat("b", 900<<10)},
			{name: "c", typ: tar.TypeReg, body: strings.Repeat("c", 900<<10)},
		}, ErrTooLarge, "total limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			_, err := ExtractTar(bytes.NewReader(buildTar(t, tt.entries)), dst, limits)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			var ee *EntryError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want an *EntryError mentioning %q", err, tt.msg)
			}
			assertNothingOutside(t, parent, dst)
		})
	}
}

// assertNothingOutside checks that parent holds only dst.
func assertNothingOutside(t *testing.T, parent, dst string) {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Join(parent, e.Name()) != dst {
			t.Fatalf("extraction wrote %s outside the target", e.Name())
		}
	}
}

func TestExtractAllowsInsideLinks(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	data := buildTar(t, []entry{
		{name: "./", typ: tar.TypeDir},
		{name: "pkg/bin/tool", typ: tar.TypeReg, body: "#!/bin/sh\n"},
		{name: ".bin/tool", typ: tar.TypeSymlink, link: "../pkg/bin/tool"},
		{name: "pkg/bin/tool2", typ: tar.TypeLink, link: "pkg/bin/tool"},
	})
	if _, err := ExtractTar(bytes.NewReader(data), dst, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, ".bin/tool"))
	if err != nil || string(b) != "#!/bin/sh\n" {
		t.Fatalf("read through link: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "pkg/bin/tool2")); string(b) != "#!/bin/sh\n" {
		t.Fatal("hard link content")
	}
}

func TestExtractDoesNotFollowPreexistingLink(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dst := filepath.Join(parent, "dst")
	outside := filepath.Join(parent, "outside")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dst, "f")); err != nil {
		t.Fatal(err)
	}
	data := buildTar(t, []entry{{name: "f", typ: tar.TypeReg, body: "new"}})
	if _, err := ExtractTar(bytes.NewReader(data), dst, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("outside file overwritten: %q", b)
	}
}

func TestRoundTripDeterministic(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	files := map[string]string{"b.txt": "b", "a/z.txt": "z", "a/y.txt": "y", "skip/x": "x", "exec.sh": "#!/bin/sh"}
	for name, body := range files {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(src, "exec.sh"), 0o755)
	os.Symlink("a/z.txt", filepath.Join(src, "link"))
	excl := func(rel string, d fs.DirEntry) bool { return rel == "skip" }
	var one, two bytes.Buffer
	if _, err := CreateTarGz(&one, src, CreateOptions{Exclude: excl}); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateTarGz(&two, src, CreateOptions{Exclude: excl}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Fatal("two archives of the same tree differ")
	}
	dst := t.TempDir()
	st, err := ExtractTarGz(bytes.NewReader(one.Bytes()), dst, ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(len("bzy#!/bin/sh")) {
		t.Fatalf("bytes = %d", st.Bytes)
	}
	if _, err := os.Stat(filepath.Join(dst, "skip")); !os.IsNotExist(err) {
		t.Fatal("excluded dir extracted")
	}
	if fi, _ := os.Stat(filepath.Join(dst, "exec.sh")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v", fi.Mode())
	}
	if target, _ := os.Readlink(filepath.Join(dst, "link")); target != "a/z.txt" {
		t.Fatalf("link = %q", target)
	}
	// Prefix and StripPrefix.
	var pre bytes.Buffer
	if _, err := CreateTar(&pre, src, CreateOptions{Prefix: "node_modules/", Exclude: excl}); err != nil {
		t.Fatal(err)
	}
	dst2 := t.TempDir()
	if _, err := ExtractTar(bytes.NewReader(pre.Bytes()), dst2, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst2, "node_modules/a/y.txt")); string(b) != "y" {
		t.Fatal("prefix")
	}
}

func TestNotGzip(t *testing.T) {
	t.Parallel()
	_, err := ExtractTarGz(strings.NewReader("plain"), t.TempDir(), ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "not a gzip stream") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzExtract builds a small tar in memory from up to three fuzzed entries
// (type, name, link target; one body) — the shapes hostile archives take —
// and extracts it: the extractor must never panic, never write outside the
// target, and never leave a symlink that resolves outside it. Building the
// tar from fields (rather than mutating raw bytes, whose header checksums
// the mutator almost never gets right) makes every execution reach the
// extractor, and the target lives below one directory per fuzz process on
// a tmpfs (/dev/shm when present), so a run costs no process and almost no
// disk: thousands of executions per minute instead of a handful.
func FuzzExtract(f *testing.F) {
	const (
		reg, dir, sym, link, dev, fifo = byte(tar.TypeReg), byte(tar.TypeDir), byte(tar.TypeSymlink), byte(tar.TypeLink), byte(tar.TypeChar), byte(tar.TypeFifo)
	)
	// The hostile shapes the tests above know, as seeds.
	for _, s := range []struct {
		k1     byte
		n1, l1 string
		k2     byte
		n2, l2 string
		k3     byte
		n3, l3 string
		body   string
	}{
		{reg, "a/b", "", 0, "", "", 0, "", "", "x"},
		{sym, "l", "a", dir, "a/", "", reg, "l/x", "", "y"},
		{reg, "../x", "", 0, "", "", 0, "", "", "x"},
		{reg, "/abs", "", 0, "", "", 0, "", "", "x"},
		{link, "h", "a", 0, "", "", 0, "", "", ""},
		{reg, "f", "", link, "h", "../f", 0, "", "", "x"},
		{sym, "a", ".", sym, "a/a/logs", "../../outside", 0, "", "", ""},
		{sym, "y", ".", sym, "x", "y/y/y/../..", 0, "", "", ""},
		{sym, "d/l", "../up/up/../..", sym, "up", ".", 0, "", "", ""},
		{sym, "esc", "../../etc", reg, "esc/passwd", "", 0, "", "", "root"},
		{sym, "abs", "/etc", reg, "abs/x", "", 0, "", "", "x"},
		{reg, "x", "", sym, "x", "/tmp", reg, "x", "", "overwrite through a link"},
		{dev, "dev/null", "", fifo, "p", "", 0, "", "", ""},
		{reg, "nul\x00name", "", reg, `back\slash`, "", 0, "", "", "x"},
		{dir, "d", "", reg, "d", "", sym, "d/../../x", "x", ""},
	} {
		f.Add(s.k1, s.n1, s.l1, s.k2, s.n2, s.l2, s.k3, s.n3, s.l3, []byte(s.body))
	}
	base := fuzzBase(f)
	f.Fuzz(func(t *testing.T, k1 byte, n1, l1 string, k2 byte, n2, l2 string, k3 byte, n3, l3 string, body []byte) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range []struct {
			k    byte
			n, l string
		}{{k1, n1, l1}, {k2, n2, l2}, {k3, n3, l3}} {
			if e.k == 0 || len(e.n) > 200 || len(e.l) > 200 {
				continue
			}
			h := &tar.Header{Typeflag: e.k, Name: e.n, Linkname: e.l, Mode: 0o644, Format: tar.FormatPAX}
			if e.k == tar.TypeReg {
				h.Size = int64(len(body))
			}
			if tw.WriteHeader(h) != nil {
				return // not representable in a tar
			}
			if e.k == tar.TypeReg {
				_, _ = tw.Write(body)
			}
		}
		if tw.Close() != nil {
			return
		}
		parent, err := os.MkdirTemp(base, "run-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(parent)
		dst := filepath.Join(parent, "dst")
		_, xerr := ExtractTar(bytes.NewReader(buf.Bytes()), dst, ExtractOptions{MaxEntryBytes: 1 << 16, MaxTotalBytes: 1 << 18, MaxEntries: 1000})
		// Nothing written outside dst, one or two levels up (a link
		// target such as ../../outside).
		assertNothingOutside(t, parent, dst)
		assertNothingOutside(t, base, parent)
		if xerr != nil {
			return // a refused archive's staging is discarded by its caller
		}
		_ = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			// An accepted archive leaves no link pointing outside, lexically
			// or resolved through the tree (chains).
			target, _ := os.Readlink(p)
			lex, _ := filepath.Rel(dst, filepath.Join(filepath.Dir(p), target))
			if filepath.IsAbs(target) || !filepath.IsLocal(lex) && lex != "." {
				t.Fatalf("symlink %s -> %s escapes", p, target)
			}
			rel, _ := filepath.Rel(dst, p)
			if err := resolvesInside(dst, filepath.ToSlash(rel)); err != nil {
				t.Fatalf("accepted archive left symlink %s, which resolves outside: %v", p, err)
			}
			return nil
		})
	})
}

// fuzzBase is one directory for every execution of a fuzz process, on a
// tmpfs when the machine has one.
func fuzzBase(f *testing.F) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "svc-fuzz-extract-"); err == nil {
			f.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return f.TempDir()
}

// Link checks on resolved paths, not lexical ones. Each
// archive passed the old lexical check and left a symlink through which git
// (or node) would later write outside the target.
func TestExtractRefusesLinkChains(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []entry
	}{
		{"a → . then a/a/logs → ../../outside", []entry{
			{name: "a", typ: tar.TypeSymlink, link: "."},
			{name: "a/a/logs", typ: tar.TypeSymlink, link: "../../outside"},
		}},
		{"y → . then x → y/y/y/../..", []entry{
			{name: "y", typ: tar.TypeSymlink, link: "."},
			{name: "x", typ: tar.TypeSymlink, link: "y/y/y/../.."},
		}},
		{"chain defined after its user", []entry{
			{name: "d/l", typ: tar.TypeSymlink, link: "../up/up/../.."},
			{name: "up", typ: tar.TypeSymlink, link: "."},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			_, err := ExtractTar(bytes.NewReader(buildTar(t, tt.entries)), dst, ExtractOptions{})
			if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), "outside") {
				t.Fatalf("err = %v, want a refusal of a link resolving outside", err)
			}
		})
	}
}

// A .git archive (NoLinks) refuses every symlink and hard link, even ones
// that stay inside.
func TestExtractNoLinks(t *testing.T) {
	t.Parallel()
	for _, e := range []entry{{name: "l", typ: tar.TypeSymlink, link: "f"}, {name: "h", typ: tar.TypeLink, link: "f"}} {
		data := buildTar(t, []entry{{name: "f", typ: tar.TypeReg, body: "x"}, e})
		if _, err := ExtractTar(bytes.NewReader(data), t.TempDir(), ExtractOptions{}); err != nil {
			t.Fatalf("%s inside, without NoLinks: %v", e.name, err)
		}
		_, err := ExtractTar(bytes.NewReader(data), t.TempDir(), ExtractOptions{NoLinks: true})
		if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), "links are not allowed") {
			t.Fatalf("%s with NoLinks: %v", e.name, err)
		}
	}
}
