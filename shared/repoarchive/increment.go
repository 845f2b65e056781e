package repoarchive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
)

// An increment is an uncompressed tar of exactly one self-contained
// packfile and its index: objects/pack/pack-<hash>.pack and .idx, named
// without the directory. Pack data is already compressed. A reader
// accepts nothing else (no config, hooks, refs or links can arrive
// through an increment), so the checks of Sanitize hold for every
// increment by construction.

// incrementEntry is the allowlist of an increment's entries.
var incrementEntry = regexp.MustCompile(`^pack-[0-9a-f]{40}([0-9a-f]{24})?\.(pack|idx)$`)

// MaxIncrementBytes bounds one increment a reader accepts.
const MaxIncrementBytes = 4 << 30

// Pack is a pack written by PackObjects.
type Pack struct {
	Hash    string
	PackDir string // directory holding pack-<Hash>.pack and .idx
	Objects uint32
}

// Files are the pack's two paths.
func (p *Pack) Files() (pack, idx string) {
	base := filepath.Join(p.PackDir, "pack-"+p.Hash)
	return base + ".pack", base + ".idx"
}

// PackObjects writes into dir a pack of every object reachable from tips
// and not from exclude (git pack-objects --revs; not thin, so the pack is
// self-contained and a reader needs no index-pack). An exclude tip the
// repository lacks is an error: the caller falls back to a full base.
func PackObjects(ctx context.Context, r *gitrun.Runner, gitDir, dir string, tips, exclude []string) (*Pack, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var in bytes.Buffer
	for _, t := range tips {
		in.WriteString(t + "\n")
	}
	for _, t := range exclude {
		in.WriteString("^" + t + "\n")
	}
	out, err := r.Command("pack-objects", "--revs", "--sparse", "--delta-base-offset", "-q").
		AddDynamic(filepath.Join(dir, "pack")).Env("GIT_DIR=" + gitDir).Stdin(&in).String(ctx)
	if err != nil {
		return nil, fmt.Errorf("repoarchive: pack-objects: %w", err)
	}
	p := &Pack{Hash: strings.TrimSpace(out), PackDir: dir}
	if !incrementEntry.MatchString("pack-" + p.Hash + ".pack") {
		return nil, fmt.Errorf("repoarchive: pack-objects printed %q", out)
	}
	packPath, _ := p.Files()
	f, err := os.Open(packPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [12]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("repoarchive: read pack header: %w", err)
	}
	p.Objects = binary.BigEndian.Uint32(hdr[8:12])
	return p, nil
}

// WriteIncrement writes the increment tar of p to w and returns its
// sha256.
func WriteIncrement(w io.Writer, p *Pack) (string, int64, error) {
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	tw := tar.NewWriter(cw)
	packPath, idxPath := p.Files()
	for _, path := range []string{packPath, idxPath} {
		f, err := os.Open(path)
		if err != nil {
			return "", 0, err
		}
		fi, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: filepath.Base(path), Mode: 0o444, Size: fi.Size(), Typeflag: tar.TypeReg, Format: tar.FormatPAX})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return "", 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// ExtractIncrement extracts an increment into gitDir/objects/pack after
// checking every entry against the allowlist (a regular file named
// pack-<hash>.pack or .idx, nothing else) and the content against
// wantSHA256. The files are written under temporary names and renamed
// only once the whole increment checked out, so a failed increment leaves
// nothing behind.
func ExtractIncrement(r io.Reader, gitDir, wantSHA256 string) error {
	packDir := filepath.Join(gitDir, "objects", "pack")
	if err := os.MkdirAll(packDir, 0o755); err != nil {
		return err
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(io.LimitReader(r, MaxIncrementBytes+1), h))
	var staged [][2]string
	defer func() {
		for _, s := range staged {
			_ = os.Remove(s[0])
		}
	}()
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("repoarchive: increment: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg || !incrementEntry.MatchString(hdr.Name) || len(staged) >= 2 {
			return fmt.Errorf("repoarchive: increment entry %q (type %c) is not a pack or index", hdr.Name, hdr.Typeflag)
		}
		if total += hdr.Size; total > MaxIncrementBytes {
			return fmt.Errorf("repoarchive: increment exceeds %d bytes", int64(MaxIncrementBytes))
		}
		f, err := os.CreateTemp(packDir, ".tmp-"+hdr.Name+"-*")
		if err != nil {
			return err
		}
		staged = append(staged, [2]string{f.Name(), filepath.Join(packDir, hdr.Name)})
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("repoarchive: increment %s: %w", hdr.Name, err)
		}
	}
	// Read to the end so the hash covers the tar's padding and trailer.
	if _, err := io.Copy(io.Discard, io.TeeReader(io.LimitReader(r, MaxIncrementBytes), h)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); wantSHA256 != "" && got != wantSHA256 {
		return fmt.Errorf("repoarchive: increment sha256 %s, the manifest names %s", got, wantSHA256)
	}
	if len(staged) != 2 || strings.TrimSuffix(filepath.Base(staged[0][1]), ".pack") != strings.TrimSuffix(filepath.Base(staged[1][1]), ".idx") {
		return fmt.Errorf("repoarchive: an increment holds one pack and its index, got %d entries", len(staged))
	}
	// The index last: git only looks at a pack through its .idx.
	for _, s := range staged {
		if err := os.Rename(s[0], s[1]); err != nil {
			return err
		}
	}
	staged = nil
	return nil
}

// FetchIncrements downloads and extracts every increment m lists into
// gitDir (order does not matter: each pack is self-contained). skip
// reports keys already applied (nil: none). It returns the bytes read.
func FetchIncrements(ctx context.Context, st objstore.Store, m *RepoManifest, gitDir string, skip func(key string) bool) (int64, error) {
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallel)
	for _, inc := range m.Increments {
		if skip != nil && skip(inc.Key) {
			continue
		}
		g.Go(func() error {
			rc, info, err := st.Get(gctx, inc.Key)
			if err != nil {
				return fmt.Errorf("repoarchive: get increment %s: %w", inc.Key, err)
			}
			err = ExtractIncrement(rc, gitDir, inc.SHA256)
			rc.Close()
			if err != nil {
				return fmt.Errorf("repoarchive: %s: %w", inc.Key, err)
			}
			n.Add(info.Size)
			return nil
		})
	}
	err := g.Wait()
	return n.Load(), err
}

// fetchParallel is how many increments are fetched at once (they are
// small: the round trips, not the bytes, are the cost).
const fetchParallel = 8

// ApplyRefs replaces the refs of gitDir by the manifest's: loose refs and
// packed-refs are removed, packed-refs and HEAD written from m (validated
// by ParseRepoManifest). Refs never come from an object's files.
func ApplyRefs(gitDir string, m *RepoManifest) error {
	if err := os.RemoveAll(filepath.Join(gitDir, "refs")); err != nil {
		return err
	}
	for _, d := range []string{"refs/heads", "refs/tags"} {
		if err := os.MkdirAll(filepath.Join(gitDir, d), 0o755); err != nil {
			return err
		}
	}
	var b strings.Builder
	// No header: git then peels tags on demand.
	for _, name := range SortedRefNames(m.Refs) {
		b.WriteString(m.Refs[name] + " " + name + "\n")
	}
	if err := atomicfile.Write(filepath.Join(gitDir, "packed-refs"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	head := m.Head
	if head == "" {
		head = "refs/heads/main"
	}
	return atomicfile.Write(filepath.Join(gitDir, "HEAD"), []byte("ref: "+head+"\n"), 0o644)
}
