// Package archive writes and safely reads the tar.gz objects of spec 2.7
// (repo.git.tar.gz, deps-<hash>.tar.gz, project-src.tar.gz).
//
// Create walks a directory in lexical order (so the same tree gives the same
// entry order), skips what an exclude predicate names, and writes regular
// files, directories and symlinks with owner fields cleared.
//
// Extract is the only way the service unpacks an archive it did not just
// write itself. Every entry must stay inside the target: absolute names,
// ".." segments, symlinks or hard links that point out, device files, FIFOs
// and anything that is not a file, directory or link are refused, as are an
// entry larger than MaxEntryBytes and an archive whose total exceeds
// MaxTotalBytes. Files are created through os.Root, so even a link created
// by an earlier entry cannot lead a later write outside the target.
package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/svc-dev/svc/shared/settings"
)

// Defaults of ExtractOptions (zero fields take these).
const (
	DefaultMaxEntryBytes = 8 << 30  // 8 GiB per entry
	DefaultMaxTotalBytes = 32 << 30 // 32 GiB per archive
	DefaultMaxEntries    = 2_000_000
)

var (
	// ErrUnsafeEntry is matched (errors.Is) by every refusal of an entry
	// that would escape the target or is of a forbidden type.
	ErrUnsafeEntry = errors.New("archive: unsafe entry")
	// ErrTooLarge is matched by refusals on the size and count limits.
	ErrTooLarge = errors.New("archive: too large")
)

// EntryError names the entry that was refused and why.
type EntryError struct {
	Name   string
	Reason string
	Kind   error // ErrUnsafeEntry or ErrTooLarge
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("archive: refused entry %q: %s", e.Name, e.Reason)
}

func (e *EntryError) Is(target error) bool { return target == e.Kind }

// Stats counts what was written or extracted.
type Stats struct {
	Entries int
	Bytes   int64 // file content bytes (uncompressed)
	// Symlinks are the symlinks an extraction created (slash-separated,
	// relative to the target), for CheckSymlinks.
	Symlinks []string
}

// CreateOptions tune Create.
type CreateOptions struct {
	// Exclude, when it returns true, skips the entry (and, for a
	// directory, everything below it). rel is slash-separated and relative
	// to the root.
	Exclude func(rel string, d fs.DirEntry) bool
	// Prefix is prepended to every entry name ("node_modules/"); empty
	// means names relative to the root.
	Prefix string
	// Level is the gzip level for CreateTarGz; 0 means gzip.DefaultCompression.
	Level int
	// SkipVanished ignores files that disappear between the directory read
	// and the open (archiving a live tree).
	SkipVanished bool
	// MemberBytes, when > 0, makes CreateTarGz write a multi-member gzip
	// (multigz.go) with members of this many uncompressed bytes, so that
	// NewGzipReader can inflate it on all cores.
	MemberBytes int
	// Leading entries are written first, before the walk of root, as
	// regular files (mode 0644): a small manifest a reader can act on
	// before the rest of the archive has arrived.
	Leading []LeadingFile
}

// LeadingFile is an in-memory file written at the start of an archive.
type LeadingFile struct {
	Name string
	Data []byte
}

// CreateTarGz writes a gzip-compressed tar of root to w.
func CreateTarGz(w io.Writer, root string, opts CreateOptions) (Stats, error) {
	level := opts.Level
	if level == 0 {
		level = gzip.DefaultCompression
	}
	var zw io.WriteCloser
	if opts.MemberBytes > 0 {
		zw = newMultiGzipWriter(w, level, opts.MemberBytes)
	} else {
		gw, err := gzip.NewWriterLevel(w, level)
		if err != nil {
			return Stats{}, err
		}
		zw = gw
	}
	st, err := CreateTar(zw, root, opts)
	if err != nil {
		return st, err
	}
	return st, zw.Close()
}

// CreateTarZstd writes a zstd-compressed tar of root to w (the deps
// layer; opts.Level and opts.MemberBytes do not apply).
func CreateTarZstd(w io.Writer, root string, opts CreateOptions) (Stats, error) {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return Stats{}, err
	}
	st, err := CreateTar(zw, root, opts)
	if err != nil {
		zw.Close()
		return st, err
	}
	return st, zw.Close()
}

