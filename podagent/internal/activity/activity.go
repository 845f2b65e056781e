// Package activity keeps the webhook channel's activity window (spec 2.5,
// 8): the last 50 inbound and outbound events, in a fixed ring buffer.
// Events are added when they start and updated in place when they change;
// an event that has already left the window is not resurrected.
package activity

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/wire"
)

// Size is the activity window (spec 8).
const Size = 50

// PreviewRunes bounds Preview.
const PreviewRunes = 140

// Log is the ring buffer. The zero value is not usable; call New.
type Log struct {
	mu   sync.Mutex
	buf  []wire.ActivityEvent
	next int // slot of the next Add
	n    int // filled slots
	now  func() time.Time
	// table is Persist's journal; nil keeps the window in memory only.
	table *journal.Table[[]wire.ActivityEvent]
}

// New returns an empty log of Size events. now may be nil.
func New(now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	return &Log{buf: make([]wire.ActivityEvent, Size), now: now}
}

// Add records a new event (ID, CreatedAt and LastTriggeredAt are filled when
// empty) and returns its id.
func (l *Log) Add(e wire.ActivityEvent) string {
	if e.ID == "" {
		e.ID = newID()
	}
	t := l.now().UTC()
	if e.CreatedAt.IsZero() {
		e.CreatedAt = t
	}
	e.LastTriggeredAt = t
	e.Preview = Preview(e.Preview)
	l.mu.Lock()
	l.put(e)
	l.save()
	l.mu.Unlock()
	return e.ID
}

func (l *Log) put(e wire.ActivityEvent) {
	l.buf[l.next] = e
	l.next = (l.next + 1) % len(l.buf)
	if l.n < len(l.buf) {
		l.n++
	}
}

// Persist keeps the window in the pod's journal (its activity bucket), so
// that it survives restarts: the events stored there are loaded now (oldest
// first, behind nothing: call it before the first Add) and the window is
// written again after every change. An empty or unreadable window starts
// empty (it is rewritten by the next change).
func (l *Log) Persist(db *journal.DB) error {
	t := journal.TableOf[[]wire.ActivityEvent](db, journal.Activity)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.table = &t
	events, _, err := t.Get(journal.ActivityWindow) // newest first, as List
	if err != nil {
		return nil // history only: rewritten by the next change
	}
	for i := min(len(events), len(l.buf)) - 1; i >= 0; i-- {
		l.put(events[i])
	}
	return nil
}

// save writes the window to Persist's journal (under l.mu; best effort: a
// failed write loses only history).
func (l *Log) save() {
	if l.table != nil {
		_ = l.table.Put(journal.ActivityWindow, l.list())
	}
}

// Update changes the event id if it is still in the window: fn edits a copy,
// LastTriggeredAt is set, and DurationMS is derived from FinishedAt when fn
// set it. It reports whether the event was found.
func (l *Log) Update(id string, fn func(e *wire.ActivityEvent)) bool {
	t := l.now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < l.n; i++ {
		e := &l.buf[i]
		if e.ID != id {
			continue
		}
		fn(e)
		e.Preview = Preview(e.Preview)
		e.LastTriggeredAt = t
		if !e.FinishedAt.IsZero() {
			e.DurationMS = e.FinishedAt.Sub(e.CreatedAt).Milliseconds()
		}
		l.save()
		return true
	}
	return false
}

// Finish marks id finished now with status (and error text, if any).
func (l *Log) Finish(id, status, errText string) bool {
	t := l.now().UTC()
	return l.Update(id, func(e *wire.ActivityEvent) {
		e.Status, e.Error, e.FinishedAt = status, errText, t
	})
}

// List returns the events in the window, newest first.
func (l *Log) List() []wire.ActivityEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.list()
}

func (l *Log) list() []wire.ActivityEvent {
	out := make([]wire.ActivityEvent, 0, l.n)
	for i := 1; i <= l.n; i++ {
		out = append(out, l.buf[(l.next-i+len(l.buf))%len(l.buf)])
	}
	return out
}

// Preview shortens s to PreviewRunes runes (with an ellipsis).
func Preview(s string) string {
	if utf8.RuneCountInString(s) <= PreviewRunes {
		return s
	}
	r := []rune(s)
	return string(r[:PreviewRunes-1]) + "…"
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "act_" + hex.EncodeToString(b[:])
}
