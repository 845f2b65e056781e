package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// CompactionOptions bound the chain of increments (docs/sync-modes.md
// §13.3). The base is rewritten in the background, never on a turn's path,
// once the listed increments reach MaxIncrements or their bytes reach
// VolumeRatio × the base.
type CompactionOptions struct {
	// MaxIncrements listed before a compaction starts (default 16; <0
	// never compacts by count).
	MaxIncrements int
	// VolumeRatio of increment bytes to base bytes (default 0.5; <0 never
	// compacts by volume), once the increments hold at least MinBytes
	// (default 1 MiB: a small repository is compacted by count).
	VolumeRatio float64
	MinBytes    int64
	// RetireGrace is how long an increment a manifest dropped is kept for
	// readers holding an older manifest (default 15 min), and how old an
	// increment no manifest names must be before the owner removes it.
	RetireGrace time.Duration
	// Timeout of one compaction (default 10 min).
	Timeout time.Duration
}

func (o CompactionOptions) withDefaults() CompactionOptions {
	if o.MaxIncrements == 0 {
		o.MaxIncrements = 16
	}
	if o.VolumeRatio == 0 {
		o.VolumeRatio = 0.5
	}
	if o.MinBytes == 0 {
		o.MinBytes = 1 << 20
	}
	if o.RetireGrace == 0 {
		o.RetireGrace = 15 * time.Minute
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	return o
}

// looseBase is the number of loose objects above which a base is
// rewritten as one pack at the next compaction check (gitsync packs the
// work repository's loose objects at the same threshold).
const looseBase = 256

// background runs at most one compaction at a time.
type background struct {
	mu      sync.Mutex
	running bool
	closed  bool
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// NeedsCompaction reports whether the manifest's chain has crossed a
// compaction threshold.
func (p *Persister) NeedsCompaction() bool { return p.due() != dueNone }

type dueKind int

const (
	dueNone  dueKind = iota
	dueMerge         // too many increments, little volume: merge them into one
	dueBase          // the increments' volume reached the base's: rewrite the base
)

// due decides what the chain needs. Many small increments are merged into
// one (O(their bytes)); the base is rewritten (O(repository)) only once
// the increments' volume is a fraction of it, so its amortised cost per
// turn stays a multiple of the change.
func (p *Persister) due() dueKind {
	o := p.opts.Compaction.withDefaults()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.man == nil || len(p.man.Increments) == 0 {
		return dueNone
	}
	if p.man.Base.Loose > looseBase && (o.MaxIncrements > 0 || o.VolumeRatio > 0) {
		// A first base of loose objects: one pack makes every cold
		// start after it cheaper, whatever the chain's volume.
		return dueBase
	}
	n := p.man.IncrementBytes()
	if o.VolumeRatio > 0 && n >= o.MinBytes && float64(n) >= o.VolumeRatio*float64(p.man.Base.Bytes) {
		return dueBase
	}
	if o.MaxIncrements <= 0 || len(p.man.Increments) < o.MaxIncrements {
		return dueNone
	}
	l0, l1 := levels(p.man)
	switch {
	case o.MaxIncrements < 2, len(l1) >= o.MaxIncrements:
		return dueBase
	case len(l0) >= o.MaxIncrements && mergeBase(p.man) != nil && len(l0) > 1:
		return dueMerge
	case len(l0) >= o.MaxIncrements || len(p.man.Increments) >= 2*o.MaxIncrements:
		return dueBase
	}
	return dueNone
}

// levels splits the listed increments by level.
func levels(m *repoarchive.RepoManifest) (l0, l1 []repoarchive.Increment) {
	for _, inc := range m.Increments {
		if inc.Level == 0 {
			l0 = append(l0, inc)
		} else {
			l1 = append(l1, inc)
		}
	}
	return l0, l1
}

// mergeBase is what a merge of the level-0 increments excludes: the refs
// of the newest level-1 increment, else the base's (nil: unknown).
func mergeBase(m *repoarchive.RepoManifest) map[string]string {
	var best *repoarchive.Increment
	for i := range m.Increments {
		if inc := &m.Increments[i]; inc.Level > 0 && inc.Refs != nil && (best == nil || inc.Seq > best.Seq) {
			best = inc
		}
	}
	if best != nil {
		return best.Refs
	}
	return m.Base.Refs
}

// maybeCompact starts a background compaction when one is due.
func (p *Persister) maybeCompact() {
	if p.NeedsCompaction() {
		p.background(p.CompactIfDue)
	}
}

// CompactIfDue merges the increments or rewrites the base, whichever the
// chain needs (nothing when neither).
func (p *Persister) CompactIfDue(ctx context.Context) error {
	switch p.due() {
	case dueMerge:
		return p.Merge(ctx)
	case dueBase:
		return p.Compact(ctx)
	}
	return nil
}

// WaitBackground waits for a background compaction to end.
func (p *Persister) WaitBackground() { p.bg.wg.Wait() }

// CompactInBackground rewrites the base in the background unless a
// compaction runs (or the Persister is closed). Callers use it at idle,
// so that most cold starts find no increment.
func (p *Persister) CompactInBackground() { p.background(p.Compact) }

func (p *Persister) background(compact func(context.Context) error) {
	b := &p.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running || b.closed {
		return
	}
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
	b.running = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(b.ctx, p.opts.Compaction.withDefaults().Timeout)
		defer cancel()
		if err := compact(ctx); err != nil && !errors.Is(err, context.Canceled) {
			p.log.Warn("compacting the durable .git failed; the next persist retries", zap.Error(err))
		}
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
}

// Close stops a running compaction and waits for it.
func (p *Persister) Close() {
	b := &p.bg
	b.mu.Lock()
	b.closed = true
	if b.cancel != nil {
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Compact rewrites the base from the manifest's refs and re-points the
// manifest at it (Neon's order: new object, then pointer, then deferred
// deletes):
//
//  1. note the manifest M (its refs R);
//  2. pack everything reachable from R into a fresh bare layout and PUT it
//     as repo.git.tar.gz through the lease, If-Match the base this pod
//     knows — a fenced pod never replaces the owner's base;
//  3. write the current manifest with that base and without the
//     increments M listed (they move to the retired list), through the
//     lease;
//  4. delete, after RetireGrace, retired increments and increments no
//     manifest names (from a crash or a fenced pod) — the owner only.
//
// A crash anywhere leaves a readable state: before 3 the manifest still
// lists every increment (the new base is a superset of the old one); after
// 3 the dropped increments are only garbage.
func (p *Persister) Compact(ctx context.Context) error {
	if p.Fenced() {
		return ErrFenced
	}
	p.mu.Lock()
	man, withLFS := p.man, p.lfsInBase
	p.mu.Unlock()
	if man == nil {
		return nil
	}
	o := p.opts.Compaction.withDefaults()
	dir, err := os.MkdirTemp(filepath.Join(p.gitDir, StateDirName, "tmp"), "compact-")
	if err != nil {
		if err := os.MkdirAll(filepath.Join(p.gitDir, StateDirName, "tmp"), 0o755); err != nil {
			return err
		}
		if dir, err = os.MkdirTemp(filepath.Join(p.gitDir, StateDirName, "tmp"), "compact-"); err != nil {
			return err
		}
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	size, err := p.stageBase(ctx, dir, man, withLFS)
	if err != nil {
		return err
	}
	info, err := p.putBase(ctx, filepath.Join(dir, "base.tar.gz"), size)
	if err != nil {
		return err
	}
	testhook.Reach(testhook.CompactBase)

	p.manMu.Lock()
	p.mu.Lock()
	cur, curETag := p.man, p.manETag
	p.mu.Unlock()
	dropped := map[string]bool{}
	for _, inc := range man.Increments {
		dropped[inc.Key] = true
	}
	next := p.nextManifest(cur)
	next.Base = repoarchive.BaseRef{ETag: info.ETag, Epoch: p.lease.Epoch(), Seq: man.Seq, Bytes: size, Refs: man.Refs, LFS: withLFS}
	next.Increments = nil
	var retired []repoarchive.Increment
	for _, inc := range cur.Increments {
		if dropped[inc.Key] {
			retired = append(retired, inc)
		} else {
			next.Increments = append(next.Increments, inc)
		}
	}
	now := time.Now()
	next.Retired = retire(next.Retired, retired, now)
	_, err = p.putManifest(ctx, curETag, next)
	p.manMu.Unlock()
	if err != nil {
		return err
	}
	testhook.Reach(testhook.CompactRepoint)
	p.log.Info("compacted the durable .git", zap.Int64("seq", man.Seq), zap.Int("increments", len(retired)),
		zap.Int64("bytes", size), zap.Duration("took", time.Since(start)))
	return p.collect(ctx, o.RetireGrace)
}

// Merge replaces the listed level-0 increments by one level-1 increment
// holding the objects reachable from the manifest's refs and not from the
// newest level-1 increment's (or the base's) — O(those increments), not
// O(the repository) — then re-points the manifest and collects as Compact
// does. The base is rewritten once the level-1 increments reach
// MaxIncrements or the volume threshold.
func (p *Persister) Merge(ctx context.Context) error {
	if p.Fenced() {
		return ErrFenced
	}
	p.mu.Lock()
	man := p.man
	p.mu.Unlock()
	if man == nil {
		return nil
	}
	l0, _ := levels(man)
	exclude := mergeBase(man)
	if exclude == nil || len(l0) < 2 {
		return nil
	}
	tmp := filepath.Join(p.gitDir, StateDirName, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	snap := &Snapshot{refs: man.Refs, head: man.Head}
	ok, err := p.snapshotIncrement(ctx, snap, &repoarchive.RepoManifest{Refs: exclude, Head: man.Head}, tmp)
	defer snap.Remove()
	if !ok || snap.kind != snapIncrement {
		return fmt.Errorf("durable: merging increments: %v", err)
	}
	p.manMu.Lock()
	p.mu.Lock()
	cur, curETag := p.man, p.manETag
	p.mu.Unlock()
	listed := map[string]bool{}
	for _, i := range cur.Increments {
		listed[i.Key] = true
	}
	for _, i := range l0 {
		if !listed[i.Key] { // another compaction got there first
			p.manMu.Unlock()
			return nil
		}
	}
	next := p.nextManifest(cur)
	inc, err := p.putIncrement(ctx, snap, next)
	if err != nil {
		p.manMu.Unlock()
		return err
	}
	testhook.Reach(testhook.MergeIncrement)
	inc.Level, inc.Refs = 1, man.Refs
	merged := map[string]bool{}
	for _, i := range l0 {
		merged[i.Key] = true
	}
	next.Increments = []repoarchive.Increment{inc}
	var retired []repoarchive.Increment
	for _, i := range cur.Increments {
		if merged[i.Key] {
			retired = append(retired, i)
		} else {
			next.Increments = append(next.Increments, i)
		}
	}
	next.Retired = retire(next.Retired, retired, time.Now())
	_, err = p.putManifest(ctx, curETag, next)
	p.manMu.Unlock()
	if err != nil {
		return err
	}
	p.log.Info("merged the durable increments", zap.Int("increments", len(retired)), zap.Int64("bytes", inc.Bytes))
	return p.collect(ctx, p.opts.Compaction.withDefaults().RetireGrace)
}

// stageBase writes dir/base.tar.gz: a bare layout holding one pack of
// everything reachable from man's refs, packed-refs and HEAD from man,
// and (when a large-file push is pending) the large-file cache.
func (p *Persister) stageBase(ctx context.Context, dir string, man *repoarchive.RepoManifest, withLFS bool) (int64, error) {
	gitDir := filepath.Join(dir, "git")
	for _, d := range []string{"objects/pack", "objects/info", "refs/heads", "refs/tags", "info"} {
		if err := os.MkdirAll(filepath.Join(gitDir, d), 0o755); err != nil {
			return 0, err
		}
	}
	format := man.ObjectFormat
	cfg := "[core]\n\trepositoryformatversion = 0\n"
	if format == "sha256" {
		cfg = "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"
	}
	if err := os.WriteFile(filepath.Join(gitDir, "config"), []byte(cfg), 0o644); err != nil {
		return 0, err
	}
	if len(man.Refs) > 0 {
		pack, err := repoarchive.PackObjects(ctx, p.opts.Runner, p.gitDir, filepath.Join(gitDir, "objects", "pack"), repoarchive.Tips(man.Refs), nil)
		if err != nil {
			return 0, err
		}
		_ = pack
	}
	if err := repoarchive.ApplyRefs(gitDir, man); err != nil {
		return 0, err
	}
	if withLFS {
		if err := repoarchive.LinkTree(filepath.Join(p.gitDir, "lfs", "objects"), filepath.Join(gitDir, "lfs", "objects"), true); err != nil {
			return 0, err
		}
	}
	f, err := os.Create(filepath.Join(dir, "base.tar.gz"))
	if err != nil {
		return 0, err
	}
	_, err = repoarchive.Create(f, gitDir, repoarchive.Options{Level: p.opts.GzipLevel, IncludeLFS: withLFS,
		Manifest: &repoarchive.Manifest{DepsHash: man.DepsHash}})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("durable: archive the compacted base: %w", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "base.tar.gz"))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// collect deletes, as the owner, the increments the current manifest no
// longer lists: retired ones once RetireGrace has passed since the
// manifest that dropped them, and ones no manifest ever listed (a crash
// between increment and manifest, or a fenced pod) once older than
// RetireGrace. Every delete goes through the lease (checked first).
func (p *Persister) collect(ctx context.Context, grace time.Duration) error {
	p.mu.Lock()
	man := p.man
	p.mu.Unlock()
	if man == nil {
		return nil
	}
	live := map[string]bool{}
	for _, inc := range man.Increments {
		live[inc.Key] = true
	}
	retiredAt := map[string]time.Time{}
	for _, r := range man.Retired {
		retiredAt[r.Key] = r.At
	}
	now := time.Now()
	var gone []string
	err := p.opts.Store.List(ctx, objstore.RepoIncrementPrefix(p.opts.ProjectID), func(oi objstore.ObjectInfo) error {
		if live[oi.Key] || !strings.HasSuffix(oi.Key, ".tar") {
			return nil
		}
		at, ok := retiredAt[oi.Key]
		if !ok {
			at = oi.LastModified
		}
		if now.Sub(at) >= grace {
			gone = append(gone, oi.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("durable: list increments: %w", err)
	}
	for _, key := range gone {
		if err := p.lease.Delete(ctx, p.opts.Store, key); err != nil {
			return fmt.Errorf("durable: delete %s: %w", key, err)
		}
	}
	if len(gone) > 0 {
		p.log.Info("removed increments no manifest lists", zap.Int("count", len(gone)))
		p.forgetRetired(ctx, gone)
	}
	testhook.Reach(testhook.Collected)
	return nil
}

// forgetRetired drops deleted keys from the manifest's retired list at
// the next manifest write (the list is bookkeeping; a key listed after its
// delete is harmless).
func (p *Persister) forgetRetired(_ context.Context, gone []string) {
	del := map[string]bool{}
	for _, k := range gone {
		del[k] = true
	}
	p.manMu.Lock()
	defer p.manMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.man == nil {
		return
	}
	kept := p.man.Retired[:0:0]
	for _, r := range p.man.Retired {
		if !del[r.Key] {
			kept = append(kept, r)
		}
	}
	m := *p.man
	m.Retired = kept
	p.man = &m
}
