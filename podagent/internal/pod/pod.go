// Package pod assembles a pod from its parts (spec 10.1): the git runner,
// GitWorkspaceSync, the durable store with fencing, the checkpoint
// recorder, the degrade machine, S3Sync, cold start, the HTTP server and the
// shutdown sequence. What differs per sync mode (spec 3.1;
// docs/sync-modes.md §12) is the mode's syncstrategy.Strategy, chosen once
// here; this package names no mode. cmd/podagent runs it; tests run it
// in-process.
package pod

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/assets"
	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/degrade"
	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/server"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/podagent/internal/syncstrategy"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/podagent/internal/webhook"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	_ "github.com/svc-dev/svc/shared/objstore/fs" // registers the fs backend
	_ "github.com/svc-dev/svc/shared/objstore/s3" // registers the s3 backend
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// Options configure Start.
type Options struct {
	Config *config.Config
	// Store holds the durable objects. LayerStore, when set, is used by
	// S3Sync instead (tests take only the .git path down).
	Store      objstore.Store
	LayerStore objstore.Store
	Log        *zap.Logger
	HTTPClient *http.Client
	// Callbacks observe degrade transitions (besides the suppression).
	OnDegrade, OnRecovered func()
	// PersistAttempts and PersistTimeout tune one durability step
	// (defaults in syncstrategy.Stores).
	PersistAttempts int
	PersistTimeout  time.Duration
	// Webhook tunes the webhook channel (zero value: the defaults; serve
	// passes Config.Webhook).
	Webhook webhook.Settings
	// RepackLooseObjects is gitsync.NewRepacker's loose-object threshold
	// (0: default; negative disables).
	RepackLooseObjects int
	// AfterTurn runs after every turn (the micro-VM guest flushes its disk,
	// so a host that finds the VM dead reads the last commit).
	AfterTurn func()
}

// Pod is a running pod.
type Pod struct {
	Config  *config.Config
	Repo    *gitsync.Repo
	Sync    *gitsync.GitWorkspaceSync
	Durable *durable.Persister
	// Lease is the pod's claim on its project: it fences every durable
	// write in every mode (docs/sync-modes.md §11).
	Lease *ownership.Lease
	// Journal is the pod's one journal of durable promises (checkpoint
	// records, accepted webhook messages, outbox messages, counters, the
	// activity window): <workspace>/.git/svc-agent/journal.db.
	Journal *journal.DB
	// Handover is the pod's one queue of what it hands to the API in the
	// background (outbox messages, attempt records, checkpoint records),
	// drained by one loop.
	Handover *handover.Queue
	Recorder *checkpoints.Recorder
	// Assets offloads large files in s3 and dual_shadow (and holds the
	// legacy offload that git_only migrates to git-lfs).
	Assets  *assets.Assets
	Machine *degrade.Machine
	// Strategy is the pod's sync mode, chosen once at start.
	Strategy syncstrategy.Strategy
	// Writer is the mode's writer (what the engine's retry loop asks Owed).
	Writer    syncstrategy.Writer
	S3        *s3sync.S3Sync
	Metrics   *gitsync.Metrics
	Echo      *echo.Echo
	ColdStart coldstart.Result
	// Webhook serves /agent/channels/webhook/*.
	Webhook *webhook.Handler
	// Turns is the pod's one turn lock: a channel turn, a rollback, a git
	// flush, a publish and the shutdown flush each hold it for their whole
	// run (docs/sync-modes.md §6).
	Turns *turn.Slot

	log       *zap.Logger
	afterTurn func()
	bgCancel  context.CancelFunc
	bgDone    chan struct{}
}

// OpenStore opens the configured object store (objstore.Open). It makes
// no network call: a pod with a local .git starts while storage is down,
// and every use of the store reports it.
func OpenStore(ctx context.Context, cfg *config.Config, log *zap.Logger) (objstore.Store, error) {
	sc := cfg.ObjectStore()
	sc.Logger = log
	return objstore.Open(ctx, sc)
}

// NewRunner returns the git runner of a pod: no global or system config,
// the workspace marked safe (spec 7.3, GIT_UNUSABLE).
func NewRunner(workspace string) *gitrun.Runner {
	return &gitrun.Runner{
		Timeout: 2 * time.Minute,
		Env: []string{
			"GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=" + workspace,
		},
	}
}

