package activity_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/activity"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/wire"
)

func TestKeepsExactlyTheLast50(t *testing.T) {
	t.Parallel()
	l := activity.New(nil)
	if got := l.List(); len(got) != 0 {
		t.Fatalf("empty log lists %d", len(got))
	}
	var ids []string
	for i := range 123 {
		ids = append(ids, l.Add(wire.ActivityEvent{Direction: wire.DirectionInbound, Preview: fmt.Sprintf("m%d", i), Status: wire.ActivityProcessing}))
		if n := len(l.List()); n != min(i+1, activity.Size) {
			t.Fatalf("after %d adds: %d events", i+1, n)
		}
	}
	got := l.List()
	if len(got) != 50 {
		t.Fatalf("%d events", len(got))
	}
	for i, e := range got { // newest first
		if want := fmt.Sprintf("m%d", 122-i); e.Preview != want {
			t.Fatalf("event %d = %q, want %q", i, e.Preview, want)
		}
	}
	if l.Update(ids[72], func(e *wire.ActivityEvent) { e.Status = "x" }) {
		t.Fatal("an event outside the window was updated")
	}
	if !l.Update(ids[73], func(e *wire.ActivityEvent) { e.Status = "x" }) || l.List()[49].Status != "x" {
		t.Fatal("the oldest event in the window was not updated")
	}
}

func TestFinishSetsDurationAndTimestamps(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := activity.New(clock)
	id := l.Add(wire.ActivityEvent{Direction: wire.DirectionInbound, SenderID: "s", Preview: strings.Repeat("é", 500)})
	mu.Lock()
	now = now.Add(1500 * time.Millisecond)
	mu.Unlock()
	l.Finish(id, wire.ActivityReplied, "")
	e := l.List()[0]
	if e.DurationMS != 1500 || e.Status != wire.ActivityReplied || !e.LastTriggeredAt.Equal(now) || e.CreatedAt.Equal(now) {
		t.Fatalf("event = %+v", e)
	}
	if n := len([]rune(e.Preview)); n != activity.PreviewRunes {
		t.Fatalf("preview of %d runes", n)
	}
}

// The window survives a restart when persisted (the activity log
// lived in memory only), newest first, updates included.
func TestPersistSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := activity.New(nil)
	if err := l.Persist(db); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range activity.Size + 3 {
		ids = append(ids, l.Add(wire.ActivityEvent{Preview: fmt.Sprint(i), Status: wire.ActivityProcessing}))
	}
	l.Finish(ids[len(ids)-1], wire.ActivityReplied, "")
	want := l.List()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	l2 := activity.New(nil)
	if err := l2.Persist(db2); err != nil {
		t.Fatal(err)
	}
	got := l2.List()
	if len(got) != activity.Size || got[0].ID != want[0].ID || got[0].Status != wire.ActivityReplied ||
		got[len(got)-1].ID != want[len(want)-1].ID {
		t.Fatalf("restored %d events, first %+v", len(got), got[0])
	}
	l2.Add(wire.ActivityEvent{Preview: "after restart"})
	if got := l2.List(); got[0].Preview != "after restart" || got[1].ID != want[0].ID {
		t.Fatalf("after restart %+v", got[:2])
	}
}
