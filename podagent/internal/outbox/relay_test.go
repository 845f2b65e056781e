package outbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// fakeAPI is the API's POST /internal/projects/{id}/outbox: it answers with
// the status of the current mode and reports every request it saw.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	status   int                 // answer to the next requests
	stored   map[string]bool     // correlation ids accepted
	seen     chan wire.OutboxPut // requests (dropped when full: never blocks a handler)
	accepted chan wire.OutboxPut // requests answered 201
}

func newFakeAPI(t *testing.T, status int) *fakeAPI {
	f := &fakeAPI{status: status, stored: map[string]bool{}, seen: make(chan wire.OutboxPut, 100),
		accepted: make(chan wire.OutboxPut, 100)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var put wire.OutboxPut
		if r.URL.Path != "/internal/projects/prj_1/outbox" || r.Header.Get("Authorization") != "Bearer rt" ||
			json.NewDecoder(r.Body).Decode(&put) != nil {
			http.Error(w, `{"error":{"code":"bad_test_request"}}`, http.StatusTeapot)
			return
		}
		f.mu.Lock()
		status := f.status
		created := status == http.StatusCreated && !f.stored[put.CorrelationID]
		if status == http.StatusCreated {
			f.stored[put.CorrelationID] = true
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		switch status {
		case http.StatusCreated:
			_ = json.NewEncoder(w).Encode(wire.OutboxPutResponse{ID: "obx_" + put.CorrelationID, Created: created})
		case http.StatusNotFound:
			_, _ = w.Write([]byte(`{"error":{"code":"channel_not_found","message":"no"}}`))
		default:
			_, _ = w.Write([]byte(`{"error":{"code":"service_unavailable","message":"down"}}`))
		}
		select {
		case f.seen <- put:
		default:
		}
		if status == http.StatusCreated {
			select {
			case f.accepted <- put:
			default:
			}
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) set(status int) {
	f.mu.Lock()
	f.status = status
	f.mu.Unlock()
}

func open(t *testing.T, db *journal.DB, api *fakeAPI) *outbox.Relay {
	t.Helper()
	r, err := outbox.OpenRelay(outbox.RelayOptions{Journal: db, Log: zaptest.NewLogger(t),
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Poster: &internalapi.Client{BaseURL: api.URL, ProjectID: "prj_1", Token: "rt"}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// openDB opens the journal of the state directory dir (a pod's start).
func openDB(t *testing.T, dir string) *journal.DB {
	t.Helper()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// journalOf lists what the journal keeps of the outbox: "pending" per
// message not yet taken, and the reason ("bad", "rejected") per message set
// aside, sorted.
func journalOf(t *testing.T, db *journal.DB) []string {
	t.Helper()
	var names []string
	items, _, err := journal.TableOf[handover.Entry](db, journal.Handover).Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Value.Kind == handover.Outbox {
			names = append(names, "pending")
		}
	}
	aside, err := db.SetAsideEntries()
	if err != nil {
		t.Fatal(err)
	}
	for k := range aside {
		switch {
		case strings.HasPrefix(k, "outbox/rejected/"):
			names = append(names, "rejected")
		case strings.HasPrefix(k, "outbox/"):
			names = append(names, "bad")
		}
	}
	sort.Strings(names)
	return names
}

// openWithAPI opens a relay on a new journal, handing over to a fake API
// that answers status.
func openWithAPI(t *testing.T, status int) (*fakeAPI, string, *journal.DB, *outbox.Relay) {
	api := newFakeAPI(t, status)
	dir := t.TempDir()
	db := openDB(t, dir)
	return api, dir, db, open(t, db, api)
}

// closeDrained closes r, requires that nothing is pending and returns what
// the journal keeps.
func closeDrained(t *testing.T, r *outbox.Relay, db *journal.DB) []string {
	t.Helper()
	must(t, r.Close(context.Background()))
	if r.Pending() != 0 {
		t.Fatalf("pending = %d after Close", r.Pending())
	}
	return journalOf(t, db)
}

func out(corr string) wire.OutboxMessage {
	return wire.OutboxMessage{OutboxReply: wire.OutboxReply{CorrelationID: corr, Reply: "late reply " + corr,
		Metadata: json.RawMessage(`{"k":"v"}`), CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}}
}

// The API is down: the message waits in the journal on disk, survives a
// restart of the pod, and reaches the API once it is back.
func TestRelayJournalSurvivesRestartWhileAPIDown(t *testing.T) {
	t.Parallel()
	api, dir, db, r := openWithAPI(t, http.StatusServiceUnavailable)
	r.Put("ch_1", out("cor_1"))
	if got := journalOf(t, db); len(got) != 1 || got[0] != "pending" {
		t.Fatalf("journal after Put = %v", got)
	}
	<-api.seen // a first attempt failed
	<-api.seen // and was retried
	if r.Len("ch_1") != 1 || r.Len("ch_other") != 0 {
		t.Fatalf("Len = %d", r.Len("ch_1"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.Close(ctx); err == nil {
		t.Fatal("Close with the API down must say that messages stay pending")
	}
	if got := journalOf(t, db); len(got) != 1 {
		t.Fatalf("journal after a failed shutdown = %v", got)
	}

	// The pod restarts; the API is back.
	must(t, db.Close())
	api.set(http.StatusCreated)
	db2 := openDB(t, dir)
	r2 := open(t, db2, api)
	put := <-api.accepted
	if put.CorrelationID != "cor_1" || put.ChannelID != "ch_1" || put.Reply != "late reply cor_1" ||
		string(put.Metadata) != `{"k":"v"}` || !put.CreatedAt.Equal(out("").CreatedAt) {
		t.Fatalf("put = %+v", put)
	}
	if got := closeDrained(t, r2, db2); len(got) != 0 { // Close waits for the loop
		t.Fatalf("journal after delivery = %v", got)
	}
}

// A message the API refuses for good is set aside, not retried forever; a
// corrupt journal entry is set aside at start; a half-written one is removed.
// (The corrupt and half-written entries are files of the JSON journal of an
// earlier pod, imported at start.)
func TestRelayRejectedAndCorruptEntries(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, http.StatusNotFound)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "outbox"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "outbox", "junk.json"), []byte("{not json"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "outbox", "half.json.tmp"), []byte("{"), 0o600))
	db := openDB(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "outbox")); !os.IsNotExist(err) {
		t.Fatalf("the imported JSON journal is still there: %v", err)
	}
	r := open(t, db, api)
	r.Put("ch_gone", out("cor_x"))
	<-api.seen
	if got := closeDrained(t, r, db); len(got) != 2 || got[0] != "bad" || got[1] != "rejected" {
		t.Fatalf("journal = %v, want one bad and one rejected", got)
	}
}

// Messages put while the API is up are handed over at once and leave the
// journal.
func TestRelayHandsOverAndForgets(t *testing.T) {
	t.Parallel()
	api, _, db, r := openWithAPI(t, http.StatusCreated)
	r.Put("ch_1", out("cor_a"))
	if put := <-api.accepted; put.CorrelationID != "cor_a" {
		t.Fatalf("put = %+v", put)
	}
	r.Put("ch_1", out("cor_b"))
	if put := <-api.accepted; put.CorrelationID != "cor_b" {
		t.Fatalf("put = %+v", put)
	}
	// Close may cut the answer to the last POST and send it again: the API
	// is idempotent on the correlation id, so that stores nothing twice.
	left := closeDrained(t, r, db)
	api.mu.Lock()
	stored := len(api.stored)
	api.mu.Unlock()
	if stored != 2 || len(left) != 0 {
		t.Fatalf("stored %d, journal %v", stored, left)
	}
	// A Put after Close stays in the journal for the next start.
	r.Put("ch_1", out("cor_c"))
	if got := journalOf(t, db); len(got) != 1 {
		t.Fatalf("journal = %v", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
