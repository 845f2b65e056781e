// Package guestimage builds what a micro-VM guest boots (spec 10.5, "Micro-VM
// runtimes"): an uncompressed kernel taken from the host's Debian cloud kernel
// and an uncompressed newc initramfs (the kernel would spend seconds
// inflating a gzip one under TCG) holding the static podagent (as /init), git with
// the shared libraries it links, and the virtio kernel modules the cloud
// kernel ships as modules (virtio-mmio, virtio-blk, virtio-net). Both files
// are cached under CacheDir by a hash of every input, so a host builds an
// image once per podagent/kernel/git version.
package guestimage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/atomicfile"
)

// format changes whenever the layout below changes, so caches rebuild.
const format = "svc-guest-image-3"

// Modules are the kernel modules the guest loads (with their dependencies,
// from modules.dep): the microvm machine's virtio-mmio transport, the
// workspace disk and the network the host reaches the agent through.
var Modules = []string{"virtio_mmio", "virtio_blk", "virtio_net"}

// ModuleList is the file in the initramfs listing the modules to load, in
// dependency order, one path per line.
const ModuleList = "/etc/svc-modules"

// Options name the inputs; empty fields take the host's defaults.
type Options struct {
	// CacheDir holds <hash>/vmlinux and <hash>/initramfs.cpio.
	CacheDir string
	// Agent is the podagent binary for the guest; it must be static
	// (CGO_ENABLED=0): the guest has no Go runtime libraries.
	Agent string
	// KernelImage is a vmlinuz; default: the newest /boot/vmlinuz-*.
	KernelImage string
	// ModulesDir is /lib/modules/<version>; default from KernelImage's name.
	ModulesDir string
	// Git is the git binary copied into the guest (default: git in PATH).
	Git string
	// GitLFS is git-lfs for the guest's large files, which move through
	// the host (default: git-lfs in PATH).
	GitLFS string
	// Shell becomes the guest's /bin/sh: git runs filter commands with
	// arguments (git-lfs filter-process) through it (default: the host's
	// sh, symlinks resolved).
	Shell string
	// LZ4 decompresses the kernel for a faster boot under TCG (default: lz4
	// in PATH; when absent the compressed kernel is booted as is).
	LZ4 string
}

// Image is a built guest image.
type Image struct {
	Kernel, Initrd string
	KernelVersion  string
	Hash           string
}

