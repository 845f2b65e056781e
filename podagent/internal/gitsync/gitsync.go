// Package gitsync is GitWorkspaceSync, the pod's mode-free turn engine
// (spec 3.1, 10.1): it stages and commits each turn locally under the
// repository lock, then hands the commit to the mode's Writer (package
// syncstrategy; docs/sync-modes.md §12), which owns every durable write of
// its mode — in git_only the .git persist to <projectId>/repo.git.tar.gz and
// the checkpoint record, in dual_shadow the origin push, in s3 and
// dual_shadow the S3 layers and assets — and the retry of what failed. The
// engine calls the Writer once per event (a commit, a flush, a rollback, the
// resume at start, a background retry) and imports none of the stores.
//
// Concurrency: turns, rollbacks, flushes and the shutdown flush are
// serialised by the pod's one turn lock (package turn's Slot), which its
// caller holds around the agent's tools and the commit alike. The engine
// lock only orders the engine's state against the background retry loop (a
// retry never runs inside a commit). Inside it, stage+commit, a tag and the
// mode's .git snapshot each take the repository lock (Repo.Lock; the "one
// lock around commit + snapshot" of docs/design.md §6), so a snapshot never
// sees a half-written commit.
package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

var (
	// ErrNotPersisted is returned by Flush when the commit could not be
	// persisted (the turn's commit exists locally; the mode keeps retrying).
	ErrNotPersisted = errors.New("gitsync: .git could not be persisted")
	// ErrClosed is returned once Drain has been called.
	ErrClosed = errors.New("gitsync: shutting down")
	// ErrFenced: another pod owns the project; this pod writes nothing
	// (ownership.ErrFenced).
	ErrFenced = ownership.ErrFenced
)

// LargeFiles is the large-file hook of the commit (spec 10.3); nil
// disables it. Uploading the bytes is the mode's (its Writer).
type LargeFiles interface {
	// TrackLarge tracks files over the threshold before add.
	TrackLarge(ctx context.Context) error
}

// Options configure a GitWorkspaceSync.
type Options struct {
	// Writer is what the mode writes after a commit (docs/sync-modes.md
	// §1, §12), built once at start (syncstrategy); required.
	Writer Writer
	Repo   *Repo
	// Lease is the pod's claim on the project: a fenced pod commits
	// nothing more (docs/sync-modes.md §11); required.
	Lease *ownership.Lease
	LFS   LargeFiles
	// Repack is the background repack (WaitBackground, Close); nil: none.
	Repack *Repacker
	Log    *zap.Logger
	// RetryMin and RetryMax bound the background retry backoff while the
	// Writer owes work (defaults 1s and 60s).
	RetryMin, RetryMax time.Duration
}

// GitWorkspaceSync drives turns. Create with New after cold start.
type GitWorkspaceSync struct {
	o   Options
	log *zap.Logger
	w   Writer

	engineMu sync.Mutex // the engine's state against the retry loop; turns are the Slot's
	closed   bool       // guarded by engineMu

	kick chan struct{}
}

// New returns a GitWorkspaceSync.
func New(o Options) *GitWorkspaceSync {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Writer == nil || o.Lease == nil {
		panic("gitsync: Options.Writer and Options.Lease are required")
	}
	o.RetryMin = settings.PositiveOr(o.RetryMin, time.Second)
	o.RetryMax = settings.PositiveOr(o.RetryMax, time.Minute)
	return &GitWorkspaceSync{o: o, log: o.Log.Named("gitsync"), kick: make(chan struct{}, 1), w: o.Writer}
}

// Repo returns the repository.
func (g *GitWorkspaceSync) Repo() *Repo { return g.o.Repo }

// Fenced reports whether another pod owns the project.
func (g *GitWorkspaceSync) Fenced() bool { return g.o.Lease.Fenced() }

// Turn is one agent turn: stage, commit locally (fixed author, message),
// then the Writer's Committed. A turn that changed no file makes no commit
// and returns "". A failed write does not fail the turn (the commit exists
// and the mode retries it); only a failed commit, a fenced project or a
// closed sync return an error.
func (g *GitWorkspaceSync) Turn(ctx context.Context, message string) (string, error) {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed {
		return "", ErrClosed
	}
	return g.turnLocked(ctx, message)
}

