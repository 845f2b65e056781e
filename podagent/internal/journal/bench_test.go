package journal_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/atomicfile"
)

// One durable write of a 1 KiB entry: the journal's transaction against
// the JSON journals' atomic file (temp file, fsync, rename, fsync of the
// directory) it replaces.
func BenchmarkDurableWrite(b *testing.B) {
	entry := map[string]string{"message": string(make([]byte, 1024))}
	b.Run("journal", func(b *testing.B) {
		db, err := journal.Open(filepath.Join(b.TempDir(), journal.FileName), journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		tab := journal.TableOf[map[string]string](db, journal.Inbox)
		for i := 0; b.Loop(); i++ {
			if err := tab.Put(fmt.Sprint("cor_", i%64), entry); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("atomicfile", func(b *testing.B) {
		dir := b.TempDir()
		data := []byte(fmt.Sprint(entry))
		for i := 0; b.Loop(); i++ {
			if err := atomicfile.Write(filepath.Join(dir, fmt.Sprint("cor_", i%64, ".json")), data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
}