// CreateTar writes an uncompressed tar of root to w, in lexical order.
func CreateTar(w io.Writer, root string, opts CreateOptions) (Stats, error) {
	var st Stats
	tw := tar.NewWriter(w)
	for _, lf := range opts.Leading {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: lf.Name, Mode: 0o644, Size: int64(len(lf.Data)), ModTime: time.Now().Truncate(time.Second)}
		if err := tw.WriteHeader(hdr); err != nil {
			return st, err
		}
		if _, err := tw.Write(lf.Data); err != nil {
			return st, err
		}
		st.Entries++
		st.Bytes += int64(len(lf.Data))
	}
	prefix := strings.TrimSuffix(opts.Prefix, "/")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if opts.SkipVanished && errors.Is(err, fs.ErrNotExist) && p != root {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			if prefix == "" {
				return nil
			}
			rel = ""
		} else if opts.Exclude != nil && opts.Exclude(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		name := rel
		if prefix != "" {
			name = path.Join(prefix, rel)
		}
		info, err := d.Info()
		if err != nil {
			if opts.SkipVanished && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		hdr := &tar.Header{Name: name, ModTime: info.ModTime(), Mode: int64(info.Mode().Perm())}
		switch {
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			return nil // sockets, devices, FIFOs are never archived
		}
		if hdr.Typeflag != tar.TypeReg {
			st.Entries++
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			if opts.SkipVanished && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.CopyN(tw, f, hdr.Size)
		st.Bytes += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("archive: %s shrank while being archived", rel)
			}
			return err
		}
		st.Entries++
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, tw.Close()
}

// ExtractOptions bound an extraction; zero fields take the defaults.
type ExtractOptions struct {
	MaxEntryBytes int64
	MaxTotalBytes int64
	MaxEntries    int
	// StripPrefix, when set, is removed from every entry name; entries
	// outside it are refused.
	StripPrefix string
	// PreserveModTime sets each entry's modification time from the archive
	// (one more system call per file; git and node do not need it).
	PreserveModTime bool
	// NoLinks refuses every symlink and hard link: a .git archive
	// (repo.git.tar.gz) never needs one.
	NoLinks bool
	// DeferSymlinkCheck leaves the resolved-path check of the symlinks
	// created (Stats.Symlinks) to the caller, which runs CheckSymlinks once
	// every writer of a parallel extraction into the same target finished.
	DeferSymlinkCheck bool
}

// ExtractTarGz extracts a gzip-compressed tar into dst (created if absent).
func ExtractTarGz(r io.Reader, dst string, opts ExtractOptions) (Stats, error) {
	zr, err := NewGzipReader(r, 0)
	if err != nil {
		return Stats{}, err
	}
	defer zr.Close()
	return ExtractTar(zr, dst, opts)
}

// ExtractTar extracts an uncompressed tar into dst (created if absent).
// On error, entries extracted so far stay; callers extract into a staging
// directory and move it into place on success.
func ExtractTar(r io.Reader, dst string, opts ExtractOptions) (Stats, error) {
	e, err := NewExtractor(dst, opts)
	if err != nil {
		return Stats{}, err
	}
	defer e.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if !opts.DeferSymlinkCheck {
				return e.Stats(), CheckSymlinks(dst, e.st.Symlinks)
			}
			return e.Stats(), nil
		}
		if err != nil {
			return e.Stats(), fmt.Errorf("archive: reading tar: %w", err)
		}
		if err := e.Entry(hdr, tr); err != nil {
			return e.Stats(), err
		}
	}
}

// Extractor writes the entries of one archive into its target, one at a
// time, with every check and limit of ExtractTar (which is a loop over it).
// A parallel extraction gives each of its writers one, over the same target,
// with DeferSymlinkCheck. It is not safe for concurrent use; Close it.
type Extractor struct {
	opts  ExtractOptions
	strip string
	root  *os.Root
	x     *extractor
	st    Stats
}

// NewExtractor opens dst (created if absent) for extraction.
func NewExtractor(dst string, opts ExtractOptions) (*Extractor, error) {
	opts.MaxEntryBytes = settings.PositiveOr(opts.MaxEntryBytes, DefaultMaxEntryBytes)
	opts.MaxTotalBytes = settings.PositiveOr(opts.MaxTotalBytes, DefaultMaxTotalBytes)
	opts.MaxEntries = settings.PositiveOr(opts.MaxEntries, DefaultMaxEntries)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return nil, err
	}
	return &Extractor{opts: opts, strip: strings.Trim(opts.StripPrefix, "/"), root: root,
		x: &extractor{root: root, dirs: map[string]bool{".": true}}}, nil
}

// Stats is what was extracted so far.
func (e *Extractor) Stats() Stats { return e.st }

// Close releases the target (the symlink check is the caller's: ExtractTar
// runs it at the end, a parallel extraction once every writer closed).
func (e *Extractor) Close() error {
	e.x.forget()
	return e.root.Close()
}