// turnLocked commits and hands the commit to the Writer (a turn, a rollback).
func (g *GitWorkspaceSync) turnLocked(ctx context.Context, message string) (string, error) {
	c, err := g.commitLocked(ctx, message)
	if err != nil || c == nil {
		return "", err
	}
	err = g.w.Committed(ctx, *c)
	g.pokeIfOwed()
	if errors.Is(err, ErrFenced) || g.Fenced() {
		return c.SHA, ErrFenced
	}
	return c.SHA, nil
}

// commitLocked stages and commits under the repository lock; nil: nothing
// changed.
func (g *GitWorkspaceSync) commitLocked(ctx context.Context, message string) (*Commit, error) {
	if g.Fenced() {
		return nil, ErrFenced
	}
	if message == "" {
		message = "agent turn"
	}
	g.o.Repo.Lock()
	sha, err := func() (string, error) {
		g.removeStaleLocks()
		if g.o.LFS != nil {
			if err := g.o.LFS.TrackLarge(ctx); err != nil {
				g.log.Warn("tracking large files", zap.Error(err))
			}
		}
		if err := g.o.Repo.StageAll(ctx); err != nil {
			return "", fmt.Errorf("gitsync: stage: %w", err)
		}
		changed, err := g.o.Repo.HasStagedChanges(ctx)
		if err != nil || !changed {
			return "", err
		}
		sha, err := g.o.Repo.Commit(ctx, message, false)
		if err != nil {
			return "", fmt.Errorf("gitsync: commit: %w", err)
		}
		return sha, nil
	}()
	g.o.Repo.Unlock()
	if err != nil || sha == "" {
		return nil, err
	}
	turn, terr := g.o.Repo.Turn(ctx, sha)
	if terr != nil {
		g.log.Warn("reading the turn number", zap.String("sha", sha), zap.Error(terr))
	}
	g.log.Info("committed turn", zap.String("sha", sha), zap.Int64("turn", turn))
	return &Commit{SHA: sha, Turn: turn, Message: message}, nil
}

// removeStaleLocks clears lock files a killed git process left (under the
// repository lock: none of the pod's own git writers runs).
func (g *GitWorkspaceSync) removeStaleLocks() {
	removed, err := g.o.Repo.RemoveStaleLocks()
	if len(removed) > 0 {
		g.log.Warn("removed stale git lock files", zap.Strings("files", removed))
	}
	if err != nil {
		g.log.Warn("removing stale git lock files", zap.Error(err))
	}
}

// WaitBackground waits for background maintenance (a repack) to end.
func (g *GitWorkspaceSync) WaitBackground() { g.o.Repack.Wait() }

// Close cancels background maintenance and waits for it.
func (g *GitWorkspaceSync) Close() { g.o.Repack.Close() }

// FlushOptions are the options of Flush (POST /agent/git-flush).
type FlushOptions struct {
	Message    string // commit message for pending changes
	Tag        string // annotated tag to create at HEAD (validated by the caller)
	TagMessage string
	// Timeout bounds the whole flush (spec 10.2.2 uses 5000 ms).
	Timeout time.Duration
	// kind is FlushRequested, or FlushShutdown for the shutdown flush.
	kind FlushKind
}

// Flush commits pending changes (if any) and has the mode make them
// durable; with a tag it then creates the annotated tag and has the mode
// make it durable too (spec 10.4). It fails with ErrNotPersisted unless the
// mode's durable store holds the result.
func (g *GitWorkspaceSync) Flush(ctx context.Context, fo FlushOptions) (wire.GitFlushResponse, error) {
	if fo.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fo.Timeout)
		defer cancel()
	}
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed {
		return wire.GitFlushResponse{}, ErrClosed
	}
	return g.flushLocked(ctx, fo)
}

