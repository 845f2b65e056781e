package fs

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
)

// The header that precedes the content of every object file:
//
//	magic "SVCOBJ1\n" | md5 [16] | size int64 BE | ctLen uint16 BE | content type | zero padding
const (
	headerSize     = 512
	magic          = "SVCOBJ1\n"
	fixedHeader    = len(magic) + md5.Size + 8 + 2
	maxContentType = headerSize - fixedHeader
)

type header struct {
	md5         [md5.Size]byte
	size        int64
	contentType string
}

func (h header) etag() string { return etagHex(h.md5) }

func (h header) info(key string, mod time.Time) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: key, Size: h.size, ETag: h.etag(), LastModified: mod, ContentType: h.contentType}
}

func (h header) marshal() []byte {
	b := make([]byte, headerSize)
	n := copy(b, magic)
	n += copy(b[n:], h.md5[:])
	binary.BigEndian.PutUint64(b[n:], uint64(h.size))
	n += 8
	binary.BigEndian.PutUint16(b[n:], uint16(len(h.contentType)))
	n += 2
	copy(b[n:], h.contentType)
	return b
}

func unmarshalHeader(b []byte) (header, error) {
	var h header
	if len(b) != headerSize || !bytes.HasPrefix(b, []byte(magic)) {
		return h, fmt.Errorf("not an object file (bad header)")
	}
	n := len(magic)
	n += copy(h.md5[:], b[n:])
	h.size = int64(binary.BigEndian.Uint64(b[n:]))
	n += 8
	ct := int(binary.BigEndian.Uint16(b[n:]))
	n += 2
	if ct > maxContentType || h.size < 0 {
		return h, fmt.Errorf("not an object file (bad header fields)")
	}
	h.contentType = string(b[n : n+ct])
	return h, nil
}

// readHeader reads the header of an open object file and checks that the
// file length matches it.
func readHeader(f *os.File) (header, os.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return header{}, nil, err
	}
	if fi.IsDir() {
		return header{}, nil, fmt.Errorf("%w (is a prefix, not an object)", objstore.ErrNotExist)
	}
	b := make([]byte, headerSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return header{}, nil, fmt.Errorf("read header: %w", err)
	}
	h, err := unmarshalHeader(b)
	if err != nil {
		return header{}, nil, err
	}
	if fi.Size() != headerSize+h.size {
		return header{}, nil, fmt.Errorf("object file is %d bytes, header says %d", fi.Size(), headerSize+h.size)
	}
	return h, fi, nil
}

// readHeaderFile reads the header of the object file at p; a missing file
// gives objstore.ErrNotExist.
func readHeaderFile(p string) (header, error) {
	f, err := os.Open(p)
	if err != nil {
		return header{}, mapNotExist(err)
	}
	defer f.Close()
	h, _, err := readHeader(f)
	return h, err
}