// Start runs cold start and returns a pod ready for turns, with its
// background retry loop running.
func Start(ctx context.Context, o Options) (*Pod, error) {
	cfg := o.Config
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("projectId", cfg.ProjectID))
	ws, err := filepath.Abs(cfg.WorkspaceDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	if o.LayerStore == nil {
		o.LayerStore = o.Store
	}
	runner := NewRunner(ws)
	strat, err := syncstrategy.For(cfg.Mode)
	if err != nil {
		return nil, err
	}
	p := &Pod{Config: cfg, Metrics: gitsync.NewMetrics(), log: log, afterTurn: o.AfterTurn, Strategy: strat}
	p.Turns = turn.NewSlot(turn.SlotOptions{
		OnWaiting: func(n int) { p.Metrics.TurnsWaiting.Set(float64(n)) },
		OnWait:    func(turn.Kind) { testhook.Reach(testhook.TurnWaiting) }})
	// The record lives beside the layers (the same store outside tests,
	// which take only the .git path down with a separate Store).
	p.Lease = ownership.New(ownership.Options{Store: o.LayerStore, ProjectID: cfg.ProjectID, Generation: cfg.Generation, Log: log,
		OnFenced: func() { p.Metrics.Fenced.Set(1) }})
	p.Repo = &gitsync.Repo{Dir: ws, Runner: runner, Author: gitsync.DefaultAuthor}
	p.Assets = assets.New(p.Lease, assets.Options{Store: o.LayerStore, ProjectID: cfg.ProjectID, Workspace: ws,
		Threshold: cfg.LargeFileBytes, StateFile: filepath.Join(ws, ".git", durable.StateDirName, "assets.json"), Log: log,
		Untrack: func(ctx context.Context, paths []string) error {
			return runner.Command("rm", "--cached", "-q", "--ignore-unmatch").Dir(ws).Env("GIT_LITERAL_PATHSPECS=1").AddDashesAndList(paths...).Run(ctx)
		}})
	sopt := s3sync.Options{Store: o.LayerStore, ProjectID: cfg.ProjectID, Workspace: ws,
		Log:       log,
		StateFile: filepath.Join(ws, ".git", durable.StateDirName, "source-etag"),
		Head:      func(ctx context.Context) string { h, _ := p.Repo.Head(ctx); return h }}
	strat.Source(&sopt, p.Assets)
	p.S3 = s3sync.New(p.Lease, sopt)
	p.Machine = degrade.New(strat.Mode(), cfg.DegradeAfterFailures, degrade.Callbacks{
		OnDegrade: func() {
			p.Metrics.Degraded.Set(1)
			if o.OnDegrade != nil {
				o.OnDegrade()
			}
		},
		OnRecovered: func() {
			p.Metrics.Degraded.Set(0)
			if o.OnRecovered != nil {
				o.OnRecovered()
			}
		},
		SetSuppressProjectArchive: strat.SuppressSource(p.S3),
	}, log.Named("degrade"))
	p.Durable = durable.New(durable.Options{Store: o.Store, ProjectID: cfg.ProjectID, Workspace: ws, Runner: runner, Log: log, Lease: p.Lease,
		Full: cfg.DurableFull, Compaction: durable.CompactionOptions{MaxIncrements: cfg.DurableMaxIncrements, RetireGrace: cfg.DurableRetireGrace},
		Manifest: func(ctx context.Context) (repoarchive.Manifest, error) {
			hash, err := p.Repo.LockfileHash(ctx)
			return repoarchive.Manifest{DepsHash: hash}, err
		}})
	client := &internalapi.Client{BaseURL: cfg.APIURL, ProjectID: cfg.ProjectID, Token: cfg.RuntimeToken, HTTP: o.HTTPClient}
	// The journal is opened before cold start (a catch-up commit is
	// remembered in it); a restore that replaces a headless .git carries the
	// open file over (durable.Restore). A start that fails on a workspace
	// that had no .git leaves none behind (a refused restore puts nothing in
	// place, the journal's folder included).
	dotGit := filepath.Join(ws, ".git")
	_, statErr := os.Lstat(dotGit)
	hadGit := !errors.Is(statErr, fs.ErrNotExist)
	if p.Journal, err = journal.OpenState(filepath.Join(dotGit, durable.StateDirName), journal.Options{Log: log}); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			_ = p.Journal.Close()
			if !hadGit {
				_ = os.RemoveAll(dotGit)
			}
		}
	}()
	if p.Handover, err = handover.OpenQueue(p.Journal, handover.QueueOptions{Log: log}); err != nil {
		return nil, err
	}
	p.Recorder, err = checkpoints.Open(p.Handover, client, log)
	if err != nil {
		return nil, err
	}
	p.Recorder.Paused = p.Lease.Fenced // a fenced pod records nothing
	p.Recorder.OnPendingChange = func(n int) { p.Metrics.RecordsPending.Set(float64(n)) }

	// Large files (spec 10.3), the origin and every durable write are the
	// mode's: its Writer holds the stores the mode writes.
	parts := syncstrategy.Parts{Config: cfg, Workspace: ws, Runner: runner, Assets: p.Assets, Lease: p.Lease, Log: log}
	large, repack := strat.LargeFiles(parts), gitsync.NewRepacker(p.Repo, o.RepackLooseObjects, 0, log)
	p.Writer = strat.Writer(syncstrategy.Stores{Repo: p.Repo, Lease: p.Lease, Persister: p.Durable, Recorder: p.Recorder,
		Repack: repack, Origin: strat.Origin(parts), S3: p.S3, Large: large,
		Machine: p.Machine, Metrics: p.Metrics, Log: log, PersistAttempts: o.PersistAttempts, PersistTimeout: o.PersistTimeout})
	writer := p.Writer
	sopts := gitsync.Options{Writer: writer, Repo: p.Repo, Lease: p.Lease, LFS: large.Turn, Repack: repack,
		Log: log, RetryMin: cfg.PersistRetryMin, RetryMax: cfg.PersistRetryMax}
	copts := coldstart.Options{Repo: p.Repo, Durable: p.Durable, S3: p.S3, Log: log, LFS: large.Cold, Assets: large.Assets}
	// The pod is the sole writer: a lock a killed git left blocks every
	// later write, so it goes before anything runs git.
	if removed, err := p.Repo.RemoveStaleLocks(); len(removed) > 0 || err != nil {
		log.Warn("removed stale git lock files at start", zap.Strings("files", removed), zap.Error(err))
	}
	p.Sync = gitsync.New(sopts)
	copts.Sync = p.Sync
	// The claim comes before anything is restored: a version of an object
	// this pod did not see at restore was then written by a pod that had
	// already lost the project (docs/sync-modes.md §11). Storage down: the
	// first write claims.
	if err := p.Lease.Claim(ctx); err != nil && !errors.Is(err, ownership.ErrFenced) {
		log.Warn("claiming the project failed; the first write claims it", zap.Error(err))
	}
	p.ColdStart, err = writer.Restore(ctx, copts)
	if errors.Is(err, coldstart.ErrDiverged) {
		_ = p.Lease.Fence(err.Error())
	} else if err != nil && !errors.Is(err, durable.ErrFenced) {
		return nil, fmt.Errorf("cold start: %w", err)
	}
	p.Sync.Resume(ctx)
	strat.AfterStart(ctx, p.started())

	ready := func() error {
		if p.Lease.Fenced() {
			return ownership.ErrFenced
		}
		return nil
	}
	// Webhook channel: the agent's tool loop ends each turn with p.Turn.
	wdeps, err := webhook.PodDeps(webhook.PodOptions{APIURL: cfg.APIURL, ProjectID: cfg.ProjectID,
		RuntimeToken: cfg.RuntimeToken, API: client, Workspace: ws, Committer: p, Slot: p.Turns, Settings: o.Webhook, Log: log, HTTP: o.HTTPClient,
		Ready: ready, Journal: p.Journal, Handover: p.Handover})
	if err != nil {
		return nil, err
	}
	p.Webhook = webhook.New(wdeps)
	p.Echo = server.New(server.Options{RuntimeToken: cfg.RuntimeToken, ProjectID: cfg.ProjectID, Generation: cfg.Generation, Registry: p.Metrics.Registry, Flusher: p, Restorer: p,
		Webhook: p.Webhook, Log: log, Ready: ready})
	p.Webhook.Resume() // accepted async messages an earlier run did not finish

	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.bgCancel, p.bgDone = cancel, make(chan struct{})
	go func() {
		defer close(p.bgDone)
		p.Sync.Run(bgCtx)
	}()
	p.Handover.Start()
	started = true
	return p, nil
}

