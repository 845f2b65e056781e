package gitsync

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// The cold-start tarball holds real file bytes, not git-lfs pointer files
// (spec 10.3): git archive writes a tracked large file as its
// pointer (smudge is skipped in pod repositories), so the HEAD snapshot
// replaces each pointer entry by the object from the local large-file cache
// (.git/lfs/objects/<aa>/<bb>/<oid>) when the cache has it with the size
// the pointer names.

// maxPointerBytes bounds what is parsed as a pointer (git-lfs's own limit).
const maxPointerBytes = 1024

var pointerRE = regexp.MustCompile(`^version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize ([0-9]+)\n`)

// parsePointer returns the oid and size of a git-lfs pointer.
func parsePointer(b []byte) (string, int64, bool) {
	m := pointerRE.FindSubmatch(b)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(string(m[2]), 10, 64)
	return string(m[1]), n, err == nil
}

// smudgeTar copies the tar stream r to w, with pointer entries replaced by
// the bytes of the objects found under lfsDir.
func smudgeTar(r io.Reader, w io.Writer, lfsDir string) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// git archive pads the stream after the end marker: drain it.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg && h.Size <= maxPointerBytes {
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if oid, size, ok := parsePointer(b); ok {
				p := filepath.Join(lfsDir, oid[0:2], oid[2:4], oid)
				if f, err := os.Open(p); err == nil {
					fi, serr := f.Stat()
					if serr == nil && fi.Size() == size {
						h.Size = size
						if err := tw.WriteHeader(h); err != nil {
							f.Close()
							return err
						}
						_, err := io.Copy(tw, f)
						f.Close()
						if err != nil {
							return err
						}
						continue
					}
					f.Close()
				}
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.Copy(tw, bytes.NewReader(b)); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
