package outbox_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/wire"
)

// The reply's outbox entry and the end of its accepted message are one
// journal transaction: after it the journal (reopened, as after a crash)
// holds the reply in the outbox and no accepted message; when the
// transaction cannot be written, the accepted message stays.
func TestReplyPutAndMessageDoneAreOneTransaction(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		otherDB  bool // the op belongs to another journal file: the transaction fails
		wantErr  bool
		wantDone bool
	}{
		{name: "one transaction", wantDone: true},
		{name: "refused as a whole", otherDB: true, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, http.StatusServiceUnavailable) // the outbox keeps its copy
			dir := t.TempDir()
			db := openDB(t, dir)
			r := open(t, db, api)
			t.Cleanup(func() { _ = r.Close(context.Background()) }) // before the journal closes
			msgs, _, err := inbox.Open(db)
			must(t, err)
			must(t, msgs.Accept(inbox.Entry{CorrelationID: "cor_1", ChannelID: "ch_1",
				WebhookIncoming: wire.WebhookIncoming{Message: "m", CallbackURL: "https://x/cb"}}))
			err = msgs.DoneWith("cor_1", func(done journal.Op) error {
				if tc.otherDB {
					return openDB(t, t.TempDir()).Apply(done)
				}
				return r.PutWith("ch_1", out("cor_1"), done)
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("DoneWith: %v, want an error %v", err, tc.wantErr)
			}
			_, stillAccepted := msgs.Get("cor_1")
			if stillAccepted == tc.wantDone {
				t.Fatalf("accepted message in memory: %v, want done %v", stillAccepted, tc.wantDone)
			}
			_, onDisk, err := journal.TableOf[inbox.Entry](db, journal.Inbox).Get("cor_1")
			must(t, err)
			outboxed := journalOf(t, db)
			if onDisk == tc.wantDone || (len(outboxed) == 1) != tc.wantDone {
				t.Fatalf("journal: accepted message %v, outbox %v: want done %v", onDisk, outboxed, tc.wantDone)
			}
		})
	}
}