func (g *GitWorkspaceSync) flushLocked(ctx context.Context, fo FlushOptions) (wire.GitFlushResponse, error) {
	if g.Fenced() {
		return wire.GitFlushResponse{}, ErrFenced
	}
	msg := fo.Message
	if msg == "" {
		msg = "git-flush"
	}
	c, err := g.commitLocked(ctx, msg)
	if err != nil {
		return wire.GitFlushResponse{}, err
	}
	err = g.w.Flush(ctx, FlushEvent{Kind: fo.kind, Commit: c})
	g.pokeIfOwed()
	if errors.Is(err, ErrFenced) {
		return wire.GitFlushResponse{}, err
	} else if err != nil {
		return wire.GitFlushResponse{}, errors.Join(ErrNotPersisted, err)
	}
	head, err := g.o.Repo.Head(ctx)
	if err != nil {
		return wire.GitFlushResponse{}, err
	}
	resp := wire.GitFlushResponse{SHA: head}
	if fo.Tag == "" {
		return resp, nil
	}
	if head == "" {
		return resp, errors.New("gitsync: nothing to tag: the repository has no commit")
	}
	g.o.Repo.Lock()
	err = g.o.Repo.Tag(ctx, fo.Tag, fo.TagMessage)
	g.o.Repo.Unlock()
	if err != nil {
		return resp, err
	}
	err = g.w.Flush(ctx, FlushEvent{Kind: FlushTagged})
	g.pokeIfOwed()
	if err != nil {
		return resp, errors.Join(ErrNotPersisted, err)
	}
	resp.Tag = fo.Tag
	return resp, nil
}

// Drain stops new turns and waits for the one in flight (spec 10.2.1).
func (g *GitWorkspaceSync) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.engineMu.Lock()
		g.closed = true
		g.engineMu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FinalFlush is the shutdown git flush (spec 10.2.2): after Drain, commit
// pending changes and have the mode make them durable within timeout.
func (g *GitWorkspaceSync) FinalFlush(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	_, err := g.flushLocked(ctx, FlushOptions{Message: "shutdown flush", kind: FlushShutdown})
	return err
}

// SnapshotHEAD writes HEAD's content (without node_modules) as a tar.gz to
// a temp file and returns its path (spec 10.2.3).
func (g *GitWorkspaceSync) SnapshotHEAD(ctx context.Context) (string, error) {
	f, err := os.CreateTemp("", "project-src-*.tar.gz")
	if err != nil {
		return "", err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if head, err := g.o.Repo.Head(ctx); err == nil {
		zw.Header.Comment = wire.SourceHeadComment(head)
	}
	g.o.Repo.Lock()
	err = g.o.Repo.ArchiveHEAD(ctx, zw)
	g.o.Repo.Unlock()
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// PersistNow has the mode make the cold-start seed durable, outside a
// turn (coldstart.Persister).
func (g *GitWorkspaceSync) PersistNow(ctx context.Context) error {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	err := g.w.Flush(ctx, FlushEvent{Kind: FlushSeed})
	g.pokeIfOwed()
	return err
}

// Resume has the mode finish what a crash interrupted. Called once at
// start, after cold start.
func (g *GitWorkspaceSync) Resume(ctx context.Context) {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.Fenced() {
		return
	}
	g.w.Resume(ctx)
	g.pokeIfOwed()
}

// Run is the background retry loop: while the mode owes work (a persist,
// a push, an S3 write) it has the Writer retry with exponential backoff
// (checkpoint records are the hand-over queue's). It returns when ctx ends.
func (g *GitWorkspaceSync) Run(ctx context.Context) {
	backoff := g.newBackoff()
	for {
		var wait <-chan time.Time
		var t *time.Timer
		if g.needsWork() {
			d, _ := backoff.Next()
			t = time.NewTimer(d)
			wait = t.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-g.kick:
		case <-wait:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue // re-evaluate; the next pass waits a backoff step
		}
		if g.retryOnce(ctx) {
			backoff = g.newBackoff()
		}
	}
}

func (g *GitWorkspaceSync) newBackoff() retry.Backoff {
	return retry.WithJitterPercent(10, retry.WithCappedDuration(g.o.RetryMax, retry.NewExponential(g.o.RetryMin)))
}

// needsWork: a failed write is retried in the background right away, below
// the degrade threshold too (docs/sync-modes.md §1).
func (g *GitWorkspaceSync) needsWork() bool { return !g.Fenced() && g.w.Owed() }

// retryOnce makes one background attempt; it reports whether all work is done.
func (g *GitWorkspaceSync) retryOnce(ctx context.Context) bool {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed || g.Fenced() {
		return true
	}
	return g.w.Retry(ctx)
}

// pokeIfOwed wakes the retry loop when an event left owed work.
func (g *GitWorkspaceSync) pokeIfOwed() {
	if !g.w.Owed() {
		return
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
}