// Entry extracts one entry; a regular file's content is read from content
// (hdr.Size bytes; a *bytes.Reader holding exactly them is written in one
// write). A refused entry is an *EntryError.
func (e *Extractor) Entry(hdr *tar.Header, content io.Reader) error {
	opts, x, root, st := &e.opts, e.x, e.root, &e.st
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // metadata only (git archive writes one with the commit id)
	}
	name, err := entryName(hdr.Name, e.strip)
	if err != nil {
		return err
	}
	if name == "" {
		return nil // the root itself
	}
	if st.Entries++; st.Entries > opts.MaxEntries {
		return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("more than %d entries", opts.MaxEntries), Kind: ErrTooLarge}
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	if opts.NoLinks && (hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink) {
		return &EntryError{Name: hdr.Name, Reason: "links are not allowed in this archive", Kind: ErrUnsafeEntry}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.mkdirAll(name); err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
	case tar.TypeReg: // the reader reports old-style (TypeRegA) entries as TypeReg
		if hdr.Size < 0 || hdr.Size > opts.MaxEntryBytes {
			return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("entry of %d bytes exceeds the per-entry limit of %d bytes", hdr.Size, opts.MaxEntryBytes), Kind: ErrTooLarge}
		}
		if st.Bytes+hdr.Size > opts.MaxTotalBytes {
			return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("archive content exceeds the total limit of %d bytes", opts.MaxTotalBytes), Kind: ErrTooLarge}
		}
		f, err := x.create(name, mode|0o200)
		if err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
		var n int64
		if br, ok := content.(*bytes.Reader); ok && int64(br.Len()) == hdr.Size {
			// Content already in memory: one write, no copy buffer.
			n, err = br.WriteTo(f)
		} else {
			if x.buf == nil {
				x.buf = make([]byte, 64<<10)
			}
			n, err = io.CopyBuffer(f, io.LimitReader(content, hdr.Size), x.buf)
		}
		st.Bytes += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
		if n != hdr.Size {
			return fmt.Errorf("archive: %s: truncated entry (%d of %d bytes)", hdr.Name, n, hdr.Size)
		}
		if mode&0o200 == 0 {
			_ = root.Chmod(name, mode)
		}
	case tar.TypeSymlink:
		if err := checkLinkTarget(name, hdr.Linkname); err != nil {
			return &EntryError{Name: hdr.Name, Reason: err.Error(), Kind: ErrUnsafeEntry}
		}
		if err := x.prepareParent(name); err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
		st.Symlinks = append(st.Symlinks, name)
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname, e.strip)
		if err != nil || target == "" {
			return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("hard link to %q points outside the target", hdr.Linkname), Kind: ErrUnsafeEntry}
		}
		fi, err := root.Lstat(target)
		if err != nil || !fi.Mode().IsRegular() {
			return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("hard link to %q, which is not an extracted regular file", hdr.Linkname), Kind: ErrUnsafeEntry}
		}
		if err := x.prepareParent(name); err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
		if err := root.Link(target, name); err != nil {
			return fmt.Errorf("archive: %s: %w", hdr.Name, err)
		}
	case tar.TypeChar, tar.TypeBlock:
		return &EntryError{Name: hdr.Name, Reason: "device files are not allowed", Kind: ErrUnsafeEntry}
	case tar.TypeFifo:
		return &EntryError{Name: hdr.Name, Reason: "FIFOs are not allowed", Kind: ErrUnsafeEntry}
	default:
		return &EntryError{Name: hdr.Name, Reason: fmt.Sprintf("unsupported entry type %q", hdr.Typeflag), Kind: ErrUnsafeEntry}
	}
	if opts.PreserveModTime && !hdr.ModTime.IsZero() && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

