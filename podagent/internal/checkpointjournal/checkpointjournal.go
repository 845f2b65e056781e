// Package checkpointjournal records commits as ProjectCheckpoint rows through the
// API's internal record endpoint (spec 4.3, docs/design.md §6):
// POST <SVC_API_URL>/internal/projects/{id}/checkpoints/record with the
// pod's runtime token.
//
// A commit is remembered in an on-disk journal right after it is made, is
// marked persisted once a repo.git.tar.gz containing it was written, and is
// posted only then (a row never points at history the durable object lacks).
// A failed POST is not a durability failure (spec 3.2): the entry stays in
// the journal and is retried later, also after a restart.
package checkpointjournal

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Poster is what the Recorder needs from the API (*internalapi.Client; tests
// substitute it).
type Poster interface {
	RecordCheckpoint(ctx context.Context, rec wire.CheckpointRecord) (wire.CheckpointRecordResponse, error)
}

// Entry is one remembered commit.
type Entry struct {
	Record    wire.CheckpointRecord `json:"record"`
	Persisted bool                  `json:"persisted"`
	Attempts  int                   `json:"attempts"`
}

// Recorder is the journal plus the poster. Safe for concurrent use.
type Recorder struct {
	path   string
	poster Poster
	log    *zap.Logger
	// OnPendingChange, if set, receives the number of pending entries after
	// every change (the checkpoint-records-pending gauge).
	OnPendingChange func(int)

	mu      sync.Mutex
	entries []Entry
	flushMu sync.Mutex
}

// Open loads (or starts) the journal at path.
func Open(path string, poster Poster, log *zap.Logger) (*Recorder, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Recorder{path: path, poster: poster, log: log.Named("checkpoints")}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &r.entries); err != nil {
			r.log.Error("unreadable checkpoint journal; starting empty (the API reconciles rows on hydrate)", zap.Error(err))
			r.entries = nil
		}
	}
	return r, nil
}

// Remember adds a commit made locally (not yet persisted) and saves the
// journal before returning.
func (r *Recorder) Remember(rec wire.CheckpointRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.Record.CommitSHA == rec.CommitSHA {
			return nil
		}
	}
	r.entries = append(r.entries, Entry{Record: rec})
	return r.saveLocked()
}

// MarkPersisted marks every entry whose commit is in persisted (the set of
// shas remembered when the snapshot was taken) as safe to record.
func (r *Recorder) MarkPersisted(shas []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := map[string]bool{}
	for _, s := range shas {
		set[s] = true
	}
	for i := range r.entries {
		if set[r.entries[i].Record.CommitSHA] {
			r.entries[i].Persisted = true
		}
	}
	return r.saveLocked()
}

// PendingSHAs returns the shas of all remembered entries, in commit order.
func (r *Recorder) PendingSHAs() []string {
	pending := r.Pending()
	out := make([]string, 0, len(pending))
	for _, e := range pending {
		out = append(out, e.Record.CommitSHA)
	}
	return out
}

// Pending returns a copy of the journal.
func (r *Recorder) Pending() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Entry(nil), r.entries...)
}

// Len is the number of commits not yet recorded.
func (r *Recorder) Len() int { return len(r.Pending()) }

// Flush posts persisted entries in commit order and drops each one the API
// accepted. It stops at the first failure and returns it; the rest stay for
// the next Flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	for {
		e, ok := r.nextPersisted()
		if !ok {
			return nil
		}
		resp, err := r.poster.RecordCheckpoint(ctx, e.Record)
		if err != nil {
			r.bumpAttempts(e.Record.CommitSHA)
			var se *internalapi.StatusError
			if errors.As(err, &se) && se.Status == http.StatusBadRequest {
				// The API will never take this payload; keep the journal
				// moving and say so (the API reconciles on hydrate).
				r.log.Error("checkpoint record rejected as invalid; dropping it", zap.String("sha", e.Record.CommitSHA), zap.Error(err))
				r.drop(e.Record.CommitSHA)
				continue
			}
			r.log.Warn("checkpoint record failed; will retry (not a durability failure)", zap.String("sha", e.Record.CommitSHA), zap.Error(err))
			return err
		}
		r.log.Info("checkpoint recorded", zap.String("sha", e.Record.CommitSHA), zap.String("id", resp.ID), zap.Bool("created", resp.Created))
		r.drop(e.Record.CommitSHA)
	}
}

func (r *Recorder) nextPersisted() (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.Persisted {
			return e, true
		}
	}
	return Entry{}, false
}

func (r *Recorder) bumpAttempts(sha string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.entries {
		if r.entries[i].Record.CommitSHA == sha {
			r.entries[i].Attempts++
		}
	}
	_ = r.saveLocked()
}

func (r *Recorder) drop(sha string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.entries[:0]
	for _, e := range r.entries {
		if e.Record.CommitSHA != sha {
			out = append(out, e)
		}
	}
	r.entries = out
	if err := r.saveLocked(); err != nil {
		r.log.Warn("saving checkpoint journal", zap.Error(err))
	}
}

func (r *Recorder) saveLocked() error {
	if r.OnPendingChange != nil {
		r.OnPendingChange(len(r.entries))
	}
	b, err := json.Marshal(r.entries)
	if err != nil {
		return err
	}
	return atomicfile.Write(r.path, b, 0o600)
}
