package pod

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/objstore"
)

// The reference Node workspace: a 170 MB / 11,327-file
// node_modules, 2,005 sources and 200 commits. SVC_BENCH_SCALE (0 < s <= 1,
// default 1) scales files, bytes and commits down when generating the full
// one takes too long.
const (
	refDepsFiles = 11327
	refDepsBytes = 170 << 20
	refSources   = 2005
	refCommits   = 200
	refLockfile  = `{"lockfileVersion":3,"name":"reference","packages":{}}`
)

func benchScale(b *testing.B) float64 {
	s := 1.0
	if v := os.Getenv("SVC_BENCH_SCALE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			b.Fatalf("SVC_BENCH_SCALE=%q: want a number in (0, 1]", v)
		}
		s = f
	}
	return s
}

// jsWords make generated files compress like real JavaScript (about 3.5:1
// with gzip -1, as the 170 MB → 46 MB layer).
var jsWords = strings.Fields(`function return const let var if else for while require module exports this
	prototype undefined null true false new typeof instanceof object string number length push call apply
	value key options callback error result data index array map filter reduce promise resolve reject then
	async await default import from class extends super constructor static get set try catch finally throw`)

func jsText(r *rand.Rand, n int) []byte {
	var sb strings.Builder
	sb.Grow(n + 64)
	for sb.Len() < n {
		switch r.IntN(12) {
		case 0:
			sb.WriteString(";\n")
		case 1:
			fmt.Fprintf(&sb, " %x", r.Uint32())
		case 2:
			fmt.Fprintf(&sb, " v%d", r.IntN(5000))
		default:
			sb.WriteByte(' ')
			sb.WriteString(jsWords[r.IntN(len(jsWords))])
		}
	}
	return []byte(sb.String()[:n])
}

// buildReferenceWorkspace writes the reference workspace into ws: sources
// committed over refCommits commits with plain git (the pod then adopts the
// local repository), node_modules installed and ignored.
func buildReferenceWorkspace(b *testing.B, ws string, scale float64) {
	b.Helper()
	start := time.Now()
	r := rand.New(rand.NewPCG(14, 14))
	sources := max(10, int(refSources*scale))
	commits := max(2, int(refCommits*scale))
	depsFiles := max(10, int(refDepsFiles*scale))
	depsBytes := int(refDepsBytes * scale)
	write := func(rel string, data []byte) {
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write(".gitignore", []byte("node_modules/\n"))
	write("package.json", []byte(`{"name":"reference","version":"1.0.0"}`))
	write("package-lock.json", []byte(refLockfile))
	src := func(i int) string { return fmt.Sprintf("src/mod%02d/sub%d/file%04d.ts", i%40, i%5, i) }
	for i := 0; i < sources; i++ {
		write(src(i), jsText(r, 500+r.IntN(3000)))
	}
	// node_modules: packages of a few dozen files, some nested.
	per := depsBytes / depsFiles
	for i := 0; i < depsFiles; i++ {
		pkg := i / 11
		rel := fmt.Sprintf("node_modules/pkg-%04d/lib/f%02d.js", pkg, i%11)
		if pkg%7 == 0 {
			rel = fmt.Sprintf("node_modules/pkg-%04d/node_modules/dep-%d/f%02d.js", pkg, pkg%3, i%11)
		}
		write(rel, jsText(r, per/2+r.IntN(per+1)))
	}
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=b@x", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=b@x")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	git("config", "gc.auto", "0")
	git("add", "-A")
	git("commit", "-q", "-m", "initial")
	for c := 1; c < commits; c++ {
		for k := 0; k < 8; k++ {
			write(src(r.IntN(sources)), jsText(r, 500+r.IntN(3000)))
		}
		git("add", "-A")
		git("commit", "-q", "-m", fmt.Sprintf("turn %d", c))
	}
	b.Logf("reference workspace (scale %.2f): %d sources, %d commits, node_modules %d files / %d MB, built in %v",
		scale, sources, commits, depsFiles, dirSize(filepath.Join(ws, "node_modules"))>>20, time.Since(start).Round(time.Millisecond))
}