// entryName validates a tar name and returns it relative to the target
// ("" for the root itself).
func entryName(raw, strip string) (string, error) {
	if strings.IndexByte(raw, 0) >= 0 || strings.Contains(raw, `\`) {
		return "", &EntryError{Name: raw, Reason: "name contains a NUL byte or backslash", Kind: ErrUnsafeEntry}
	}
	if strings.HasPrefix(raw, "/") {
		return "", &EntryError{Name: raw, Reason: "absolute path", Kind: ErrUnsafeEntry}
	}
	for _, seg := range strings.Split(raw, "/") {
		if seg == ".." {
			return "", &EntryError{Name: raw, Reason: `path contains ".."`, Kind: ErrUnsafeEntry}
		}
	}
	name := path.Clean(raw)
	if strip != "" {
		if name == strip {
			return "", nil
		}
		if !strings.HasPrefix(name, strip+"/") {
			return "", &EntryError{Name: raw, Reason: fmt.Sprintf("entry outside %s/", strip), Kind: ErrUnsafeEntry}
		}
		name = strings.TrimPrefix(name, strip+"/")
	}
	if name == "." {
		return "", nil
	}
	if !filepath.IsLocal(filepath.FromSlash(name)) {
		return "", &EntryError{Name: raw, Reason: "path is not local to the target", Kind: ErrUnsafeEntry}
	}
	return name, nil
}

// checkLinkTarget refuses symlink targets that are absolute or resolve,
// lexically from the link's directory, outside the target.
func checkLinkTarget(name, target string) error {
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("symlink with an empty or NUL target")
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("symlink to absolute path %q points outside the target", target)
	}
	resolved := path.Join(path.Dir(name), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("symlink to %q points outside the target", target)
	}
	return nil
}

// CheckSymlinks resolves each of links (slash-separated paths relative to
// dst, as in Stats.Symlinks) through the tree as it now is on disk —
// following every symlink on the way, as git or node would later — and
// refuses one that leads outside dst. The lexical check at extraction time
// cannot see chains: with a → "." an entry a/a/logs → "../../outside" looks
// like "outside" inside the target, but resolves two levels above it.
func CheckSymlinks(dst string, links []string) error {
	for _, l := range links {
		if err := resolvesInside(dst, l); err != nil {
			return &EntryError{Name: l, Reason: err.Error(), Kind: ErrUnsafeEntry}
		}
	}
	return nil
}

// maxSymlinkHops bounds a resolution (the kernel's limit is 40).
const maxSymlinkHops = 40

// resolvesInside follows name below dst component by component; a ".."
// above dst or an absolute target is an escape. Components that do not
// exist (yet) are taken lexically.
func resolvesInside(dst, name string) error {
	var real []string // resolved components so far: real directories only
	pending := strings.Split(name, "/")
	hops := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(real) == 0 {
				return fmt.Errorf("symlink resolves outside the target")
			}
			real = real[:len(real)-1]
			continue
		}
		cur := filepath.Join(append([]string{dst}, append(real, c)...)...)
		fi, err := os.Lstat(cur)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			real = append(real, c)
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return fmt.Errorf("too many levels of symlinks")
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return err
		}
		if target == "" || strings.HasPrefix(target, "/") {
			return fmt.Errorf("symlink to absolute path %q points outside the target", target)
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return nil
}

// extractor writes entries below root, remembering the directories it made
// and holding the last few open, so a tree of many small files costs few
// system calls per file: on Unix a file is created with one openat relative
// to its directory (instead of one per path component) and written straight
// to its descriptor (create_unix.go).
type extractor struct {
	root *os.Root
	dirs map[string]bool
	// open holds up to maxOpenDirs directories (opened through root, so
	// inside the target), in order of first use.
	open  map[string]*os.File
	order []string
	buf   []byte // copy buffer, reused for every file
}

// maxOpenDirs bounds the directories held open: archives are written in
// directory order, so a few cover the entries still to come in each.
const maxOpenDirs = 8

func (x *extractor) mkdirAll(dir string) error {
	if x.dirs[dir] {
		return nil
	}
	if err := x.root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	x.dirs[dir] = true
	return nil
}

// dir returns directory dir of the target (made if missing), held open.
func (x *extractor) dir(dir string) (*os.File, error) {
	if d, ok := x.open[dir]; ok {
		return d, nil
	}
	if err := x.mkdirAll(dir); err != nil {
		return nil, err
	}
	d, err := x.root.Open(dir)
	if err != nil {
		return nil, err
	}
	if x.open == nil {
		x.open = map[string]*os.File{}
	}
	if len(x.order) == maxOpenDirs {
		x.open[x.order[0]].Close()
		delete(x.open, x.order[0])
		x.order = x.order[1:]
	}
	x.open[dir] = d
	x.order = append(x.order, dir)
	return d, nil
}

// forget closes the directories held open. It runs whenever an entry is
// removed to make way for another, so a held directory never stands for a
// path that now resolves elsewhere.
func (x *extractor) forget() {
	for _, d := range x.open {
		d.Close()
	}
	x.open, x.order = nil, nil
}

// create opens a new regular file. In a fresh target (the usual case) one
// exclusive create is enough (O_EXCL never follows a symlink at the name);
// an existing entry in the way is replaced, a directory in the way is an
// error.
func (x *extractor) create(name string, mode fs.FileMode) (io.WriteCloser, error) {
	f, err := x.createNew(name, mode)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return f, err
	}
	if err := x.prepareParent(name); err != nil {
		return nil, err
	}
	return x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
}

// prepareParent makes name's directory and removes a non-directory entry
// already at name, so a write never follows a link left there by an earlier
// entry or an earlier extraction.
func (x *extractor) prepareParent(name string) error {
	if err := x.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	fi, err := x.root.Lstat(name)
	if err == nil && !fi.IsDir() {
		x.forget()
		return x.root.Remove(name)
	}
	if err == nil && fi.IsDir() {
		return fmt.Errorf("a directory is in the way")
	}
	return nil
}
