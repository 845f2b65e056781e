// Package ownership is the one fencing rule of a pod's durable writes in
// every sync mode (spec 10.1.1: a project is pinned to one pod at a time;
// docs/sync-modes.md §11).
//
// The project's ownership record <projectId>/owner.json holds an epoch. A
// pod claims it at start, before it restores anything, with a conditional
// PUT raising the epoch by one: the newest pod of a project owns it. Every
// durable write of a pod then:
//
//  1. checks the record still holds its claim (Check) — a pod that lost it
//     is fenced and writes nothing more;
//  2. writes conditionally (Put): If-Match the ETag this pod last wrote or
//     read of that key, If-None-Match "*" when it knows none. A lost
//     condition asks the record: a pod that still owns the project replaces
//     the version in its way (it was written by a pod that had already lost
//     the record, see below); a pod that does not is fenced;
//  3. checks the record again before the write is acknowledged.
//
// Why a version in the owner's way is never an acknowledged write: the
// owner claimed before it restored, so any version it did not see at restore
// landed after its claim, and the pod that wrote it checks the record after
// its write (3), sees the newer claim and does not acknowledge. Why a stale
// pod cannot replace the owner's acknowledged write: its conditional PUT
// names a version the owner has since replaced, so the store refuses it.
//
// A fenced Lease logs one FENCED line, and every later Check or Put returns
// ErrFenced without touching the store.
package ownership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/objstore"
)

// ErrFenced is returned by every write once another pod owns the project.
var ErrFenced = errors.New("fenced: another pod owns this project; this pod stopped writing")

// Options configure a Lease.
type Options struct {
	Store     objstore.Store
	ProjectID string
	// Pod names this pod in the record (default: host name and pid).
	Pod string
	// Generation is the runtime driver's generation of this pod (0: none).
	// A pod never claims over a record of a newer generation.
	Generation int64
	Log        *zap.Logger
	// OnFenced runs once, when the lease is fenced.
	OnFenced func()
}

// Lease is a pod's claim on its project. Safe for concurrent use.
type Lease struct {
	o   Options
	key string
	log *zap.Logger

	mu      sync.Mutex
	claimed bool
	etag    string // the record's ETag after this pod's claim
	epoch   int64
	fenced  bool
}

// New returns an unclaimed Lease; Claim it before restoring anything.
func New(o Options) *Lease {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Pod == "" {
		host, _ := os.Hostname()
		o.Pod = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return &Lease{o: o, key: objstore.OwnerKey(o.ProjectID), log: o.Log.Named("ownership")}
}

// Epoch returns the epoch of this pod's claim (0 before it claimed).
func (l *Lease) Epoch() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// Fenced reports whether another pod owns the project.
func (l *Lease) Fenced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenced
}

// Fence marks the lease fenced (idempotent: one FENCED log line) and
// returns ErrFenced.
func (l *Lease) Fence(reason string) error {
	l.mu.Lock()
	already := l.fenced
	l.fenced = true
	epoch := l.epoch
	l.mu.Unlock()
	if !already {
		l.log.Error("FENCED: another pod owns this project; this pod stops writing (409 fenced, /readyz 503)",
			zap.Int64("epoch", epoch), zap.String("reason", reason))
		if l.o.OnFenced != nil {
			l.o.OnFenced()
		}
	}
	return ErrFenced
}

// Claim takes the project: it raises the record's epoch with a conditional
// PUT (retrying when another pod claimed at the same moment). A store
// error is returned and leaves the lease unclaimed: the first Check claims.
// A record of a newer generation fences the lease.
func (l *Lease) Claim(ctx context.Context) error {
	if l.Fenced() {
		return ErrFenced
	}
	for attempt := 0; ; attempt++ {
		prev, etag, err := objstore.ReadOwnerRecord(ctx, l.o.Store, l.o.ProjectID)
		opts := objstore.PutOptions{ContentType: "application/json"}
		switch {
		case errors.Is(err, objstore.ErrNotExist):
			opts.IfNoneMatch = "*"
		case err != nil:
			return fmt.Errorf("ownership: read %s: %w", l.key, err)
		default:
			opts.IfMatch = etag
		}
		if l.o.Generation > 0 && prev.Generation > l.o.Generation {
			return l.Fence(fmt.Sprintf("the record names generation %d, newer than this pod's %d", prev.Generation, l.o.Generation))
		}
		rec := objstore.OwnerRecord{Epoch: prev.Epoch + 1, Pod: l.o.Pod, Generation: l.o.Generation, Claimed: time.Now().UTC()}
		b, _ := json.Marshal(rec)
		info, err := l.o.Store.Put(ctx, l.key, bytes.NewReader(b), int64(len(b)), opts)
		if errors.Is(err, objstore.ErrPreconditionFailed) && attempt < 10 {
			continue // another pod claimed meanwhile: claim over it
		}
		if err != nil {
			return fmt.Errorf("ownership: claim %s: %w", l.key, err)
		}
		l.mu.Lock()
		l.claimed, l.etag, l.epoch = true, info.ETag, rec.Epoch
		l.mu.Unlock()
		l.log.Info("claimed the project", zap.Int64("epoch", rec.Epoch), zap.Int64("previousEpoch", prev.Epoch),
			zap.String("previousPod", prev.Pod), zap.Int64("generation", l.o.Generation))
		return nil
	}
}

