package journal_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/journal"
)

// legacyState writes the JSON journals of an earlier pod in dir: two
// messages (one torn, one .bad, one .tmp beside them), counters, the
// activity window, an outbox message and a .rejected one, three
// checkpoint entries.
func legacyState(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"inbox/a1.json":          `{"correlationId":"cor_a","channelId":"ch","state":"accepted","runs":0}`,
		"inbox/b2.json":          `{"correlationId":"cor_b","channelId":"ch","state":"replied","runs":1,"reply":"r"}`,
		"inbox/torn.json":        `{"correlationId":`,
		"inbox/old.bad":          `{"x"`,
		"inbox/c3.json.123.tmp":  `{"correlationId":"cor_tmp"}`,
		"inbox/counters.state":   `{"messageCount":41}`,
		"inbox/activity.state":   `[{"id":"act_2","status":"replied"},{"id":"act_1","status":"failed"}]`,
		"outbox/o1.json":         `{"channelId":"ch","correlationId":"cor_o","reply":"late"}`,
		"outbox/o2.rejected":     `{"channelId":"gone","correlationId":"cor_r","reply":"x"}`,
		"checkpoints.json":       `[{"record":{"commitSha":"s1"},"persisted":true},{"record":{"commitSha":"s2"}},{"record":{"commitSha":"s3"},"attempts":2}]`,
		"checkpoints.json.9.tmp": `[`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

type imported struct {
	Inbox, Outbox, Checkpoints []string
	Count                      int64
	Activity                   string
	Aside                      []string
}

func importedOf(t *testing.T, db *journal.DB) imported {
	t.Helper()
	var got imported
	keys := func(k journal.Kind) []string {
		items, _, err := journal.TableOf[json.RawMessage](db, k).Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, string(it.Value))
		}
		return out
	}
	got.Inbox, got.Outbox, got.Checkpoints = keys(journal.Inbox), keys(journal.Outbox), keys(journal.Checkpoints)
	got.Count, _ = db.Counter(journal.MessageCount)
	w, _, err := journal.TableOf[json.RawMessage](db, journal.Activity).Get(journal.ActivityWindow)
	if err != nil {
		t.Fatal(err)
	}
	got.Activity = string(w)
	aside, err := db.SetAsideEntries()
	if err != nil {
		t.Fatal(err)
	}
	for k := range aside {
		got.Aside = append(got.Aside, k)
	}
	sort.Strings(got.Aside)
	return got
}

// The JSON journals of an earlier pod are imported into the journal once,
// then removed: every entry keeps its value (checkpoints their order),
// unreadable files and rejected outbox messages are set aside, unfinished
// writes (.tmp) dropped. A crash after the import but before the removal
// imports the same files again, which changes nothing.
func TestLegacyJournalsImportedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	legacyState(t, dir)
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := imported{
		Inbox: []string{`{"correlationId":"cor_a","channelId":"ch","state":"accepted","runs":0}`,
			`{"correlationId":"cor_b","channelId":"ch","state":"replied","runs":1,"reply":"r"}`},
		Outbox: []string{`{"channelId":"ch","correlationId":"cor_o","reply":"late"}`},
		Checkpoints: []string{`{"record":{"commitSha":"s1"},"persisted":true}`, `{"record":{"commitSha":"s2"}}`,
			`{"record":{"commitSha":"s3"},"attempts":2}`},
		Count:    41,
		Activity: `[{"id":"act_2","status":"replied"},{"id":"act_1","status":"failed"}]`,
		Aside:    []string{"inbox/legacy-bad/inbox/old.bad", "inbox/legacy-bad/inbox/torn.json", "outbox/rejected/outbox/o2.rejected"},
	}
	if got := importedOf(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported\n%+v\nwant\n%+v", got, want)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, de := range des {
		left = append(left, de.Name())
	}
	sort.Strings(left)
	if !reflect.DeepEqual(left, []string{journal.FileName}) {
		t.Fatalf("left in the state directory: %v", left)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// A crash between the import and the removal: the files are there again.
	legacyState(t, dir)
	db, err = journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := importedOf(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported twice\n%+v\nwant\n%+v", got, want)
	}
}
