package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// maxZstdWindow bounds the decoder's window for untrusted input (a frame
// that asks for more is refused).
const maxZstdWindow = 64 << 20

// zstdProgram is the zstd command on PATH, looked up once ("" when there is
// none).
var zstdProgram = sync.OnceValue(func() string {
	p, _ := exec.LookPath("zstd")
	return p
})

// useZstdProgram: NewZstdReader runs the zstd program when it is installed
// (tests switch it off to cover the Go decoder).
var useZstdProgram = true

// NewZstdReader returns a zstd decompressor bounded for untrusted input
// (64 MiB window). When the zstd program is installed it decompresses in a
// process of its own (`zstd -d`, the reference C decoder): on a cold start's
// deps layer it takes about a third of the Go decoder's CPU, and it runs on
// the other core beside the extraction (docs/performance.md, "Cold start").
// Without it, the Go decoder (github.com/klauspost/compress/zstd). Either
// way a damaged stream is an error from Read, never a short clean end.
func NewZstdReader(r io.Reader) (io.ReadCloser, error) {
	if prog := zstdProgram(); useZstdProgram && prog != "" {
		return startZstd(prog, r)
	}
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return nil, fmt.Errorf("archive: not a zstd stream: %w", err)
	}
	return zr.IOReadCloser(), nil
}

// zstdProcess is `zstd -d` reading r and writing the decompressed stream
// to a pipe.
type zstdProcess struct {
	cmd    *exec.Cmd
	out    io.ReadCloser
	stderr bytes.Buffer
	waited bool
	err    error
}

func startZstd(prog string, r io.Reader) (*zstdProcess, error) {
	// --memory bounds the window as the Go decoder's option does; -q keeps
	// stderr for errors; no environment (ZSTD_* variables change nothing
	// of a decompression, but nothing is inherited that could).
	cmd := exec.Command(prog, "-d", "-c", "-q", fmt.Sprintf("--memory=%dMB", maxZstdWindow>>20))
	cmd.Env = []string{}
	cmd.Stdin = r
	// Once zstd has exited, its stdin copy may still be blocked reading r:
	// Wait gives up on it after this long.
	cmd.WaitDelay = time.Second
	z := &zstdProcess{cmd: cmd}
	cmd.Stderr = &z.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	z.out = out
	if f, ok := out.(*os.File); ok {
		growPipe(f)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("archive: starting zstd: %w", err)
	}
	return z, nil
}

// Read reads the decompressed stream; at its end, zstd's exit status
// decides between io.EOF and an error (a damaged or truncated input).
func (z *zstdProcess) Read(p []byte) (int, error) {
	n, err := z.out.Read(p)
	if errors.Is(err, io.EOF) {
		if werr := z.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (z *zstdProcess) wait() error {
	if !z.waited {
		z.waited = true
		if err := z.cmd.Wait(); err != nil {
			z.err = fmt.Errorf("archive: zstd: %v: %s", err, bytes.TrimSpace(z.stderr.Bytes()))
		}
	}
	return z.err
}

// Close stops zstd if it is still running (the reader stopped early).
func (z *zstdProcess) Close() error {
	if !z.waited {
		_ = z.cmd.Process.Kill()
		_ = z.wait()
	}
	return nil
}
