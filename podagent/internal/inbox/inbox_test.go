package inbox_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/shared/wire"
)

// What a run journals is what the next run (a new Open of the same
// directory) resumes; a removed entry is gone; counters survive; a torn or
// foreign file is set aside instead of stopping the pod.
func TestJournalSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, bad, err := inbox.Open(dir)
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
	if err := os.WriteFile(filepath.Join(dir, "torn.json"), []byte(`{"correlationId":`), 0o600); err != nil {
		t.Fatal(err)
	}

	j2, bad, err := inbox.Open(dir)
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
