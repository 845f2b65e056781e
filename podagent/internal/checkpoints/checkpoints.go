// Package checkpoints records commits as ProjectCheckpoint rows through the
// API's internal record endpoint (spec 4.3, docs/design.md §6):
// POST <SVC_API_URL>/internal/projects/{id}/checkpoints/record with the
// pod's runtime token.
//
// A commit is remembered in the pod's journal (package journal, the
// checkpoints bucket, in commit order) right after it is made, is
// marked persisted once a repo.git.tar.gz containing it was written, and is
// posted only then (a row never points at history the durable object lacks).
// A failed POST is not a durability failure (spec 3.2): the entry stays in
// the journal and is retried later, also after a restart.
package checkpoints

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/journal"
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
	table  journal.Table[Entry]
	poster Poster
	log    *zap.Logger
	// OnPendingChange, if set, receives the number of pending entries after
	// every change (the checkpoint-records-pending gauge).
	OnPendingChange func(int)

	mu      sync.Mutex
	entries []Entry
	keys    []string // journal key of entries[i]
	flushMu sync.Mutex
}

// Open loads the commits the pod's journal remembers. An entry that does
// not decode is set aside in the journal (logged; the API reconciles rows
// on hydrate).
func Open(db *journal.DB, poster Poster, log *zap.Logger) (*Recorder, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Recorder{table: journal.TableOf[Entry](db, journal.Checkpoints), poster: poster, log: log.Named("checkpoints")}
	items, bad, err := r.table.Load(func(_ string, e Entry) bool { return e.Record.CommitSHA != "" })
	if err != nil {
		return nil, fmt.Errorf("checkpoint journal: %w", err)
	}
	for _, k := range bad {
		r.log.Error("unreadable checkpoint journal entry; set aside in the journal (the API reconciles rows on hydrate)", zap.String("key", k))
	}
	for _, it := range items {
		r.entries = append(r.entries, it.Value)
		r.keys = append(r.keys, it.Key)
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
	e := Entry{Record: rec}
	key, err := r.table.Append(e)
	if err != nil {
		return err
	}
	r.entries = append(r.entries, e)
	r.keys = append(r.keys, key)
	r.changed()
	return nil
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
	var changed []journal.Item[Entry]
	for i := range r.entries {
		if set[r.entries[i].Record.CommitSHA] && !r.entries[i].Persisted {
			e := r.entries[i]
			e.Persisted = true
			changed = append(changed, journal.Item[Entry]{Key: r.keys[i], Value: e})
		}
	}
	if len(changed) == 0 {
		return nil
	}
	if err := r.table.PutAll(changed); err != nil {
		return err
	}
	for i := range r.entries {
		if set[r.entries[i].Record.CommitSHA] {
			r.entries[i].Persisted = true
		}
	}
	r.changed()
	return nil
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
			if internalapi.Permanent(err) {
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
			_ = r.table.Put(r.keys[i], r.entries[i]) // only a count
		}
	}
}

func (r *Recorder) drop(sha string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.entries {
		if r.entries[i].Record.CommitSHA != sha {
			continue
		}
		if err := r.table.Delete(r.keys[i]); err != nil {
			// Posted again after a restart: the API is idempotent on
			// (project, commitSha).
			r.log.Warn("saving checkpoint journal", zap.Error(err))
		}
		r.entries = append(r.entries[:i], r.entries[i+1:]...)
		r.keys = append(r.keys[:i], r.keys[i+1:]...)
		break
	}
	r.changed()
}

// changed reports the number of pending entries (under r.mu).
func (r *Recorder) changed() {
	if r.OnPendingChange != nil {
		r.OnPendingChange(len(r.entries))
	}
}
