package s3sync

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/readahead"
	"golang.org/x/sync/semaphore"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/settings"
)

// Read-ahead between the stages of ExtractTarGz, and its writers.
const (
	readaheadBuffers     = 8
	readaheadBufferBytes = 1 << 20
	// ExtractWorkers is how many archive.ExtractTar run side by side.
	// Creating files is mostly kernel time (one openat per path component
	// through os.Root, then write, utimensat, close), which parallelises
	// across directories.
	ExtractWorkers = 4
)

// errAborted stops the other writers once one of them failed.
var errAborted = errors.New("s3sync: extraction aborted")

// ExtractTarGz is the cold-start extraction of the deps layer and of
// repo.git.tar.gz (spec 8 cold start target). It is archive.ExtractTar —
// every safety check and limit of the shared extractor applies, each writer
// works through os.Root on dst — with three changes for speed:
//
//   - read-ahead buffers between the download, the gunzip and the tar
//     reader, so network, decompression and file writes overlap;
//   - the entries are spread over ExtractWorkers writers, each an
//     archive.ExtractTar fed by a tar stream of its own; all entries under
//     the same first two path components ("node_modules/react",
//     "objects/ab") go to the same writer in archive order, and a hard link
//     goes to the writer of its target, so every entry still sees what came
//     before it;
//   - the archive-wide limits (entries, total bytes) are enforced here,
//     since each writer only sees its share.
//
// No file is fsynced: the result is a cache of object storage, rebuilt by
// the next cold start if the node dies.
func ExtractTarGz(r io.Reader, dst string, opts archive.ExtractOptions) (archive.Stats, error) {
	return ExtractTarGzTap(r, dst, opts, nil)
}

// ExtractTarZstd is ExtractTarGz for a zstd-compressed tar (the deps
// layer's current form): the same read-ahead, writers and limits.
func ExtractTarZstd(r io.Reader, dst string, opts archive.ExtractOptions) (archive.Stats, error) {
	return extractCompressed(r, archive.NewZstdReader, dst, opts, nil)
}

// Tap takes one small regular entry out of an archive being extracted: Fn
// gets its content as soon as the feed reaches it (before the rest of the
// archive is read), and the entry is not written to dst. Fn runs on the
// feeding goroutine and must not block. Entries over maxTapBytes are refused.
type Tap struct {
	Name string
	Fn   func([]byte)
}

const maxTapBytes = 64 << 10

// ExtractTarGzTap is ExtractTarGz with a tap (nil: none).
func ExtractTarGzTap(r io.Reader, dst string, opts archive.ExtractOptions, tap *Tap) (archive.Stats, error) {
	gunzip := func(r io.Reader) (io.ReadCloser, error) {
		return archive.NewGzipReader(r, 0) // multi-member layers inflate on every core
	}
	return extractCompressed(r, gunzip, dst, opts, tap)
}

// extractCompressed reads r ahead, decompresses it with decompress (reading
// its output ahead too) and extracts the tar with ExtractWorkers writers.
func extractCompressed(r io.Reader, decompress func(io.Reader) (io.ReadCloser, error), dst string, opts archive.ExtractOptions, tap *Tap) (archive.Stats, error) {
	src, err := readahead.NewReaderSize(r, readaheadBuffers, readaheadBufferBytes)
	if err != nil {
		return archive.Stats{}, err
	}
	defer src.Close()
	zr, err := decompress(src)
	if err != nil {
		return archive.Stats{}, err
	}
	defer zr.Close()
	plain, err := readahead.NewReaderSize(zr, readaheadBuffers, readaheadBufferBytes)
	if err != nil {
		return archive.Stats{}, err
	}
	defer plain.Close()
	return extractTarParallel(plain, dst, opts, ExtractWorkers, tap)
}

// A writer of a parallel extraction: an archive.Extractor on the target,
// fed entries in archive order through its queue.
type extractWriter struct {
	items chan extractItem
	st    archive.Stats
	err   error
	done  chan struct{}
}

// extractItem is one entry for a writer: a regular file's content in data
// (up to maxInMemoryEntry bytes, read by the feeder) or streamed through
// body (larger ones); nil for the other entry types.
type extractItem struct {
	hdr  *tar.Header
	data []byte
	body *io.PipeReader
}

const (
	// maxInMemoryEntry: regular files up to this size are read into
	// memory by the feeder and handed over whole (node_modules is mostly
	// files of a few KiB); larger ones are streamed to their writer.
	maxInMemoryEntry = 1 << 20
	// maxInFlightBytes bounds the file content read ahead of the writers.
	maxInFlightBytes = 32 << 20
	// writerQueue is how many entries one writer may have waiting.
	writerQueue = 256
)

// ExtractTarParallel extracts an uncompressed tar into dst with n writers
// (see ExtractTarGz). n <= 1 is archive.ExtractTar.
func ExtractTarParallel(r io.Reader, dst string, opts archive.ExtractOptions, n int) (archive.Stats, error) {
	return extractTarParallel(r, dst, opts, n, nil)
}