// Turn commits an agent turn (see gitsync.GitWorkspaceSync.Turn); the
// channel's turn.Runner calls it holding the slot.
func (p *Pod) Turn(ctx context.Context, message string) (string, error) {
	sha, err := p.Sync.Turn(ctx, message)
	if p.afterTurn != nil {
		p.afterTurn()
	}
	return sha, err
}

// Restore is a rollback turn (POST /agent/restore): it waits for the turn
// in flight, bounded by the caller's deadline (turn.Slot.Hold), and never
// runs beside an agent's tools.
func (p *Pod) Restore(ctx context.Context, sha string) (resp wire.RestoreResponse, err error) {
	herr := p.Turns.Hold(ctx, turn.KindRollback, func(ctx context.Context) error {
		resp, err = p.Sync.Restore(ctx, sha)
		return nil
	})
	if herr != nil {
		return resp, closedAs(herr)
	}
	return resp, err
}

// Flush is a git-flush turn (POST /agent/git-flush; a publish when it
// tags; the micro-VM export), on the same slot as Restore.
func (p *Pod) Flush(ctx context.Context, fo gitsync.FlushOptions) (resp wire.GitFlushResponse, err error) {
	kind := turn.KindFlush
	if fo.Tag != "" {
		kind = turn.KindPublish
	}
	herr := p.Turns.Hold(ctx, kind, func(ctx context.Context) error {
		resp, err = p.Sync.Flush(ctx, fo)
		return nil
	})
	if herr != nil {
		return resp, closedAs(herr)
	}
	return resp, err
}