// referenceObjectsIn builds the reference workspace in a scratch directory
// under dir ("" is the temp dir) and has a pod write its durable objects
// (repo.git.tar.gz after the background repack, and the deps layer).
func referenceObjectsIn(b *testing.B, store objstore.Store, project string, repackLoose int, dir string) {
	b.Helper()
	ws, err := os.MkdirTemp(dir, "svc-refws-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(ws)
	buildReferenceWorkspace(b, ws, benchScale(b))
	p, err := Start(context.Background(), Options{Config: testConfig(project, ws, ""), Store: store, Log: zap.NewNop(), RepackLooseObjects: repackLoose})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for i := 0; i < 2; i++ { // the first persist may start a repack; the second writes the packed .git
		if err := os.WriteFile(filepath.Join(ws, "src", fmt.Sprintf("bench-%d.ts", i)), []byte("export {};\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Turn(ctx, "bench setup"); err != nil {
			b.Fatal(err)
		}
		p.Sync.WaitBackground()
		p.Durable.WaitBackground() // the first base's loose objects packed, as a pod does after its first turn
	}
	if err := p.S3.EnsureDeps(ctx); err != nil {
		b.Fatal(err)
	}
	// The floor fetches the pod's own deps layer (zstd): record its key.
	hash, err := p.S3.LockfileHash()
	if err != nil {
		b.Fatal(err)
	}
	floorDepsKey = objstore.DepsKeyZstd(hash)
	if _, err := store.Head(ctx, floorDepsKey); err != nil {
		b.Fatalf("the deps layer %s: %v", floorDepsKey, err)
	}
	loose, _ := p.Repo.LooseObjects()
	packs, _ := p.Repo.Packs()
	b.Logf("durable .git: %d loose objects, %d packs", loose, packs)
}

// floorDepsKey is the reference workspace's deps layer (zstd), as the pod
// wrote it.
var floorDepsKey string

// workspaceRoots are the file systems the cold start is measured on: tmpfs
// (SVC_BENCH_TMPFS, default /dev/shm) and disk (the temp dir).
func workspaceRoots(b *testing.B) []struct{ name, dir string } {
	tmpfs := os.Getenv("SVC_BENCH_TMPFS")
	if tmpfs == "" {
		tmpfs = "/dev/shm"
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(tmpfs, &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		b.Fatalf("%s is not a tmpfs (set SVC_BENCH_TMPFS to a tmpfs mount): %v", tmpfs, err)
	}
	return []struct{ name, dir string }{{"tmpfs", tmpfs}, {"disk", os.TempDir()}}
}

// Trees restored by the cold-start benchmark are removed only once every
// run is over (unless SVC_BENCH_REMOVE_EACH=1): on ext4 without a journal
// (this VM's disk) every inode creation first skips, one by one, the
// inodes freed in the same block group during the last 60 s (300 s while
// their inode-table block is dirty), so removing a 11,000-file tree right
// before a run makes that run's file creation cost O(created × freed) in
// kernel time. The timed runs would measure the previous run's rm -rf.
func removeEach() bool { return os.Getenv("SVC_BENCH_REMOVE_EACH") == "1" }

// sysTime is the kernel CPU time of this process and its children.
func sysTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Stime.Nano() + children.Stime.Nano())
}

// BenchmarkColdStartReference: the cold start of the reference workspace,
// pod against the floor, on tmpfs and on disk, in the same run.
// pod: pod.Start into an empty directory until the tree is complete (.git,
// work tree at HEAD, node_modules). floor: the raw cost of the same bytes
// (the floor), `GET | zstd -d | tar x` of the deps layer in parallel
// with `GET | tar xz` of repo.git.tar.gz followed by `git reset --hard` (the
// checkout).
// Reported: ms per cold start of each, and pod/floor.
func BenchmarkColdStartReference(b *testing.B) {
	store := benchStore(b)
	const project = "refbench"
	roots := workspaceRoots(b)
	// The scratch workspace lives on tmpfs so that its removal frees no
	// inodes on the disk being measured (see removeEach).
	referenceObjectsIn(b, store, project, 0, roots[0].dir)
	var trees []string
	b.Cleanup(func() {
		for _, t := range trees {
			os.RemoveAll(t)
		}
	})
	keep := func(dir string) {
		if removeEach() {
			os.RemoveAll(dir)
			return
		}
		trees = append(trees, dir)
	}
	for _, root := range roots {
		b.Run(root.name, func(b *testing.B) { coldStartVsFloor(b, store, project, root.name, root.dir, keep) })
	}
}

// coldStartVsFloor runs b.N pod cold starts and b.N floors of project into
// dir, alternating which goes first, and reports ms per cold start of
// each, pod/floor and their CPU and system CPU.
func coldStartVsFloor(b *testing.B, store objstore.Store, project, name, dir string, keep func(string)) {
	var pod, floor, podCPU, floorCPU, podSys, floorSys time.Duration
	for i := 0; i < b.N; i++ {
		// Alternate which one goes first, so a drift of the
		// machine (or of the file system) weighs on both alike.
		var d, f, dc, fc, ds, fs time.Duration
		// measure runs one restore and takes its wall, CPU and
		// system times.
		measure := func(once func(*testing.B, objstore.Store, string, string) (time.Duration, string)) (wall, cpu, sys time.Duration) {
			c0, s0 := cpuTime(), sysTime()
			wall, tree := once(b, store, project, dir)
			cpu, sys = cpuTime()-c0, sysTime()-s0
			keep(tree)
			return wall, cpu, sys
		}
		runPod := func() { d, dc, ds = measure(coldStartOnce) }
		runFloor := func() { f, fc, fs = measure(floorOnce) }
		if i%2 == 0 {
			runPod()
			runFloor()
		} else {
			runFloor()
			runPod()
		}
		pod += d
		floor += f
		podCPU += dc
		floorCPU += fc
		podSys += ds
		floorSys += fs
		b.Logf("%s: pod %v (cpu %v, sys %v), floor %v (cpu %v, sys %v)", name, d.Round(time.Millisecond),
			dc.Round(time.Millisecond), ds.Round(time.Millisecond), f.Round(time.Millisecond), fc.Round(time.Millisecond), fs.Round(time.Millisecond))
	}
	b.ReportMetric(float64(pod.Milliseconds())/float64(b.N), "pod-ms")
	b.ReportMetric(float64(floor.Milliseconds())/float64(b.N), "floor-ms")
	b.ReportMetric(float64(pod)/float64(floor), "pod/floor")
	// CPU of this process and its children (git, tar, gzip; not
	// MinIO): the figure least disturbed by a busy machine.
	b.ReportMetric(float64(podCPU.Milliseconds())/float64(b.N), "pod-cpu-ms")
	b.ReportMetric(float64(floorCPU.Milliseconds())/float64(b.N), "floor-cpu-ms")
	b.ReportMetric(float64(podSys.Milliseconds())/float64(b.N), "pod-sys-ms")
	b.ReportMetric(float64(floorSys.Milliseconds())/float64(b.N), "floor-sys-ms")
}

// coldStartOnce returns the time and the restored tree (the caller
// removes it).
func coldStartOnce(b *testing.B, store objstore.Store, project, root string) (time.Duration, string) {
	b.Helper()
	dst, err := os.MkdirTemp(root, "svc-cold-")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var p *Pod
	// Labelled, so that a CPU profile of the benchmark (-test.cpuprofile)
	// can be narrowed to the pod's cold start with -tagfocus=coldstart=pod
	// (every goroutine it starts inherits the label).
	pprof.Do(context.Background(), pprof.Labels("coldstart", "pod"), func(ctx context.Context) {
		p, err = Start(ctx, Options{Config: testConfig(project, dst, ""), Store: store, Log: zap.NewNop()})
	})
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	res := p.ColdStart
	p.Close()
	if !res.Restored || !res.DepsRestored {
		b.Fatalf("cold start = %+v", res)
	}
	b.Logf("pod phases: %v", res.Phases)
	return took, dst
}

// floorOnce returns the time and the extracted tree (the caller removes
// it).
func floorOnce(b *testing.B, store objstore.Store, project, root string) (time.Duration, string) {
	b.Helper()
	dst, err := os.MkdirTemp(root, "svc-floor-")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dst, ".git"), 0o755); err != nil {
		b.Fatal(err)
	}
	depsKey := floorDepsKey
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	untar := func(key, dir, tarCmd string, then ...string) {
		defer wg.Done()
		rc, _, err := store.Get(context.Background(), key)
		if err != nil {
			errs <- err
			return
		}
		defer rc.Close()
		cmd := exec.Command("sh", "-c", tarCmd, "sh", dir)
		cmd.Stdin = rc
		if out, err := cmd.CombinedOutput(); err != nil {
			errs <- fmt.Errorf("tar %s: %v %s", key, err, out)
			return
		}
		_, _ = io.Copy(io.Discard, rc)
		if len(then) > 0 {
			cmd := exec.Command("git", then...)
			cmd.Dir = dst
			cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("git %v: %v %s", then, err, out)
			}
		}
	}
	wg.Add(2)
	go untar(depsKey, dst, `zstd -d -q | tar -xf - -C "$1"`)
	go untar(objstore.RepoKey(project), filepath.Join(dst, ".git"), `tar -xzf - -C "$1"`, "reset", "-q", "--hard")
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took, dst
}