// extractTarParallel: one feeder (this goroutine) reads the tar, enforces
// the archive-wide limits and hands each entry to its writer's queue; each
// writer extracts its entries in order with an archive.Extractor (every
// per-entry check). Nothing is re-encoded: headers are passed as parsed.
func extractTarParallel(r io.Reader, dst string, opts archive.ExtractOptions, n int, tap *Tap) (archive.Stats, error) {
	if n <= 1 && tap == nil {
		return archive.ExtractTar(r, dst, opts)
	}
	n = max(n, 1)
	maxEntries, maxTotal := opts.MaxEntries, opts.MaxTotalBytes
	maxEntries = settings.PositiveOr(maxEntries, archive.DefaultMaxEntries)
	maxTotal = settings.PositiveOr(maxTotal, archive.DefaultMaxTotalBytes)
	wopts := opts
	wopts.DeferSymlinkCheck = true // checked below, once every writer finished
	budget := semaphore.NewWeighted(maxInFlightBytes)
	var failed atomic.Bool // a writer failed: the feeder stops
	ws := make([]*extractWriter, n)
	for i := range ws {
		x, err := archive.NewExtractor(dst, wopts)
		if err != nil {
			for _, w := range ws[:i] {
				close(w.items)
				<-w.done
			}
			return archive.Stats{}, err
		}
		w := &extractWriter{items: make(chan extractItem, writerQueue), done: make(chan struct{})}
		ws[i] = w
		go func() {
			defer close(w.done)
			defer x.Close()
			var br bytes.Reader
			for it := range w.items {
				if w.err == nil {
					var content io.Reader
					if it.body != nil {
						content = it.body
					} else {
						br.Reset(it.data)
						content = &br
					}
					if w.err = x.Entry(it.hdr, content); w.err != nil {
						failed.Store(true)
					}
				}
				if it.body != nil {
					it.body.CloseWithError(orAborted(w.err)) // the feeder's copy ends
				}
				budget.Release(int64(len(it.data)))
				putEntryBuf(it.data)
			}
			w.st = x.Stats()
		}()
	}
	feedErr := func() error {
		tr := tar.NewReader(r)
		buf := make([]byte, 64<<10) // io.Copy would allocate one per entry
		var entries int
		var total int64
		for {
			if failed.Load() {
				return errAborted
			}
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("archive: reading tar: %w", err)
			}
			if hdr.Typeflag == tar.TypeXGlobalHeader {
				continue
			}
			if entries++; entries > maxEntries {
				return &archive.EntryError{Name: hdr.Name, Reason: fmt.Sprintf("more than %d entries", maxEntries), Kind: archive.ErrTooLarge}
			}
			if hdr.Typeflag == tar.TypeReg {
				if total += hdr.Size; hdr.Size < 0 || total > maxTotal {
					return &archive.EntryError{Name: hdr.Name, Reason: fmt.Sprintf("archive content exceeds the total limit of %d bytes", maxTotal), Kind: archive.ErrTooLarge}
				}
			}
			if tap != nil && hdr.Name == tap.Name {
				if hdr.Typeflag != tar.TypeReg || hdr.Size > maxTapBytes {
					return &archive.EntryError{Name: hdr.Name, Reason: "not a small regular file", Kind: archive.ErrUnsafeEntry}
				}
				b, err := io.ReadAll(tr)
				if err != nil {
					return fmt.Errorf("archive: reading %s: %w", hdr.Name, err)
				}
				tap.Fn(b)
				continue
			}
			key := hdr.Name
			if hdr.Typeflag == tar.TypeLink {
				key = hdr.Linkname
			}
			w := ws[partition(key, len(ws))]
			it := extractItem{hdr: hdr}
			switch {
			case hdr.Typeflag != tar.TypeReg:
			case hdr.Size <= maxInMemoryEntry:
				if err := budget.Acquire(context.Background(), hdr.Size); err != nil {
					return err
				}
				it.data = getEntryBuf(int(hdr.Size))
				if _, err := io.ReadFull(tr, it.data); err != nil {
					putEntryBuf(it.data)
					budget.Release(hdr.Size)
					return fmt.Errorf("archive: reading %s: %w", hdr.Name, err)
				}
			default:
				pr, pw := io.Pipe()
				it.body = pr
				w.items <- it
				_, err := io.CopyBuffer(pw, tr, buf)
				pw.CloseWithError(err)
				if err != nil {
					return orAborted(err)
				}
				continue
			}
			w.items <- it
		}
	}()
	for _, w := range ws {
		close(w.items)
	}
	var st archive.Stats
	var werr error
	for _, w := range ws {
		<-w.done
		st.Entries += w.st.Entries
		st.Bytes += w.st.Bytes
		st.Symlinks = append(st.Symlinks, w.st.Symlinks...)
		if w.err != nil && werr == nil {
			werr = w.err
		}
	}
	// A writer's own error (an unsafe entry, say) explains a failed feed.
	if werr != nil {
		return st, werr
	}
	if feedErr != nil {
		return st, feedErr
	}
	// Links resolved through the whole tree: a chain across writers
	// (a → "." by one, a/a/logs → "../../outside" by another) escapes only
	// once both exist.
	if !opts.DeferSymlinkCheck {
		return st, archive.CheckSymlinks(dst, st.Symlinks)
	}
	return st, nil
}

// entryBufs pool the in-memory entries' buffers by size class (4 KiB to
// maxInMemoryEntry, ×4 apart): a deps layer is tens of thousands of small
// files, and a fresh buffer each is as much allocation as the layer is large.
var entryBufs [6]sync.Pool

func entryClass(n int) int {
	c, size := 0, 4<<10
	for size < n {
		c, size = c+1, size<<2
	}
	return c
}

func getEntryBuf(n int) []byte {
	c := entryClass(n)
	if b, ok := entryBufs[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 4<<10<<(2*c))
}

func putEntryBuf(b []byte) {
	if b == nil {
		return
	}
	c := entryClass(cap(b))
	if c < len(entryBufs) && cap(b) == 4<<10<<(2*c) {
		entryBufs[c].Put(&b)
	}
}

func orAborted(err error) error {
	if err == nil {
		return errAborted
	}
	return err
}

// partition maps an entry name to a writer by its first two components.
func partition(name string, n int) int {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if i := strings.IndexByte(name, '/'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '/'); j >= 0 {
			name = name[:i+1+j]
		}
	}
	var h uint32 = 2166136261 // FNV-1a
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
