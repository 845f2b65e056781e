package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/gzip"

	"github.com/svc-dev/svc/shared/settings"
)

// Multi-member gzip (the BGZF idea): a .tar.gz written as a series of gzip
// members, each compressing MemberBytes of the tar stream and carrying its own
// compressed length in an extra field (subfield "SV"). The file is still one
// valid gzip stream for every tool (RFC 1952 allows concatenated members), but
// a reader that knows the length of each member can inflate members on all
// cores at once. Inflating is the critical path of a cold start (spec 8: the
// deps layer is the largest archive a pod restores).

const (
	// DefaultMemberBytes is the uncompressed size of one member.
	DefaultMemberBytes = 4 << 20
	extraID1, extraID2 = 'S', 'V'
	// sizeOffset is where the member length sits in a member we wrote:
	// 10-byte header, 2-byte XLEN, 2-byte subfield id, 2-byte subfield length.
	sizeOffset = 16
)

// multiGzipWriter compresses every memberBytes of input into one member.
type multiGzipWriter struct {
	w           io.Writer
	level       int
	memberBytes int
	buf         []byte
	out         bytes.Buffer
}

func newMultiGzipWriter(w io.Writer, level, memberBytes int) *multiGzipWriter {
	return &multiGzipWriter{w: w, level: level, memberBytes: memberBytes, buf: make([]byte, 0, memberBytes)}
}

func (m *multiGzipWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), m.memberBytes-len(m.buf))
		m.buf = append(m.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(m.buf) == m.memberBytes {
			if err := m.flushMember(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (m *multiGzipWriter) flushMember() error {
	m.out.Reset()
	zw, err := gzip.NewWriterLevel(&m.out, m.level)
	if err != nil {
		return err
	}
	zw.Header.Extra = []byte{extraID1, extraID2, 4, 0, 0, 0, 0, 0}
	if _, err := zw.Write(m.buf); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	b := m.out.Bytes()
	if uint64(len(b)) > 1<<32-1 {
		return errors.New("archive: gzip member too large")
	}
	binary.LittleEndian.PutUint32(b[sizeOffset:], uint32(len(b)))
	m.buf = m.buf[:0]
	_, err = m.w.Write(b)
	return err
}

// Close writes the last member (an empty input still gets one member, so
// the output is a valid gzip file).
func (m *multiGzipWriter) Close() error {
	if len(m.buf) > 0 || m.out.Len() == 0 {
		return m.flushMember()
	}
	return nil
}

// memberSize reads the length a multi-member writer recorded in a gzip
// header; ok is false for gzip data without it.
func memberSize(h []byte) (int, bool) {
	if len(h) < 12 || h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 || h[3]&0x04 == 0 {
		return 0, false
	}
	xlen := int(binary.LittleEndian.Uint16(h[10:12]))
	extra := h[12:min(len(h), 12+xlen)]
	for len(extra) >= 4 {
		l := int(binary.LittleEndian.Uint16(extra[2:4]))
		if extra[0] == extraID1 && extra[1] == extraID2 && l == 4 && len(extra) >= 8 {
			return int(binary.LittleEndian.Uint32(extra[4:8])), true
		}
		if len(extra) < 4+l {
			break
		}
		extra = extra[4+l:]
	}
	return 0, false
}

// NewGzipReader returns the decompressed content of a gzip stream. A stream
// written with CreateOptions.MemberBytes is inflated on up to workers
// goroutines (0: GOMAXPROCS), its members delivered in order; any other gzip
// stream is read as usual. Close releases the workers.
func NewGzipReader(r io.Reader, workers int) (io.ReadCloser, error) {
	workers = settings.PositiveOr(workers, runtime.GOMAXPROCS(0))
	head := make([]byte, 24)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("archive: not a gzip stream: %w", err)
	}
	head = head[:n]
	full := io.MultiReader(bytes.NewReader(head), r)
	if _, ok := memberSize(head); !ok || workers == 1 {
		zr, err := gzip.NewReader(full)
		if err != nil {
			return nil, fmt.Errorf("archive: not a gzip stream: %w", err)
		}
		return zr, nil
	}
	return newParallelGzipReader(full, workers), nil
}

// parallelGzipReader reads members one after another from the stream,
// inflates up to workers of them at once, and yields them in order.
type parallelGzipReader struct {
	results chan chan memberResult
	stop    chan struct{}
	cur     *bytes.Reader
	err     error
}

type memberResult struct {
	data []byte
	err  error
}

// maxMember bounds one member we are willing to buffer.
const maxMember = 256 << 20

func newParallelGzipReader(r io.Reader, workers int) *parallelGzipReader {
	p := &parallelGzipReader{results: make(chan chan memberResult, workers), stop: make(chan struct{})}
	sem := make(chan struct{}, workers)
	go func() {
		defer close(p.results)
		head := make([]byte, 24)
		for {
			n, err := io.ReadFull(r, head)
			if n == 0 && errors.Is(err, io.EOF) {
				return
			}
			res := make(chan memberResult, 1)
			select {
			case p.results <- res:
			case <-p.stop:
				return
			}
			size, ok := memberSize(head[:n])
			if !ok {
				// A member without a length (appended by another tool):
				// inflate the rest of the stream sequentially.
				zr, err := gzip.NewReader(io.MultiReader(bytes.NewReader(head[:n]), r))
				if err == nil {
					var b []byte
					b, err = io.ReadAll(zr)
					res <- memberResult{data: b, err: err}
				} else {
					res <- memberResult{err: fmt.Errorf("archive: gzip member: %w", err)}
				}
				return
			}
			if size < n || size > maxMember {
				res <- memberResult{err: fmt.Errorf("archive: gzip member length %d is not plausible", size)}
				return
			}
			member := make([]byte, size)
			copy(member, head[:n])
			if _, err := io.ReadFull(r, member[n:]); err != nil {
				res <- memberResult{err: fmt.Errorf("archive: truncated gzip member: %w", err)}
				return
			}
			select {
			case sem <- struct{}{}:
			case <-p.stop:
				return
			}
			go func() {
				defer func() { <-sem }()
				zr, err := gzip.NewReader(bytes.NewReader(member))
				if err != nil {
					res <- memberResult{err: fmt.Errorf("archive: gzip member: %w", err)}
					return
				}
				zr.Multistream(false)
				b, err := io.ReadAll(zr)
				res <- memberResult{data: b, err: err}
			}()
		}
	}()
	return p
}

func (p *parallelGzipReader) Read(b []byte) (int, error) {
	for {
		if p.err != nil {
			return 0, p.err
		}
		if p.cur != nil && p.cur.Len() > 0 {
			return p.cur.Read(b)
		}
		res, ok := <-p.results
		if !ok {
			p.err = io.EOF
			continue
		}
		r := <-res
		if r.err != nil {
			p.err = r.err
			continue
		}
		p.cur = bytes.NewReader(r.data)
	}
}

// Close stops the reader's goroutines.
func (p *parallelGzipReader) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	return nil
}