// BenchmarkTurnReference: per-turn latency on the reference workspace, a
// turn that changes three sources and a turn that also changes the lockfile
// (and installs a package). The deps layer is uploaded in the background;
// it is awaited outside the timed region so turns do not pile up.
func BenchmarkTurnReference(b *testing.B) {
	store := benchStore(b)
	ws, err := os.MkdirTemp("", "svc-refturn-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(ws)
	buildReferenceWorkspace(b, ws, benchScale(b))
	p, err := Start(context.Background(), Options{Config: testConfig("refturn", ws, ""), Store: store, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	n := 0
	turn := func(b *testing.B, lockfile bool) {
		for k := 0; k < 3; k++ {
			n++
			if err := os.WriteFile(filepath.Join(ws, "src", fmt.Sprintf("turn-%d.ts", n)), jsText(r, 2000), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if lockfile {
			n++
			lock := fmt.Sprintf(`{"lockfileVersion":3,"name":"reference","packages":{"pkg-new-%d":{}}}`, n)
			if err := os.WriteFile(filepath.Join(ws, "package-lock.json"), []byte(lock), 0o644); err != nil {
				b.Fatal(err)
			}
			dir := filepath.Join(ws, "node_modules", fmt.Sprintf("pkg-new-%d", n))
			os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(filepath.Join(dir, "index.js"), jsText(r, 4000), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := p.Turn(ctx, "bench turn"); err != nil {
			b.Fatal(err)
		}
	}
	turn(b, true) // first persist and deps layer, off the clock
	_ = p.S3.WaitDeps(ctx)
	p.Sync.WaitBackground()
	for _, lockfile := range []bool{false, true} {
		name := "sources"
		if lockfile {
			name = "sources+lockfile"
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				turn(b, lockfile)
				total += time.Since(start)
				b.StopTimer()
				if err := p.S3.WaitDeps(ctx); err != nil {
					b.Fatal(err)
				}
				p.Sync.WaitBackground()
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "turn-ms")
		})
	}
}
