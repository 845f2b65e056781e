package objstoretest

import (
	"context"
	"io"
	"sync"

	"github.com/svc-dev/svc/shared/objstore"
)

// Counting wraps a Store and counts the bytes and requests that go
// through it, per key class (Class): what benchmarks report as "bytes
// uploaded", measured rather than estimated.
type Counting struct {
	objstore.Store
	// Class names the class of a key (nil: the whole key).
	Class func(key string) string

	mu   sync.Mutex
	puts map[string]Count
	gets map[string]Count
}

// Count is the traffic of one class.
type Count struct {
	Requests int
	Bytes    int64
}

func (c *Counting) class(key string) string {
	if c.Class == nil {
		return key
	}
	return c.Class(key)
}

func (c *Counting) add(m *map[string]Count, key string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *m == nil {
		*m = map[string]Count{}
	}
	cur := (*m)[c.class(key)]
	cur.Requests++
	cur.Bytes += n
	(*m)[c.class(key)] = cur
}

// Put counts the bytes the store read from r.
func (c *Counting) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	cr := &countReader{r: r}
	info, err := c.Store.Put(ctx, key, cr, size, opts)
	c.add(&c.puts, key, cr.n)
	return info, err
}

// Get counts the bytes the caller read.
func (c *Counting) Get(ctx context.Context, key string) (io.ReadCloser, objstore.ObjectInfo, error) {
	rc, info, err := c.Store.Get(ctx, key)
	if err != nil {
		return rc, info, err
	}
	return &countReadCloser{ReadCloser: rc, done: func(n int64) { c.add(&c.gets, key, n) }}, info, nil
}

// Puts returns the upload counts per class.
func (c *Counting) Puts() map[string]Count { return c.snapshot(c.puts) }

// Gets returns the download counts per class (counted at Close).
func (c *Counting) Gets() map[string]Count { return c.snapshot(c.gets) }

// Reset zeroes the counts.
func (c *Counting) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.puts, c.gets = nil, nil
}

// Total sums the bytes of m.
func Total(m map[string]Count) int64 {
	var n int64
	for _, v := range m {
		n += v.Bytes
	}
	return n
}

func (c *Counting) snapshot(m map[string]Count) map[string]Count {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Count, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

type countReadCloser struct {
	io.ReadCloser
	n    int64
	done func(int64)
	once sync.Once
}

func (c *countReadCloser) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countReadCloser) Close() error {
	c.once.Do(func() { c.done(c.n) })
	return c.ReadCloser.Close()
}
