// Package inbox is the pod's durable journal of accepted async webhook
// messages (spec 2.5, 3.3: the 202 is a promise; docs/design.md §7 "accepted async
// messages"). A message is written to disk before the 202 is answered and
// stays until its reply was delivered by callback or handed to the outbox.
// On restart the pod resumes every entry by its correlationId:
//
//	accepted → the turn never ran (or was cut off before its reply was
//	           known): it runs, once
//	replied  → the turn ran (its reply is journaled before the commit, so a
//	           turn that committed is never run again): only the callback
//	           is retried, with the same webhook-id
//
// Besides the entries the journal keeps the channel's counters (health's
// messageCount) so that they survive restarts. The entries and counters
// live in the pod's one journal (package journal: the inbox bucket, keyed
// by correlationId, and the messageCount counter); every change is one
// fsynced transaction.
package inbox

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/wire"
)

// States of an entry.
const (
	StateAccepted = "accepted" // journaled; the turn has not produced its reply yet
	StateReplied  = "replied"  // the reply is known; only the callback is left
)

// Entry is one accepted async message.
type Entry struct {
	CorrelationID string `json:"correlationId"`
	ChannelID     string `json:"channelId"`
	// WebhookIncoming is the message as it was accepted (an async one
	// always has its callbackUrl).
	wire.WebhookIncoming
	AcceptedAt time.Time `json:"acceptedAt"`
	State      string    `json:"state"`
	// Runs counts the turns started for the message (a run cut off by a
	// crash before its reply was journaled is run again).
	Runs int `json:"runs"`
	// Reply and Failed are set in StateReplied.
	Reply     string    `json:"reply,omitempty"`
	Failed    bool      `json:"failed,omitempty"`
	RepliedAt time.Time `json:"repliedAt,omitzero"`
}

// Counters survive restarts with the journal.
type Counters struct {
	MessageCount int64 `json:"messageCount"`
}

// Journal is safe for concurrent use.
type Journal struct {
	db    *journal.DB
	table journal.Table[Entry]

	mu       sync.Mutex
	entries  map[string]*Entry
	counters Counters
}

// Open loads the accepted messages and counters of the pod's journal. An
// entry that does not decode, or is not keyed by its own correlationId, is
// moved to the journal's set-aside bucket and its key listed in bad.
func Open(db *journal.DB) (j *Journal, bad []string, err error) {
	j = &Journal{db: db, table: journal.TableOf[Entry](db, journal.Inbox), entries: map[string]*Entry{}}
	items, bad, err := j.table.Load(func(key string, e Entry) bool { return e.CorrelationID != "" && e.CorrelationID == key })
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: %w", err)
	}
	for _, it := range items {
		e := it.Value
		j.entries[e.CorrelationID] = &e
	}
	if j.counters.MessageCount, err = db.Counter(journal.MessageCount); err != nil {
		return nil, nil, fmt.Errorf("inbox: %w", err)
	}
	return j, bad, nil
}

func (j *Journal) write(e *Entry) error { return j.table.Put(e.CorrelationID, *e) }

// Accept journals a new message in StateAccepted; it is on disk when Accept
// returns nil.
func (j *Journal) Accept(e Entry) error {
	if e.CorrelationID == "" {
		return errors.New("inbox: entry without correlationId")
	}
	e.State = StateAccepted
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.entries[e.CorrelationID]; ok {
		return fmt.Errorf("inbox: %s already journaled", e.CorrelationID)
	}
	if err := j.write(&e); err != nil {
		return err
	}
	j.entries[e.CorrelationID] = &e
	return nil
}

// Update changes an entry and writes it before returning.
func (j *Journal) Update(corr string, fn func(*Entry)) (Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[corr]
	if !ok {
		return Entry{}, fmt.Errorf("inbox: no entry %s", corr)
	}
	next := *e
	fn(&next)
	if err := j.write(&next); err != nil {
		return *e, err
	}
	*e = next
	return next, nil
}

// Done removes an entry (its reply was delivered or handed to the outbox).
func (j *Journal) Done(corr string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.table.Delete(corr); err != nil {
		return err
	}
	delete(j.entries, corr)
	return nil
}

// DoneWith removes the entry corr in the same journal transaction as the
// hand-over of its reply: handOver is given the removal as a journal.Op to
// apply together with its own write (outbox.Relay.PutWith). When handOver
// fails the entry stays (its reply is delivered again after a restart).
func (j *Journal) DoneWith(corr string, handOver func(done journal.Op) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := handOver(j.table.DeleteOp(corr)); err != nil {
		return err
	}
	delete(j.entries, corr)
	return nil
}

// Get returns an entry.
func (j *Journal) Get(corr string) (Entry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[corr]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Pending lists the entries, oldest first.
func (j *Journal) Pending() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Entry, 0, len(j.entries))
	for _, e := range j.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].AcceptedAt.Equal(out[b].AcceptedAt) {
			return out[a].AcceptedAt.Before(out[b].AcceptedAt)
		}
		return out[a].CorrelationID < out[b].CorrelationID
	})
	return out
}

// Len is the number of entries.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// CountMessage adds one to messageCount and persists it (best effort: a
// failed write loses only the count). It returns the new value.
func (j *Journal) CountMessage() (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n, err := j.db.Add(journal.MessageCount, 1)
	if err != nil {
		j.counters.MessageCount++
		return j.counters.MessageCount, err
	}
	j.counters.MessageCount = n
	return n, nil
}

// Counters returns the persisted counters.
func (j *Journal) Counters() Counters {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.counters
}
