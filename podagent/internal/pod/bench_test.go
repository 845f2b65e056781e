package pod

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/testenv"
)

func benchStore(b *testing.B) objstore.Store {
	env := testenv.MinIO(b)
	s, err := openS3Store(env.Endpoint, env)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// writeRandomTree writes files of incompressible content totalling about
// bytes (git objects of random data stay that size in .git).
func writeRandomTree(b *testing.B, dir string, files int, bytes int64) {
	b.Helper()
	per := bytes / int64(files)
	buf := make([]byte, per)
	for i := 0; i < files; i++ {
		rand.Read(buf)
		p := filepath.Join(dir, "src", fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d.bin", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkPersist: one durability step (snapshot of .git under the lock,
// conditional PUT to MinIO) for a .git of about 1, 20 and 100 MB, against
// the floor of `tar | gzip | PUT` of the same .git to the same MinIO.
func BenchmarkPersist(b *testing.B) {
	store := benchStore(b)
	for _, mb := range []int64{1, 20, 100} {
		ws := b.TempDir()
		writeRandomTree(b, ws, 200, mb<<20)
		p, err := Start(context.Background(), Options{Config: testConfig("bench"+fmt.Sprint(mb), ws, ""), Store: store, Log: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		gitDir := filepath.Join(ws, ".git")
		size := dirSize(gitDir)
		b.Run(fmt.Sprintf("pod/%dMB", mb), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if err := p.Sync.PersistNow(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, floor := range []struct{ name, gzip string }{{"floor-tar-gzip-put", "gzip"}, {"floor-tar-gzip1-put", "gzip -1"}} {
			b.Run(fmt.Sprintf("%s/%dMB", floor.name, mb), func(b *testing.B) {
				b.SetBytes(size)
				for i := 0; i < b.N; i++ {
					var out bytes.Buffer
					cmd := exec.Command("sh", "-c", "tar -C \"$1\" -cf - . | "+floor.gzip, "sh", gitDir)
					cmd.Stdout = &out
					if err := cmd.Run(); err != nil {
						b.Fatal(err)
					}
					if _, err := store.Put(context.Background(), fmt.Sprintf("floor/%d.tar.gz", mb), &out, int64(out.Len()), objstore.PutOptions{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		p.Close()
	}
}

// BenchmarkColdStart restores a reference workspace into an empty
// directory: .git (2000 source files, ~20 MB) from repo.git.tar.gz, reset
// to HEAD, fsck, and the deps layer (node_modules; 50 MB by default,
// SVC_BENCH_DEPS_MB=150 for the full reference).
func BenchmarkColdStart(b *testing.B) {
	store := benchStore(b)
	depsMB := int64(50)
	if v := os.Getenv("SVC_BENCH_DEPS_MB"); v != "" {
		fmt.Sscan(v, &depsMB)
	}
	ws := b.TempDir()
	writeRandomTree(b, ws, 2000, 20<<20)
	os.WriteFile(filepath.Join(ws, "package-lock.json"), []byte(`{"lockfileVersion":3}`), 0o644)
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte("node_modules/\n"), 0o644)
	// node_modules: many small, text-like (compressible) files.
	nm := filepath.Join(ws, "node_modules")
	per := 16 << 10
	raw := make([]byte, per/2)
	for i := 0; int64(i*per) < depsMB<<20; i++ {
		rand.Read(raw)
		p := filepath.Join(nm, fmt.Sprintf("pkg%03d", i%300), fmt.Sprintf("lib%05d.js", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(hex.EncodeToString(raw)), 0o644)
	}
	p, err := Start(context.Background(), Options{Config: testConfig("coldbench", ws, ""), Store: store, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.S3.SyncDeps(context.Background()); err != nil {
		b.Fatal(err)
	}
	p.Close()
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := b.TempDir()
		cpu0 := cpuTime()
		b.StartTimer()
		p2, err := Start(context.Background(), Options{Config: testConfig("coldbench", dst, ""), Store: store, Log: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		if !p2.ColdStart.Restored || !p2.ColdStart.DepsRestored {
			b.Fatalf("cold start = %+v", p2.ColdStart)
		}
		b.Logf("cold start phases: %v (total %v)", p2.ColdStart.Phases, p2.ColdStart.Took)
		p2.Close()
		os.RemoveAll(dst)
		b.StartTimer()
	}
	// CPU of the pod process and its git children (MinIO excluded): the
	// figure that does not depend on how busy the machine is.
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}

// cpuTime is the user+system time of this process and its waited-for children.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

var _ = s3sync.DepsDir
