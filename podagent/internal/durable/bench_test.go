package durable_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/objstore/objstoretest"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
)

// Benchmarks of docs/sync-modes.md §13.8. Times count only from a quiet
// machine (docs/performance.md); the byte counts do not depend on load.
// SVC_BENCH_STORE=minio runs them against MinIO (testenv), else a
// directory store.

func benchStore(b *testing.B) *objstoretest.Counting {
	b.Helper()
	var st objstore.Store
	if os.Getenv("SVC_BENCH_STORE") == "minio" {
		env := testenv.MinIO(b)
		s, err := s3store.New(context.Background(), s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
		if err != nil {
			b.Fatal(err)
		}
		st = s
	} else {
		s, err := fs.New(b.TempDir(), fs.Options{})
		if err != nil {
			b.Fatal(err)
		}
		st = s
	}
	return &objstoretest.Counting{Store: st, Class: keyClass}
}

// BenchmarkIncrementalTurn is one one-line turn (commit outside the timer,
// Snapshot + Upload inside) on a repository of incompressible history:
// ms/turn and the bytes uploaded per turn, counted by the store wrapper.
// The target: 200MB within 1.5× of 10MB, ≤ 64 KiB per turn.
// Each size runs twice: increments, and the whole archive per turn (the
// path before increments, SVC_DURABLE_FULL) as the baseline of the same run.
// SVC_BENCH_1GB=1 adds a 1 GB repository (the 5 s shutdown flush).
func BenchmarkIncrementalTurn(b *testing.B) {
	sizes := []int{10, 200}
	if os.Getenv("SVC_BENCH_1GB") != "" {
		sizes = append(sizes, 1024)
	}
	for _, mb := range sizes {
		for _, full := range []bool{false, true} {
			name := fmt.Sprintf("%dMB/increment", mb)
			if full {
				name = fmt.Sprintf("%dMB/full", mb) // the whole archive per turn (SVC_DURABLE_FULL): the baseline
			}
			b.Run(name, func(b *testing.B) { benchTurn(b, mb, full) })
		}
	}
}

func benchTurn(b *testing.B, mb int, full bool) {
	ctx := context.Background()
	st := benchStore(b)
	ws := b.TempDir()
	newRepo(b, ws, mb<<20)
	turn(b, ws, 0)
	p := podWith(b, st, ws, "bench", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1}, full)
	if err := benchPersist(ctx, p); err != nil {
		b.Fatal(err)
	}
	st.Reset()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		b.StopTimer()
		turn(b, ws, i)
		b.StartTimer()
		if err := benchPersist(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	puts := st.Puts()
	b.ReportMetric(float64(objstoretest.Total(puts))/float64(b.N), "bytes-uploaded/turn")
	b.ReportMetric(float64(puts["base"].Bytes)/float64(b.N), "base-bytes/turn")
}

// BenchmarkRestoreIncrements is a cold start's restore (base + K
// increments + refs, sanitised, synced) into an empty workspace of a
// 10 MB repository with K = 0, 8 and 32 increments pending.
func BenchmarkRestoreIncrements(b *testing.B) {
	for _, k := range []int{0, 8, 32} {
		b.Run("K="+strconv.Itoa(k), func(b *testing.B) {
			ctx := context.Background()
			st := benchStore(b)
			ws := b.TempDir()
			newRepo(b, ws, 10<<20)
			turn(b, ws, 0)
			p := podWith(b, st, ws, "bench", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1})
			if err := benchPersist(ctx, p); err != nil {
				b.Fatal(err)
			}
			for i := 1; i <= k; i++ {
				turn(b, ws, i)
				if err := benchPersist(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dst := b.TempDir()
				r := podWith(b, st, dst, "restore", durable.CompactionOptions{})
				b.StartTimer()
				if ok, err := r.Restore(ctx, archive.ExtractOptions{}); err != nil || !ok {
					b.Fatalf("restore: %v %v", ok, err)
				}
			}
		})
	}
}

// BenchmarkStorageAfterTurns runs 500 one-line turns on a repository
// (SVC_BENCH_STORAGE_MB, default 200) with the default compaction (run in
// line, grace 0: merges every 16 increments, a base rewrite once their
// volume is half the base) and reports the bytes stored, their ratio to
// the base, the bytes uploaded per turn amortised over the run, the base
// rewrites and merges the compaction made, and the peak chain (increments
// listed right after a persist, before its compaction).
// The target: ≤ 2 × the repository.
func BenchmarkStorageAfterTurns(b *testing.B) {
	mb := 200
	if v, err := strconv.Atoi(os.Getenv("SVC_BENCH_STORAGE_MB")); err == nil && v > 0 {
		mb = v
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		st := benchStore(b)
		ws := b.TempDir()
		newRepo(b, ws, mb<<20)
		turn(b, ws, 0)
		p := podWith(b, st, ws, "bench", durable.CompactionOptions{RetireGrace: time.Nanosecond})
		p.Close() // no background compaction: CompactIfDue runs in line below
		if err := benchPersist(ctx, p); err != nil {
			b.Fatal(err)
		}
		// The chain a cold start would apply peaks right after a persist,
		// before the compaction it triggers; a base rewrite shows as a new
		// base in the manifest, a merge as fewer increments listed.
		first, _ := p.Manifest()
		baseETag := first.Base.ETag
		peak, rewrites, merges := len(first.Increments), 0, 0
		var rewroteAt []int
		for n := 1; n <= 500; n++ {
			turn(b, ws, n)
			if err := benchPersist(ctx, p); err != nil {
				b.Fatal(err)
			}
			before, _ := p.Manifest()
			peak = max(peak, len(before.Increments))
			if err := p.CompactIfDue(ctx); err != nil { // in line, as the background would
				b.Fatal(err)
			}
			after, _ := p.Manifest()
			switch {
			case after.Base.ETag != baseETag:
				rewrites++
				rewroteAt = append(rewroteAt, n)
				baseETag = after.Base.ETag
			case len(after.Increments) < len(before.Increments):
				merges++
			}
		}
		var stored, base int64
		_ = st.List(ctx, "p1/", func(oi objstore.ObjectInfo) error {
			stored += oi.Size
			if oi.Key == objstore.RepoKey("p1") {
				base = oi.Size
			}
			return nil
		})
		b.ReportMetric(float64(stored), "bytes-stored")
		b.ReportMetric(float64(stored)/float64(base), "stored/base")
		b.ReportMetric(float64(objstoretest.Total(st.Puts()))/500, "bytes-uploaded/turn")
		b.ReportMetric(float64(peak), "peak-chain")
		b.ReportMetric(float64(rewrites), "base-rewrites")
		b.ReportMetric(float64(merges), "merges")
		puts := st.Puts()
		b.ReportMetric(float64(puts["base"].Requests), "base-writes")
		b.ReportMetric(float64(puts["inc"].Bytes)/500, "inc-bytes/turn")
		b.Logf("%d MB, 500 one-line turns: %d base writes (the first, then %d rewrites by compaction, after turns %v), %d merges, "+
			"peak chain %d increments, %d stored = %.3f × the base", mb, puts["base"].Requests, rewrites, rewroteAt, merges,
			peak, stored, float64(stored)/float64(base))
	}
}

func benchPersist(ctx context.Context, p *durable.Persister) error {
	_, err := persist(ctx, p)
	return err
}