// closedAs answers a slot closed by the drain as the engine does.
func closedAs(err error) error {
	if errors.Is(err, turn.ErrClosed) {
		return gitsync.ErrClosed
	}
	return err
}

// Shutdown runs the spec 10.2 sequence and stops the background loop.
func (p *Pod) Shutdown(ctx context.Context) shutdown.Result {
	if p.Webhook != nil {
		// Running webhook turns end (and commit) before the drain; with a
		// deadline they get only what the flushes leave (shutdown.Run), and
		// a journaled async turn cut off resumes at the next start.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if dl, ok := ctx.Deadline(); ok {
			cancel()
			wctx, cancel = context.WithDeadline(ctx, shutdown.DrainDeadline(dl))
		}
		_ = p.Webhook.Shutdown(wctx)
		cancel()
	}
	res := shutdown.Run(ctx, p.ShutdownSteps())
	p.Close()
	return res
}

// ShutdownSteps wires the sequence to this pod; the strategy sets the
// mode's part (in s3 and dual_shadow, and degraded git_only, the sequence
// ends with the S3 flush, spec 10.2.4: the HEAD snapshot is git_only's
// alone, and forceProjectArchive is set in git_only only).
func (p *Pod) ShutdownSteps() shutdown.Steps {
	s := shutdown.Steps{
		// The drain closes the turn slot once the turn in flight ended; the
		// shutdown flush is the one turn that runs after it.
		Drain: func(ctx context.Context) error {
			if err := p.Turns.Drain(ctx); err != nil {
				return err
			}
			return p.Sync.Drain(ctx)
		},
		GitFlush: func(ctx context.Context, timeout time.Duration) error {
			return p.Turns.Hold(ctx, turn.KindShutdown, func(ctx context.Context) error {
				return p.Sync.FinalFlush(ctx, timeout)
			})
		},
		Healthy: func() bool { return !p.Machine.Degraded() },
		Fenced:  p.Sync.Fenced,
		UploadHEADSnapshot: func(ctx context.Context) error {
			path, err := p.Sync.SnapshotHEAD(ctx)
			if err != nil {
				return err
			}
			defer os.Remove(path)
			return p.S3.UploadProjectArchive(ctx, path)
		},
		S3Flush: p.S3.Flush,
		Log:     p.log,
	}
	p.Strategy.Shutdown(&s, p.started())
	flush := s.S3Flush
	s.S3Flush = func(ctx context.Context, force bool) error {
		testhook.Reach(testhook.BeforeS3Flush)
		return flush(ctx, force)
	}
	return s
}

// started is the running pod as its strategy sees it.
func (p *Pod) started() syncstrategy.Started {
	return syncstrategy.Started{Sync: p.Sync, Machine: p.Machine, Repo: p.Repo, Assets: p.Assets, S3: p.S3, Log: p.log}
}

// Close stops the background loop and background maintenance (a repack,
// a deps upload) (idempotent).
func (p *Pod) Close() {
	if p.bgCancel != nil {
		p.bgCancel()
		<-p.bgDone
	}
	if p.Sync != nil {
		p.Sync.Close()
	}
	if p.Durable != nil {
		p.Durable.Close() // a running compaction
	}
	if p.S3 != nil {
		p.S3.Close()
	}
	if p.Handover != nil {
		// The loop stops; what the API has not taken stays in the journal
		// (the webhook's and the flush's last attempts were made).
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = p.Handover.Close(ctx)
	}
	if p.Journal != nil {
		_ = p.Journal.Close()
	}
}
