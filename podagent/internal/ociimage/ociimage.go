// Package ociimage builds the product's container images (svc-apiserver and
// svc-podagent, the images the chart names; docs/kubernetes-runtime.md "Images and real containers") without
// docker or a registry: a base layer with git, git-lfs and sh and exactly the
// shared objects they need (the micro-VM guest image's file set,
// guestimage.ToolFiles), CA certificates and passwd/group for the non-root
// user 65532, and a layer with one static binary. Every tar entry and the
// config carry fixed times, owners and order, so the same inputs give the
// same image digest; Write stores an OCI image layout as one tar archive
// (`podman load -i`, `ctr images import`).
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
)

// UID and GID run every process of the images (the chart's runAsUser).
const (
	UID = 65532
	GID = 65532
)

// Epoch is the time of every entry and of the config: builds do not depend
// on when or from which file times they ran.
var Epoch = time.Unix(0, 0).UTC()

// CACerts is the host's CA bundle (Debian's ca-certificates), copied to the
// same path in the images.
const CACerts = "/etc/ssl/certs/ca-certificates.crt"

// Spec is one image.
type Spec struct {
	// Binary is the static executable, installed at /usr/local/bin/<Name>.
	Binary string
	// Name is the program's name in the image (apiserver, podagent).
	Name string
	// Cmd are the entrypoint's default arguments (["serve"]).
	Cmd []string
	// Tools are git, git-lfs and sh (default: the host's, guestimage.HostTools).
	Tools guestimage.Tools
	// CACerts is the CA bundle (default CACerts).
	CACerts string
}

// Build returns the image of s.
func Build(s Spec) (v1.Image, error) {
	if s.Binary == "" || s.Name == "" {
		return nil, errors.New("ociimage: Binary and Name are required")
	}
	if err := guestimage.CheckStatic(s.Binary); err != nil {
		return nil, err
	}
	if s.Tools == (guestimage.Tools{}) {
		t, err := guestimage.HostTools()
		if err != nil {
			return nil, err
		}
		s.Tools = t
	}
	if s.CACerts == "" {
		s.CACerts = CACerts
	}
	base, err := baseLayer(s)
	if err != nil {
		return nil, err
	}
	bin := &layerFiles{}
	if err := bin.file("/usr/local/bin/"+s.Name, s.Binary, 0o755, 0); err != nil {
		return nil, err
	}
	app, err := bin.layer()
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "svc-image: " + toolNames(s.Tools) + ", CA certificates, user 65532"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "svc-image: /usr/local/bin/" + s.Name}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: Epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{"/usr/local/bin/" + s.Name},
		Cmd:        s.Cmd,
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "SSL_CERT_FILE=" + CACerts},
		WorkingDir: "/",
	}
	return mutate.ConfigFile(img, cf)
}

// baseLayer holds what both images share, so a node stores it once.
func baseLayer(s Spec) (v1.Layer, error) {
	t, err := baseFiles(s)
	if err != nil {
		return nil, err
	}
	return t.layer()
}

func baseFiles(s Spec) (*layerFiles, error) {
	files, err := guestimage.ToolFiles(s.Tools)
	if err != nil {
		return nil, err
	}
	t := &layerFiles{}
	for _, f := range files {
		if err := t.file(f.Dst, f.Src, 0o755, 0); err != nil {
			return nil, err
		}
	}
	if err := t.file(CACerts, s.CACerts, 0o644, 0); err != nil {
		return nil, err
	}
	t.bytes("/etc/passwd", []byte(fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsvc:x:%d:%d:svc:/tmp:/usr/sbin/nologin\n", UID, GID)), 0o644, 0)
	t.bytes("/etc/group", []byte(fmt.Sprintf("root:x:0:\nsvc:x:%d:\n", GID)), 0o644, 0)
	// The chart mounts volumes on these; a container engine copies a
	// volume's first owner from the image (podman named volumes), so the
	// writable ones belong to the user.
	t.dir("/tmp", 0o1777, 0)
	for _, d := range []string{"/workspace", "/data"} {
		t.dir(d, 0o755, UID)
	}
	return t, nil
}

// layerFiles collects the entries of one layer; layer writes them sorted by
// path with their parent directories, all times Epoch.
type layerFiles struct {
	entries map[string]entry
}

type entry struct {
	mode int64 // permission bits, sticky included
	uid  int
	data []byte
	dir  bool
}

func (t *layerFiles) add(p string, e entry) {
	if t.entries == nil {
		t.entries = map[string]entry{}
	}
	t.entries[strings.TrimPrefix(path.Clean(p), "/")] = e
}

func (t *layerFiles) file(dst, src string, mode int64, uid int) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	t.bytes(dst, b, mode, uid)
	return nil
}

func (t *layerFiles) bytes(dst string, b []byte, mode int64, uid int) {
	t.add(dst, entry{mode: mode, uid: uid, data: b})
}

func (t *layerFiles) dir(dst string, mode int64, uid int) {
	t.add(dst, entry{mode: mode, uid: uid, dir: true})
}

func (t *layerFiles) tar() ([]byte, error) {
	for p := range t.entries {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := t.entries[d]; !ok {
				t.entries[d] = entry{mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(t.entries))
	for p := range t.entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		e := t.entries[p]
		h := &tar.Header{Name: p, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: Epoch, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (t *layerFiles) layer() (v1.Layer, error) {
	b, err := t.tar()
	if err != nil {
		return nil, err
	}
	// Compressed once here (gzip's output depends only on its input and
	// level; no name or time in the header), not on every read of the layer.
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	c := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Write stores img as an OCI image layout in one tar archive at dst, named
// ref (a full reference such as ghcr.io/svc-dev/svc-podagent:0.1.0, for
// podman and containerd alike). The archive's bytes depend only on img and ref.
func Write(dst, ref string, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Dir(dst), ".oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	})); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = tarDir(f, dir)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// tarDir writes the files under dir, sorted, with fixed headers.
func tarDir(w io.Writer, dir string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, p := range names {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: Epoch, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// Size is an image's size: its layers' tar bytes (as unpacked on a node)
// and their compressed bytes (as stored in the archive).
type Size struct{ Uncompressed, Compressed int64 }

// Sizes adds up img's layers.
func Sizes(img v1.Image) (Size, error) {
	var s Size
	ls, err := img.Layers()
	if err != nil {
		return s, err
	}
	for _, l := range ls {
		c, err := l.Size()
		if err != nil {
			return s, err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return s, err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return s, err
		}
		s.Compressed += c
		s.Uncompressed += n
	}
	return s, nil
}

// toolNames names the programs of the base layer (its history entry).
func toolNames(t guestimage.Tools) string {
	if t.Zstd != "" {
		return "git, git-lfs, sh, zstd"
	}
	return "git, git-lfs, sh"
}