// Check returns nil while this pod owns the project, ErrFenced (fencing the
// lease) once another pod does, and another error when the record cannot
// be read (a transient failure: nothing is decided). An unclaimed lease
// (storage was down at start) claims first.
func (l *Lease) Check(ctx context.Context) error {
	l.mu.Lock()
	fenced, claimed, mine, epoch := l.fenced, l.claimed, l.etag, l.epoch
	l.mu.Unlock()
	if fenced {
		return ErrFenced
	}
	if !claimed {
		return l.Claim(ctx)
	}
	info, err := l.o.Store.Head(ctx, l.key)
	if errors.Is(err, objstore.ErrNotExist) {
		return l.Fence("the ownership record was deleted")
	}
	if err != nil {
		return fmt.Errorf("ownership: head %s: %w", l.key, err)
	}
	if info.ETag != mine {
		rec, _, rerr := objstore.ReadOwnerRecord(ctx, l.o.Store, l.o.ProjectID)
		if rerr == nil && rec.Epoch == epoch && rec.Pod == l.o.Pod {
			return nil // the same claim (a backend whose ETag of a GET differs)
		}
		return l.Fence(fmt.Sprintf("the record now names epoch %d (pod %s); this pod claimed epoch %d", rec.Epoch, rec.Pod, epoch))
	}
	return nil
}

// Body opens the bytes of a Put; it is called again when a Put is retried.
type Body func() (io.ReadCloser, int64, error)

// FileBody is a Body reading the file at path.
func FileBody(path string) Body {
	return func() (io.ReadCloser, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
}

// Put writes key to st (the store the record lives in, outside tests) after Check, conditional on prev — the ETag this pod last
// wrote or read of key, "" when it knows none — and checks again after the
// write. A lost condition while this pod still owns the project means the
// version in the way was written by a pod that had lost (never
// acknowledged): it is replaced, conditional on its own ETag. The returned
// info carries the new ETag to pass as prev next time.
func (l *Lease) Put(ctx context.Context, st objstore.Store, key, prev string, body Body, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := l.Check(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	testhook.Reach(testhook.BeforeWrite)
	for attempt := 0; ; attempt++ {
		opts.IfMatch, opts.IfNoneMatch = prev, ""
		if prev == "" {
			opts.IfNoneMatch = "*"
		}
		info, err := put(ctx, st, key, body, opts)
		if err == nil {
			return info, l.Check(ctx)
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return info, err
		}
		if err := l.Check(ctx); err != nil {
			return info, err
		}
		if attempt >= 3 {
			return info, fmt.Errorf("ownership: %s keeps changing under this pod's conditional writes: %w", key, err)
		}
		cur, herr := st.Head(ctx, key)
		switch {
		case errors.Is(herr, objstore.ErrNotExist):
			prev = ""
		case herr != nil:
			return info, herr
		default:
			prev = cur.ETag
		}
		l.log.Warn("replacing a version written by a pod that no longer owns the project", zap.String("key", key),
			zap.String("etag", prev))
	}
}

func put(ctx context.Context, st objstore.Store, key string, body Body, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	r, size, err := body()
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer r.Close()
	return st.Put(ctx, key, r, size, opts)
}

// Delete deletes key after Check (deletes are not conditional in S3; the
// check narrows the window to the request itself).
func (l *Lease) Delete(ctx context.Context, st objstore.Store, key string) error {
	if err := l.Check(ctx); err != nil {
		return err
	}
	return st.Delete(ctx, key)
}
