// Package checkpoints records commits as ProjectCheckpoint rows through the
// API's internal record endpoint (spec 4.3, docs/design.md §6):
// POST <SVC_API_URL>/internal/projects/{id}/checkpoints/record with the
// pod's runtime token.
//
// A commit is queued in the pod's one hand-over queue (package handover,
// kind checkpoint, in commit order, in the journal) right after it is made,
// held until a repo.git.tar.gz containing it was written (MarkPersisted),
// and posted only then (a row never points at history the durable object
// lacks), by the queue's one drain loop. A failed POST is not a durability
// failure (spec 3.2): the entry stays in the journal and is retried with the
// queue's backoff, also after a restart.
package checkpoints

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/handover"
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

// Recorder is the checkpoint kind of the hand-over queue. Safe for
// concurrent use.
type Recorder struct {
	q      *handover.Queue
	poster Poster
	log    *zap.Logger
	// OnPendingChange, if set before the first change, receives the number
	// of pending entries after every change (the
	// checkpoint-records-pending gauge).
	OnPendingChange func(int)
	// Paused, if set, stops the records while it says so (a fenced pod
	// records nothing).
	Paused func() bool
}

// Open registers the checkpoint kind of q (the commits an earlier run left
// in the journal are in it already).
func Open(q *handover.Queue, poster Poster, log *zap.Logger) (*Recorder, error) {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Recorder{q: q, poster: poster, log: log.Named("checkpoints")}
	q.OnChange(handover.Checkpoint, func(n int) {
		if fn := r.OnPendingChange; fn != nil {
			fn(n)
		}
	})
	q.Handle(handover.Checkpoint, handover.Handler{What: "checkpoint record", Send: r.send,
		Paused: func() bool { return r.Paused != nil && r.Paused() }})
	return r, nil
}

// Remember adds a commit made locally (not yet persisted) and saves the
// journal before returning.
func (r *Recorder) Remember(rec wire.CheckpointRecord) error {
	return r.q.Put(handover.Checkpoint, rec.CommitSHA, rec, true)
}

// MarkPersisted marks every entry whose commit is in persisted (the set of
// shas remembered when the snapshot was taken) as safe to record.
func (r *Recorder) MarkPersisted(shas []string) error {
	return r.q.Release(handover.Checkpoint, shas)
}

// Wake asks the queue's drain loop to post the released entries now.
func (r *Recorder) Wake() { r.q.Wake() }

// PendingSHAs returns the shas of all remembered entries, in commit order.
func (r *Recorder) PendingSHAs() []string {
	pending := r.Pending()
	out := make([]string, 0, len(pending))
	for _, e := range pending {
		out = append(out, e.Record.CommitSHA)
	}
	return out
}

// Pending returns the remembered commits not recorded yet, in commit order.
func (r *Recorder) Pending() []Entry { return entries(r.q.Entries(handover.Checkpoint)) }

func entries(es []handover.Entry) []Entry {
	out := make([]Entry, 0, len(es))
	for _, e := range es {
		var rec wire.CheckpointRecord
		if json.Unmarshal(e.Payload, &rec) != nil {
			rec.CommitSHA = e.ID
		}
		out = append(out, Entry{Record: rec, Persisted: !e.Held, Attempts: e.Attempts})
	}
	return out
}

// Len is the number of commits not yet recorded.
func (r *Recorder) Len() int { return r.q.Len(handover.Checkpoint) }

// Flush posts the persisted entries now, in commit order (the queue's
// drain of the kind), and returns a failure that may pass; the entries then
// stay for the queue's loop.
func (r *Recorder) Flush(ctx context.Context) error {
	return r.q.Drain(ctx, handover.Checkpoint)
}

// send posts one record (the queue's handler).
func (r *Recorder) send(ctx context.Context, batch []handover.Entry) error {
	for _, e := range batch {
		var rec wire.CheckpointRecord
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			// Never sendable; the API reconciles rows on hydrate.
			r.log.Error("unreadable checkpoint record in the journal; dropped", zap.String("sha", e.ID), zap.Error(err))
			continue
		}
		resp, err := r.poster.RecordCheckpoint(ctx, rec)
		if err != nil {
			if !internalapi.Permanent(err) {
				r.log.Warn("checkpoint record failed; will retry (not a durability failure)", zap.String("sha", rec.CommitSHA), zap.Error(err))
			}
			return err
		}
		r.log.Info("checkpoint recorded", zap.String("sha", rec.CommitSHA), zap.String("id", resp.ID), zap.Bool("created", resp.Created))
	}
	return nil
}

// Journaled reads the commits not recorded yet from the journal file
// itself, in commit order.
func Journaled(db *journal.DB) ([]Entry, error) {
	es, err := handover.Journaled(db, handover.Checkpoint)
	return entries(es), err
}