// Build returns the cached image for o, building it when missing.
func Build(o Options) (Image, error) {
	if o.CacheDir == "" {
		return Image{}, errors.New("guestimage: CacheDir is required")
	}
	if err := o.defaults(); err != nil {
		return Image{}, err
	}
	if err := CheckStatic(o.Agent); err != nil {
		return Image{}, err
	}
	mods, err := resolveModules(o.ModulesDir, Modules)
	if err != nil {
		return Image{}, err
	}
	files, err := ToolFiles(Tools{Git: o.Git, GitLFS: o.GitLFS, Shell: o.Shell})
	if err != nil {
		return Image{}, err
	}
	h := sha256.New()
	fmt.Fprintln(h, format)
	inputs := append([]string{o.KernelImage, o.Agent}, mods...)
	for _, f := range files {
		inputs = append(inputs, f.Src)
	}
	for _, p := range inputs {
		if err := hashFile(h, p); err != nil {
			return Image{}, err
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(o.CacheDir, sum)
	img := Image{Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initramfs.cpio"),
		KernelVersion: filepath.Base(o.ModulesDir), Hash: sum}
	if exists(img.Kernel) && exists(img.Initrd) {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // recently used: kept by prune
		return img, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, err
	}
	if err := o.kernel(img.Kernel); err != nil {
		return Image{}, err
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, o.Agent, mods, files); err != nil {
		return Image{}, err
	}
	if err := atomicfile.Write(img.Initrd, buf.Bytes(), 0o644); err != nil {
		return Image{}, err
	}
	prune(o.CacheDir, sum, keepImages)
	return img, nil
}

// keepImages is how many older images stay cached beside the current one
// (each is ~80 MB; a host or test run may still boot a recent one).
const keepImages = 3

// prune removes all but the keep most recent images other than current.
func prune(cacheDir, current string, keep int) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	type dir struct {
		name string
		mod  int64
	}
	var old []dir
	for _, e := range entries {
		if !e.IsDir() || e.Name() == current {
			continue
		}
		if fi, err := e.Info(); err == nil {
			old = append(old, dir{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].mod > old[j].mod })
	for i := keep; i < len(old); i++ {
		_ = os.RemoveAll(filepath.Join(cacheDir, old[i].name))
	}
}

func (o *Options) defaults() error {
	if o.Agent == "" {
		return errors.New("guestimage: the guest podagent binary is not set (build it with CGO_ENABLED=0)")
	}
	if o.KernelImage == "" {
		ks, _ := filepath.Glob("/boot/vmlinuz-*")
		sort.Strings(ks)
		if len(ks) == 0 {
			return errors.New("guestimage: no kernel under /boot/vmlinuz-* (install the Debian package linux-image-cloud-amd64)")
		}
		o.KernelImage = ks[len(ks)-1]
	}
	if _, err := os.Stat(o.KernelImage); err != nil {
		return fmt.Errorf("guestimage: kernel: %w (install linux-image-cloud-amd64)", err)
	}
	if o.ModulesDir == "" {
		ver := strings.TrimPrefix(filepath.Base(o.KernelImage), "vmlinuz-")
		o.ModulesDir = filepath.Join("/lib/modules", ver)
	}
	if _, err := os.Stat(filepath.Join(o.ModulesDir, "modules.dep")); err != nil {
		return fmt.Errorf("guestimage: kernel modules: %w", err)
	}
	if o.Git == "" || o.GitLFS == "" || o.Shell == "" {
		t, err := HostTools()
		if err != nil {
			return err
		}
		o.Git, o.GitLFS, o.Shell = or(o.Git, t.Git), or(o.GitLFS, t.GitLFS), or(o.Shell, t.Shell)
	}
	if o.LZ4 == "" {
		o.LZ4, _ = exec.LookPath("lz4")
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Tools are the host programs an image carries besides the agent.
type Tools struct {
	// Git and GitLFS serve and sync the workspace; Shell becomes /bin/sh
	// (git runs filter commands with arguments, git-lfs filter-process,
	// through it).
	Git, GitLFS, Shell string
	// Zstd, when set, becomes /usr/bin/zstd: the cold start decompresses
	// the deps layer with it (shared/archive.NewZstdReader; without it the
	// Go decoder, at about three times the CPU).
	Zstd string
}

// HostTools finds git, git-lfs and sh in PATH (symlinks of sh resolved:
// Debian's /bin/sh is dash).
func HostTools() (Tools, error) {
	var t Tools
	var err error
	if t.Git, err = exec.LookPath("git"); err != nil {
		return t, errors.New("guestimage: git is not installed on the host (it is copied into the image)")
	}
	if t.GitLFS, err = exec.LookPath("git-lfs"); err != nil {
		return t, errors.New("guestimage: git-lfs is not installed on the host (it is copied into the image)")
	}
	p, err := exec.LookPath("sh")
	if err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err != nil {
		return t, errors.New("guestimage: no sh on the host (it is copied into the image for git's filters)")
	}
	t.Shell = p
	t.Zstd, _ = exec.LookPath("zstd") // optional
	return t, nil
}

// File is one file an image holds: Src on the host, Dst in the image.
type File struct{ Src, Dst string }

// ToolFiles is the file set of git, git-lfs and sh (and zstd when Tools
// names it: the container images do, the guest does not) in an image — the
// micro-VM guest's initramfs and the container images alike: the three
// programs at /usr/bin/git, /usr/bin/git-lfs and /bin/sh, and every shared
// object they need (the ELF interpreter and DT_NEEDED libraries,
// transitively) at its host path.
func ToolFiles(t Tools) ([]File, error) {
	bins := []string{t.Git, t.GitLFS, t.Shell}
	dsts := []string{"/usr/bin/git", "/usr/bin/git-lfs", "/bin/sh"}
	if t.Zstd != "" {
		bins, dsts = append(bins, t.Zstd), append(dsts, "/usr/bin/zstd")
	}
	paths, err := gitFiles(bins...)
	if err != nil {
		return nil, err
	}
	out := make([]File, len(paths))
	for i, p := range paths {
		dst := p
		if i < len(dsts) {
			dst = dsts[i]
		}
		out[i] = File{Src: p, Dst: dst}
	}
	return out, nil
}

// CheckStatic fails unless path is a statically linked ELF executable (the
// guest and the container images have no Go runtime libraries).
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("guestimage: guest agent %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("guestimage: guest agent %s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// kernel writes an uncompressed ELF vmlinux when lz4 can extract the
// payload of the bzImage (the Debian cloud kernel compresses with lz4), else
// copies the compressed image: a direct entry saves about a second of
// decompression under TCG.
func (o *Options) kernel(dst string) error {
	raw, err := os.ReadFile(o.KernelImage)
	if err != nil {
		return err
	}
	if o.LZ4 != "" {
		if i := bytes.Index(raw, []byte{0x02, 0x21, 0x4c, 0x18}); i > 0 {
			var out bytes.Buffer
			cmd := exec.Command(o.LZ4, "-dc")
			cmd.Stdin, cmd.Stdout = bytes.NewReader(raw[i:]), &out
			_ = cmd.Run() // the payload is followed by the rest of the bzImage: lz4 reports trailing garbage
			if b := out.Bytes(); len(b) > 1<<20 && bytes.HasPrefix(b, []byte("\x7fELF")) {
				return atomicfile.Write(dst, b, 0o644)
			}
		}
	}
	return atomicfile.Write(dst, raw, 0o644)
}

// resolveModules returns the absolute paths of names and their
// dependencies, dependencies first, from modules.dep. A module the kernel
// has built in (absent from modules.dep) is skipped.
func resolveModules(dir string, names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{} // module name -> [own path, dep paths...]
	byPath := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		path, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(filepath.Base(path), ".ko") // also .ko.xz, .ko.zst
		deps[name] = append([]string{path}, strings.Fields(rest)...)
		byPath[path] = name
	}
	var out []string
	seen := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		d, ok := deps[name]
		if !ok || seen[name] {
			return
		}
		seen[name] = true
		for _, dp := range d[1:] {
			visit(byPath[dp])
		}
		out = append(out, filepath.Join(dir, d[0]))
	}
	for _, n := range names {
		visit(n)
	}
	for _, p := range out {
		if strings.HasSuffix(p, ".ko") {
			continue
		}
		return nil, fmt.Errorf("guestimage: module %s is compressed; the guest loads plain .ko files", p)
	}
	return out, nil
}

// gitFiles is git, git-lfs, sh and every shared object they need (the ELF interpreter
// and DT_NEEDED libraries, transitively), as host paths.
func gitFiles(bins ...string) ([]string, error) {
	out := append([]string(nil), bins...)
	seen := map[string]bool{}
	queue := append([]string(nil), bins...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		f, err := elf.Open(p)
		if err != nil {
			return nil, fmt.Errorf("guestimage: %s: %w", p, err)
		}
		libs, _ := f.ImportedLibraries()
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(prog.Open())
				libs = append(libs, strings.TrimRight(string(b), "\x00"))
			}
		}
		f.Close()
		for _, l := range libs {
			path, err := findLib(l)
			if err != nil {
				return nil, err
			}
			if !seen[path] {
				seen[path] = true
				out = append(out, path)
				queue = append(queue, path)
			}
		}
	}
	return out, nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func findLib(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, d := range libDirs {
		if p := filepath.Join(d, name); exists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("guestimage: shared library %s of git not found", name)
}

func writeInitramfs(w io.Writer, agent string, mods []string, files []File) error {
	c := &cpioWriter{w: w}
	dirs := map[string]bool{}
	mkdir := func(d string) {
		var parts []string
		for d != "/" && d != "." && !dirs[d] {
			parts = append(parts, d)
			d = filepath.Dir(d)
		}
		for i := len(parts) - 1; i >= 0; i-- {
			dirs[parts[i]] = true
			c.Dir(parts[i], 0o755)
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys", "/tmp", "/data", "/etc", "/root", "/bin", "/lib/modules"} {
		mkdir(d)
	}
	add := func(dst, src string, perm uint32) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		mkdir(filepath.Dir(dst))
		c.File(dst, perm, b)
		return nil
	}
	if err := add("/bin/podagent", agent, 0o755); err != nil {
		return err
	}
	c.Symlink("/init", "/bin/podagent")
	var list strings.Builder
	for _, m := range mods {
		dst := "/lib/modules/" + filepath.Base(m)
		if err := add(dst, m, 0o644); err != nil {
			return err
		}
		list.WriteString(dst + "\n")
	}
	c.File(ModuleList, 0o644, []byte(list.String()))
	for _, f := range files {
		if err := add(f.Dst, f.Src, 0o755); err != nil {
			return err
		}
	}
	c.File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/podagent\n"))
	c.File("/etc/group", 0o644, []byte("root:x:0:\n"))
	return c.Close()
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("guestimage: %w", err)
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
