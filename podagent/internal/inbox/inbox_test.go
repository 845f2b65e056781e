package inbox_test

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/wire"
)

func openDB(t *testing.T, dir string) *journal.DB {
	t.Helper()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// What a run journals is what the next run (a new Open of the same
// journal file) resumes; a removed entry is gone; counters survive; an
// entry that does not decode is set aside instead of stopping the pod.
func TestJournalSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openDB(t, dir)
	j, bad, err := inbox.Open(db)
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, corr := range []string{"cor_b", "cor_a", "cor_c"} {
		if err := j.Accept(inbox.Entry{CorrelationID: corr, ChannelID: "ch",
			WebhookIncoming: wire.WebhookIncoming{Message: "m " + corr, CallbackURL: "https://x/cb"}, AcceptedAt: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Accept(inbox.Entry{CorrelationID: "cor_a"}); err == nil {
		t.Fatal("a second Accept of the same correlationId must fail")
	}
	if _, err := j.Update("cor_a", func(e *inbox.Entry) { e.Runs++; e.State, e.Reply = inbox.StateReplied, "r" }); err != nil {
		t.Fatal(err)
	}
	if err := j.Done("cor_c"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := j.CountMessage(); err != nil {
			t.Fatal(err)
		}
	}
	if err := journal.TableOf[string](db, journal.Inbox).Put("torn", "not an entry"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	j2, bad, err := inbox.Open(openDB(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 {
		t.Fatalf("bad %v", bad)
	}
	got := j2.Pending()
	if len(got) != 2 || got[0].CorrelationID != "cor_b" || got[1].CorrelationID != "cor_a" {
		t.Fatalf("pending %+v", got)
	}
	if a := got[1]; a.State != inbox.StateReplied || a.Reply != "r" || a.Runs != 1 || a.Message != "m cor_a" {
		t.Fatalf("cor_a %+v", a)
	}
	if b := got[0]; b.State != inbox.StateAccepted || b.Runs != 0 {
		t.Fatalf("cor_b %+v", b)
	}
	if n := j2.Counters().MessageCount; n != 3 {
		t.Fatalf("messageCount %d", n)
	}
}
