package journal_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/podagent/internal/journal"
)

func mustOpen(t *testing.T, path string, o journal.Options) *journal.DB {
	t.Helper()
	db, err := journal.Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// validJournal writes a journal with a few entries at path and returns its
// bytes.
func validJournal(t *testing.T, path string) []byte {
	t.Helper()
	db := mustOpen(t, path, journal.Options{})
	tab := journal.TableOf[string](db, journal.Inbox)
	for _, k := range []string{"a", "b", "c"} {
		if err := tab.Put(k, strings.Repeat(k, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A file that is not a valid journal — garbage, both meta pages
// overwritten, cut short, a data page scribbled on — is set aside, byte for
// byte, as journal.db.corrupt-<time>; an error names both files in the log;
// the pod starts with an empty journal that works. A torn write of one meta
// page is no corruption: bbolt reads the other one and nothing is set aside.
func TestCorruptFileIsSetAside(t *testing.T) {
	t.Parallel()
	const page = 4096
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte) []byte
		aside   bool
	}{
		{"garbage", func(b []byte) []byte { return bytes.Repeat([]byte("not a journal "), 1000) }, true},
		{"both meta pages", func(b []byte) []byte { copy(b, make([]byte, 2*page)); return b }, true},
		{"cut short", func(b []byte) []byte { return b[:100] }, true},
		{"data pages", func(b []byte) []byte {
			for i := 2 * page; i < len(b); i += 64 {
				b[i] ^= 0xa5
			}
			return b
		}, true},
		{"one meta page torn", func(b []byte) []byte { copy(b[page:], bytes.Repeat([]byte{0xff}, 100)); return b }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), journal.FileName)
			bad := tc.corrupt(validJournal(t, path))
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.ErrorLevel)
			db := mustOpen(t, path, journal.Options{Log: zap.New(core)})
			n, err := db.Len(journal.Inbox)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.aside {
				// The torn page was the last commit's (page 1: the third
				// Put), which never returned: the journal is as before it.
				if db.SetAsideFile() != "" || n != 2 || logs.Len() != 0 {
					t.Fatalf("set aside %q, %d entries, %d error lines", db.SetAsideFile(), n, logs.Len())
				}
				return
			}
			aside := db.SetAsideFile()
			if !strings.HasPrefix(aside, path+".corrupt-") || n != 0 {
				t.Fatalf("set aside as %q, %d entries", aside, n)
			}
			if kept, err := os.ReadFile(aside); err != nil || !bytes.Equal(kept, bad) {
				t.Fatalf("the corrupt file was not kept as it was: %v", err)
			}
			if logs.Len() != 1 {
				t.Fatalf("%d error lines", logs.Len())
			}
			fields := logs.All()[0].ContextMap()
			if fields["file"] != path || fields["setAsideAs"] != aside || !strings.Contains(logs.All()[0].Message, "corrupt") {
				t.Fatalf("log line %q %v", logs.All()[0].Message, fields)
			}
			// The new journal works.
			if err := journal.TableOf[string](db, journal.Inbox).Put("d", "d"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// One owner per data directory: a second open of a journal that is held
// fails with ErrLocked naming the file instead of waiting forever; once the
// holder closes it, it opens.
func TestSecondOpenIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), journal.FileName)
	first := mustOpen(t, path, journal.Options{})
	_, err := journal.Open(path, journal.Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, journal.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second open: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path, journal.Options{LockTimeout: 100 * time.Millisecond})
}

// A journal path the pod cannot open (here a directory) is an error naming
// it, never set aside as corrupt.
func TestUnopenableFileIsAnError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), journal.FileName)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open(path, journal.Options{}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("open: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("the path was moved: %v", err)
	}
}

// Table: Put/Get/Delete, Append keeps order, Load sets aside what does not
// decode or is refused, counters add up.
func TestTableAndCounters(t *testing.T) {
	t.Parallel()
	db := mustOpen(t, filepath.Join(t.TempDir(), journal.FileName), journal.Options{})
	type rec struct{ N int }
	tab := journal.TableOf[rec](db, journal.Checkpoints)
	var keys []string
	for i := range 20 {
		k, err := tab.Append(rec{i})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := tab.Delete(keys[3]); err != nil {
		t.Fatal(err)
	}
	if err := journal.TableOf[string](db, journal.Checkpoints).Put("zz-not-a-rec", "x"); err != nil {
		t.Fatal(err)
	}
	items, bad, err := tab.Load(func(_ string, r rec) bool { return r.N != 7 })
	if err != nil || len(items) != 18 || len(bad) != 2 || bad[0] != keys[7] || bad[1] != "zz-not-a-rec" {
		t.Fatalf("load: %d items, bad %v, %v", len(items), bad, err)
	}
	for i, it := range items[:5] {
		if want := []int{0, 1, 2, 4, 5}[i]; it.Value.N != want {
			t.Fatalf("item %d = %d, want %d", i, it.Value.N, want)
		}
	}
	if v, ok, err := tab.Get(keys[1]); !ok || err != nil || v.N != 1 {
		t.Fatalf("get %v %v %v", v, ok, err)
	}
	aside, err := db.SetAsideEntries()
	if err != nil || len(aside) != 2 || string(aside["checkpoints/bad/zz-not-a-rec"]) != `"x"` {
		t.Fatalf("set aside %v %v", aside, err)
	}
	if n, _ := db.Len(journal.Checkpoints); n != 18 {
		t.Fatalf("%d checkpoints left", n)
	}
	for range 3 {
		if _, err := db.Add(journal.MessageCount, 2); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.Counter(journal.MessageCount); n != 6 || err != nil {
		t.Fatalf("counter %d %v", n, err)
	}
}
